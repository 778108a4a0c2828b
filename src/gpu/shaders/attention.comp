// Causal attention for each token of a batch over the paged f16 or Q8_0 cache (kv_store layout,
// values dequantized as the CPU's attention does: scale * int8): one
// workgroup per (query head, token), the grid's y being the token. Token t at position pos of
// sequence seq attends to that sequence's positions 0..pos, found through its block table
// (bt[seq][max_blocks]); a batch's own K/V are stored before this runs, so a prefill or a
// verify batch attends within itself. The head's KV head is shared by n_head / n_head_kv query
// heads (GQA). Unsplit, scores go to scratch ([n][n_head][max_len]) so any depth fits; split,
// a workgroup's chunk of scores stays in shared memory (chunk <= kMaxChunk), so the scratch
// does not grow with the context. Softmax with the max subtracted, then each invocation sums
// its dims of the values. Each (token, head) is
// computed the same way whatever else is in the batch, so decode rows equal verify rows bit for
// bit.
// Split over positions (flash-decoding; chunk > 0): workgroup (head, c) covers positions
// [c * chunk, (c + 1) * chunk) only and writes its unnormalised sums with its max and exp-sum to
// part ([n][n_head][n_chunks][head_dim + 2]); attention_combine.comp rescales and adds them. The
// chunks depend only on the token's position, never on the batch, so a decode row still equals
// its verify row; with one chunk the result is the unsplit kernel's to the bit.
// gpt-oss: with window > 0 (a sliding-window layer) a token at pos sees positions
// pos - window + 1..pos only (chunks wholly before them do nothing; the combine skips them);
// with has_sinks, head h's learned sink logit sinks[h] is a key with no value: e^(sink - max)
// joins the softmax's denominator (here unsplit, in the combine when split).
// With quant kActQ8_0 (unsplit; head_dim a multiple of 32) the head's output is also written as Q8_0
// blocks into q (binding 6, in place of part; quant_q8.glsl; blocks [n][n_head][head_dim / 32],
// scales at word q_d_off), the bits quantize_q8_0 gives from o: the o-projection's activation
// without a dispatch and barrier of its own. The values go through shared memory (s_sc, unused
// unsplit) to the subgroups. With quant kActF16 or kActBF16, as f16 or bf16 pairs (quantize_pairs' bits: each
// invocation packs the two values it computed, a word [n][n_head][head_dim / 2]).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Qry { float qry[]; };
layout(std430, binding = 1) readonly buffer C { uint cache[]; };
// coherent: every invocation reads the scores the others wrote (after memoryBarrierBuffer and a
// barrier), which GLSL makes visible only for coherent variables (a workgroup may span two L0
// caches on some GPUs).
layout(std430, binding = 2) coherent buffer S { float scores[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };
layout(std430, binding = 4) readonly buffer Tok { uint tok[]; };
layout(std430, binding = 5) readonly buffer BT { int bt[]; };
layout(std430, binding = 6) writeonly buffer Part { float part[]; };
layout(std430, binding = 7) readonly buffer Sinks { float sinks[]; };
// With quant, binding 6 is the Q8_0 output instead (unsplit: part is not written), so the kernel
// stays within 8 storage buffers (some devices allow no more per stage).
layout(std430, binding = 6) writeonly buffer QOut { uint q[]; };
layout(push_constant) uniform P {
  uint n_head, n_head_kv, head_dim, n_rows, k_off, v_off;
  float scale;
  uint block_size, max_blocks, max_len, row_words, q8;
  uint chunk, n_chunks;  // chunk 0: the whole context in one workgroup, written to o
  uint window, has_sinks;
  uint quant, q_d_off;  // quant kAct*: o's Q8_0 blocks / f16 / bf16 pairs into q too (unsplit)
} p;

#include "attention_pair.glsl"
DEFINE_KV_PAIR(Pair, cache)
DEFINE_KV_SCORE(KeyScore, Pair)

// A split workgroup's scores (positions t0 + i); the same float values as the global scratch.
const uint kMaxChunk = 1024;
shared float s_sc[kMaxChunk];

float Score(uint sb, uint t, uint t0) { return p.chunk == 0 ? scores[sb + t] : s_sc[t - t0]; }
void SetScore(uint sb, uint t, uint t0, float v) {
  if (p.chunk == 0) {
    scores[sb + t] = v;
  } else {
    s_sc[t - t0] = v;
  }
}

uint g_first = 0;  // the head's first output value, s_sc[0] (quant)
float QIn(uint i) { return s_sc[i - g_first]; }

#include "quant_q8.glsl"

uint Row(uint seq, uint pos) {
  return uint(bt[seq * p.max_blocks + pos / p.block_size]) * p.block_size + pos % p.block_size;
}

void main() {
  const uint nc = p.chunk == 0 ? 1 : p.n_chunks;
  const uint h = gl_WorkGroupID.x / nc, c = gl_WorkGroupID.x % nc;
  const uint token = gl_WorkGroupID.y;
  const uint lid = gl_LocalInvocationID.x;
  const uint n_keys = tok[4 * token + 1] + 1, seq = tok[4 * token + 3];
  const uint first = p.window != 0 && n_keys > p.window ? n_keys - p.window : 0;
  const uint t0 = max(c * p.chunk, first);
  const uint t1 = p.chunk == 0 ? n_keys : min(c * p.chunk + p.chunk, n_keys);
  if (t0 >= t1) return;  // past this token's positions (the whole workgroup)
  const uint kvh = h / (p.n_head / p.n_head_kv);
  const uint hp = p.head_dim / 2;
  const uint qb = (token * p.n_head + h) * p.head_dim;
  const uint sb = (token * p.n_head + h) * p.max_len;
  const uint hb = kvh * p.n_rows;
  float mx = -1.0 / 0.0;
  for (uint t = t0 + lid; t < t1; t += 64) {
    const float dot = KeyScore(qb, p.k_off + (hb + Row(seq, t)) * p.row_words);
    SetScore(sb, t, t0, dot);
    mx = max(mx, dot);
  }
  mx = WorkgroupMax(mx);
  float sum = 0.0;
  for (uint t = t0 + lid; t < t1; t += 64) {
    const float e = exp(Score(sb, t, t0) - mx);
    SetScore(sb, t, t0, e);
    sum += e;
  }
  sum = WorkgroupSum(sum);
  const float denom = p.chunk == 0 && p.has_sinks != 0 ? sum + exp(sinks[h] - mx) : sum;
  // The exponentials written above by other invocations must be visible before they are read.
  memoryBarrierBuffer();
  memoryBarrierShared();
  barrier();
  const float inv = 1.0 / denom;
  const uint pb = ((token * p.n_head + h) * nc + c) * (p.head_dim + 2);
  for (uint i = lid; i < hp; i += 64) {
    vec2 acc = vec2(0.0);
    for (uint t = t0; t < t1; ++t) {
      acc += Score(sb, t, t0) * Pair(p.v_off + (hb + Row(seq, t)) * p.row_words, i);
    }
    if (p.chunk == 0) {
      const float o0 = acc.x * inv, o1 = acc.y * inv;
      o[qb + 2 * i] = o0;
      o[qb + 2 * i + 1] = o1;
      if (p.quant == kActQ8_0) {
        s_sc[2 * i] = o0;
        s_sc[2 * i + 1] = o1;
      } else if (p.quant != 0) {
        q[qb / 2 + i] = PackPair(o0, o1, p.quant == kActBF16);
      }
    } else {
      part[pb + 2 * i] = acc.x;
      part[pb + 2 * i + 1] = acc.y;
    }
  }
  if (p.chunk != 0 && lid == 0) {
    part[pb + p.head_dim] = mx;
    part[pb + p.head_dim + 1] = sum;
  }
  if (p.chunk == 0 && p.quant == kActQ8_0) {  // workgroup-uniform
    barrier();
    QuantLanes();
    g_first = qb;
    QuantizeRangeQ8_0(qb / 32, (qb + p.head_dim) / 32, p.q_d_off);
  }
}
