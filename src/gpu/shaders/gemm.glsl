// Shared by the GEMM shaders (gemm_*.comp): y[t][row] = dot(W[row], x[t]) for the n tokens of a
// batch. One subgroup per weight row, as the single-token GEMV had; the tokens are taken in tiles
// of kTile (the grid's x: TILES_INNER, common.glsl), so each weight element is read once per tile
// and multiplied into every token of it.
// Each (row, token) sum is formed the same way whatever n is: the same lane takes the same
// columns in the same order into acc[t], and subgroupAdd reduces it. So a token's row of a
// k + 1-token verify batch is bit-identical to the same token run alone (speculation stays
// lossless; tests/gpu_batch_test.cc checks it).
//
// Push constants: rows; cols (values for float weights, blocks for quantized ones); w_d_off (word
// of the weights' block scales); n tokens; x_stride (per token: floats, or words of a Q8_0 / Q8_K
// activation or of 16-bit pairs); x_d_off (word of the Q8_0 activations' scales, token-major);
// y_off, y_stride; acc: 1 to add the product to y (y += W x: the residual add folded into the
// GEMM, as add.comp would add it afterwards: y + s, the same bits), 0 to write it.
#extension GL_GOOGLE_include_directive : require
#ifndef EXPERTS
#define TILES_INNER  // the token tile (grouped: the expert's tile) is the grid's x (common.glsl)
#endif
#include "common.glsl"

#extension GL_EXT_control_flow_attributes : require

// Tokens per tile. The loops over a tile are unrolled ([[unroll]]) so acc[] stays in registers
// (indexed by a variable it went to memory: 6x slower on lavapipe).
#ifndef kTile
#define kTile 8
#endif

#if defined(GROUPED)
// Stacked experts grouped by expert (gemmg_*, kTile 8): x is a tile of up to 8 slots that chose
// one expert, so its rows are read once for all of them: tiles[3 z] the expert, tiles[3 z + 1]
// the tile's first index into order (the slots sorted by expert, moe_group.comp), tiles[3 z + 2]
// its slot count (0: an unused tile). A slot's sum is formed as gemm8_* forms a token's, which
// is gemm1_*'s (and so gemmx_*'s) to the bit.
layout(push_constant) uniform P {
  uint rows, cols, w_d_off, n, x_stride, x_d_off, y_off, y_stride, x_div, acc;
} p;
layout(std430, binding = 3) readonly buffer Tiles { uint tiles[]; };
layout(std430, binding = 4) readonly buffer Order { uint order[]; };
// The tile's slots and their activation rows, read once by TileStart (the loops over a tile are
// unrolled, so these stay in registers).
uint g_n = 0;
uint g_slot[kTile], g_x[kTile];
uint WRow(uint row) { return tiles[3 * TileIndex()] * p.rows + row; }
float Biased(float s, uint row) { return s; }
uint XTok(uint i) { return g_x[i]; }
bool InBatch(uint i) { return i < g_n; }
uint YRow(uint i) { return g_slot[i]; }
bool Skip() { return tiles[3 * TileIndex() + 2] == 0; }
#elif defined(EXPERTS)
// Stacked experts (gemmx_*, kTile 1): z is a slot, ids[slot] its expert, whose rows start at
// ids[slot] * rows of the stack; the slot reads activation row slot / x_div (a token's row for
// gate and up, the slot's own for down) and writes y row slot.
#ifdef SUM
// The sum tail's (gemmx_*_sum, SumTail below): the rows a workgroup computes, the down biases,
// and the norm tail's flag, format, word of its Q8 scales and eps.
layout(push_constant) uniform P {
  uint rows, cols, w_d_off, n, x_stride, x_d_off, y_off, y_stride, x_div, acc, group_rows,
      has_bias, norm, format, q_d_off;
  float eps;
} p;
#else
layout(push_constant) uniform P {
  uint rows, cols, w_d_off, n, x_stride, x_d_off, y_off, y_stride, x_div, acc;
} p;
#endif
layout(std430, binding = 3) readonly buffer Ids { uint ids[]; };
uint WRow(uint row) { return ids[gl_WorkGroupID.z] * p.rows + row; }
float Biased(float s, uint row) { return s; }
uint XTok(uint t) { return t / p.x_div; }
bool InBatch(uint t) { return t < p.n; }
uint YRow(uint t) { return t; }
bool Skip() { return false; }
#else
// bias: 1 to add bias[row] to each sum before it is stored (qwen2's and gpt-oss's q/k/v biases:
// s + b, the bits of add.comp after the product); never together with acc.
// norm: 1 for the norm tail (NormTail below: y_off 0, y_stride rows), with its eps, the
// quantized format it writes (kAct*, 0 for none) and the word of that format's Q8 scales.
// rope: the RoPE / K/V-store epilogue (RopeStore below: 1 Q, 2 K, 3 V; y_off 0, y_stride rows),
// with the rows a workgroup computes (even), the heads' dimension, rope_dim, the cache's rows per
// head, the first word of this matrix's half of the cache and the words of a head's row.
// route: the route tail (RouteTail below; the *_route kernels only): 1 | 2 softmax_all | 4 norm,
// with the router's k and scale.
layout(push_constant) uniform P {
  uint rows, cols, w_d_off, n, x_stride, x_d_off, y_off, y_stride, acc, bias, norm, format,
      q_d_off;
  float eps;
  uint rope, group_rows, head_dim, rope_dim, n_rows, cache_off, row_words, route, route_k;
  float route_scale;
} p;
layout(std430, binding = 3) readonly buffer B { float bias_v[]; };
float Biased(float s, uint row) { return p.bias != 0 ? s + bias_v[row] : s; }
uint WRow(uint row) { return row; }
uint XTok(uint t) { return t; }
bool InBatch(uint t) { return t < p.n; }
uint YRow(uint t) { return t; }
bool Skip() { return false; }
#endif

