// Shared by the compute shaders: 64 invocations per workgroup (kGroupSize), a workgroup sum
// through shared memory, the row a workgroup owns when rows are spread over a 2-D grid (a dimension holds at
// most 65535 groups), and for the GEMVs the row a subgroup owns (one row per subgroup, summed
// with subgroupAdd: no barriers, which on lavapipe made the lm_head 10x slower).
#extension GL_KHR_shader_subgroup_arithmetic : require

// Invocations per workgroup: 64 unless the includer defines it first (a power of two; the row
// norms take 256, so that one row of a decode step is not left to 64 invocations of one core).
#ifndef kGroupSize
#define kGroupSize 64
#endif
layout(local_size_x = kGroupSize) in;

shared float uf_red[kGroupSize];

float WorkgroupSum(float v) {
  const uint lid = gl_LocalInvocationID.x;
  uf_red[lid] = v;
  barrier();
  for (uint s = kGroupSize / 2; s > 0; s >>= 1) {
    if (lid < s) uf_red[lid] += uf_red[lid + s];
    barrier();
  }
  const float r = uf_red[0];
  barrier();
  return r;
}

float WorkgroupMax(float v) {
  const uint lid = gl_LocalInvocationID.x;
  uf_red[lid] = v;
  barrier();
  for (uint s = kGroupSize / 2; s > 0; s >>= 1) {
    if (lid < s) uf_red[lid] = max(uf_red[lid], uf_red[lid + s]);
    barrier();
  }
  const float r = uf_red[0];
  barrier();
  return r;
}

#ifdef TILES_INNER
// The token-tiled GEMMs (gemm.glsl, gemm_glu.glsl, gemm_qkv.glsl; gemm_tiled.glsl does the
// same) and the experts' grouped GEMM (its tiles of one expert's slots): the grid's x is the
// token tile and y, z the row group, so the workgroups of one row group's tiles are
// consecutive and run together: the second tile's reads of those weight rows hit L2 instead of
// DRAM (with the tile in z, as it was, every tile streamed the whole matrix again once the
// previous one had, from DRAM for any matrix larger than L2: an 8B layer's 117 MB gate, a 1B
// lm_head's 525 MB). The order changes no result.
uint GroupIndex() { return gl_WorkGroupID.y + gl_WorkGroupID.z * gl_NumWorkGroups.y; }
uint TileIndex() { return gl_WorkGroupID.x; }
#else
uint GroupIndex() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }
uint TileIndex() { return gl_WorkGroupID.z; }  // the experts' GEMM (gemmx_*): the slot
#endif

// f32 -> bf16 -> f32, round to nearest even: the CPU's rounding of activations before a BF16
// product.
float RoundBf16(float v) {
  const uint u = floatBitsToUint(v);
  return uintBitsToFloat((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u);
}

// The quantized activation formats, as the host's Activation enum numbers them (vk_kernels.h):
// the fused kernels' `format` and attention's `quant` (0 there: none).
const uint kActQ8_0 = 1, kActQ8_K = 2, kActF16 = 3, kActBF16 = 4;

// Two activations as one word of 16-bit values (a low, b high), rounded as the CPU kernels round
// activations before an F16 (bf16 false) or BF16 product: packHalf2x16 converts each component
// on its own (as the GEMMs' per-row f32 -> f16 -> f32 round trip did before), and a RoundBf16
// value is its high 16 bits. The GEMMs unpack them to the same floats they rounded to before,
// so taking pairs instead of f32 values changes no bit.
uint PackPair(float a, float b, bool bf16) {
  if (!bf16) return packHalf2x16(vec2(a, b));
  return (floatBitsToUint(RoundBf16(a)) >> 16) | (floatBitsToUint(RoundBf16(b)) & 0xFFFF0000u);
}

// silu(g) * u, silu(g) = g / (1 + e^-g): SwiGLU's value as swiglu.comp, swiglu_q.comp and the
// gate/up GEMM that applies it (gemm_glu.glsl) all compute it, one expression so one set of bits.
float SwiGlu(float g, float u) { return g / (1.0 + exp(-g)) * u; }

// The row of a GEMV this subgroup computes: gl_NumSubgroups rows per workgroup (the host
// dispatches rows / (64 / subgroup size) workgroups; a 64-wide workgroup holds full subgroups).
uint SubgroupRow() { return GroupIndex() * gl_NumSubgroups + gl_SubgroupID; }

// The index of an elementwise item when the host spreads groups of 64 over a 2-D grid.
uint ItemIndex() { return GroupIndex() * 64 + gl_LocalInvocationID.x; }

#include "div_rounded.glsl"
