// Internal to the MXFP4 translation units (mxfp4_avx2.cc, mxfp4_avx512.cc, each compiled with its
// ISA's flags): the row driver of the kernel over GGUF blocks, around the ISA's own row kernel.
// Each file passes its kernel, which has internal linkage, so every instance of the driver is
// that file's alone and compiled with its flags (none is shared across ISAs at link time).
#pragma once

#include <cstdint>

#include "kernels/blocks.h"
#include "kernels/dispatch.h"
#include "kernels/packed.h"

namespace uf::kernels {

// NR weight rows (w[r], nb blocks each) against NT activation rows: out[r * NT + t].
using Mxfp4RowsKernel = void (*)(const BlockMxfp4* const* w, int64_t nb, const ActQ8_0* const* act,
                                 float* out);

// Rows on NR weight rows from r0 against NT tokens from t0, written into t.y.
template <int NR, int NT, Mxfp4RowsKernel Rows>
void RunMxfp4Rows(const GemmTask& t, int64_t nb, int64_t r0, int64_t t0) {
  const BlockMxfp4* w[NR];
#pragma GCC unroll 16
  for (int r = 0; r < NR; ++r) {
    w[r] = reinterpret_cast<const BlockMxfp4*>(t.w + (r0 + r) * t.w_row_bytes);
  }
  const ActQ8_0* act[NT];
#pragma GCC unroll 16
  for (int i = 0; i < NT; ++i) {
    act[i] = reinterpret_cast<const ActQ8_0*>(t.act + (t0 + i) * t.act_row_bytes);
  }
  float out[NR * NT];
  Rows(w, nb, act, out);
  for (int r = 0; r < NR; ++r) {
    for (int i = 0; i < NT; ++i) t.y[(t0 + i) * t.ldy + r0 + r] = out[r * NT + i];
  }
}

}  // namespace uf::kernels