#ifdef STAGES
// coherent: the norm tail's last workgroup reads the rows the others wrote, the epilogue the rows
// its workgroup's other subgroups wrote.
layout(std430, binding = 2) coherent buffer Y { float y[]; };

// The tails' counters (zero before and after a dispatch) and their common part: counts this
// workgroup on counter[c], and says whether it is the last of `of` to, which then sees every
// write the others made before counting (called in uniform control flow).
layout(std430, binding = 7) coherent buffer Counter { uint counter[]; };
shared bool g_last_group;

bool LastOf(uint c, uint of) {
  memoryBarrierBuffer();  // this invocation's writes, before its workgroup counts itself done
  barrier();
  if (gl_LocalInvocationIndex == 0) g_last_group = atomicAdd(counter[c], 1u) == of - 1;
  barrier();
  if (!g_last_group) return false;
  memoryBarrierBuffer();  // every other workgroup's writes, published before its count
  return true;
}
#else
layout(std430, binding = 2) buffer Y { float y[]; };
#endif

// The first token of this workgroup's tile: tiles are the grid's x (TILES_INNER).
#ifdef GROUPED
uint TileStart() {
  const uint first = tiles[3 * TileIndex() + 1];
  g_n = tiles[3 * TileIndex() + 2];
  [[unroll]] for (uint t = 0; t < kTile; ++t) {
    g_slot[t] = t < g_n ? order[first + t] : 0;
    g_x[t] = g_slot[t] / p.x_div;
  }
  return 0;
}
#else
uint TileStart() { return TileIndex() * kTile; }
#endif

void Store(uint i, float s) { y[i] = p.acc != 0 ? y[i] + s : s; }

// Sums each token's partial over the subgroup and writes it.
void StoreTile(float acc[kTile], uint t0, uint row) {
  [[unroll]] for (uint t = 0; t < kTile; ++t) {
    if (InBatch(t0 + t)) {  // uniform: every lane has the same t0
      const float s = subgroupAdd(acc[t]);
      if (subgroupElect()) Store(p.y_off + YRow(t0 + t) * p.y_stride + row, Biased(s, row));
    }
  }
}

// v itself, but a value the compiler cannot fuse into a following add: lavapipe contracted
// a * b - c into one fused multiply-add despite `precise` (SPIR-V NoContraction), which the
// CPU's scalar kernels do not do. Every lane holds the same v (a uniform value), so their max
// is v; one subgroup reduction (arithmetic, which every kernel here needs already).
float Unfused(float v) { return subgroupMax(v); }

