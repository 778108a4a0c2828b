// The sampled tokens of a chained step (GpuForward::ForwardSampledChains), each row's drawn on the
// device from its best k tokens (topk.comp's [k ids][k logits][max][lse]) so that the next step can
// start before the host has seen this one. A guess, checked by the host: once the step ends the
// host draws the token from the same reduced row with the sampler itself (Sampler::SampleTop or
// SampleReduced, with the same uniform), and the chain goes on only while the two agree. So this
// only has to agree where the host decides; it follows the host's float formulas without their
// error margins, and where the draw lands outside the k it writes the best token, which the host
// then overrules. One workgroup a row (a stream of the chain): the k weights in parallel, the walk
// (k <= 64 terms) in invocation 0.
//
// draw (binding 1), draw_words a row: [temperature][top_k][top_p][min_p][draws][n_uniforms]
// [2 unused][uniforms..]: the row's sampler's filters, the draws taken so far in this chain (a
// step without a draw, such as a top-k row whose filters keep one token, takes none, as the host's
// sampler does) and its next uniforms in order. The step also copies the reduced row to
// top_ring[row][position % ring_size] and its token to ring[row][...], for the host, and feeds the
// token to the row's slot of the next step's input (tok[row]) as argmax.comp's feed does.
//
// With cap > 0 the row has known tokens (edit_rows.comp: bans, bias, penalties), -inf in the
// row the top-k reduced and listed in known[row][position % ring_size] with their edited
// logits: they join the k best (the merged row's best k lead the walk) and the row's mass, as
// they do in the host's SampleTop / SampleReduced.
#version 450
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Top { uint top[]; };
layout(std430, binding = 1) buffer Draw { uint dw[]; };
layout(std430, binding = 2) buffer Tok { uint tok[]; };
layout(std430, binding = 3) readonly buffer Bt { int bt[]; };
layout(std430, binding = 4) writeonly buffer Ring { uint ring[]; };
layout(std430, binding = 5) writeonly buffer TopRing { uint top_ring[]; };
layout(std430, binding = 6) readonly buffer Known { uint known[]; };
layout(push_constant) uniform P {
  uint k, n_vocab, block_size, max_blocks, ring_size, draw_words, cap;
} p;

// Known tokens above the listed row's k-th that the merge gathers (more is not expected: the
// rest are left out of the walk, whose draw the host then overrules).
const uint kMaxCompete = 512u;

shared float s_l[64];  // logits, -inf past the valid ones
shared float s_w[64];  // e^(l - max)
shared float s_v[64];  // e^((l - max) / T)
shared uint s_id[64];
shared uint s_cid[kMaxCompete];   // the gathered known tokens' ids
shared float s_cv[kMaxCompete];   // their edited logits
shared uint s_cnt[64];            // per invocation: its known tokens to gather
shared float s_max[64];           // per invocation: the known tokens' largest edited logit
shared float s_xw[64], s_xv[64];  // per invocation: mass at T = 1 and T past the merged best k
shared float s_kw[64];            // per invocation: the known tokens' mass at T = 1

const float kInf = 1.0 / 0.0;

// The token whose interval of the first m weights v holds target; the best token past them.
uint Walk(uint m, float target) {
  float cum = 0.0;
  for (uint j = 0; j < m; ++j) {
    if (!(s_v[j] > 0.0)) continue;
    cum += s_v[j];
    if (target < cum) return s_id[j];
  }
  return s_id[0];
}

