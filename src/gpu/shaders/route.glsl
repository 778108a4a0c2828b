// A mixture-of-experts router's choice for one token (model::Decoder::Route), the code route.comp
// runs and the router GEMM's route tail (gemm.glsl) runs after the product that wrote the
// logits, so both give the same bits. From the token's n_expert logits (RouteLogit(t, x): the
// router's bias added where it has one), its k experts, best first, ties to the lower index, and
// their weights: with softmax_all the selected experts' probabilities of the softmax over all
// experts (qwen3moe, Mixtral), else a softmax over the k selected logits (gpt-oss); then divided
// by their sum (norm; the sum clamped below at the smallest normal f16, as the reference) and
// multiplied by scale (0 or 1: none). RouteOut(slot, id, weight) stores slot t k + i's.
// The includer defines kGroupSize (common.glsl), `float RouteLogit(uint t, uint x)` and
// `void RouteOut(uint slot, uint id, float w)`, and calls RouteToken in workgroup-uniform control
// flow.
// One workgroup per token (an invocation per token walked the experts with an insertion sort
// through device memory, a chain of dependent loads per expert: microseconds a token on a GPU,
// per MoE layer of a decode step). Each expert's rank (the experts ahead of it: a higher logit,
// or an equal one at a lower index) is counted from shared memory in parallel, and the experts
// ranked below k are the CPU insertion's k in its order. The sums stay serial, in expert order,
// over values computed in parallel (the same operations per value), so the weights keep the
// bits of the one-invocation kernel. A NaN logit ranks as -inf (the insertion kept one it met
// first; a NaN router is a broken model either way).

const uint kMaxExperts = 512;    // checked by the host (Kernels::kMaxExperts)
const uint kMaxExpertsUsed = 64; // Kernels::kMaxExpertsUsed
shared float uf_lg[kMaxExperts];   // the token's logits (plus bias), NaN as -inf
shared float uf_ex[kMaxExperts];   // exp(logit - max) of every expert (softmax_all)
shared uint uf_top[kMaxExpertsUsed];  // the k best, best first
shared float uf_wt[kMaxExpertsUsed];  // their weights

void RouteToken(uint t, uint n_expert, uint k, bool softmax_all, bool norm, float scale) {
  const uint lid = gl_LocalInvocationID.x;
  for (uint x = lid; x < n_expert; x += kGroupSize) {
    const float b = RouteLogit(t, x);
    uf_lg[x] = isnan(b) ? -1.0 / 0.0 : b;
  }
  barrier();
  for (uint x = lid; x < n_expert; x += kGroupSize) {
    const float v = uf_lg[x];
    uint rank = 0;
    for (uint y = 0; y < n_expert; ++y) {
      const float u = uf_lg[y];
      rank += (u > v || (u == v && y < x)) ? 1u : 0u;
    }
    if (rank < k) uf_top[rank] = x;
  }
  barrier();
  const float mx = uf_lg[uf_top[0]];
  if (softmax_all) {
    for (uint x = lid; x < n_expert; x += kGroupSize) uf_ex[x] = exp(uf_lg[x] - mx);
  }
  barrier();
  if (lid == 0) {
    float sum = 0.0;
    if (softmax_all) {
      for (uint x = 0; x < n_expert; ++x) sum += uf_ex[x];
      for (uint i = 0; i < k; ++i) uf_wt[i] = uf_ex[uf_top[i]] / sum;
    } else {
      for (uint i = 0; i < k; ++i) {
        const float e = exp(uf_lg[uf_top[i]] - mx);
        uf_wt[i] = e;
        sum += e;
      }
      for (uint i = 0; i < k; ++i) uf_wt[i] /= sum;
    }
    if (norm) {
      float s = 0.0;
      for (uint i = 0; i < k; ++i) s += uf_wt[i];
      s = max(s, 6.103515625e-5);
      for (uint i = 0; i < k; ++i) uf_wt[i] /= s;
    }
    if (scale != 0.0 && scale != 1.0) {
      for (uint i = 0; i < k; ++i) uf_wt[i] *= scale;
    }
    for (uint i = 0; i < k; ++i) RouteOut(t * k + i, uf_top[i], uf_wt[i]);
  }
  barrier();  // the shared arrays read, before a next token writes them
}
