// Tier parsing and ultrafast admission: capacity, auto fallback, 429 with Retry-After.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "base/clock.h"
#include "scheduler/admission.h"
#include "scheduler/tiers.h"

namespace uf::scheduler {
namespace {

TEST(ServiceTierTest, ParsesNamesAndAliases) {
  struct Case {
    const char* value;
    ServiceTier tier;
    bool is_auto;
  };
  const Case cases[] = {
      {"ultrafast", ServiceTier::kUltrafast, false},
      {"priority", ServiceTier::kUltrafast, false},
      {"default", ServiceTier::kDefault, false},
      {"standard", ServiceTier::kDefault, false},
      {"flex", ServiceTier::kFlex, false},
      {"auto", ServiceTier::kFlex, true},
      {"", ServiceTier::kFlex, true},
  };
  for (const Case& c : cases) {
    // auto_tier kFlex: distinguishable from every explicit default.
    StatusOr<RequestedTier> t = ParseServiceTier(c.value, ServiceTier::kFlex);
    ASSERT_TRUE(t.ok()) << c.value << ": " << t.status().ToString();
    EXPECT_EQ(t->tier, c.tier) << c.value;
    EXPECT_EQ(t->is_auto, c.is_auto) << c.value;
  }
}

TEST(ServiceTierTest, AutoFollowsTheConfiguredDefault) {
  for (ServiceTier d : {ServiceTier::kUltrafast, ServiceTier::kDefault, ServiceTier::kFlex}) {
    StatusOr<RequestedTier> t = ParseServiceTier("auto", d);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->tier, d);
    EXPECT_TRUE(t->is_auto);
  }
  // The configured default itself is a concrete name, never "auto".
  EXPECT_EQ(*ParseServiceTierName("standard"), ServiceTier::kDefault);
  EXPECT_EQ(ParseServiceTierName("auto").status().code(), StatusCode::kInvalidArgument);
}

TEST(ServiceTierTest, RejectsUnknownValues) {
  for (const char* bad : {"Ultrafast", "fast", "scale", " default", "flex ", "AUTO"}) {
    StatusOr<RequestedTier> t = ParseServiceTier(bad, ServiceTier::kDefault);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("service_tier"), std::string::npos);
  }
  // A huge value is not echoed whole.
  const std::string huge(100000, 'x');
  StatusOr<RequestedTier> t = ParseServiceTier(huge, ServiceTier::kDefault);
  ASSERT_FALSE(t.ok());
  EXPECT_LT(t.status().message().size(), 300u);
}

TEST(ServiceTierTest, NamesRoundTrip) {
  for (ServiceTier tier : {ServiceTier::kUltrafast, ServiceTier::kDefault, ServiceTier::kFlex}) {
    EXPECT_EQ(*ParseServiceTierName(ServiceTierName(tier)), tier);
  }
  EXPECT_EQ(ServiceTierName(ServiceTier::kUltrafast), "ultrafast");
  EXPECT_EQ(ServiceTierName(ServiceTier::kDefault), "default");
  EXPECT_EQ(ServiceTierName(ServiceTier::kFlex), "flex");
}

constexpr RequestedTier kExplicitUltrafast{ServiceTier::kUltrafast, false};
constexpr RequestedTier kAutoUltrafast{ServiceTier::kUltrafast, true};

