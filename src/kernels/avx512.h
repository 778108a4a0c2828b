// Internal to src/kernels: functions of the AVX-512 tier shared between its translation units.
// Only callable after GetCpuFeatures() reported AVX-512 (and BF16 where named).
#pragma once

#include <cstdint>

#include "kernels/dispatch.h"

namespace uf::kernels {

// Same bytes as ConvertActQ8_0 / ConvertActQ8_K (packed.h).
void ConvertActQ8_0Avx512(const float* x, void* dst, int64_t n);
void ConvertActQ8_KAvx512(const float* x, void* dst, int64_t n);

// F32, F16 and (with AVX512_BF16) BF16 weights; leaves other types untouched.
void FillAvx512FloatKernels(GgmlType type, KernelSet* ks);

}  // namespace uf::kernels
