// Arithmetic peak probe: the ceiling prefill is measured against, as decode is measured against
// the read bandwidth (membw.h). Prefill multiplies many tokens by each weight it loads, so it is
// bound by the multiply-add rate of the instructions the kernels are built on, not by memory.
#pragma once

#include <string>

#include "base/thread_pool.h"
#include "kernels/matmul.h"

namespace uf::kernels {

struct ComputePeak {
  // Fused multiply-adds on f32 (2 flops each): the float types' kernels (F32, and F16 widened to
  // F32).
  double f32_gflops = 0;
  // bf16 pair dot products where the tier has them (vdpbf16ps, 2 multiply-adds per f32 lane),
  // else the FMA figure: what the BF16 kernels run on.
  double bf16_gflops = 0;
  // int8 multiply-adds (2 ops each) of the tier's integer dot instruction, alone: the quantized
  // types' kernels add unpacking, widening and scaling on top, so no kernel reaches it.
  double int8_gops = 0;
  std::string f32_op, bf16_op, int8_op;  // the instructions timed
};

// Every thread of `pool` (nullptr: the calling thread) runs independent chains of each
// instruction of tier `isa`, enough of them to cover its latency; the best of `passes` passes
// (each a few milliseconds) per instruction. On a shared machine the fastest pass is the least
// disturbed one.
ComputePeak MeasureComputePeak(ThreadPool* pool, Isa isa, int passes);

// Per-tier loops behind it: `iters` iterations of kPeakChains independent operations per call;
// the result only keeps the work from being optimised away.
inline constexpr int kPeakChains = 10;
enum class PeakOp { kF32Fma, kBf16Dot, kInt8Dot };
float PeakLoopScalar(PeakOp op, long iters);
float PeakLoopAvx2(PeakOp op, long iters);
float PeakLoopAvx512(PeakOp op, long iters);

}  // namespace uf::kernels
