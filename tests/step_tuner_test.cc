// StepTuner: the online choice between two ways of running a step that give the same bits
// (the GPU forward's attention kernels and norm tail, UF_GPU_ATTENTION=tune and
// UF_GPU_NORM_TAIL=tune), on made-up times.
#include "gpu/step_tuner.h"

#include <gtest/gtest.h>

namespace uf::gpu {
namespace {

using Class = StepTuner::Class;

// Alternates while trying, in balanced pairs (0 1 1 0 0 1: a drift over the trials, such as a
// GPU's clocks rising, falls on both ways alike), then keeps the way with the lower median: one
// slow outlier of the faster way does not flip the choice.
TEST(StepTuner, AlternatesInBalancedPairsThenKeepsTheLowerMedian) {
  StepTuner t("attention", "tiled", "token");
  const Class c = StepTuner::ClassOf(true, 512, 4096);
  const int order[2 * StepTuner::kTrials] = {0, 1, 1, 0, 0, 1};
  const double way0[StepTuner::kTrials] = {2.0, 9.0, 2.2};  // median 2.2, one outlier
  const double way1[StepTuner::kTrials] = {3.0, 3.1, 2.9};  // median 3.0, mean below way 0's
  int n[2] = {0, 0};
  for (int step = 0; step < 2 * StepTuner::kTrials; ++step) {
    ASSERT_EQ(t.Chosen(c), -1);
    const int way = t.Pick(c);
    ASSERT_EQ(way, order[step]) << "step " << step;
    t.Report(c, way, way == 0 ? way0[n[0]++] : way1[n[1]++]);
  }
  EXPECT_EQ(t.Chosen(c), 0);
  EXPECT_EQ(t.Pick(c), 0);
  // Settled: later times change nothing.
  for (int i = 0; i < 10; ++i) t.Report(c, 0, 100.0);
  EXPECT_EQ(t.Pick(c), 0);
}

TEST(StepTuner, ChoosesTheSecondWayWhenItIsFaster) {
  StepTuner t("attention", "tiled", "token");
  const Class c = StepTuner::ClassOf(false, 64, 300);
  for (int step = 0; step < 2 * StepTuner::kTrials; ++step) {
    const int way = t.Pick(c);
    t.Report(c, way, way == 0 ? 5.0 : 1.0);
  }
  EXPECT_EQ(t.Chosen(c), 1);
  const std::vector<std::string> lines = t.Describe();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("attention, single tokens, tokens < 128, depth < 512"), std::string::npos)
      << lines[0];
  EXPECT_NE(lines[0].find("tiled 5000000.0 us, token 1000000.0 us"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(": token"), std::string::npos) << lines[0];
}

// Classes by runs or single tokens, and by the bit widths of tokens and depth; each is tuned on
// its own.
TEST(StepTuner, ClassesAreTunedApart) {
  EXPECT_EQ(StepTuner::ClassOf(true, 300, 1000), StepTuner::ClassOf(true, 511, 1023));
  EXPECT_NE(StepTuner::ClassOf(true, 300, 1000), StepTuner::ClassOf(true, 512, 1000));
  EXPECT_NE(StepTuner::ClassOf(true, 300, 1000), StepTuner::ClassOf(true, 300, 1024));
  EXPECT_NE(StepTuner::ClassOf(true, 300, 1000), StepTuner::ClassOf(false, 300, 1000));
  StepTuner t("attention", "tiled", "token");
  const Class a = StepTuner::ClassOf(false, 1, 100), b = StepTuner::ClassOf(false, 1, 5000);
  for (int i = 0; i < StepTuner::kTrials; ++i) {
    t.Report(a, 0, 1.0);
    t.Report(a, 1, 2.0);
  }
  EXPECT_EQ(t.Chosen(a), 0);
  EXPECT_EQ(t.Chosen(b), -1);
  EXPECT_EQ(t.Pick(b), 0);
}

// A class for every depth (depth 0: the norm tail's, whose cost does not grow with the
// context) says so.
TEST(StepTuner, DepthZeroIsAnyDepth) {
  EXPECT_EQ(StepTuner::ClassOf(false, 1, 0).depth_log2, 0);
  EXPECT_NE(StepTuner::ClassOf(false, 1, 0), StepTuner::ClassOf(false, 1, 1));
  StepTuner t("norm tail", "off", "on");
  const Class c = StepTuner::ClassOf(false, 1, 0);
  t.Report(c, 0, 2e-3);
  const std::vector<std::string> lines = t.Describe();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(t.Describe(c), lines[0]);
  EXPECT_NE(lines[0].find("norm tail, single tokens, tokens < 2, any depth: off 2000.0 us"),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[0].find("(medians of 1, 0): trying"), std::string::npos) << lines[0];
}

// Unmeasured steps (no timestamps and no clock: 0 or negative seconds) and ways other than 0
// and 1 are ignored; a way reported more than kTrials times while the other lags keeps its first
// kTrials.
TEST(StepTuner, IgnoresUnmeasuredAndExtraReports) {
  StepTuner t("attention", "tiled", "token");
  const Class c = StepTuner::ClassOf(true, 16, 16);
  t.Report(c, 0, 0.0);
  t.Report(c, 1, -1.0);
  t.Report(c, 2, 1.0);
  t.Report(c, -1, 1.0);
  EXPECT_EQ(t.Pick(c), 0);
  for (int i = 0; i < 2 * StepTuner::kTrials; ++i) t.Report(c, 0, 4.0 + i);
  EXPECT_EQ(t.Pick(c), 1);
  EXPECT_EQ(t.Chosen(c), -1);
  for (int i = 0; i < StepTuner::kTrials; ++i) t.Report(c, 1, 4.5);
  EXPECT_EQ(t.Chosen(c), 1);  // way 0's first three: 4, 5, 6 (median 5) against 4.5
}

}  // namespace
}  // namespace uf::gpu
