// Before a chained sampled step's top-k (GpuForward::ForwardSampledChains with bans, logit bias
// or penalties): each row's edited tokens, as sampling::Sampler::Sample() edits them, are read
// out and set to -inf, so that topk.comp reduces the tokens the sampler leaves alone (what a
// plain step's mask_rows.comp gives the host). sample.comp then merges the edited values into
// its draw, and the host judges the draw from the raw values with the sampler's own arithmetic.
//
// A chained row's penalty window changes with each token the chain draws, so the device keeps
// it: the window at the chain's start (from the host) followed by each step's input token (the
// token the step before drew, or the host's after an overrule: chain_redo.comp's), its last
// last_n. The known tokens of step i (input at position s0 + i) are the static list S (bias,
// bans, the start window's distinct tokens; sorted by id) and the distinct tokens of the chain's
// steps 1..i still in the window, in step order (deterministic). An S token's count is its
// start count plus what came and less what left (shared atomics: integers, the same in any
// order).
//
// state, state_words a row: [n_s][last_n (0: no penalties)][n_init][s0][repeat][presence]
// [frequency][0], then cap entries of S [id][bias][count in the start window][banned], then the
// start window's first kSteps tokens (only those can leave it within a chain), then kSteps
// words of the chain's input tokens by step (written here, step 0's is the window's last).
// ring, (3 cap + 1) words a row and slot (the drawn token's position % ring_size, as
// sample.comp's rings): [K][K ids][K raw logits][K edited logits] (bans: edited -inf; their
// raw logits still come back, as mask_rows.comp's do: logprobs count them).
// One workgroup a row; K <= cap <= kMaxKnown (the host checks).
#version 450
layout(local_size_x = 256) in;

layout(std430, binding = 0) buffer L { float l[]; };
layout(std430, binding = 1) buffer E { uint e[]; };
layout(std430, binding = 2) readonly buffer Tok { uint tok[]; };
layout(std430, binding = 3) writeonly buffer Ring { uint ring[]; };
layout(push_constant) uniform P { uint n_vocab, cap, state_words, ring_size; } p;

const uint kSteps = 256;  // model::kMaxSampledChainSteps
const float kInf = 1.0 / 0.0;

const uint kMaxKnown = 4096u;  // Kernels::kMaxChainKnown

shared uint s_hist[kSteps];  // s_hist[j]: step j's input token (1 <= j <= i)
shared int s_delta[kMaxKnown];  // S's counts: tokens of the window that left it, and that came
shared uint s_new[kSteps];   // 1: step j's token joins the known list
shared uint s_new_ids[kSteps];
shared uint s_k;

// a / b correctly rounded in nearly every case (a shader's `/` may be off by 2.5 ulp; the host
// divides in IEEE): one Newton step on the quotient. Where it still differs the host's judge
// overrules the draw, which costs a step, never a token.
float Div(float a, float b) {
  precise float q = a / b;
  precise float r = fma(-q, b, a);
  precise float c = fma(r, 1.0 / b, q);
  return c;
}

// The index of id in S (sorted by id: the host writes it so), or n_s.
uint FindInS(uint s_at, uint n_s, uint id) {
  uint lo = 0u, hi = n_s;
  while (lo < hi) {
    const uint mid = (lo + hi) / 2u;
    const uint x = e[s_at + 4u * mid];
    if (x == id) return mid;
    if (x < id) {
      lo = mid + 1u;
    } else {
      hi = mid;
    }
  }
  return n_s;
}

void main() {
  const uint lid = gl_LocalInvocationID.x, row = gl_WorkGroupID.x;
  const uint base = row * p.state_words;
  const uint n_s = e[base], last_n = e[base + 1u], n_init = e[base + 2u], s0 = e[base + 3u];
  const float repeat = uintBitsToFloat(e[base + 4u]);
  const float presence = uintBitsToFloat(e[base + 5u]);
  const float frequency = uintBitsToFloat(e[base + 6u]);
  const uint s_at = base + 8u, init_at = s_at + 4u * p.cap, hist_at = init_at + kSteps;
  const uint q = tok[4u * row + 1u], t_in = tok[4u * row];
  const uint i = q - s0;  // this step's index in the chain (< kSteps)
  for (uint j = lid + 1u; j <= i; j += 256u) s_hist[j] = j == i ? t_in : e[hist_at + j];
  barrier();
  // For the steps after (they run in later submissions, behind a barrier).
  if (lid == 0u && i >= 1u) e[hist_at + i] = t_in;

  // The window: the start window (n_init tokens) then steps 1..i, its last wl; d dropped.
  const bool penal = last_n > 0u;
  const uint wl = penal ? min(last_n, n_init + i) : 0u;
  const uint d = n_init + i - wl;
  const uint init_dropped = min(d, n_init);
  const uint j0 = d > n_init ? d - n_init + 1u : 1u;  // first step whose token is in the window
  for (uint k = lid; k < n_s; k += 256u) s_delta[k] = 0;
  barrier();
  // S's tokens that left the window (the start window's oldest) and that came with the chain.
  for (uint j = lid; j < init_dropped; j += 256u) {
    const uint at = FindInS(s_at, n_s, e[init_at + j]);
    if (at < n_s) atomicAdd(s_delta[at], -1);
  }
  for (uint j = lid + 1u; j <= i; j += 256u) {
    uint join = penal && j >= j0 ? 1u : 0u;
    const uint t = s_hist[j];
    if (join != 0u) {
      const uint at = FindInS(s_at, n_s, t);
      if (at < n_s) {
        atomicAdd(s_delta[at], 1);
        join = 0u;
      }
    }
    for (uint k = j + 1u; k <= i && join != 0u; ++k) {
      if (s_hist[k] == t) join = 0u;
    }
    s_new[j] = join;
  }
  barrier();
  if (lid == 0u) {
    uint k = 0u;
    for (uint j = j0; j <= i; ++j) {
      if (s_new[j] != 0u) s_new_ids[k++] = s_hist[j];
    }
    s_k = n_s + k;
  }
  barrier();

  const uint big_k = s_k;
  const uint slot = row * p.ring_size + (q + 1u) % p.ring_size;
  const uint kb = slot * (3u * p.cap + 1u);
  if (lid == 0u) ring[kb] = big_k;
  for (uint k = lid; k < big_k; k += 256u) {
    uint id;
    float bias = 0.0;
    int count = 0;
    bool banned = false;
    if (k < n_s) {
      const uint at = s_at + 4u * k;
      id = e[at];
      bias = uintBitsToFloat(e[at + 1u]);
      count = int(e[at + 2u]) + s_delta[k];
      banned = e[at + 3u] != 0u;
    } else {
      id = s_new_ids[k - n_s];
      for (uint j = j0; j <= i && penal; ++j) count += s_hist[j] == id ? 1 : 0;
    }
    const uint at = row * p.n_vocab + id;
    const float raw = l[at];
    precise float v = raw + bias;
    if (penal && count > 0) {
      v = v <= 0.0 ? v * repeat : (repeat == 1.0 ? v : Div(v, repeat));
      precise float f = float(count) * frequency;
      precise float sub = f + presence;
      v = v - sub;
    }
    ring[kb + 1u + k] = id;
    ring[kb + 1u + p.cap + k] = floatBitsToUint(raw);
    ring[kb + 1u + 2u * p.cap + k] = floatBitsToUint(banned ? -kInf : v);
    l[at] = -kInf;  // the ids are distinct: no other invocation reads it
  }
}
