#include "engine/request.h"

#include <chrono>

#include "base/clock.h"

namespace uf::engine {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "";
}

void RequestChannel::Push(GenerationEvent event) {
  bool wake = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool final = event.finish != FinishReason::kNone;
    events_.push_back(std::move(event));
    if (!final) {
      if (final_only_) {
        wake = false;
      } else if (min_wake_interval_s_ > 0.0) {
        const double now = NowSeconds();
        wake = now - last_wake_ >= min_wake_interval_s_;
        if (wake) last_wake_ = now;
      }
    }
    pending_ = !wake;
  }
  if (wake) {
    wakeups_.fetch_add(1, std::memory_order_relaxed);
    cv_.notify_one();
  }
}

void RequestChannel::WakeOnFinalOnly() {
  std::lock_guard<std::mutex> lock(mu_);
  final_only_ = true;
}

void RequestChannel::SetMinWakeInterval(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  min_wake_interval_s_ = seconds;
}

void RequestChannel::FlushIfDue(double now, bool force) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!pending_ || final_only_ || (!force && now - last_wake_ < min_wake_interval_s_)) return;
    pending_ = false;
    last_wake_ = now;
  }
  wakeups_.fetch_add(1, std::memory_order_relaxed);
  cv_.notify_one();
}

bool RequestChannel::Pop(std::vector<GenerationEvent>* out, double timeout_s) {
  out->clear();
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                    [this] { return !events_.empty(); })) {
    return false;
  }
  while (!events_.empty()) {
    out->push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return true;
}

}  // namespace uf::engine
