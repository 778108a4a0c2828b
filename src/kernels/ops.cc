#include "kernels/ops.h"

#include <algorithm>
#include <cmath>

#include "kernels/blocks.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

namespace uf::kernels {

void RmsNorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  if (ActiveIsa() != Isa::kScalar) return internal::RmsNormAvx2(x, w, y, n, eps);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  if (w != nullptr) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
  }
}

void AddInPlace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void AddRmsNorm(float* x, const float* add, const float* w, float* y, int64_t n, float eps) {
  if (ActiveIsa() != Isa::kScalar) return internal::AddRmsNormAvx2(x, add, w, y, n, eps);
  AddInPlace(x, add, n);
  RmsNorm(x, w, y, n, eps);
}

void SwiGlu(const float* gate, const float* up, float* out, int64_t n) {
  if (ActiveIsa() != Isa::kScalar) return internal::SwiGluAvx2(gate, up, out, n);
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void F32ToF16(const float* x, uint16_t* y, int64_t n) {
  if (ActiveIsa() != Isa::kScalar) return internal::F32ToF16Avx2(x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = Fp32ToFp16(x[i]);
}

float MaxValue(const float* x, int64_t n) {
  if (ActiveIsa() == Isa::kAvx512) return internal::MaxValueAvx512(x, n);
  if (ActiveIsa() == Isa::kAvx2) return internal::MaxValueAvx2(x, n);
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = x[i] > max ? x[i] : max;  // false for NaN
  return max;
}

double ExpSum(const float* x, int64_t n, float shift, float scale, float* out, double* block_sums) {
  if (ActiveIsa() == Isa::kAvx512) {
    return internal::ExpSumAvx512(x, n, shift, scale, out, block_sums);
  }
  if (ActiveIsa() == Isa::kAvx2) return internal::ExpSumAvx2(x, n, shift, scale, out, block_sums);
  double total = 0.0;
  for (int64_t b = 0; b < n; b += kExpSumBlock) {
    float sum = 0.0f;
    for (int64_t i = b; i < std::min(n, b + kExpSumBlock); ++i) {
      const float a = (x[i] - shift) * scale;
      const float e = a >= -87.0f ? std::exp(a) : 0.0f;  // false for NaN
      if (out != nullptr) out[i] = e;
      sum += e;
    }
    if (block_sums != nullptr) block_sums[b / kExpSumBlock] = sum;
    total += sum;
  }
  return total;
}

int64_t FirstAbove(const float* x, int64_t n, float t) {
  if (ActiveIsa() == Isa::kAvx512) return internal::FirstAboveAvx512(x, n, t);
  if (ActiveIsa() == Isa::kAvx2) return internal::FirstAboveAvx2(x, n, t);
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] > t) return i;
  }
  return n;
}

int64_t IndicesInRange(const float* x, int64_t n, float lo, float hi, int32_t* ids) {
  if (ActiveIsa() == Isa::kAvx512) return internal::IndicesInRangeAvx512(x, n, lo, hi, ids);
  if (ActiveIsa() == Isa::kAvx2) return internal::IndicesInRangeAvx2(x, n, lo, hi, ids);
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] >= lo && x[i] < hi) ids[m++] = static_cast<int32_t>(i);
  }
  return m;
}

double MassAtLeast(const float* w, int64_t n, float t, int64_t* count) {
  if (ActiveIsa() != Isa::kScalar) return internal::MassAtLeastAvx2(w, n, t, count);
  double total = 0.0;
  int64_t c = 0;
  for (int64_t b = 0; b < n; b += kExpSumBlock) {
    float sum = 0.0f;
    for (int64_t i = b; i < std::min(n, b + kExpSumBlock); ++i) {
      if (w[i] >= t) sum += w[i], ++c;
    }
    total += sum;
  }
  *count = c;
  return total;
}

double MaskedBlockSums(const float* w, const float* v, int64_t n, float t, double* block_sums) {
  if (ActiveIsa() != Isa::kScalar) return internal::MaskedBlockSumsAvx2(w, v, n, t, block_sums);
  double total = 0.0;
  for (int64_t b = 0; b < n; b += kExpSumBlock) {
    float sum = 0.0f;
    for (int64_t i = b; i < std::min(n, b + kExpSumBlock); ++i) {
      if (w[i] >= t) sum += v[i];
    }
    block_sums[b / kExpSumBlock] = sum;
    total += sum;
  }
  return total;
}

void RopeAngles(const RopeParams& p, int32_t pos, float* cs) {
  // The reference advances theta by repeated float multiplication; doing the same keeps our
  // angles within rounding of its angles even at large positions.
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.rope_dim));
  float theta = static_cast<float>(pos);
  for (int64_t i = 0; i < p.rope_dim / 2; ++i) {
    const float extrap = p.freq_factors != nullptr ? theta / p.freq_factors[i] : theta;
    float t = extrap * p.freq_scale;
    if (p.ext_factor != 0.0f) {
      const float y =
          (static_cast<float>(i) - p.yarn_low) / std::max(0.001f, p.yarn_high - p.yarn_low);
      const float mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * p.ext_factor;
      t = t * (1.0f - mix) + extrap * mix;
    }
    cs[2 * i] = std::cos(t) * p.mscale;
    cs[2 * i + 1] = std::sin(t) * p.mscale;
    theta *= theta_scale;
  }
}

void ApplyRope(const RopeParams& p, const float* cs, float* x, int64_t n_heads, int64_t head_dim) {
  const int64_t half = p.rope_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    if (p.neox) {
      for (int64_t i = 0; i < half; ++i) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float x0 = v[i], x1 = v[i + half];
        v[i] = x0 * c - x1 * s;
        v[i + half] = x0 * s + x1 * c;
      }
    } else {
      for (int64_t i = 0; i < half; ++i) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * c - x1 * s;
        v[2 * i + 1] = x0 * s + x1 * c;
      }
    }
  }
}

}  // namespace uf::kernels