TEST(TierAdmissionTest, CapacityFallbackAndRejection) {
  FakeClock clock;
  AdmissionOptions o;
  o.ultrafast_capacity = 2;
  o.initial_token_seconds = 0.1;
  TierAdmission adm(o, &clock);

  AdmissionResult a = adm.Admit(1, kExplicitUltrafast, 100);
  ASSERT_TRUE(a.admitted);
  EXPECT_EQ(a.tier, ServiceTier::kUltrafast);
  EXPECT_FALSE(a.fell_back);
  clock.Advance(2.0);
  ASSERT_TRUE(adm.Admit(2, kAutoUltrafast, 50).admitted);
  EXPECT_EQ(adm.ultrafast_in_use(), 2);

  // Full: auto falls back to default, explicit ultrafast is refused.
  AdmissionResult fb = adm.Admit(3, kAutoUltrafast, 10);
  ASSERT_TRUE(fb.admitted);
  EXPECT_EQ(fb.tier, ServiceTier::kDefault);
  EXPECT_TRUE(fb.fell_back);
  EXPECT_TRUE(fb.ToStatus().ok());

  AdmissionResult no = adm.Admit(4, kExplicitUltrafast, 10);
  EXPECT_FALSE(no.admitted);
  const Status s = no.ToStatus();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message().rfind("tier_capacity_exceeded", 0), 0u) << s.message();
  // Stream 1 ends at 0 + (100 + 1) * 0.1 = 10.1 s, stream 2 at 2 + 51 * 0.1 = 7.1 s; now = 2.
  EXPECT_EQ(no.retry_after_seconds, 6);  // ceil(7.1 - 2)

  // The engine measured faster steps: the estimate shrinks. Stream 1 now ends at 101 * 0.05 =
  // 5.05 s, stream 2 at 2 + 51 * 0.05 = 4.55 s.
  adm.SetUltrafastTokenSeconds(0.05);
  EXPECT_EQ(adm.Admit(5, kExplicitUltrafast, 10).retry_after_seconds, 3);  // ceil(2.55)
  adm.SetUltrafastTokenSeconds(-1.0);                                      // ignored
  // Streams past their estimate still give a Retry-After of at least 1 s.
  clock.Advance(60.0);
  EXPECT_EQ(adm.Admit(6, kExplicitUltrafast, 10).retry_after_seconds, 1);

  // Default and flex never consume ultrafast capacity.
  EXPECT_EQ(adm.Admit(7, {ServiceTier::kFlex, false}, 10).tier, ServiceTier::kFlex);
  EXPECT_EQ(adm.Admit(8, {ServiceTier::kDefault, true}, 10).tier, ServiceTier::kDefault);
  EXPECT_EQ(adm.ultrafast_in_use(), 2);

  // Releasing a stream frees the slot; releasing unknown ids is harmless.
  adm.Release(3);
  adm.Release(12345);
  EXPECT_EQ(adm.ultrafast_in_use(), 2);
  adm.Release(1);
  EXPECT_EQ(adm.ultrafast_in_use(), 1);
  AdmissionResult again = adm.Admit(9, kExplicitUltrafast, 10);
  EXPECT_TRUE(again.admitted);
  EXPECT_EQ(again.tier, ServiceTier::kUltrafast);
}

TEST(TierAdmissionTest, RetryAfterIsCapped) {
  FakeClock clock;
  AdmissionOptions o;
  o.ultrafast_capacity = 1;
  o.initial_token_seconds = 1.0;
  o.max_retry_after_seconds = 120.0;
  TierAdmission adm(o, &clock);
  ASSERT_TRUE(adm.Admit(1, kExplicitUltrafast, 1000000).admitted);
  EXPECT_EQ(adm.Admit(2, kExplicitUltrafast, 1).retry_after_seconds, 120);
}

TEST(TierAdmissionTest, ZeroCapacityDisablesUltrafast) {
  FakeClock clock;
  AdmissionOptions o;
  o.ultrafast_capacity = 0;
  TierAdmission adm(o, &clock);
  EXPECT_FALSE(adm.Admit(1, kExplicitUltrafast, 10).admitted);
  AdmissionResult a = adm.Admit(2, kAutoUltrafast, 10);
  EXPECT_TRUE(a.admitted);
  EXPECT_EQ(a.tier, ServiceTier::kDefault);
}

TEST(TierAdmissionTest, ConcurrentAdmitsNeverExceedCapacity) {
  FakeClock clock;
  AdmissionOptions o;
  o.ultrafast_capacity = 3;
  TierAdmission adm(o, &clock);
  std::vector<std::thread> threads;
  std::vector<int> got(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const int64_t id = t * 1000 + i;
        if (adm.Admit(id, kExplicitUltrafast, 10).admitted) {
          ++got[t];
          EXPECT_LE(adm.ultrafast_in_use(), 3);
          adm.Release(id);
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(adm.ultrafast_in_use(), 0);
  int total = 0;
  for (int g : got) total += g;
  EXPECT_GT(total, 0);
}

}  // namespace
}  // namespace uf::scheduler
