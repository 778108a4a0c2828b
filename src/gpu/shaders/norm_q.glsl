// RMSNorm of one row and the quantization of its output, the code rmsnorm_q.comp runs and the
// GEMMs' norm tail (gemm.glsl) runs after the product that wrote the row, so both give the same
// bits (and rmsnorm.comp's, which sums as 256 invocations do). The includer defines kGroupSize
// (a power of two, at most 256), `float NormX(uint i)` (value i of the rows), `float NormW(uint
// j)` (the norm's weight j), `void NormY(uint i, float v)` (stores the normalized value) and a
// writable `uint q[]`, and calls NormRow in workgroup-uniform control flow.
// The sum of squares is taken as 256 lanes take it whatever the workgroup size: lane l sums values
// l, l + 256, ... in order, then a tree over the 256 partial sums (s = 128, 64, ..., 1): a
// smaller workgroup plays several lanes, so the sum's bits do not depend on the workgroup size.

shared float uf_norm[256];
float g_scale = 0.0;  // the row's 1 / rms
uint g_row0 = 0;      // index of the row's first value

float QIn(uint i) { return NormX(i) * g_scale * NormW(i - g_row0); }

#include "quant_q8.glsl"

// Row `row` of n values (from value row * n): y = x / sqrt(mean(x^2) + eps) * w into NormY and,
// for format kActQ8_0, kActQ8_K, kActF16 or kActBF16, quantized into q (Q8 scales at word d_off;
// nothing for 0). n a multiple of the format's block.
// 1 / sqrt(mean(x^2) + eps) of the n values from value xb, the sum of squares taken as above;
// uf_norm is free again when it returns.
float NormScale(uint xb, uint n, float eps) {
  const uint lid = gl_LocalInvocationID.x;
  for (uint l = lid; l < 256; l += kGroupSize) {
    float ss = 0.0;
    for (uint i = l; i < n; i += 256) ss += NormX(xb + i) * NormX(xb + i);
    uf_norm[l] = ss;
  }
  barrier();
  for (uint s = 128; s > 0; s >>= 1) {
    for (uint l = lid; l < s; l += kGroupSize) uf_norm[l] += uf_norm[l + s];
    barrier();
  }
  const float scale = 1.0 / sqrt(uf_norm[0] / float(n) + eps);
  barrier();  // uf_norm[0] read by all before a next row writes it
  return scale;
}

void NormRow(uint row, uint n, float eps, uint format, uint d_off) {
  const uint xb = row * n, lid = gl_LocalInvocationID.x;
  const float scale = NormScale(xb, n, eps);
  for (uint i = lid; i < n; i += kGroupSize) NormY(xb + i, NormX(xb + i) * scale * NormW(i));
  g_scale = scale;
  g_row0 = xb;
  if (format == kActF16 || format == kActBF16) {  // a word per two values, from xb / 2
    for (uint i = lid; i < n / 2; i += kGroupSize) {
      q[xb / 2 + i] = PackPair(QIn(xb + 2 * i), QIn(xb + 2 * i + 1), format == kActBF16);
    }
    return;
  }
  if (format != kActQ8_0 && format != kActQ8_K) return;
  const uint per_row = n / (format == kActQ8_K ? 256 : 32);
  QuantLanes();
  if (format == kActQ8_K) {
    QuantizeRangeQ8_K(row * per_row, row * per_row + per_row, d_off);
  } else {
    QuantizeRangeQ8_0(row * per_row, row * per_row + per_row, d_off);
  }
}