// Writes each token's sum when every lane already holds it (the K-quant GEMMs reduce each
// block's integer sums over the subgroup and add the blocks in order in every lane).
void StoreTileUniform(float acc[kTile], uint t0, uint row) {
  [[unroll]] for (uint t = 0; t < kTile; ++t) {
    if (InBatch(t0 + t) && subgroupElect()) {
      Store(p.y_off + YRow(t0 + t) * p.y_stride + row, Biased(acc[t], row));
    }
  }
}

#if !defined(GROUPED) && !defined(EXPERTS) && defined(STAGES)
// The *_stages kernels (built with STAGES): the plain ones must carry no barrier(), which makes
// lavapipe run a whole shader 2-3x slower whether it executes or not.
// The norm tail: a product that writes the residual stream (x += W a, one token) also computes
// the RMSNorm after it, in the last of its workgroups to finish, so the norm needs no dispatch
// and barrier of its own (~1.9 us each on an H200 by issue 28's probe, two a layer). Every
// workgroup publishes its rows (memoryBarrierBuffer on a coherent y) and then counts itself
// done on counter[0]; the one that counts last sees every row, normalizes the n tokens' rows of
// y (norm_q.glsl: rmsnorm_q.comp's code, so its bits) into xn and q, and resets the counter for
// the next dispatch. The pattern of a single-pass reduction (AMD's FidelityFX SPD uses it on
// every vendor). Binding 6 (q) may be the buffer this GEMM's activation came from: the tail
// writes it only after every workgroup has finished reading.
layout(std430, binding = 4) readonly buffer NormWt { float nw[]; };
layout(std430, binding = 5) writeonly buffer XN { float xn[]; };
layout(std430, binding = 6) writeonly buffer Q { uint q[]; };

float NormX(uint i) { return y[i]; }
float NormW(uint j) { return nw[j]; }
void NormY(uint i, float v) { xn[i] = v; }
#include "norm_q.glsl"

// Whether this workgroup is the dispatch's last to finish (counter[0]).
bool LastGroup() {
  return LastOf(0, gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_NumWorkGroups.z);
}

void NormTail() {
  if (p.norm == 0 || !LastGroup()) return;
  for (uint t = 0; t < p.n; ++t) NormRow(t, p.rows, p.eps, p.format, p.q_d_off);
  if (gl_LocalInvocationIndex == 0) counter[0] = 0;
}

#ifdef ROUTE
// The route tail (the *_route twins of the one-token GEMMs, compiled with STAGES and ROUTE: the
// router's shared arrays, ~4.5 KB, stay out of the other kernels): a mixture-of-experts router
// GEMM (rows = n_expert logits a token, the router's bias as this GEMM's, s + b as route.comp
// adds it) also routes its tokens in its last workgroup, route.glsl's code and so route.comp's
// bits, the experts' ids into binding 6 and their weights into binding 5: no route dispatch and
// barrier a MoE layer (~1.9 us each on an H200, 48 a Qwen3-30B-A3B token).
float RouteLogit(uint t, uint x) { return y[t * p.rows + x]; }
void RouteOut(uint slot, uint id, float w) {
  q[slot] = id;
  xn[slot] = w;
}
#include "route.glsl"

void RouteTail() {
  if (p.route == 0 || !LastGroup()) return;
  for (uint t = 0; t < p.n; ++t) {
    RouteToken(t, p.rows, p.route_k, (p.route & 2u) != 0, (p.route & 4u) != 0, p.route_scale);
  }
  if (gl_LocalInvocationIndex == 0) counter[0] = 0;
}
#endif

// The RoPE / K/V-store epilogue: Q's, K's or V's GEMM (one row a subgroup, any weight type)
// also does the stage after it, so a layer has no RoPE / store dispatch and barrier between the
// products and attention. A workgroup computes rows group_rows g .. group_rows (g + 1) - 1, an
// even count, so it holds whole llama RoPE pairs (2 i, 2 i + 1) of its heads. After its subgroups
// have stored the sums (a coherent y, memoryBarrierBuffer, barrier), each invocation takes pairs
// of the workgroup's rows for the tile's tokens and, at the token's position tok[4 t + 1], as
// rope.comp and kv_store.comp do (rope.glsl's RotatePair, the same floats in):
// - Q (rope 1): rotates the pair in y, as Rope() would;
// - K (rope 2): stores the rotated pair as an f16-pair word into the cache row tok[4 t + 2]
//   (kv_store.comp's layout from word cache_off), y left unrotated;
// - V (rope 3): stores the pair's f16-pair word.
// Its buffers are bindings 4-5 seen as the rotation's (the angles [positions][rope_dim], the
// cache: the norm tail's, which it never runs with) and 8, the tokens. Not binding 6: there
// the norm tail writes, and a binding some declaration writes counts as written for every
// dispatch that binds it, so Q's, K's and V's products, grouped without a barrier and each
// binding the one token buffer, would be read-after-write hazards to synchronization validation
// (UF_GPU_VALIDATE) that no GPU has.
layout(std430, binding = 4) readonly buffer RopeCS { float rope_cs[]; };
layout(std430, binding = 5) writeonly buffer RopeCache { uint rope_cache[]; };
layout(std430, binding = 8) readonly buffer RopeTok { uint rope_tok[]; };
#include "rope.glsl"

