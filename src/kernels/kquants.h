// Reference quantizers for the K-quant weight types (used to write synthetic model files and in
// tests). Weighted least-squares fits in the spirit of the reference engine's quantizer; slow.
#pragma once

#include <cstdint>

#include "kernels/blocks.h"

namespace uf::kernels {

// nb blocks of 256 values each.
void QuantizeRowQ4_K(const float* x, BlockQ4_K* y, int64_t nb);
void QuantizeRowQ6_K(const float* x, BlockQ6_K* y, int64_t nb);

}  // namespace uf::kernels
