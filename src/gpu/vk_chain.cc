// Chained greedy decoding (GpuForward::ForwardGreedyChain): one sequence's greedy steps with no
// host round trip between them. A step's arg-max pass writes its token into the next step's
// input on the device (argmax.comp's feed), so the host queues step i + 1 before step i ends:
// the device runs the steps back to back, and the host's turn (the fence, the token, the
// caller's stop checks and the next submit, tens of microseconds a token: issue 28 measured a
// submit and fence wait at 40 us on an H200, ~5% of a 1,300 tok/s step) happens while the next
// step runs.
#include <deque>

#include "base/clock.h"
#include "gpu/vk_forward.h"

namespace uf::gpu {

namespace {
// Steps in flight: one running and one queued behind it hides the host's turn as long as that
// turn is shorter than a step. More would only grow the steps dropped after a stop.
constexpr size_t kChainDepth = 2;
}  // namespace

StatusOr<int64_t> VulkanForward::ForwardGreedyChain(int32_t seq, int32_t token, int32_t pos,
                                                    int64_t n,
                                                    const std::function<bool(int32_t)>& on_token,
                                                    std::span<const int32_t> banned) {
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
  const auto* ring = static_cast<const uint32_t*>(chain_ring_.mapped());

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
    ++taken;
    stop = !on_token(static_cast<int32_t>(ring[(pos + f.step + 1) % kChainRing]));
  };
  for (int64_t i = 0; i < n && !stop && status.ok(); ++i) {
    Trial trial;
    const StepWay way = ChooseWay(1, false, pos + i + 1, &trial);
    // A trial is timed alone: nothing queued before it (a wall-clock time would include that)
    // and nothing behind it until it ends (the tuner's next pick waits for its time).
    while (!flight.empty() && (trial.tuner != nullptr || flight.size() >= kChainDepth)) finish();
    if (stop || !status.ok()) break;
    auto rec = ChainRecording(way, static_cast<int>(i % kChainDepth), masked);
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
