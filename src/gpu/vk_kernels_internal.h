// What the files of Kernels (vk_kernels.cc, vk_kernels_moe.cc, vk_kernels_output.cc) share: the
// grid of a dispatch, the fused quantizers' push-constant values and a GEMM's activation shape. Not
// for use outside them.
#pragma once

#include <algorithm>
#include <cstdint>

#include "base/check.h"
#include "gpu/vk_kernels.h"

namespace uf::gpu::kernels_internal {

inline constexpr uint32_t kMaxGroups = 32768;  // per grid dimension (every device allows 65535)

// A grid of n workgroups as (x, y) within the per-dimension limit; shaders read GroupIndex().
inline void Grid(uint64_t n, uint32_t* x, uint32_t* y) {
  *x = static_cast<uint32_t>(std::min<uint64_t>(n, kMaxGroups));
  *y = static_cast<uint32_t>((n + kMaxGroups - 1) / kMaxGroups);
}

// Groups of 64 invocations for n elementwise items.
inline uint32_t Groups64(uint64_t n) {
  UF_CHECK((n + 63) / 64 <= 65535) << "elementwise kernel over " << n << " values";
  return static_cast<uint32_t>((n + 63) / 64);
}

// The fused quantizers' format (rmsnorm_q.comp, swiglu_q.comp): the Activation's value, which
// common.glsl's kAct* constants repeat; and the word of the Q8 scales of `values` values (0 for
// pairs).
inline uint32_t FusedFormat(Activation act) {
  UF_CHECK(act != Activation::kF32) << "f32 activations are not quantized";
  return static_cast<uint32_t>(act);
}
inline uint32_t FusedDOff(Activation act, int64_t values) {
  const int64_t block = ActivationBlock(act);
  UF_CHECK(values % block == 0) << values << " values in blocks of " << block;
  if (act == Activation::kQ8_K) return static_cast<uint32_t>(values / block * 72);
  return act == Activation::kQ8_0 ? static_cast<uint32_t>(values / block * 8) : 0u;
}

// What the GEMMs' push constants say of w's activation: cols (blocks for quantized weights,
// else values), x_stride (per token: words of the quantized activation, else floats) and
// x_d_off (the word of the activations' scales for n_x tokens; 0 without scales).
struct GemmShape {
  uint32_t cols, x_stride, x_d_off;
};
inline GemmShape ShapeOf(const GpuMatrix& w, int64_t n_x) {
  const auto n = static_cast<uint32_t>(n_x);
  const auto cols = static_cast<uint32_t>(w.cols);
  switch (ActivationFor(w.type)) {
    case Activation::kQ8_K:
      return {cols / 256, cols / 256 * 72, n * (cols / 256) * 72};
    case Activation::kQ8_0:
      return {cols / 32, cols / 32 * 8, n * (cols / 32) * 8};
    case Activation::kF16:
    case Activation::kBF16:
      return {cols, cols / 2, 0u};  // a word per pair
    case Activation::kF32:
      break;
  }
  return {cols, cols, 0u};
}

}  // namespace uf::gpu::kernels_internal
