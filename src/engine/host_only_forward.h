// A forward pass that computes nothing: every row that wants logits gets a made-up row at once,
// reduced to its best tokens as a GPU forward reduces it (model::TopRow: the best 64, the row's
// max and log-sum-exp, the known tokens' raw logits), or whole where the batch asks for that. The
// serving engine stepped on it does everything but the model (scheduling, batch building, the
// per-request sampler, detokenizing, stop strings, events, HTTP), so `bench --serve --host-only`
// measures what the serving path itself costs per token: the ceiling it puts on one stream
// whatever the device, and the share of a fast device's step it adds.
//
// The rows are peaked as a language model's are: rank r of the vocabulary has logit
// 12 - 2 ln(1 + r), so the best 64 hold ~99% of a row's mass at temperature 1 (a draw outside
// them fetches the whole row, as on a GPU). Which token has which rank follows from the row's
// token, position and sequence, so the generated text does not repeat one token and the same
// batch gives the same rows.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "model/batch.h"

namespace uf::engine {

class HostOnlyForward final : public model::BatchForward {
 public:
  static constexpr int32_t kTop = 64;         // the device forward's top_capacity
  static constexpr int32_t kMaxKnown = 1024;  // and its top_known_capacity
  HostOnlyForward(int64_t n_vocab, int64_t max_outputs);

  Status Forward(const model::Batch& batch, const std::atomic<bool>* abandon = nullptr) override;
  const float* logits(int64_t i) const override { return rows_[i].data(); }
  int64_t n_outputs() const override { return n_outputs_; }
  int32_t top_capacity() const override { return kTop; }
  model::TopRow top(int64_t i) const override;
  int32_t top_known_capacity() const override { return kMaxKnown; }
  Status FetchLogits(std::span<const int64_t> rows) override;

  // The logit of token id in output row i of the last Forward.
  float Logit(int64_t i, int32_t id) const;

 private:
  void FillRow(int64_t i);  // rows_[i] whole
  void Reduce(int64_t i, std::span<const int32_t> known, const uint64_t* allowed);

  int64_t n_vocab_, max_outputs_;
  std::vector<float> by_rank_;    // [n_vocab] the logit of rank r, decreasing
  std::vector<int32_t> id_of_;    // [n_vocab] rank -> token before the row's shift
  std::vector<int32_t> rank_of_;  // [n_vocab] its inverse
  std::vector<float> by_id_;      // [n_vocab] the logit of token j before the row's shift
  double mass_ = 0.0;             // sum over ranks of e^(by_rank - by_rank[0])
  int64_t n_outputs_ = 0;
  std::vector<int64_t> shift_;  // [max_outputs] each row's rotation of the ids
  // [max_outputs][n_vocab, once asked for] rows asked for whole: a serving engine's forward has
  // room for hundreds of rows, which at 128k tokens would be 0.5 MB each if made up front.
  std::vector<std::vector<float>> rows_;
  // [max_outputs] each reduced row: its best ids and logits, max and log-sum-exp, known tokens.
  std::vector<int32_t> top_ids_;   // [max_outputs][kTop]
  std::vector<float> top_logits_;  // [max_outputs][kTop]
  std::vector<float> max_, lse_;
  std::vector<int32_t> n_known_;
  std::vector<int32_t> known_ids_;   // [max_outputs][kMaxKnown]
  std::vector<float> known_logits_;  // [max_outputs][kMaxKnown]
  std::vector<int32_t> sorted_;      // [<= kMaxKnown] Reduce's known tokens, ascending
};

}  // namespace uf::engine
