#include "kernels/peak.h"

#include <algorithm>
#include <atomic>

#include "base/clock.h"
#include "kernels/dispatch.h"

namespace uf::kernels {
namespace {

// Operations per lane-instruction counted by each op: FMA 2 flops per lane; vdpbf16ps 2
// multiply-adds per f32 lane; the int8 dots 2 ops per byte pair.
struct OpShape {
  double ops_per_instruction;
  const char* name;
};

OpShape Shape(Isa isa, PeakOp op, const CpuFeatures& f) {
  switch (isa) {
    case Isa::kAvx512:
      if (op == PeakOp::kF32Fma) return {2.0 * 16, "vfmadd132ps zmm"};
      if (op == PeakOp::kBf16Dot) {
        return f.avx512bf16 ? OpShape{4.0 * 16, "vdpbf16ps zmm"}
                            : OpShape{2.0 * 16, "vfmadd132ps zmm"};
      }
      return {2.0 * 64, "vpdpbusd zmm"};
    case Isa::kAvx2:
      if (op == PeakOp::kInt8Dot) return {2.0 * 32, "vpmaddubsw ymm"};
      return {2.0 * 8, "vfmadd132ps ymm"};
    case Isa::kScalar:
      break;
  }
  if (op == PeakOp::kInt8Dot) return {2.0, "scalar int32 multiply-add"};
  return {2.0, "scalar f32 multiply-add"};
}

}  // namespace

ComputePeak MeasureComputePeak(ThreadPool* pool, Isa isa, int passes) {
  const CpuFeatures& f = GetCpuFeatures();
  auto loop = isa == Isa::kAvx512 ? PeakLoopAvx512
              : isa == Isa::kAvx2 ? PeakLoopAvx2
                                  : PeakLoopScalar;
  // ~5-10 ms per pass on a 3 GHz core for the SIMD tiers: long against the pool's dispatch,
  // short enough that 3 ops x a few passes stay under a tenth of a second.
  const long iters = isa == Isa::kScalar ? (1L << 20) : (1L << 21);
  ComputePeak peak;
  float sink = 0;
  for (PeakOp op : {PeakOp::kF32Fma, PeakOp::kBf16Dot, PeakOp::kInt8Dot}) {
    const OpShape shape = Shape(isa, op, f);
    if (op == PeakOp::kBf16Dot && !(isa == Isa::kAvx512 && f.avx512bf16)) {
      peak.bf16_gflops = peak.f32_gflops;  // no bf16 dot instruction: the kernels widen to f32
      peak.bf16_op = peak.f32_op;
      continue;
    }
    std::atomic<int> threads{0};
    double best = 0;
    for (int p = 0; p < std::max(1, passes); ++p) {
      std::atomic<float> s{0};
      threads = 0;
      const double t0 = NowSeconds();
      auto run = [&](int, int) {
        threads.fetch_add(1, std::memory_order_relaxed);
        s.store(loop(op, iters), std::memory_order_relaxed);
      };
      if (pool != nullptr) {
        pool->Run(run);
      } else {
        run(0, 1);
      }
      const double seconds = NowSeconds() - t0;
      sink += s.load();
      const double ops =
          shape.ops_per_instruction * kPeakChains * static_cast<double>(iters) * threads.load();
      best = std::max(best, ops / seconds / 1e9);
    }
    switch (op) {
      case PeakOp::kF32Fma:
        peak.f32_gflops = best;
        peak.f32_op = shape.name;
        break;
      case PeakOp::kBf16Dot:
        peak.bf16_gflops = best;
        peak.bf16_op = shape.name;
        break;
      case PeakOp::kInt8Dot:
        peak.int8_gops = best;
        peak.int8_op = shape.name;
        break;
    }
  }
  volatile float consumed = sink;  // keeps the loops' work from being optimised away
  (void)consumed;
  return peak;
}

float PeakLoopScalar(PeakOp op, long iters) {
  if (op == PeakOp::kInt8Dot) {
    int32_t a[kPeakChains];
    for (int i = 0; i < kPeakChains; ++i) a[i] = i;
    int32_t w = 3, x = 5;
    for (long it = 0; it < iters; ++it) {
      asm volatile("" : "+r"(w), "+r"(x));  // not hoisted out of the loop
      for (int i = 0; i < kPeakChains; ++i) a[i] = a[i] * w + x;
    }
    int32_t s = 0;
    for (int32_t v : a) s += v;
    return static_cast<float>(s);
  }
  float a[kPeakChains];
  for (int i = 0; i < kPeakChains; ++i) a[i] = static_cast<float>(i);
  float b = 0.999999f, c = 1e-7f;
  for (long it = 0; it < iters; ++it) {
    asm volatile("" : "+x"(b), "+x"(c));
    for (int i = 0; i < kPeakChains; ++i) a[i] = a[i] * b + c;
  }
  float s = 0;
  for (float v : a) s += v;
  return s;
}

}  // namespace uf::kernels
