// Q4_K as uploaded (vk_kernels.cc): per block of 256 values 35 words (qs: 32, the 12 bytes of
// packed 6-bit scales and mins: 3), the f32 d and dmin of each block at words d_off + 2 b and
// d_off + 2 b + 1. Value l of group g (64 values: sub-blocks 2g and 2g+1, l < 32) is the low
// nibble of qs[32 g + l] (sub-block 2g) or its high nibble (the value 32 later, 2g+1); a value
// is (d * scale_j) * q - dmin * min_j, as kernels::DequantizeQ4_K computes it.
uint Q4Byte(uint base, uint i) { return (W4(base + i / 4) >> (8 * (i % 4))) & 0xFFu; }

// The 6-bit scale and min of sub-block j (kernels::GetScaleMinK4).
void Q4ScaleMinU(uint base, uint j, out uint sc, out uint m) {
  const uint sb = base + 32;
  if (j < 4) {
    sc = Q4Byte(sb, j) & 63u;
    m = Q4Byte(sb, j + 4) & 63u;
  } else {
    sc = (Q4Byte(sb, j + 4) & 15u) | ((Q4Byte(sb, j - 4) >> 6) << 4);
    m = (Q4Byte(sb, j + 4) >> 4) | ((Q4Byte(sb, j) >> 6) << 4);
  }
}

void Q4ScaleMin(uint base, uint j, out float sc, out float m) {
  uint s, mn;
  Q4ScaleMinU(base, j, s, mn);
  sc = float(s);
  m = float(mn);
}
