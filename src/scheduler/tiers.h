// Service tiers: the speed a request buys. `ultrafast` decodes at (nearly) its solo speed however
// busy the server is, `default` keeps the hardware busy beside it, `flex` soaks up what is left.
// Follows the OpenAI API's `service_tier` field (auto, default, flex, priority).
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"

namespace uf::scheduler {

enum class ServiceTier : uint8_t { kUltrafast, kDefault, kFlex };
inline constexpr int kNumServiceTiers = 3;

// "ultrafast", "default", "flex": what responses and metrics report as the serving tier.
std::string_view ServiceTierName(ServiceTier tier);

// A request's tier as asked for. `auto` resolves to the project default and may fall back to
// default when ultrafast is full; an explicit ultrafast request is rejected instead.
struct RequestedTier {
  ServiceTier tier = ServiceTier::kDefault;
  bool is_auto = false;
};

// Parses the request field `service_tier`: "ultrafast", "priority" (OpenAI's name for it),
// "default", "standard", "flex", or "auto" (-> auto_tier). An absent field means "auto"; pass "".
// InvalidArgument for anything else.
StatusOr<RequestedTier> ParseServiceTier(std::string_view value, ServiceTier auto_tier);

// Parses a concrete tier name for configuration (e.g. the `auto` default): the names above
// except "auto" and "". InvalidArgument for anything else.
StatusOr<ServiceTier> ParseServiceTierName(std::string_view value);

}  // namespace uf::scheduler
