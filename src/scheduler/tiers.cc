#include "scheduler/tiers.h"

#include <string>

namespace uf::scheduler {

std::string_view ServiceTierName(ServiceTier tier) {
  switch (tier) {
    case ServiceTier::kUltrafast:
      return "ultrafast";
    case ServiceTier::kDefault:
      return "default";
    case ServiceTier::kFlex:
      return "flex";
  }
  return "default";
}

StatusOr<ServiceTier> ParseServiceTierName(std::string_view value) {
  if (value == "ultrafast" || value == "priority") return ServiceTier::kUltrafast;
  if (value == "default" || value == "standard") return ServiceTier::kDefault;
  if (value == "flex") return ServiceTier::kFlex;
  // Bound the echo: the value comes from a request body.
  std::string shown(value.substr(0, 64));
  if (value.size() > 64) shown += "...";
  return InvalidArgumentError("invalid service_tier '" + shown +
                              "': expected one of auto, default, standard, flex, ultrafast, "
                              "priority");
}

StatusOr<RequestedTier> ParseServiceTier(std::string_view value, ServiceTier auto_tier) {
  if (value.empty() || value == "auto") return RequestedTier{auto_tier, true};
  UF_ASSIGN_OR_RETURN(ServiceTier tier, ParseServiceTierName(value));
  return RequestedTier{tier, false};
}

}  // namespace uf::scheduler
