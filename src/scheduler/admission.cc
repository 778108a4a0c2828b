#include "scheduler/admission.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace uf::scheduler {

Status AdmissionResult::ToStatus() const {
  if (admitted) return OkStatus();
  return ResourceExhaustedError(
      std::string(kTierCapacityExceeded) + ": every ultrafast stream is in use; retry after " +
      std::to_string(retry_after_seconds) + " s or use service_tier auto or default");
}

TierAdmission::TierAdmission(const AdmissionOptions& options, const Clock* clock)
    : options_(options), clock_(clock), token_seconds_(options.initial_token_seconds) {
  UF_CHECK(clock_ != nullptr);
  UF_CHECK(options_.ultrafast_capacity >= 0) << options_.ultrafast_capacity;
  UF_CHECK(options_.max_retry_after_seconds >= 1.0) << options_.max_retry_after_seconds;
}

AdmissionResult TierAdmission::Admit(int64_t id, RequestedTier requested, int64_t max_tokens) {
  AdmissionResult result;
  if (requested.tier != ServiceTier::kUltrafast) {
    result.admitted = true;
    result.tier = requested.tier;
    return result;
  }
  std::lock_guard<std::mutex> lock(mu_);
  const double now = clock_->Now();
  if (static_cast<int>(streams_.size()) < options_.ultrafast_capacity) {
    UF_CHECK(!streams_.contains(id)) << "request " << id << " admitted twice";
    streams_[id] = Stream{now, std::max<int64_t>(max_tokens, 0)};
    result.admitted = true;
    result.tier = ServiceTier::kUltrafast;
    return result;
  }
  if (requested.is_auto) {
    result.admitted = true;
    result.tier = ServiceTier::kDefault;
    result.fell_back = true;
    return result;
  }
  result.retry_after_seconds = RetryAfterLocked(now);
  return result;
}

int64_t TierAdmission::RetryAfterLocked(double now) const {
  // The soonest a stream frees up, judging by each one's max_tokens at the current token time
  // (the prompt costs about one step). Streams usually stop early, so this errs long; streams
  // past their estimate count as 1 s.
  double soonest = options_.max_retry_after_seconds;
  for (const auto& [id, s] : streams_) {
    const double end = s.start + static_cast<double>(s.max_tokens + 1) * token_seconds_;
    soonest = std::min(soonest, end - now);
  }
  return static_cast<int64_t>(
      std::clamp(std::ceil(soonest), 1.0, std::ceil(options_.max_retry_after_seconds)));
}

void TierAdmission::Release(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_.erase(id);
}

void TierAdmission::SetUltrafastTokenSeconds(double seconds) {
  if (!std::isfinite(seconds) || seconds <= 0.0) return;
  std::lock_guard<std::mutex> lock(mu_);
  token_seconds_ = seconds;
}

int TierAdmission::ultrafast_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(streams_.size());
}

}  // namespace uf::scheduler