void RopeStore() {
  if (p.rope == 0 || p.rope >= 4) return;
  memoryBarrierBuffer();  // the subgroups' rows of y, for the workgroup's other invocations
  barrier();
  const uint first = GroupIndex() * p.group_rows, pairs = p.group_rows / 2;
  const uint t0 = TileStart();
  for (uint k = gl_LocalInvocationIndex; k < pairs * kTile; k += gl_WorkGroupSize.x) {
    const uint t = t0 + k / pairs, r = first + 2 * (k % pairs);
    if (!InBatch(t) || r >= p.rows) continue;
    const uint at = t * p.rows + r;
    const uint h = r / p.head_dim, i = (r % p.head_dim) / 2;
    vec2 v = vec2(y[at], y[at + 1]);
    if (p.rope != 3 && 2 * i < p.rope_dim) {
      const uint cb = rope_tok[4 * t + 1] * p.rope_dim + 2 * i;
      v = RotatePair(v.x, v.y, rope_cs[cb], rope_cs[cb + 1]);
    }
    if (p.rope == 1) {
      y[at] = v.x;
      y[at + 1] = v.y;
    } else {
      const uint row = rope_tok[4 * t + 2];
      rope_cache[p.cache_off + (h * p.n_rows + row) * p.row_words + i] = packHalf2x16(v);
    }
  }
}

// The head tail (rope 4: Q, 5: K; + 2 for NEOX pairs; one token): qwen3's per-head q/k norms,
// then what RopeStore does, in the last of a head's workgroups to finish (a head's rows are
// head_dim / group_rows workgroups; counter[h] counts them), so the norms, RoPE and the store
// need no dispatch and barrier after the products (qk_norm_rope.comp does it as one dispatch
// after them). The head's 1 / rms is norm_q.glsl's NormScale (256 lanes' sum, rmsnorm.comp's
// bits), its normalized values x * scale * w (binding 4, the norm tail's weights) go to
// uf_norm (head_dim <= 256), and the pairs are rotated as rope.comp / kv_store.comp rotate them
// with the angles of binding 3 (the bias's: these products have none): Q written back into y,
// K's f16 pairs stored into the cache row (y left as the product wrote it).
layout(std430, binding = 3) readonly buffer HeadCS { float head_cs[]; };

