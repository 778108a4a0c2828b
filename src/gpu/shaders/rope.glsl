// One RoPE rotation, shared by rope.comp, kv_store.comp and gemm_qkv.glsl so that the three give
// the same bits: the pair (x0, x1) rotated by the angle whose cosine and sine are c and s (the
// host's table), as the CPU's kernels::ApplyRope writes it. One expression each, so a driver that
// contracts a product into the add or subtract after it contracts it alike in every kernel.
vec2 RotatePair(float x0, float x1, float c, float s) {
  return vec2(x0 * c - x1 * s, x0 * s + x1 * c);
}
