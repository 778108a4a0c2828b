// The activation quantizers' block code, shared by quantize_q8_0.comp, quantize_q8_k.comp and
// the fused kernels that quantize what they compute (rmsnorm_q.comp, swiglu_q.comp), so a fused
// kernel's blocks are the separate quantizer's bits. The includer defines `float QIn(uint i)`,
// value i of the activation (recomputed on each call: the same operations give the same bits),
// and a writable `uint q[]`.

// Q8_0 block b (values 32 b ..): the scale is amax / 127 rounded to f16, each value
// round-half-even(x * 127 / amax). The int8 values four per word at q[8 b ..], the scale as f32
// bits at q[d_off + b]; the CPU's QuantizeRow(kQ8_0).
void QuantizeBlockQ8_0(uint b, uint d_off) {
  const uint base = b * 32;
  float amax = 0.0;
  for (uint j = 0; j < 32; ++j) amax = max(amax, abs(QIn(base + j)));
  const float d = unpackHalf2x16(packHalf2x16(vec2(amax / 127.0, 0.0))).x;
  const float id = amax != 0.0 ? 127.0 / amax : 0.0;
  for (uint k = 0; k < 8; ++k) {
    uint word = 0;
    for (uint j = 0; j < 4; ++j) {
      const float v = clamp(roundEven(QIn(base + 4 * k + j) * id), -128.0, 127.0);
      word |= (uint(int(v)) & 0xFFu) << (8 * j);
    }
    q[b * 8 + k] = word;
  }
  q[d_off + b] = floatBitsToUint(d);
}

// Q8_K block b (values 256 b ..), as kernels::QuantizeQ8_K rounds it: max is the first value of
// the largest magnitude, iscale = -127 / max, each value round-half-even(iscale * x) capped at
// 127, d = 1 / iscale (both divisions correctly rounded: DivRounded). 72 words at q[72 b ..]:
// the int8 values four per word (64 words) and the sums of the 8 sub-blocks of 32 as ints; d as
// f32 bits at q[d_off + b].
void QuantizeBlockQ8_K(uint b, uint d_off) {
  const uint base = b * 256;
  float amax = 0.0, mx = 0.0;
  for (uint j = 0; j < 256; ++j) {
    const float v = QIn(base + j);
    if (abs(v) > amax) {
      amax = abs(v);
      mx = v;
    }
  }
  if (amax == 0.0) {
    for (uint k = 0; k < 72; ++k) q[b * 72 + k] = 0;
    q[d_off + b] = 0;
    return;
  }
  const float iscale = DivRounded(-127.0, mx);
  for (uint s = 0; s < 8; ++s) {
    int sum = 0;
    for (uint k = 0; k < 8; ++k) {
      uint word = 0;
      for (uint j = 0; j < 4; ++j) {
        precise const float t = iscale * QIn(base + 32 * s + 4 * k + j);
        const int v = min(127, int(roundEven(t)));
        sum += v;
        word |= (uint(v) & 0xFFu) << (8 * j);
      }
      q[b * 72 + 8 * s + k] = word;
    }
    q[b * 72 + 64 + s] = uint(sum);
  }
  const float d = DivRounded(1.0, iscale);
  q[d_off + b] = floatBitsToUint(d);
}
