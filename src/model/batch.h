// A batch of tokens for one forward pass. Tokens may belong to several sequences (continuous
// batching); within a sequence they must be consecutive positions, in order.
#pragma once

#include <cstdint>
#include <vector>

namespace uf::model {

struct Batch {
  std::vector<int32_t> tokens;       // [n]
  std::vector<int32_t> positions;    // [n] position of each token in its sequence
  std::vector<int32_t> seq_ids;      // [n] KV cache sequence of each token
  std::vector<uint8_t> want_logits;  // [n] 1 when the token's logits are needed

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  // Keeps capacity, so a reused Batch does not allocate per step.
  void Clear() {
    tokens.clear();
    positions.clear();
    seq_ids.clear();
    want_logits.clear();
  }
  void Reserve(int64_t n) {
    tokens.reserve(n);
    positions.reserve(n);
    seq_ids.reserve(n);
    want_logits.reserve(n);
  }
  void Add(int32_t token, int32_t position, int32_t seq_id, bool logits) {
    tokens.push_back(token);
    positions.push_back(position);
    seq_ids.push_back(seq_id);
    want_logits.push_back(logits ? 1 : 0);
  }
};

}  // namespace uf::model
