// The arithmetic peak probe (kernels/peak.h) runs on every tier the CPU has and names what it
// timed. Its figures are machine facts, so only their presence and consistency are checked.
#include "kernels/peak.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/dispatch.h"

namespace uf::kernels {
namespace {

TEST(ComputePeakTest, EveryAvailableTierReportsPositiveFigures) {
  const CpuFeatures& f = GetCpuFeatures();
  std::vector<Isa> isas = {Isa::kScalar};
  if (f.avx2) isas.push_back(Isa::kAvx2);
  if (f.avx512) isas.push_back(Isa::kAvx512);
  ThreadPool pool(2);
  for (Isa isa : isas) {
    SCOPED_TRACE(IsaName(isa));
    const ComputePeak p = MeasureComputePeak(&pool, isa, 2);
    EXPECT_GT(p.f32_gflops, 0.0);
    EXPECT_GT(p.bf16_gflops, 0.0);
    EXPECT_GT(p.int8_gops, 0.0);
    EXPECT_TRUE(std::isfinite(p.f32_gflops) && std::isfinite(p.int8_gops));
    EXPECT_FALSE(p.f32_op.empty());
    EXPECT_FALSE(p.int8_op.empty());
    if (isa == Isa::kAvx512 && f.avx512bf16) {
      EXPECT_EQ(p.bf16_op, "vdpbf16ps zmm");
    } else {
      // No bf16 dot instruction: the BF16 kernels widen to f32, so that is their ceiling.
      EXPECT_EQ(p.bf16_op, p.f32_op);
      EXPECT_EQ(p.bf16_gflops, p.f32_gflops);
    }
    if (isa == Isa::kAvx2) EXPECT_EQ(p.int8_op, "vpmaddubsw ymm");
    if (isa == Isa::kAvx512) EXPECT_EQ(p.int8_op, "vpdpbusd zmm");
  }
}

TEST(ComputePeakTest, RunsWithoutAPool) {
  const ComputePeak p = MeasureComputePeak(nullptr, Isa::kScalar, 1);
  EXPECT_GT(p.f32_gflops, 0.0);
  EXPECT_GT(p.int8_gops, 0.0);
}

}  // namespace
}  // namespace uf::kernels
