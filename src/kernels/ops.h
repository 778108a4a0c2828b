// Elementwise and small reduction ops of the transformer forward pass (everything that is not a
// weight matmul). F32 in, F32 out; the numerics follow the reference engine's CPU ops (double
// accumulation in RMS norm and softmax sums, RoPE angles by repeated multiplication) so logits
// match it to rounding.
#pragma once

#include <cstdint>

namespace uf::kernels {

// y = x / sqrt(mean(x^2) + eps) * w; w may be nullptr (no scale). y may alias x. The sum of
// squares is accumulated in double (as the reference does); with AVX2 in 16 lanes: a serial
// double chain cost the demo model's decode 9% of its time.
void RmsNorm(const float* x, const float* w, float* y, int64_t n, float eps);

// y += x
void AddInPlace(float* y, const float* x, int64_t n);

// x += add, then y = RmsNorm(x, w): the residual add and the norm after it in one pass over x,
// the same bits as AddInPlace then RmsNorm. y must not alias x or add.
void AddRmsNorm(float* x, const float* add, const float* w, float* y, int64_t n, float eps);

// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)). out may alias gate or up. With the best
// ISA; the AVX2 version takes e^x from the polynomial of kernels/avx2.h (a 1B-shape decode step
// computes 131k of them, ~2% of the step with the libm call).
void SwiGlu(const float* gate, const float* up, float* out, int64_t n);

// y[i] = half(x[i]), rounded to nearest even (what F16C's vcvtps2ph gives).
void F32ToF16(const float* x, uint16_t* y, int64_t n);

namespace internal {
// AVX2+FMA(+F16C) versions (ops_avx2.cc); only called after the CPU check.
void F32ToF16Avx2(const float* x, uint16_t* y, int64_t n);
void RmsNormAvx2(const float* x, const float* w, float* y, int64_t n, float eps);
void AddRmsNormAvx2(float* x, const float* add, const float* w, float* y, int64_t n, float eps);
void SwiGluAvx2(const float* gate, const float* up, float* out, int64_t n);
float MaxValueAvx2(const float* x, int64_t n);
double ExpSumAvx2(const float* x, int64_t n, float shift, float scale, float* out,
                  double* block_sums);
int64_t IndicesInRangeAvx2(const float* x, int64_t n, float lo, float hi, int32_t* ids);
double MassAtLeastAvx2(const float* w, int64_t n, float t, int64_t* count);
double MaskedBlockSumsAvx2(const float* w, const float* v, int64_t n, float t, double* block_sums);
int64_t FirstAboveAvx2(const float* x, int64_t n, float t);
float MaxValueAvx512(const float* x, int64_t n);
double ExpSumAvx512(const float* x, int64_t n, float shift, float scale, float* out,
                    double* block_sums);
int64_t FirstAboveAvx512(const float* x, int64_t n, float t);
int64_t IndicesInRangeAvx512(const float* x, int64_t n, float lo, float hi, int32_t* ids);
}  // namespace internal

// Reductions over a row of logits for the sampler (src/sampling), with the best ISA. NaN never
// counts: it is neither a maximum, nor mass, nor gathered. A 152k vocabulary is 600 KB; each of
// these reads it once at close to the L2/L3 rate instead of the ~20 ns per token of a sort.

// Largest non-NaN value of x[0..n); -inf if there is none.
float MaxValue(const float* x, int64_t n);

// Tokens per block of ExpSum's block_sums.
inline constexpr int64_t kExpSumBlock = 64;

// Returns the sum over x[0..n) of e^((x[i] - shift) * scale) in double (each block of
// kExpSumBlock terms summed in float first). A term whose exponent is below -87 (e^-87 =
// 1.6e-38) or NaN is 0, so masked (-inf) tokens carry no mass. When not null, out[i] receives each
// term and block_sums[b] the sum over [b * kExpSumBlock, (b + 1) * kExpSumBlock) clipped to n: the
// sampler's draw finds its block from these without a second pass over the row.
double ExpSum(const float* x, int64_t n, float shift, float scale, float* out, double* block_sums);

// Index of the first x[i] > t (never NaN), or n if there is none: the top-k scan skips what cannot
// enter its heap 16-64 tokens per compare.
int64_t FirstAbove(const float* x, int64_t n, float t);

// Writes the indices i in increasing order with lo <= x[i] < hi (never NaN) to ids, which must
// hold n; returns their count.
int64_t IndicesInRange(const float* x, int64_t n, float lo, float hi, int32_t* ids);

// Sum (in double, blocks of kExpSumBlock in float) and count of the w[i] >= t: the mass above a
// threshold of non-negative weights, one compare and one masked add per 8 tokens.
double MassAtLeast(const float* w, int64_t n, float t, int64_t* count);

// Returns the sum of v[i] over the i with w[i] >= t; block_sums[b] receives the sum over block b
// (as ExpSum's).
double MaskedBlockSums(const float* w, const float* v, int64_t n, float t, double* block_sums);

struct RopeParams {
  int64_t rope_dim = 0;  // rotated leading dims of a head (even)
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;              // linear position scaling
  const float* freq_factors = nullptr;  // [rope_dim / 2] divisors of each frequency, or nullptr
  bool neox = false;                    // pair (i, i + rope_dim/2) instead of (2i, 2i+1)
  // YaRN: frequency i's angle is interpolated (x freq_scale) below the ramp, original above it,
  // blended by ext_factor x ramp in between; cos and sin are multiplied by mscale.
  float ext_factor = 0.0f;
  float yarn_low = 0.0f, yarn_high = 0.0f;  // ramp ends, in frequency indices
  float mscale = 1.0f;
};

// cs[2*i] = cos(theta_i), cs[2*i+1] = sin(theta_i) for i in [0, rope_dim/2) at position pos.
void RopeAngles(const RopeParams& p, int32_t pos, float* cs);

// Rotates the first rope_dim values of each of n_heads heads (head_dim apart) in place.
void ApplyRope(const RopeParams& p, const float* cs, float* x, int64_t n_heads, int64_t head_dim);

}  // namespace uf::kernels
