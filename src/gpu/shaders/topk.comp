// The best k tokens of each row of logits (k <= 64), so that a sampling step copies back k
// candidates and two floats instead of the row: ids and raw logits sorted best first (higher
// logit, then lower id, as sampling::Sampler orders its top-k set; NaN ranks as -inf, -0 as +0),
// then the row's maximum and log-sum-exp. Output per row: [k ids][k logits][max][lse] (words;
// unused slots, when the row is shorter than k, hold id 0xFFFFFFFF and -inf).
//
// Two passes, because one workgroup per row left a 128k-token row to one GPU core for seven
// reads of it (~3,500 dependent loop trips an invocation: on the order of 100 us a sampled step
// by load latency, an estimate; no GPU has run it), against one more dependent dispatch:
//   pass 0: a workgroup of 256 per (chunk of `chunk` values, row) selects the chunk's best k and
//           writes them to part[(row * n_chunks + c) * (2k + 2) ..] as [k ids][k keys][max][s]:
//           ids and order-preserving keys best first (unused: id 0xFFFFFFFF, key 0, below every
//           value's key), the chunk's maximum and s = sum of exp(x - max) over its values > -inf;
//   pass 1: a workgroup per row selects the best k of its chunks' candidates (n_chunks * k),
//           reads their raw logits, and forms the lse from the chunks' (max, s):
//           M + log(sum_c s_c exp(max_c - M)).
// Selecting: the k-th best key by a radix select (four passes of 8 bits, a histogram in shared
// memory), then one pass gathers the keys above it and, in item order, the first ties at it,
// and a rank sort orders the k. Items are in id order for ties: a chunk's values are; a chunk's
// candidates are sorted best first, so its equal keys are consecutive and in id order, and the
// chunks follow each other in id order. So the result is one selection over the row's: the same
// ids and values for any chunking. sampling::Sampler::SampleReduced's bound on the lse assumes
// this summation (kTopKChunk there).
#version 450
#extension GL_GOOGLE_include_directive : require
#define kGroupSize 256
#include "common.glsl"

layout(std430, binding = 0) readonly buffer L { float l[]; };
layout(std430, binding = 1) writeonly buffer O { uint o[]; };
layout(std430, binding = 2) buffer Part { uint part[]; };
layout(push_constant) uniform P { uint n_vocab, k, chunk, n_chunks, pass; } p;

shared uint hist[256];
shared uint s_prefix, s_need, s_n, s_top;
shared uint c_id[64];
shared uint c_key[64];

