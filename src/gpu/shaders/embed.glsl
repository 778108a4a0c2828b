// Value c of row `row` of an embedding table in its uploaded layout (vk_kernels.cc), dequantized:
// p.type 0 F32, 1 F16, 2 Q8_0, 3 Q4_0, 4 Q6_K, 5 BF16, 6 Q4_K, 7 MXFP4 (the layouts the GEMMs
// read), p.cols values a row, p.d_off the word of the scales. The includer declares the table as
// `uint t[]` and push constants p with type, cols and d_off (embed.comp, embed_q.comp).
uint W6(uint i) { return t[i]; }
uint W4(uint i) { return t[i]; }
#include "q6_k.glsl"
#include "q4_k.glsl"

float EmbedValue(uint row, uint c) {
  float v;
  if (p.type == 0) {
    v = uintBitsToFloat(t[row * p.cols + c]);
  } else if (p.type == 1 || p.type == 5) {
    const uint word = t[(row * p.cols + c) / 2];
    if (p.type == 1) {
      const vec2 h = unpackHalf2x16(word);
      v = (c & 1) != 0 ? h.y : h.x;
    } else {
      v = uintBitsToFloat((c & 1) != 0 ? word & 0xFFFF0000u : word << 16);
    }
  } else if (p.type == 4) {
    const uint blocks = p.cols / 256, b = c / 256, j = c % 256;
    const uint h = j / 128, k = (j % 128) / 32, l = j % 32;
    const uint base = (row * blocks + b) * 52;
    const float d = uintBitsToFloat(t[p.d_off + row * blocks + b]);
    v = d * Q6Scale(base, h, l, k) * float(Q6Quant(base, h, l, k));
  } else if (p.type == 6) {
    const uint blocks = p.cols / 256, b = c / 256, j = c % 256;
    const uint g = j / 64, hi = (j % 64) / 32, l = j % 32;
    const uint base = (row * blocks + b) * 35;
    const uint db = p.d_off + 2 * (row * blocks + b);
    const uint q = Q4Byte(base, 32 * g + l);
    float sc, m;
    Q4ScaleMin(base, 2 * g + hi, sc, m);
    v = (uintBitsToFloat(t[db]) * sc) * float(hi != 0 ? q >> 4 : q & 15u) -
        uintBitsToFloat(t[db + 1]) * m;
  } else {
    const uint blocks = p.cols / 32, b = c / 32, j = c % 32;
    const float d = uintBitsToFloat(t[p.d_off + row * blocks + b]);
    if (p.type == 2) {
      v = d * float(bitfieldExtract(int(t[(row * blocks + b) * 8 + j / 4]), int(8 * (j % 4)), 8));
    } else {
      const uint byte_index = j % 16;
      const uint word = t[(row * blocks + b) * 4 + byte_index / 4];
      const uint nib = (word >> (8 * (byte_index % 4) + (j >= 16 ? 4 : 0))) & 15u;
      const int kDoubled[16] = int[16](0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
      v = d * float(p.type == 7 ? kDoubled[nib] : int(nib) - 8);
    }
  }
  return v;
}
