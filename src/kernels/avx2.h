// Internal to src/kernels: functions of the AVX2 tier shared between its translation units.
// Only callable after GetCpuFeatures() reported AVX2 + FMA + F16C.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/dispatch.h"

namespace uf::kernels {

// Same bytes as ConvertActQ8_0 / ConvertActQ8_K (packed.h).
void ConvertActQ8_0Avx2(const float* x, void* dst, int64_t n);
void ConvertActQ8_KAvx2(const float* x, void* dst, int64_t n);

// Software prefetch distance of the streaming kernels: the hardware prefetcher alone leaves
// 10-25% of the read bandwidth unused on the Zen 3 VM (tables in kernels_avx2.cc).
// PrefetchAhead requests the line kPrefetchDistance past `line` where `anchor`, a register just
// loaded from `line`, is: the asm ties it there. A plain _mm_prefetch depends on nothing, and GCC
// gathered the 32-52 prefetches of a K-quant tile at the tile's top, a burst that stalls on the
// core's miss buffers: kernels_bench Q4_K streamed at 0.60 of the bandwidth that way against
// 0.82-0.86 with no prefetch or with the requests spread out.
inline constexpr int kPrefetchDistance = 1024;
inline void PrefetchAhead(const void* line, __m256i& anchor) {
  asm volatile("prefetcht0 %1"
               : "+x"(anchor)
               : "m"(*(static_cast<const char*>(line) + kPrefetchDistance)));
}

// F32, F16 and BF16 weights; leaves other types untouched.
void FillAvx2FloatKernels(GgmlType type, KernelSet* ks);

}  // namespace uf::kernels
