// Chained decoding (GpuForward::ForwardGreedyChain, ForwardSampledChain): one sequence's steps
// with no host round trip between them. A step's last pass writes its token into the next step's
// input on the device (argmax.comp's feed for a greedy chain; sample.comp's draw from the row's
// best tokens for a sampled one), so the host queues step i + 1 before step i ends: the device
// runs the steps back to back, and the host's turn (the fence, the token, the caller's stop
// checks and the next submit, tens of microseconds a token: issue 28 measured a submit and fence
// wait at 40 us on an H200, ~5% of a 1,300 tok/s step) happens while the next step runs.
//
// A sampled step's draw on the device is a guess the host checks: the host's sampler draws the
// token from the same reduced row with the same uniform (ChainDecide), and where the two differ
// (a float rounding at an interval's edge, or a draw the best tokens cannot decide) the host's
// token is taken and the chain ends, its next step (queued with the guess) dropped. So a chained
// sampled stream gives one sampled step at a time's tokens, and a wrong guess costs one step.
#include <algorithm>
#include <cstring>
#include <deque>

#include "base/clock.h"
#include "gpu/vk_forward.h"

namespace uf::gpu {

StatusOr<int64_t> VulkanForward::ForwardGreedyChain(int32_t seq, int32_t token, int32_t pos,
                                                    int64_t n,
                                                    const std::function<bool(int32_t)>& on_token,
                                                    std::span<const int32_t> banned) {
  const auto* ring = static_cast<const uint32_t*>(chain_ring_.mapped());
  return Chain(seq, token, pos, n, banned, /*sampled=*/false,
               [&](int64_t p, int, bool* more) -> StatusOr<bool> {
                 *more = on_token(static_cast<int32_t>(ring[p % kChainRing]));
                 return true;
               });
}

StatusOr<int64_t> VulkanForward::ForwardSampledChain(int32_t seq, int32_t token, int32_t pos,
                                                     int64_t n, const model::ChainDraw& draw,
                                                     const model::ChainDecide& decide,
                                                     std::span<const int32_t> banned) {
  if (o_.top_k <= 0) return FailedPreconditionError("gpu forward: no top-k reduction to draw from");
  if (n > model::kMaxSampledChainSteps || static_cast<int64_t>(draw.uniforms.size()) < n) {
    return InvalidArgumentError("gpu forward: a sampled chain of " + std::to_string(n) +
                                " steps with " + std::to_string(draw.uniforms.size()) +
                                " uniforms (at most " +
                                std::to_string(model::kMaxSampledChainSteps) + " steps)");
  }
  if (!(draw.temperature > 0.0f) || !(draw.top_p > 0.0f) || draw.min_p < 0.0f) {
    return InvalidArgumentError(
        "gpu forward: a sampled chain needs a temperature and top_p above 0, min_p at least 0");
  }
  auto* d = static_cast<uint32_t*>(chain_draw_.mapped());
  std::memcpy(d + 0, &draw.temperature, 4);
  std::memcpy(d + 1, &draw.top_k, 4);
  std::memcpy(d + 2, &draw.top_p, 4);
  std::memcpy(d + 3, &draw.min_p, 4);
  d[4] = 0;  // draws taken
  d[5] = static_cast<uint32_t>(std::max<int64_t>(n, 1));
  std::memcpy(d + Kernels::kDrawHeaderWords, draw.uniforms.data(), n * 4);
  const auto* ring = static_cast<const uint32_t*>(chain_ring_.mapped());
  const auto* tops = static_cast<const uint32_t*>(chain_top_.mapped());
  const int64_t row_words = 2 * o_.top_k + 2;
  // The bans as known tokens (their raw logits unknown, and not needed: see ChainDecide).
  known_zeros_.assign(banned.size(), 0.0f);
  const auto on_step = [&](int64_t p, int slot, bool* more) -> StatusOr<bool> {
    model::TopRow row = TopRowOf(tops + (p % kChainRing) * row_words, o_.top_k, c_.n_vocab);
    row.n_known = static_cast<int32_t>(banned.size());
    row.known_ids = banned.data();
    row.known_logits = known_zeros_.data();
    const auto drawn = static_cast<int32_t>(ring[p % kChainRing]);
    *more = true;
    int32_t t = decide(row, nullptr, drawn, more);
    if (t < 0) {
      // The draw needs the whole row: still in the slot's buffer (the step behind this one
      // writes the other slot's), copied once that step ends.
      UF_ASSIGN_OR_RETURN(const float* whole, ChainRow(slot));
      *more = true;
      t = decide(row, whole, drawn, more);
      if (t < 0) return InternalError("gpu forward: a sampled chain's decider drew no token");
    }
    if (t != drawn) *more = false;  // the next step was queued with `drawn`
    return true;
  };
  return Chain(seq, token, pos, n, banned, /*sampled=*/true, on_step);
}

StatusOr<const float*> VulkanForward::ChainRow(int slot) {
  if (chain_fetch_[slot] == nullptr) {
    auto r = std::make_unique<Recorder>(ctx_.get());
    k_.CopyRows(r.get(), chain_logits_[slot], logits_dev_, full_, c_.n_vocab, 1);
    UF_RETURN_IF_ERROR(r->Finish());
    chain_fetch_[slot] = std::move(r);
  }
  static_cast<uint32_t*>(full_.mapped())[0] = 1;  // row 0 flagged for copy_rows.comp
  UF_RETURN_IF_ERROR(chain_fetch_[slot]->Run());
  ++rows_fetched_;
  return static_cast<const float*>(logits_dev_.mapped());
}

StatusOr<int64_t> VulkanForward::Chain(int32_t seq, int32_t token, int32_t pos, int64_t n,
                                       std::span<const int32_t> banned, bool sampled,
                                       const ChainStep& on_step) {
  if (n < 1) return InvalidArgumentError("gpu forward: a chain needs at least one step");
  UF_RETURN_IF_ERROR(CheckToken(token));
  UF_RETURN_IF_ERROR(CheckSequence(seq));
  UF_RETURN_IF_ERROR(CheckStart(seq, pos));
  if (pos + n > max_len_) {
    return OutOfRangeError("gpu forward: a chain of " + std::to_string(n) +
                           " steps from position " + std::to_string(pos) + " passes the cache's " +
                           std::to_string(max_len_) + " positions");
  }
  const bool masked = !banned.empty();
  if (masked && (!known_.valid() || static_cast<int64_t>(banned.size()) > o_.max_known)) {
    return InvalidArgumentError("gpu forward: a chain bans " + std::to_string(banned.size()) +
                                " tokens; this forward masks at most " +
                                std::to_string(known_.valid() ? o_.max_known : 0));
  }
  for (int32_t id : banned) {
    if (id < 0 || id >= c_.n_vocab) {
      return InvalidArgumentError("gpu forward: banned token " + std::to_string(id) +
                                  " is outside the vocabulary");
    }
  }
  for (int32_t s : touched_) seq_next_[s] = -1;  // a Run's batch, as Prepare forgets it
  touched_.clear();
  if (Status s = cache_->Reserve(seq, pos + n); !s.ok()) {
    cache_->Truncate(seq, cache_->Length(seq));  // blocks reserved here, never filled
    return s;
  }
  // The first step's input from the host; every later one's from the step before it.
  const int64_t bs = cache_->block_size();
  std::memcpy(static_cast<int32_t*>(bt_.mapped()) + seq * max_blocks_, cache_->BlockTable(seq),
              (pos + n + bs - 1) / bs * 4);
  auto* tok = static_cast<uint32_t*>(tok_.mapped());
  tok[0] = static_cast<uint32_t>(token);
  tok[1] = static_cast<uint32_t>(pos);
  tok[2] = static_cast<uint32_t>(cache_->BlockTable(seq)[pos / bs] * bs + pos % bs);
  tok[3] = static_cast<uint32_t>(seq);
  static_cast<uint32_t*>(outs_.mapped())[0] = 0;
  if (masked) {  // row 0's known tokens: masked to -inf ahead of every step's arg-max
    auto* known = static_cast<uint32_t*>(known_.mapped());
    known[0] = static_cast<uint32_t>(banned.size());
    for (size_t i = 0; i < banned.size(); ++i) known[1 + i] = static_cast<uint32_t>(banned[i]);
  }
  n_outputs_ = 1;
  last_mode_ = Out::kGreedy;  // nothing for FetchLogits
  last_trial_ = false;

  struct InFlight {
    Recorder* rec;
    int64_t step;
    Trial trial;
    double submitted;
  };
  std::deque<InFlight> flight;
  Status status;
  int64_t taken = 0;
  bool stop = false;
  // Waits for the oldest step; its token goes to on_token unless the chain has stopped.
  const auto finish = [&] {
    const InFlight f = flight.front();
    flight.pop_front();
    if (Status s = f.rec->Wait(); !s.ok()) {
      if (status.ok()) status = s;
      return;
    }
    last_ = f.rec;
    if (f.trial.tuner != nullptr) ReportTrial(f.trial, *f.rec, f.submitted);
    if (stop || !status.ok()) return;  // queued past the last taken token: dropped
    bool more = true;
    StatusOr<bool> took = on_step(pos + f.step + 1, static_cast<int>(f.step % kChainDepth), &more);
    if (!took.ok()) {
      status = took.status();
      return;
    }
    taken += *took ? 1 : 0;
    stop = !more;
  };
  for (int64_t i = 0; i < n && !stop && status.ok(); ++i) {
    Trial trial;
    const StepWay way = ChooseWay(1, false, pos + i + 1, &trial);
    // A trial is timed alone: nothing queued before it (a wall-clock time would include that)
    // and nothing behind it until it ends (the tuner's next pick waits for its time).
    while (!flight.empty() &&
           (trial.tuner != nullptr || flight.size() >= static_cast<size_t>(kChainDepth))) {
      finish();
    }
    if (stop || !status.ok()) break;
    auto rec = ChainRecording(way, static_cast<int>(i % kChainDepth), masked, sampled);
    if (!rec.ok()) {
      status = rec.status();
      break;
    }
    const double submitted = NowSeconds();
    if (Status s = (*rec)->Submit(); !s.ok()) {
      status = s;
      break;
    }
    flight.push_back({*rec, i, trial, submitted});
    last_trial_ = last_trial_ || trial.tuner != nullptr;
    if (trial.tuner != nullptr) finish();
  }
  while (!flight.empty()) finish();
  // The taken steps' K/V stay; the dropped ones' rows lie past the sequence's end.
  const int64_t keep = pos + taken;
  cache_->Truncate(seq, keep);
  cache_->SetLength(seq, keep);
  if (!status.ok()) return status;
  return taken;
}

}  // namespace uf::gpu
