// Q, K and V of a llama layer in one dispatch, with Q's and K's RoPE and the K/V store into an f16
// cache (gemm1_qkv_*: one token, a single sequence's decode; gemm8_qkv_*, gemm16_qkv_*,
// gemm32_qkv_*: tiles of 8, 16, 32 tokens, the grid's x, as Gemm's tiles), so a step has no RoPE /
// store stage and barrier between the products and attention. The includer defines Unpack
// (gemm_f16.glsl, gemm_bf16.glsl) and kTile.
//
// The grid covers the row pairs of Q, then K, then V (each matrix has an even row count: heads
// of an even head_dim); subgroup g computes the rows 2 g' and 2 g' + 1 of its matrix, each
// token's sum formed as gemm1_* forms it (gemm_pairs_loop.glsl: the same lanes, columns, order
// and subgroupAdd), so these are Gemm's bits. With both sums in every lane, the pair is the llama
// RoPE pair (2 i, 2 i + 1) of its head (i < rope_dim / 2; past rope_dim unrotated), which it
// rotates with rope.comp's operations (rope.glsl) at the token's position tok[4 t + 1]:
// - Q: the rotated pair into q, as Rope() leaves it there;
// - K: the unrotated sums into k (as Gemm writes them) and the rotated pair as one f16-pair word
//   into the cache row tok[4 t + 2], as kv_store.comp with rope stores it;
// - V: the sums into v and their f16-pair word into the cache.
// Not for NEOX pairs (i, i + rope_dim / 2: two rows of different subgroups), Q8_0 caches,
// biases or q/k norms (Kernels::QkvRopeFits).
#extension GL_GOOGLE_include_directive : require
#define TILES_INNER  // the token tile is the grid's x (common.glsl)
#include "common.glsl"
#include "rope.glsl"

#extension GL_EXT_control_flow_attributes : require

#define kRows 2

// Rows of Q (n_head * head_dim) and of K and V (n_head_kv * head_dim); cols of each; n tokens;
// x_stride: words of a token's pairs (cols / 2); the cache: rows per KV head, K's and V's first
// word, words a head's row (head_dim / 2).
layout(push_constant) uniform P {
  uint q_rows, kv_rows, cols, n, x_stride, head_dim, rope_dim, n_rows, k_off, v_off, row_words;
} p;
layout(std430, binding = 0) readonly buffer WQ { uint w_q[]; };
layout(std430, binding = 1) readonly buffer WK { uint w_k[]; };
layout(std430, binding = 2) readonly buffer WV { uint w_v[]; };
layout(std430, binding = 3) readonly buffer X { uint x[]; };     // [n][cols / 2] pairs
layout(std430, binding = 4) writeonly buffer Q { float q[]; };   // [n][q_rows], rotated
layout(std430, binding = 5) writeonly buffer K { float k[]; };   // [n][kv_rows], unrotated
layout(std430, binding = 6) writeonly buffer V { float v[]; };   // [n][kv_rows]
layout(std430, binding = 7) writeonly buffer C { uint cache[]; };  // kv_store.comp's layout
layout(std430, binding = 8) readonly buffer Tok { uint tok[]; };
layout(std430, binding = 9) readonly buffer CS { float cs[]; };  // [positions][rope_dim]

uint XTok(uint t) { return t; }
bool InBatch(uint t) { return t < p.n; }

void main() {
  const uint q_pairs = p.q_rows / 2, kv_pairs = p.kv_rows / 2;
  const uint pair = SubgroupRow();
  if (pair >= q_pairs + 2 * kv_pairs) return;  // uniform in the subgroup
  // The matrix (0 Q, 1 K, 2 V) and the pair's first row in it.
  const uint m = pair < q_pairs ? 0 : pair < q_pairs + kv_pairs ? 1 : 2;
  const uint row0 = 2 * (pair - (m == 0 ? 0 : m == 1 ? q_pairs : q_pairs + kv_pairs));
  const uint pairs = p.cols / 2;
  const uint base[kRows] = uint[kRows](row0 * pairs, (row0 + 1) * pairs);
  const uint t0 = TileIndex() * kTile;
  float acc[kRows][kTile];
  // One loop per weight buffer (a branch uniform in the subgroup), not a select per load.
  if (m == 0) {
#define PAIRS_W w_q
#include "gemm_pairs_loop.glsl"
#undef PAIRS_W
  } else if (m == 1) {
#define PAIRS_W w_k
#include "gemm_pairs_loop.glsl"
#undef PAIRS_W
  } else {
#define PAIRS_W w_v
#include "gemm_pairs_loop.glsl"
#undef PAIRS_W
  }
  const uint h = row0 / p.head_dim, j = row0 % p.head_dim;  // the pair (j, j + 1) of head h
  [[unroll]] for (uint t = 0; t < kTile; ++t) {
    const uint token = t0 + t;
    if (!InBatch(token)) continue;  // uniform: every lane has the same t0
    const float x0 = subgroupAdd(acc[0][t]), x1 = subgroupAdd(acc[1][t]);
    // A closed if, not `continue` for the other lanes: core Vulkan reconverges a subgroup at a
    // selection's merge, so the next token's subgroupAdd sees every lane.
    if (subgroupElect()) {
      const uint y = token * (m == 0 ? p.q_rows : p.kv_rows) + row0;
      const uint dst = (h * p.n_rows + tok[4 * token + 2]) * p.row_words + j / 2;
      if (m == 2) {
        v[y] = x0;
        v[y + 1] = x1;
        cache[p.v_off + dst] = packHalf2x16(vec2(x0, x1));
      } else {
        vec2 r = vec2(x0, x1);
        if (j < p.rope_dim) {
          const uint cb = tok[4 * token + 1] * p.rope_dim + j;
          const float c = cs[cb], s = cs[cb + 1];
          r = RotatePair(x0, x1, c, s);
        }
        if (m == 0) {
          q[y] = r.x;
          q[y + 1] = r.y;
        } else {
          k[y] = x0;
          k[y + 1] = x1;
          cache[p.k_off + dst] = packHalf2x16(r);
        }
      }
    }
  }
}
