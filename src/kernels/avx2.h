// Internal to src/kernels: functions of the AVX2 tier shared between its translation units.
// Only callable after GetCpuFeatures() reported AVX2 + FMA + F16C.
#pragma once

#include <cstdint>

#include "kernels/dispatch.h"

namespace uf::kernels {

// Same bytes as ConvertActQ8_0 / ConvertActQ8_K (packed.h).
void ConvertActQ8_0Avx2(const float* x, void* dst, int64_t n);
void ConvertActQ8_KAvx2(const float* x, void* dst, int64_t n);

// F32, F16 and BF16 weights; leaves other types untouched.
void FillAvx2FloatKernels(GgmlType type, KernelSet* ks);

}  // namespace uf::kernels