// Larger logit <=> larger key; NaN is keyed as -inf and -0 as +0.
uint Key(float x) {
  uint u = floatBitsToUint(x);
  if (isnan(x)) u = 0xFF800000u;
  if (u == 0x80000000u) u = 0u;
  return (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
}

float FromKey(uint key) {
  return uintBitsToFloat((key & 0x80000000u) != 0u ? (key & 0x7FFFFFFFu) : ~key);
}

// The items of this workgroup: pass 0 the chunk's values, pass 1 the row's chunks' candidates.
uint g_row = 0, g_first = 0;
uint PartBase(uint c) { return (g_row * p.n_chunks + c) * (2u * p.k + 2u); }
uint ItemKey(uint i) {
  if (p.pass == 0u) return Key(l[g_row * p.n_vocab + g_first + i]);
  return part[PartBase(i / p.k) + p.k + i % p.k];
}
uint ItemId(uint i) {
  if (p.pass == 0u) return g_first + i;
  return part[PartBase(i / p.k) + i % p.k];
}


// The best kk (<= n) of the n items into c_id / c_key, best first at [rank]; s_top = the best
// key. Every invocation calls it.
void Select(uint n, uint kk) {
  const uint lid = gl_LocalInvocationID.x;
  // Radix select: prefix is the high bits of the kk-th best key found so far, need how many
  // keys with that prefix are still to take.
  uint prefix = 0u, mask = 0u, need = kk;
  for (int shift = 24; shift >= 0; shift -= 8) {
    hist[lid] = 0u;
    barrier();
    for (uint i = lid; i < n; i += 256u) {
      const uint key = ItemKey(i);
      if ((key & mask) == prefix) atomicAdd(hist[(key >> uint(shift)) & 255u], 1u);
    }
    barrier();
    if (lid == 0u) {
      uint above = 0u, b = 255u;
      while (b > 0u && above + hist[b] < need) {
        above += hist[b];
        --b;
      }
      s_prefix = prefix | (b << uint(shift));
      s_need = need - above;
    }
    barrier();
    prefix = s_prefix;
    need = s_need;
    mask |= 255u << uint(shift);
  }
  // prefix is now the kk-th best key; kk - need keys lie above it, and the first `need` items
  // that equal it complete the set. Contiguous spans keep the ties in item order.
  const uint span = (n + 255u) / 256u;
  const uint b0 = min(lid * span, n), b1 = min(b0 + span, n);
  uint eq = 0u;
  for (uint i = b0; i < b1; ++i) eq += ItemKey(i) == prefix ? 1u : 0u;
  hist[lid] = eq;
  if (lid == 0u) s_n = 0u;
  barrier();
  if (lid == 0u) {
    uint acc = 0u;
    for (uint t = 0u; t < 256u; ++t) {
      const uint c = hist[t];
      hist[t] = acc;
      acc += c;
    }
  }
  barrier();
  const uint above = kk - need;
  uint slot = hist[lid];
  uint my_id = 0u, my_key = 0u;
  for (uint i = b0; i < b1; ++i) {
    const uint key = ItemKey(i);
    if (key > prefix) {
      const uint s = atomicAdd(s_n, 1u);
      c_id[s] = ItemId(i);
      c_key[s] = key;
    } else if (key == prefix) {
      if (slot < need) {
        c_id[above + slot] = ItemId(i);
        c_key[above + slot] = key;
      }
      ++slot;
    }
  }
  barrier();
  // Rank sort of the kk candidates: rank = how many are better.
  uint rank = 0u;
  if (lid < kk) {
    my_id = c_id[lid];
    my_key = c_key[lid];
    for (uint j = 0u; j < kk; ++j) {
      const uint kj = c_key[j];
      if (kj > my_key || (kj == my_key && c_id[j] < my_id)) ++rank;
    }
  }
  barrier();
  if (lid < kk) {
    c_id[rank] = my_id;
    c_key[rank] = my_key;
  }
  barrier();
  if (lid == 0u) s_top = kk > 0u ? c_key[0] : 0u;
  barrier();
}

void main() {
  const uint lid = gl_LocalInvocationID.x;
  if (p.pass == 0u) {
    const uint c = gl_WorkGroupID.x;
    g_row = gl_WorkGroupID.y;
    g_first = c * p.chunk;
    const uint n = min(p.chunk, p.n_vocab - g_first);
    const uint kk = min(p.k, n);
    Select(n, kk);
    const uint pb = PartBase(c);
    if (lid < p.k) {
      part[pb + lid] = lid < kk ? c_id[lid] : 0xFFFFFFFFu;
      part[pb + p.k + lid] = lid < kk ? c_key[lid] : 0u;
    }
    // The chunk's sum of exp(x - max) over its values above -inf.
    const float m = FromKey(s_top);
    float s = 0.0;
    if (m > -1.0 / 0.0) {
      const uint base = g_row * p.n_vocab + g_first;
      for (uint i = lid; i < n; i += 256u) {
        const float x = l[base + i];
        if (x > -1.0 / 0.0) s += exp(x - m);
      }
    }
    s = WorkgroupSum(s);
    if (lid == 0u) {
      part[pb + 2u * p.k] = floatBitsToUint(m);
      part[pb + 2u * p.k + 1u] = floatBitsToUint(s);
    }
    return;
  }
  g_row = gl_WorkGroupID.x;
  const uint ob = g_row * (2u * p.k + 2u);
  const uint kk = min(p.k, p.n_vocab);
  Select(p.n_chunks * p.k, kk);
  if (lid < kk) {
    o[ob + lid] = c_id[lid];
    o[ob + p.k + lid] = floatBitsToUint(l[g_row * p.n_vocab + c_id[lid]]);
  } else if (lid < p.k) {
    o[ob + lid] = 0xFFFFFFFFu;
    o[ob + p.k + lid] = 0xFF800000u;
  }
  // Log-sum-exp around the maximum (for log-probabilities), from the chunks' sums.
  const float m = FromKey(s_top);
  float s = 0.0;
  if (m > -1.0 / 0.0) {
    for (uint c = lid; c < p.n_chunks; c += 256u) {
      const float mc = uintBitsToFloat(part[PartBase(c) + 2u * p.k]);
      if (mc > -1.0 / 0.0) s += uintBitsToFloat(part[PartBase(c) + 2u * p.k + 1u]) * exp(mc - m);
    }
  }
  s = WorkgroupSum(s);
  if (lid == 0u) {
    o[ob + 2u * p.k] = floatBitsToUint(m);
    o[ob + 2u * p.k + 1u] = floatBitsToUint(m > -1.0 / 0.0 ? m + log(s) : m);
  }
}
