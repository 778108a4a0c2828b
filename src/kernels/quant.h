// Scalar reference conversions for every weight type. These are the test oracle for the SIMD
// kernels and stay simple on purpose: clarity over speed.
#pragma once

#include <cstdint>

#include "gguf/types.h"

namespace uf::kernels {

float Fp16ToFp32(uint16_t h);
uint16_t Fp32ToFp16(float f);   // round to nearest even
float Bf16ToFp32(uint16_t h);
uint16_t Fp32ToBf16(float f);   // round to nearest even, NaN kept quiet

// n values of `type` at src -> dst. n must be a multiple of the type's block size.
// Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, Q8_K, MXFP4.
void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n);

// Reference quantizers (same rounding rules as the reference engine's, so files we write
// round-trip and activation quantization matches theirs). n a multiple of the block size.
// Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, Q8_K, MXFP4.
void QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n);

// The type activations are converted to before a dot product with weights of `weight_type`
// (as the reference does: Q8_0 for Q4_0/Q8_0/MXFP4, Q8_K for Q4_K/Q6_K, F16 for F16, BF16 for BF16,
// F32 for F32).
GgmlType ActivationType(GgmlType weight_type);

// Reference dot product of n values: weights of `weight_type` with activations already
// converted to ActivationType(weight_type). Scalar; SIMD versions are tested against it.
float DotReference(GgmlType weight_type, const void* w, const void* a, int64_t n);

}  // namespace uf::kernels
