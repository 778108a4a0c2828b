// Ultrafast capacity is reserved at submission: a request either gets an ultrafast stream for its
// whole life or does not start as one. `auto` requests fall back to default when the streams are
// all taken (billed and reported as default); explicit ultrafast ones are refused with 429
// tier_capacity_exceeded and a Retry-After estimate.
//
// Thread-safe: HTTP threads Admit, the engine thread Releases and updates the token time.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string_view>

#include "base/clock.h"
#include "base/status.h"
#include "scheduler/tiers.h"

namespace uf::scheduler {

// The error code clients see in the 429 body.
inline constexpr std::string_view kTierCapacityExceeded = "tier_capacity_exceeded";

struct AdmissionOptions {
  int ultrafast_capacity = 1;  // concurrent ultrafast streams; 0 disables the tier
  // Seconds per ultrafast token assumed until SetUltrafastTokenSeconds is called.
  double initial_token_seconds = 0.05;
  double max_retry_after_seconds = 3600.0;
};

struct AdmissionResult {
  bool admitted = false;
  ServiceTier tier = ServiceTier::kDefault;  // the serving tier, when admitted
  bool fell_back = false;                    // auto wanted ultrafast and got default
  int64_t retry_after_seconds = 0;           // when refused: the Retry-After header, >= 1

  // OK when admitted; otherwise ResourceExhausted "tier_capacity_exceeded: ...".
  Status ToStatus() const;
};

class TierAdmission {
 public:
  // clock must outlive this.
  TierAdmission(const AdmissionOptions& options, const Clock* clock);

  // Decides the serving tier of request `id` (the caller's unique id). An admitted ultrafast
  // request holds a stream until Release(id). max_tokens sizes the Retry-After estimate.
  AdmissionResult Admit(int64_t id, RequestedTier requested, int64_t max_tokens);
  // The request finished, failed or was cancelled. Unknown ids are ignored (non-ultrafast
  // requests hold nothing), so the engine can release every request it ends.
  void Release(int64_t id);
  // The engine's latest estimate of one ultrafast step (e.g. StepPlan::ultrafast_solo_seconds).
  void SetUltrafastTokenSeconds(double seconds);

  int ultrafast_in_use() const;
  const AdmissionOptions& options() const { return options_; }

 private:
  int64_t RetryAfterLocked(double now) const;

  struct Stream {
    double start = 0.0;  // Clock time of admission
    int64_t max_tokens = 0;
  };

  const AdmissionOptions options_;
  const Clock* clock_;
  mutable std::mutex mu_;
  double token_seconds_;               // guarded by mu_
  std::map<int64_t, Stream> streams_;  // ultrafast streams held, by request id; guarded by mu_
};

}  // namespace uf::scheduler
