// A batch of tokens for one forward pass. Tokens may belong to several sequences (continuous
// batching); within a sequence they must be consecutive positions, in order.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "base/status.h"

namespace uf::model {

struct Batch {
  std::vector<int32_t> tokens;       // [n]
  std::vector<int32_t> positions;    // [n] position of each token in its sequence
  std::vector<int32_t> seq_ids;      // [n] KV cache sequence of each token
  std::vector<uint8_t> want_logits;  // [n] 1 when the token's logits are needed
  // [n] or empty: 1 when a token's logits are needed only as its row's best tokens
  // (BatchForward::top); a forward without that reduction ignores it. Add() leaves it alone.
  std::vector<uint8_t> top_only;
  // Empty, or [n + 1] offsets into known_ids: a top_only token's tokens whose logits its sampler
  // edits (sampling::Sampler::EditedTokens). The forward reduces the row without them and returns
  // their raw logits beside it (TopRow::known_*). Add() leaves both alone.
  std::vector<int32_t> known_begin;
  std::vector<int32_t> known_ids;
  // Empty, or [n]: a top_only token's grammar mask, or null for none: (n_vocab + 63) / 64 words,
  // bit i of word i / 64 set where token i may come next (grammar::TokenConstraint::Mask), owned
  // by the caller until the forward returns. The forward reduces the row with the other tokens at
  // -inf (TokenConstraint::Apply's row). Not on a row that lists known tokens. Add() leaves it.
  std::vector<const uint64_t*> allowed;

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  // Keeps capacity, so a reused Batch does not allocate per step.
  void Clear() {
    tokens.clear();
    positions.clear();
    seq_ids.clear();
    want_logits.clear();
    top_only.clear();
    known_begin.clear();
    known_ids.clear();
    allowed.clear();
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

// A logits row reduced where it was computed (a GPU): its n best tokens, best first (higher
// logit, then lower id; NaN ranks as -inf), with their raw logits, the row's maximum and its
// log-sum-exp. With known tokens (Batch::known_ids), all of that is over the row without them
// (they count as -inf there; ids may then list some of them at the end, to be skipped) and their
// raw logits come beside it.
struct TopRow {
  int32_t n = 0;
  const int32_t* ids = nullptr;
  const float* logits = nullptr;
  float max = 0.0f, log_sum_exp = 0.0f;
  int32_t n_known = 0;
  const int32_t* known_ids = nullptr;
  const float* known_logits = nullptr;
};

// How a sampled chain draws on the device (BatchForward::ForwardSampledChain): the sampler's
// filters, as sampling::SamplingParams means them (its bias and penalties: ChainEdits), and the
// uniforms of its next draws in order (the sampler's own, so that the device's draw is the host's).
struct ChainDraw {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  std::span<const float> uniforms;
};
// Steps a sampled chain runs at most (its uniforms live in a buffer of this many).
inline constexpr int64_t kMaxSampledChainSteps = 256;
// A sampled chain's step ended: its row reduced (TopRow; with bans or edits, the step's edited
// tokens listed as known with their raw logits, the banned ones' -inf: a ban makes them -inf
// whatever they were) and the token the device drew from it. Returns the token the step takes:
// `drawn` to go on; another to take that one and end the chain (the next step, queued with `drawn`,
// is dropped). With whole == nullptr it may return -1 when the reduced row cannot decide the draw
// (Sampler::SampleReduced): it is then called again with the whole row (whole: [n_vocab] raw
// logits, the banned tokens at -inf; valid during the call) and must return a token. *more = false
// ends the chain after this step.
using ChainDecide =
    std::function<int32_t(const TopRow& row, const float* whole, int32_t drawn, bool* more)>;
// A sampled chain's logit bias and penalties (sampling::Sampler's, as the chain starts). The
// device edits each step's row as Sample() does: raw + bias, then for a token counted c > 0
// times in the penalty window l <= 0 ? l * repeat : l / repeat, then l -= c * frequency +
// presence, then bans to -inf; the window is `window` followed by the tokens the chain takes,
// its last `last_n`. Each step's edited tokens come back with their raw logits as the row's
// known tokens (TopRow), so the host's sampler still judges every draw.
struct ChainEdits {
  std::span<const int32_t> ids;     // distinct: each token with a bias or in the window
  std::span<const float> bias;      // [ids] its bias (0 for none)
  std::span<const int32_t> counts;  // [ids] its occurrences in the window
  std::span<const int32_t> window;  // the penalty window, oldest first
  float repeat_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  int32_t last_n = 0;  // the window's length at most; 0: no penalties
  bool empty() const { return ids.empty() && last_n == 0; }
};
// One stream of a batch of sampled chains (BatchForward::ForwardSampledChains): its sequence,
// its first step's token and position, its draw, its banned tokens (ForwardSampledChain's) and
// its edits.
struct ChainStream {
  int32_t seq = 0, token = 0, pos = 0;
  ChainDraw draw;
  std::span<const int32_t> banned;
  ChainEdits edits;
};
// Tokens a chained row of `stream` lists as known at most over n steps: its bans, its edits'
// ids and, with penalties, each token the chain takes (BatchForward::chain_known_capacity()).
inline int64_t ChainKnown(const ChainStream& stream, int64_t n) {
  int64_t k = static_cast<int64_t>(stream.edits.ids.size());
  for (int32_t id : stream.banned) {
    if (std::find(stream.edits.ids.begin(), stream.edits.ids.end(), id) == stream.edits.ids.end()) {
      ++k;
    }
  }
  return k + (stream.edits.last_n > 0 ? n : 0);
}
// What a batch of chains' decider says of a stream's step besides its token (ChainsDecide).
struct ChainTurn {
  bool more = true;   // false: the stream ends after this step, and the chain with it
  int64_t draws = 0;  // the stream's ChainDraw::uniforms its sampler has drawn so far, this step's
                      // included: where the device's next draw starts after an overruled one
};
// ChainDecide for stream i of a batch of chains (turn->more as ChainDecide's *more).
using ChainsDecide = std::function<int32_t(int64_t i, const TopRow& row, const float* whole,
                                           int32_t drawn, ChainTurn* turn)>;

// A forward pass over batches: what the serving engine steps (the CPU Decoder, or a device's).
class BatchForward {
 public:
  virtual ~BatchForward() = default;
  // Runs the batch: its K/V into the cache, logits for the tokens that want them (see
  // Decoder::Forward for the errors, and for abandon: the engine's step preemption, which a
  // forward may ignore).
  virtual Status Forward(const Batch& batch, const std::atomic<bool>* abandon = nullptr) = 0;
  // Layers the last Forward ran before it was abandoned; 0 when it ran to the end.
  virtual int64_t abandoned_layers() const { return 0; }
  // Logits of the i-th token of the last batch that wanted logits (batch order). [n_vocab]
  virtual const float* logits(int64_t i) const = 0;
  virtual int64_t n_outputs() const = 0;
  // Best tokens per row this forward can reduce a row to (Batch::top_only); 0: none, every
  // row comes back whole.
  virtual int32_t top_capacity() const { return 0; }
  // The i-th output row of the last batch reduced to its best top_capacity() tokens (rows of
  // top_only tokens; logits(i) is then not valid).
  virtual TopRow top(int64_t i) const { return {}; }
  // Known tokens (Batch::known_ids) a reduced row may list; 0: none (a row whose sampler edits
  // logits then comes back whole).
  virtual int32_t top_known_capacity() const { return 0; }
  // After a Forward that reduced rows without known tokens: copies those output rows back whole
  // (one small transfer), so that logits(i) is valid for each i in rows until the next Forward.
  // For a sampler whose draw fell outside a reduced row's candidates (Sampler::SampleReduced).
  virtual Status FetchLogits(std::span<const int64_t> /*rows*/) {
    return UnimplementedError("this forward does not reduce rows");
  }
  // Whether ForwardGreedyChain runs (a device forward: gpu::GpuForward).
  virtual bool chains_greedy() const { return false; }
  // Greedy decoding of sequence seq with no host round trip between steps: runs `token` at
  // `pos`, then each step's arg-max at the next position, up to n steps. Each step's arg-max is
  // written into the next step's input on the device, so the host queues step i + 1 before step
  // i ends and the device runs them back to back; on_token gets each step's arg-max in order as
  // its step ends (while the next one runs) and returns false to stop. The steps give a
  // one-token greedy Forward's tokens, bit for bit. Returns the steps whose tokens were taken:
  // seq's cache then holds positions up to pos + that many (the one or two steps queued after
  // the last taken token ran, but are dropped). Needs pos <= the cache's length of seq and
  // pos + n <= its max_seq_len. banned: tokens never chosen (at -inf before each arg-max; the
  // end tokens when ignoring EOS), at most the forward's top_known_capacity().
  virtual StatusOr<int64_t> ForwardGreedyChain(int32_t /*seq*/, int32_t /*token*/, int32_t /*pos*/,
                                               int64_t /*n*/,
                                               const std::function<bool(int32_t)>& /*on_token*/,
                                               std::span<const int32_t> /*banned*/ = {}) {
    return UnimplementedError("this forward does not chain greedy steps");
  }
  // Whether ForwardSampledChain runs.
  virtual bool chains_sampled() const { return false; }
  // ForwardGreedyChain for a sampled sequence: each step's row is reduced to its best
  // top_capacity() tokens and a token drawn from them on the device with `draw`, fed to the next
  // step. The host's sampler stays the judge: `decide` draws the step's token from the reduced
  // row (Sampler::SampleTop or SampleReduced, the same uniform) and the chain goes on only while
  // the two agree, so the tokens are those of one sampled step at a time, draw for draw. Returns
  // the steps taken (see ChainDecide); seq's cache then holds positions up to pos + that many.
  // Needs n <= kMaxSampledChainSteps, draw.uniforms.size() >= n, top_capacity() > 0, and
  // ChainKnown(stream, n) <= chain_known_capacity() where it bans or edits.
  StatusOr<int64_t> ForwardSampledChain(int32_t seq, int32_t token, int32_t pos, int64_t n,
                                        const ChainDraw& draw, const ChainDecide& decide,
                                        std::span<const int32_t> banned = {},
                                        const ChainEdits& edits = {}) {
    const ChainStream stream{seq, token, pos, draw, banned, edits};
    UF_ASSIGN_OR_RETURN(const std::vector<int64_t> taken,
                        ForwardSampledChains(std::span<const ChainStream>(&stream, 1), n,
                                             [&](int64_t, const TopRow& row, const float* whole,
                                                 int32_t drawn, ChainTurn* turn) {
                                               return decide(row, whole, drawn, &turn->more);
                                             }));
    return taken[0];
  }
  // Streams a batch of sampled chains may hold (ForwardSampledChains); 0 when it does not run.
  virtual int64_t chain_streams() const { return 0; }
  // Known tokens a chained row may list (ChainKnown of each stream for the chain's n steps).
  virtual int64_t chain_known_capacity() const { return 0; }
  // ForwardSampledChain for several sequences at once (a decode batch a step, one row each, up
  // to chain_streams() of them): the device feeds each row's draw to its row of the next step.
  // decide(i, ...) judges stream i's step as ChainDecide does. A stream that ends (turn->more =
  // false) ends the chain: no step is queued after, and the step queued already is taken for the
  // streams that have not ended (its row of the ended one is dropped). A token other than the
  // drawn one ends a lone stream's chain as ChainDecide says; in a batch of two or more streams
  // only that stream's queued step is dropped, and its next step (two behind) computes its
  // position again from the host's token, drawing from uniform turn->draws on, while the other
  // streams go on (a batch's whole rows are judged a step later, as the step behind ends: both
  // steps behind an overruled one are dropped). Returns the steps taken per stream; sequence
  // i's cache then holds positions up to pos + that many. Each stream's tokens are those of one
  // sampled step at a time.
  virtual StatusOr<std::vector<int64_t>> ForwardSampledChains(
      std::span<const ChainStream> /*streams*/, int64_t /*n*/, const ChainsDecide& /*decide*/) {
    return UnimplementedError("this forward does not chain sampled steps");
  }
};

}  // namespace uf::model
