// Internal to the AVX2 translation units (compiled with -mavx2): writing the 8 row results of a
// half tile, of which the last tile of a matrix may have fewer (its padding rows are not stored).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace uf::kernels {

// Stores the first `valid` (1..8) lanes of v at y.
inline void StoreRows8(float* y, __m256 v, int64_t valid) {
  if (valid == 8) {
    _mm256_storeu_ps(y, v);
    return;
  }
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, v);
  std::copy(tmp, tmp + valid, y);
}

}  // namespace uf::kernels
