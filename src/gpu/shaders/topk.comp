// The best k tokens of each row of logits (k <= 64), so that a sampling step copies back k
// candidates and two floats instead of the row: ids and raw logits sorted best first (higher
// logit, then lower id, as sampling::Sampler orders its top-k set; NaN ranks as -inf, -0 as +0),
// then the row's maximum and log-sum-exp. Output per row: [k ids][k logits][max][lse] (words;
// unused slots, when the row is shorter than k, hold id 0xFFFFFFFF and -inf).
// One workgroup of 256 per row. The k-th best value is found by a radix select over the
// values' order-preserving 32-bit keys (four passes of 8 bits, a histogram in shared memory),
// then one pass gathers the keys above it and, in index order, the lowest-id ties at it; a rank
// sort of the k orders them. Cost: seven reads of the row (~1 MiB for 128k tokens), no sort of
// the row.
#version 450
layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer L { float l[]; };
layout(std430, binding = 1) writeonly buffer O { uint o[]; };
layout(push_constant) uniform P {
  uint n_vocab;
  uint k;
} p;

shared uint hist[256];
shared uint s_prefix, s_need, s_n, s_top;
shared uint c_id[64];
shared uint c_key[64];
shared float red[256];

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

void main() {
  const uint row = gl_WorkGroupID.x, lid = gl_LocalInvocationID.x;
  const uint n = p.n_vocab, base = row * n, ob = row * (2u * p.k + 2u);
  const uint kk = min(p.k, n);
  // Radix select: prefix is the high bits of the kk-th best key found so far, need how many
  // keys with that prefix are still to take.
  uint prefix = 0u, mask = 0u, need = kk;
  for (int shift = 24; shift >= 0; shift -= 8) {
    hist[lid] = 0u;
    barrier();
    for (uint i = lid; i < n; i += 256u) {
      const uint key = Key(l[base + i]);
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
  // prefix is now the kk-th best key; kk - need keys lie above it, and the first `need` tokens
  // (by id) that equal it complete the set. Contiguous chunks keep the ties in id order.
  const uint chunk = (n + 255u) / 256u;
  const uint b0 = min(lid * chunk, n), b1 = min(b0 + chunk, n);
  uint eq = 0u;
  for (uint i = b0; i < b1; ++i) eq += Key(l[base + i]) == prefix ? 1u : 0u;
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
  for (uint i = b0; i < b1; ++i) {
    const uint key = Key(l[base + i]);
    if (key > prefix) {
      const uint s = atomicAdd(s_n, 1u);
      c_id[s] = i;
      c_key[s] = key;
    } else if (key == prefix) {
      if (slot < need) {
        c_id[above + slot] = i;
        c_key[above + slot] = key;
      }
      ++slot;
    }
  }
  barrier();
  // Rank sort of the kk candidates: rank = how many are better.
  if (lid < kk) {
    const uint my_id = c_id[lid], my_key = c_key[lid];
    uint rank = 0u;
    for (uint j = 0u; j < kk; ++j) {
      const uint kj = c_key[j];
      if (kj > my_key || (kj == my_key && c_id[j] < my_id)) ++rank;
    }
    o[ob + rank] = my_id;
    o[ob + p.k + rank] = floatBitsToUint(l[base + my_id]);
    if (rank == 0u) s_top = my_key;
  } else if (lid < p.k) {
    o[ob + lid] = 0xFFFFFFFFu;
    o[ob + p.k + lid] = 0xFF800000u;
  }
  barrier();
  // Log-sum-exp around the maximum (for log-probabilities).
  const float m = FromKey(s_top);
  float s = 0.0;
  if (m > -1.0 / 0.0) {
    for (uint i = lid; i < n; i += 256u) {
      const float x = l[base + i];
      if (x > -1.0 / 0.0) s += exp(x - m);
    }
  }
  red[lid] = s;
  barrier();
  for (uint w = 128u; w > 0u; w >>= 1) {
    if (lid < w) red[lid] += red[lid + w];
    barrier();
  }
  if (lid == 0u) {
    o[ob + 2u * p.k] = floatBitsToUint(m);
    o[ob + 2u * p.k + 1u] = floatBitsToUint(m > -1.0 / 0.0 ? m + log(red[0]) : m);
  }
}