void main() {
  const uint lid = gl_LocalInvocationID.x, row = gl_WorkGroupID.x;
  const uint row_words = 2u * p.k + 2u;
  const uint t0 = row * row_words;  // the row's reduced row in top
  const uint d0 = row * p.draw_words;
  const uint pos = tok[4u * row + 1u] + 1u;  // read by all before invocation 0 moves it
  const uint slot = row * p.ring_size + pos % p.ring_size;
  for (uint i = lid; i < row_words; i += 64u) top_ring[slot * row_words + i] = top[t0 + i];
  const float mx = uintBitsToFloat(top[t0 + 2u * p.k]);
  const float lse = uintBitsToFloat(top[t0 + 2u * p.k + 1u]);
  const float temperature = uintBitsToFloat(dw[d0]);
  const int top_k = int(dw[d0 + 1u]);
  const float top_p = uintBitsToFloat(dw[d0 + 2u]);
  const float min_p = uintBitsToFloat(dw[d0 + 3u]);
  const float s = 1.0 / temperature;
  float l = -kInf;
  uint id = 0xFFFFFFFFu;
  if (lid < p.k) {
    id = top[t0 + lid];
    l = uintBitsToFloat(top[t0 + p.k + lid]);
    if (isnan(l) || id == 0xFFFFFFFFu) l = -kInf;
  }
  // The known tokens (none without cap; NaN ranks as -inf, as the host's). Only those that rank
  // above the listed row's k-th token can enter the merged k: they are gathered (in list order,
  // each invocation a contiguous part of the list), the others only add their mass past it.
  const uint kb = slot * (3u * p.cap + 1u);
  const uint nk = p.cap > 0u ? min(known[kb], p.cap) : 0u;
  const uint part = (nk + 63u) / 64u, k0 = min(lid * part, nk), k1 = min(k0 + part, nk);
  const float l_last = uintBitsToFloat(top[t0 + 2u * p.k - 1u]);
  const uint id_last = top[t0 + p.k - 1u];
  const bool full = id_last != 0xFFFFFFFFu && l_last > -kInf;  // (NaN: not full)
  float kmax = -kInf;
  uint mine = 0u;  // this invocation's tokens that could enter the merged k
  for (uint j = k0; j < k1; ++j) {
    const float v = uintBitsToFloat(known[kb + 1u + 2u * p.cap + j]);
    if (!(v > -kInf)) continue;
    kmax = max(kmax, v);
    const uint kid = known[kb + 1u + j];
    if (!full || v > l_last || (v == l_last && kid < id_last)) ++mine;
  }
  s_max[lid] = kmax;
  s_cnt[lid] = mine;
  barrier();
  float m_all = mx;  // the merged row's max
  for (uint j = 0u; j < 64u; ++j) m_all = max(m_all, s_max[j]);
  uint at = 0u;  // where this invocation's gathered tokens go
  for (uint j = 0u; j < lid; ++j) at += s_cnt[j];
  uint nc = 0u;
  for (uint j = 0u; j < 64u; ++j) nc += s_cnt[j];
  float xw = 0.0, xv = 0.0, kw = 0.0;  // past the merged k; the known tokens' mass
  for (uint j = k0; j < k1; ++j) {
    const float v = uintBitsToFloat(known[kb + 1u + 2u * p.cap + j]);
    if (!(v > -kInf)) continue;
    const uint kid = known[kb + 1u + j];
    kw += exp(v - m_all);
    if (!full || v > l_last || (v == l_last && kid < id_last)) {
      if (at < kMaxCompete) {
        s_cid[at] = kid;
        s_cv[at] = v;
      } else {  // past the gather's room: left out of the walk (the host overrules a wrong draw)
        xw += exp(v - m_all);
        xv += exp((v - m_all) * s);
      }
      ++at;
    } else {
      xw += exp(v - m_all);
      xv += exp((v - m_all) * s);
    }
  }
  nc = min(nc, kMaxCompete);
  s_l[lid] = -kInf;  // s_l and s_id receive the merged k
  s_id[lid] = 0xFFFFFFFFu;
  barrier();
  // Ranks in the merged row (higher logit, then lower id): a listed token's is its index plus
  // the gathered tokens above it; a gathered token's, the listed and gathered tokens above it.
  if (l > -kInf) {
    uint rank = lid;
    for (uint j = 0u; j < nc; ++j) {
      if (s_cv[j] > l || (s_cv[j] == l && s_cid[j] < id)) ++rank;
    }
    if (rank < p.k) {
      s_l[rank] = l;
      s_id[rank] = id;
    } else {
      xw += exp(l - m_all);
      xv += exp((l - m_all) * s);
    }
  }
  for (uint j = lid; j < nc; j += 64u) {
    const float v = s_cv[j];
    const uint kid = s_cid[j];
    uint r = 0u;
    for (uint o = 0u; o < p.k; ++o) {
      const float lo = uintBitsToFloat(top[t0 + p.k + o]);
      const uint io = top[t0 + o];
      if (isnan(lo) || io == 0xFFFFFFFFu || !(lo > -kInf)) break;
      if (lo > v || (lo == v && io < kid)) ++r;
    }
    for (uint o = 0u; o < nc; ++o) {
      if (s_cv[o] > v || (s_cv[o] == v && s_cid[o] < kid)) ++r;
    }
    if (r < p.k) {
      s_l[r] = v;
      s_id[r] = kid;
    } else {
      xw += exp(v - m_all);
      xv += exp((v - m_all) * s);
    }
  }
  s_xw[lid] = xw;
  s_xv[lid] = xv;
  s_kw[lid] = kw;
  barrier();
  const float lm = s_l[lid];
  s_w[lid] = lm > -kInf ? exp(lm - m_all) : 0.0;
  s_v[lid] = lm > -kInf ? exp((lm - m_all) * s) : 0.0;
  barrier();
  if (lid != 0u) return;

  uint valid = 0u;
  while (valid < p.k && s_l[valid] > -kInf) ++valid;
  // The listed tokens (the row without the known ones): how many, the last one's weight.
  uint listed = 0u;
  while (listed < p.k && top[t0 + listed] != 0xFFFFFFFFu &&
         uintBitsToFloat(top[t0 + p.k + listed]) > -kInf) {
    ++listed;
  }
  const float w_last_listed =
      listed > 0u ? exp(uintBitsToFloat(top[t0 + p.k + listed - 1u]) - m_all) : 0.0;
  float extra_w = 0.0, extra_v = 0.0, known_w = 0.0;
  for (uint j = 0u; j < 64u; ++j) {
    extra_w += s_xw[j];
    extra_v += s_xv[j];
    known_w += s_kw[j];
  }
  uint token = 0u;
  bool drawn = true;
  const uint draws = dw[d0 + 4u], n_uniforms = dw[d0 + 5u];
  const float u = uintBitsToFloat(dw[d0 + 8u + min(draws, n_uniforms - 1u)]);
  if (!(m_all > -kInf) || valid == 0u) {
    token = 0u;  // every token masked: the lowest id, no draw (the host decides here)
    drawn = false;
  } else if (top_k > 0 && uint(top_k) < p.n_vocab) {
    // Sampler::SampleTop: the top-k set, min-p against its best, top-p against its mass, T.
    uint m = min(uint(top_k), valid);
    float z = 0.0;
    for (uint j = 0; j < m; ++j) z += s_w[j];
    if (min_p > 0.0) {
      const float threshold = m_all + log(min_p);
      uint kept = 0u;
      while (kept < m && s_l[kept] >= threshold) ++kept;
      m = kept;
    }
    if (top_p < 1.0 && m > 1u) {
      float need = top_p * z;
      uint cut = m;
      for (uint j = 0; j < m; ++j) {
        need -= s_w[j];
        if (need <= 0.0) {
          cut = j + 1u;
          break;
        }
      }
      m = cut;
    }
    if (m <= 1u) {
      token = s_id[0];
      drawn = false;
    } else {
      float total = 0.0;
      for (uint j = 0; j < m; ++j) total += s_v[j];
      token = Walk(m, u * total);
    }
  } else {
    // Sampler::SampleReduced: the row's mass z from its log-sum-exp; the k best lead the walk.
    const float z = (mx > -kInf ? exp(lse - m_all) : 0.0) + known_w;
    float s1 = 0.0;
    for (uint j = 0; j < valid; ++j) s1 += s_w[j];
    if (!(top_p < 1.0) && !(min_p > 0.0)) {
      // The whole row at T: the rest's mass lies between 0 and a bound from the k-th weight (as
      // the host bounds it); its middle.
      float v_sum = 0.0;
      for (uint j = 0; j < valid; ++j) v_sum += s_v[j];
      const float r1 = max(0.0, z - s1);
      float r = r1;
      if (s != 1.0) {
        // The unlisted tokens' mass at T = 1, each at most the last listed one's weight; the
        // known and listed tokens past the merged k are exact.
        const float r1u = max(0.0, r1 - extra_w);
        const float n_unseen = float(p.n_vocab - listed - nk);
        const float w_last = w_last_listed;
        float hi = n_unseen * pow(w_last, s);
        hi = s > 1.0 ? min(hi, r1u * pow(w_last, s - 1.0))
                     : min(hi, pow(n_unseen, 1.0 - s) * pow(r1u, s));
        r = extra_v + 0.5 * (listed > 0u ? hi : 0.0);
      }
      token = Walk(valid, u * (v_sum + r));
    } else {
      // The kept set: the best prefix at or above min-p (and top-p's floor), cut where it
      // reaches top-p of the row's mass.
      float lo = min_p;
      if (top_p < 1.0) lo = max(lo, z * (1.0 - top_p) / float(p.n_vocab) * 0.99);
      uint above = 0u;
      while (above < valid && s_w[above] >= lo) ++above;
      uint m = above;
      if (top_p < 1.0) {
        const float need = top_p * z;
        float cum = 0.0;
        uint cut = 0u;
        while (cut < above && cum + s_w[cut] < need) cum += s_w[cut++];
        m = cut < above ? cut + 1u : above;
      }
      m = max(m, 1u);
      float total = 0.0;
      for (uint j = 0; j < m; ++j) total += s_v[j];
      token = Walk(m, u * total);
    }
  }
  if (drawn) dw[d0 + 4u] = draws + 1u;

  const uint seq = tok[4u * row + 3u], b = pos / p.block_size;
  // Past the last reserved block (the chain's last step has no next one) the row is not used.
  const int block = b < p.max_blocks ? bt[seq * p.max_blocks + b] : -1;
  tok[4u * row] = token;
  tok[4u * row + 1u] = pos;
  tok[4u * row + 2u] = block >= 0 ? uint(block) * p.block_size + pos % p.block_size : 0u;
  ring[slot] = token;
}
