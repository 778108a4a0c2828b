#include "kernels/kquants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/quant.h"

namespace uf::kernels {
namespace {

inline int RoundInt(float v) { return static_cast<int>(std::nearbyint(v)); }

// Fits x[i] ~ scale * q[i] - min with q in [0, nmax] and min >= 0, minimising the weighted
// squared error. Tries a few scales around (max - min) / nmax and, for each, solves the 2x2
// least-squares problem for (scale, min) given the rounded q. Returns scale; *out_min = min.
float FitScaleMin(int n, int nmax, const float* x, const float* w, uint8_t* q, float* out_min) {
  float lo = x[0], hi = x[0], sum_w = 0.0f, sum_x = 0.0f;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  lo = std::min(lo, 0.0f);  // the format can only subtract a min
  if (hi == lo) {
    std::fill(q, q + n, 0);
    *out_min = -lo;
    return 0.0f;
  }
  auto error_of = [&](float scale, float offset, const uint8_t* qq) {
    float err = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float diff = scale * qq[i] + offset - x[i];
      err += w[i] * diff * diff;
    }
    return err;
  };
  float iscale = nmax / (hi - lo);
  float best_scale = 1.0f / iscale, best_offset = lo;
  for (int i = 0; i < n; ++i) q[i] = std::clamp(RoundInt(iscale * (x[i] - lo)), 0, nmax);
  float best_err = error_of(best_scale, best_offset, q);

  uint8_t trial[kQK_K];
  for (int step = 0; step <= 20; ++step) {
    iscale = (nmax - 1.0f + 0.1f * step) / (hi - lo);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(RoundInt(iscale * (x[i] - lo)), 0, nmax);
      trial[i] = static_cast<uint8_t>(l);
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det <= 0.0f) continue;
    float scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float offset = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (offset > 0.0f) {  // a positive offset cannot be stored: refit the scale alone
      offset = 0.0f;
      scale = sum_xl / sum_l2;
    }
    const float err = error_of(scale, offset, trial);
    if (err < best_err) {
      best_err = err;
      best_scale = scale;
      best_offset = offset;
      std::memcpy(q, trial, n);
    }
  }
  *out_min = -best_offset;
  return best_scale;
}

// Fits x[i] ~ scale * q[i] with q in [-nmax, nmax - 1], weighting by x^2 (large values matter
// most). The scale is signed so the largest-magnitude value lands on -nmax. Returns the scale.
float FitSymmetric(int n, int nmax, const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < 1e-30f) return 0.0f;
  float best_scale = 0.0f, best_gain = -1.0f;
  for (int step = -9; step <= 9; ++step) {
    const float iscale = -(nmax + 0.1f * step) / max;
    float sum_lx = 0.0f, sum_l2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(RoundInt(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      sum_lx += w * x[i] * l;
      sum_l2 += w * l * l;
    }
    // The error at the optimal scale sum_lx/sum_l2 is const - sum_lx^2/sum_l2.
    if (sum_l2 > 0.0f && sum_lx * sum_lx / sum_l2 > best_gain) {
      best_gain = sum_lx * sum_lx / sum_l2;
      best_scale = sum_lx / sum_l2;
    }
  }
  return best_scale;
}

}  // namespace

void QuantizeRowQ4_K(const float* x, BlockQ4_K* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += kQK_K) {
    uint8_t q[kQK_K];
    float scales[8], mins[8];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
      const float* xs = x + 32 * j;
      float sum_x2 = 0.0f;
      for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
      const float rms = std::sqrt(sum_x2 / 32);
      float w[32];
      for (int l = 0; l < 32; ++l) w[l] = rms + std::fabs(xs[l]);
      scales[j] = FitScaleMin(32, 15, xs, w, q + 32 * j, &mins[j]);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    // Sub-block scales and mins are themselves quantized to 6 bits against the super-block
    // scales d = max/63 and dmin = max_min/63.
    const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    std::memset(y[b].scales, 0, sizeof(y[b].scales));
    for (int j = 0; j < 8; ++j) {
      const uint8_t ls = static_cast<uint8_t>(std::min(63, RoundInt(inv_scale * scales[j])));
      const uint8_t lm = static_cast<uint8_t>(std::min(63, RoundInt(inv_min * mins[j])));
      if (j < 4) {
        y[b].scales[j] = ls;
        y[b].scales[j + 4] = lm;
      } else {
        y[b].scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
        y[b].scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
        y[b].scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
      }
    }
    y[b].d = Fp32ToFp16(max_scale / 63.0f);
    y[b].dmin = Fp32ToFp16(max_min / 63.0f);
    // Requantize against the scales as they will be decoded.
    const float d = Fp16ToFp32(y[b].d), dmin = Fp16ToFp32(y[b].dmin);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      GetScaleMinK4(j, y[b].scales, &sc, &m);
      const float ds = d * sc;
      if (ds == 0.0f) continue;
      const float dm = dmin * m;
      for (int l = 0; l < 32; ++l) {
        q[32 * j + l] =
            static_cast<uint8_t>(std::clamp(RoundInt((x[32 * j + l] + dm) / ds), 0, 15));
      }
    }
    for (int g = 0; g < 4; ++g) {
      for (int l = 0; l < 32; ++l) {
        y[b].qs[32 * g + l] = static_cast<uint8_t>(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
      }
    }
  }
}

void QuantizeRowQ6_K(const float* x, BlockQ6_K* y, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b, x += kQK_K) {
    float scales[16];
    float max_scale = 0.0f, max_abs_scale = 0.0f;
    for (int j = 0; j < 16; ++j) {
      scales[j] = FitSymmetric(16, 32, x + 16 * j);
      if (std::fabs(scales[j]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    std::memset(&y[b], 0, sizeof(BlockQ6_K));
    if (max_abs_scale == 0.0f) continue;
    // int8 sub-block scales against d = max_scale / -128, so the largest maps to -128..127.
    const float iscale = -128.0f / max_scale;
    y[b].d = Fp32ToFp16(1.0f / iscale);
    for (int j = 0; j < 16; ++j) {
      y[b].scales[j] = static_cast<int8_t>(std::clamp(RoundInt(iscale * scales[j]), -128, 127));
    }
    uint8_t q[kQK_K];
    const float d = Fp16ToFp32(y[b].d);
    for (int j = 0; j < 16; ++j) {
      const float ds = d * y[b].scales[j];
      for (int l = 0; l < 16; ++l) {
        const int v = ds == 0.0f ? 0 : std::clamp(RoundInt(x[16 * j + l] / ds), -32, 31);
        q[16 * j + l] = static_cast<uint8_t>(v + 32);
      }
    }
    for (int half = 0; half < 2; ++half) {
      const uint8_t* qq = q + 128 * half;
      uint8_t* ql = y[b].ql + 64 * half;
      uint8_t* qh = y[b].qh + 32 * half;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((qq[l] & 0xF) | ((qq[l + 64] & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((qq[l + 32] & 0xF) | ((qq[l + 96] & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) |
                                     ((qq[l + 64] >> 4) << 4) | ((qq[l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace uf::kernels
