// Q6_K as uploaded (vk_kernels.cc): per block of 256 values 52 words (ql: 32, qh: 16, the 16
// int8 scales: 4), the f32 super-block scales elsewhere. Value l + 32 k of half h (l < 32,
// k < 4) is a nibble of ql[64 h + l + 32 (k & 1)] (low for k < 2) with bits 2k..2k+1 of
// qh[32 h + l] on top, minus 32, times scale[8 h + l / 16 + 2 k].
uint Q6Byte(uint base, uint i) { return (W6(base + i / 4) >> (8 * (i % 4))) & 0xFFu; }

int Q6Quant(uint base, uint h, uint l, uint k) {
  const uint ql = Q6Byte(base, 64 * h + l + 32 * (k & 1u));
  const uint nib = k < 2 ? (ql & 15u) : (ql >> 4);
  const uint qh = (Q6Byte(base + 32, 32 * h + l) >> (2 * k)) & 3u;
  return int(nib | (qh << 4)) - 32;
}

float Q6Scale(uint base, uint h, uint l, uint k) {
  const uint i = 8 * h + l / 16 + 2 * k;
  return float(bitfieldExtract(int(W6(base + 48 + i / 4)), int(8 * (i % 4)), 8));
}