void HeadTail() {
  if (p.rope < 4) return;
  const uint first = GroupIndex() * p.group_rows;
  if (first >= p.rows) return;  // uniform: a workgroup past the rows counts nowhere
  const uint h = first / p.head_dim, hd = p.head_dim, xb = h * hd;
  if (!LastOf(h, hd / p.group_rows)) return;
  const float scale = NormScale(xb, hd, p.eps);
  for (uint i = gl_LocalInvocationIndex; i < hd; i += gl_WorkGroupSize.x) {
    uf_norm[i] = y[xb + i] * scale * nw[i];
  }
  barrier();
  const bool neox = p.rope >= 6, is_k = (p.rope & 1u) != 0;
  const uint half_dim = p.rope_dim / 2, cb = rope_tok[1] * p.rope_dim;
  if (!is_k) {
    for (uint i = gl_LocalInvocationIndex; i < half_dim; i += gl_WorkGroupSize.x) {
      const uint i0 = neox ? i : 2 * i, i1 = neox ? i + half_dim : 2 * i + 1;
      const vec2 r =
          RotatePair(uf_norm[i0], uf_norm[i1], head_cs[cb + 2 * i], head_cs[cb + 2 * i + 1]);
      y[xb + i0] = r.x;
      y[xb + i1] = r.y;
    }
    for (uint j = p.rope_dim + gl_LocalInvocationIndex; j < hd; j += gl_WorkGroupSize.x) {
      y[xb + j] = uf_norm[j];
    }
  } else {
    const uint dst = p.cache_off + (h * p.n_rows + rope_tok[2]) * p.row_words;
    for (uint i = gl_LocalInvocationIndex; i < hd / 2; i += gl_WorkGroupSize.x) {
      float v[2];
      [[unroll]] for (uint e = 0; e < 2; ++e) {
        const uint j = 2 * i + e;
        if (j >= p.rope_dim) {
          v[e] = uf_norm[j];
          continue;
        }
        const uint pi = neox ? j % half_dim : j / 2;
        const bool lo = neox ? j < half_dim : j % 2 == 0;
        const uint i0 = neox ? pi : 2 * pi, i1 = neox ? pi + half_dim : 2 * pi + 1;
        const vec2 r = RotatePair(uf_norm[i0], uf_norm[i1], head_cs[cb + 2 * pi],
                                  head_cs[cb + 2 * pi + 1]);
        v[e] = lo ? r.x : r.y;
      }
      rope_cache[dst + i] = packHalf2x16(vec2(v[0], v[1]));
    }
  }
  if (gl_LocalInvocationIndex == 0) counter[h] = 0;
}
#endif

#if defined(EXPERTS) && defined(SUM)
// The sum tail (the gemmx_*_sum twins, compiled with STAGES and SUM): the down product of one
// token's k slots also adds their weighted sum into the residual stream, so the sum needs no
// dispatch and barrier of its own. A workgroup computes rows group_rows g .. of one slot (z);
// after publishing them it counts itself on counter[1 + g], and the last of the row group's k
// slots to finish adds the group's rows: x[row] + MoeSlotSum (moe_sum.glsl: moe_sum.comp's bits
// with its residual add). With norm, the row groups' last workgroups then count on counter[0]
// and the last of those normalizes x into xn and q as the GEMMs' norm tail does (norm_q.glsl).
// Bindings 4 weights, 5 x (the residual stream), 6 the down biases ([n_expert][rows]), 7 the
// counters (LastOf), 8-10 the norm's weights, xn and q.
layout(std430, binding = 4) readonly buffer SumWt { float sum_w[]; };
layout(std430, binding = 5) coherent buffer SumX { float sum_x[]; };
layout(std430, binding = 6) readonly buffer SumB { float sum_b[]; };
layout(std430, binding = 8) readonly buffer NormWt { float nw[]; };
layout(std430, binding = 9) writeonly buffer XN { float xn[]; };
layout(std430, binding = 10) writeonly buffer Q { uint q[]; };

float MoeOut(uint s, uint i) {
  const float v = y[s * p.y_stride + i];
  return p.has_bias != 0 ? v + sum_b[ids[s] * p.rows + i] : v;
}
float MoeWeight(uint s) { return sum_w[s]; }
#include "moe_sum.glsl"

float NormX(uint i) { return sum_x[i]; }
float NormW(uint j) { return nw[j]; }
void NormY(uint i, float v) { xn[i] = v; }
#include "norm_q.glsl"

void SumTail() {
  const uint g = GroupIndex();
  if (!LastOf(1 + g, p.n)) return;
  for (uint i = gl_LocalInvocationIndex; i < p.group_rows; i += gl_WorkGroupSize.x) {
    const uint row = g * p.group_rows + i;
    if (row < p.rows) sum_x[row] = sum_x[row] + MoeSlotSum(0, p.n, row);
  }
  if (gl_LocalInvocationIndex == 0) counter[1 + g] = 0;
  if (p.norm == 0 || !LastOf(0, gl_NumWorkGroups.x * gl_NumWorkGroups.y)) return;
  NormRow(0, p.rows, p.eps, p.format, p.q_d_off);
  if (gl_LocalInvocationIndex == 0) counter[0] = 0;
}
#endif

void GemmMain();  // the product: the type's file (gemm_*.glsl), included after this one

void main() {
  GemmMain();
#if !defined(GROUPED) && !defined(EXPERTS) && defined(STAGES)
  NormTail();
  RopeStore();
  HeadTail();
#endif
#ifdef ROUTE
  RouteTail();
#endif
#if defined(EXPERTS) && defined(SUM)
  SumTail();
#endif
}
