// Mixture-of-experts feed-forward (qwen3moe, Mixtral): a router picks each token's k experts,
// each a SwiGLU FFN of n_ff_exp rows, and their outputs are summed by the router's weights.
//
// One step of a batch, all threads inside one pool job (ThreadPool::Sync between the steps):
//
//   tokens: router and expert activations from the normed input   | Sync
//   router product                                                 | Sync
//   tokens: softmax, top-k, weights                                | Sync (group slots by expert)
//   slots: gather each (token, expert) slot's activations          | Sync
//   (batches of up to 16 tokens do these three in the first Sync's completion)
//   gate/up of every selected expert, SwiGLU per finished chunk    | Sync
//   slots: convert the SwiGLU output for the down product          | Sync
//   down of every selected expert                                  | Sync
//   tokens: weighted sum of the token's k expert outputs
//
// A slot is one (token, selected expert) pair; slots are ordered by expert, so each expert's
// tokens are contiguous rows and its weights are read once per step however many tokens chose
// it (a prefill reads each selected expert once, not once per token). The products of all the
// selected experts are cut into chunks the threads share in one pass (kernels::ExpertProduct):
// a decode step's 8 small experts are not 8 pool-wide products each waiting for its slowest
// thread. Every kernel computes a (row, token) the same way whatever else shares the call, and
// a token's sum runs in its own rank order, so a speculative verify row equals the decode step.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "model/decoder.h"

namespace uf::model {

Status BindMoeFfn(const WeightBinder& b, const ModelConfig& c, int64_t layer, LayerWeights* w) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  UF_ASSIGN_OR_RETURN(w->router, b.Matrix(p + "ffn_gate_inp.weight", c.n_expert, c.n_embd));
  const int64_t ne = c.n_expert, ff = c.n_ff_exp, e = c.n_embd;
  if (b.Has(p + "ffn_up_exps.weight")) {
    UF_ASSIGN_OR_RETURN(w->exp_gate, b.Experts(p + "ffn_gate_exps.weight", ne, ff, e));
    UF_ASSIGN_OR_RETURN(w->exp_up, b.Experts(p + "ffn_up_exps.weight", ne, ff, e));
    UF_ASSIGN_OR_RETURN(w->exp_down, b.Experts(p + "ffn_down_exps.weight", ne, e, ff));
  } else {
    // Mixtral files converted before the 3-D layout: one 2-D tensor per expert.
    for (int64_t x = 0; x < ne; ++x) {
      const std::string s = "." + std::to_string(x) + ".weight";
      UF_ASSIGN_OR_RETURN(auto g, b.Matrix(p + "ffn_gate" + s, ff, e));
      UF_ASSIGN_OR_RETURN(auto u, b.Matrix(p + "ffn_up" + s, ff, e));
      UF_ASSIGN_OR_RETURN(auto d, b.Matrix(p + "ffn_down" + s, e, ff));
      w->exp_gate.push_back(std::move(g));
      w->exp_up.push_back(std::move(u));
      w->exp_down.push_back(std::move(d));
    }
  }
  // One activation format per product: the experts of a layer share their types.
  for (int64_t x = 1; x < ne; ++x) {
    if (w->exp_gate[x].type() != w->exp_gate[0].type() ||
        w->exp_up[x].type() != w->exp_gate[0].type() ||
        w->exp_down[x].type() != w->exp_down[0].type()) {
      return UnimplementedError("model: layer " + std::to_string(layer) +
                                " has experts of different weight types");
    }
  }
  if (w->exp_up[0].type() != w->exp_gate[0].type()) {
    return UnimplementedError("model: layer " + std::to_string(layer) +
                              " has expert gate and up matrices of different types");
  }
  return OkStatus();
}

void Decoder::AllocateMoe() {
  const ModelConfig& c = config_;
  if (!c.is_moe()) return;
  const int64_t b = options_.max_batch, k = c.n_expert_used, slots = b * k;
  size_t router_row = 0, act_row = 0, down_row = 0;
  // The largest row of any layer's format at any tier (tests switch tiers between forwards);
  // a layer's rows are at its own format's stride, as the kernels read [tokens][row bytes].
  for (const LayerWeights& l : model_.weights().layers) {
    for (kernels::Isa isa : {kernels::Isa::kScalar, kernels::Isa::kAvx2, kernels::Isa::kAvx512}) {
      router_row = std::max(router_row, kernels::ActivationFormatFor(l.router, isa).row_bytes);
      act_row = std::max(act_row, kernels::ActivationFormatFor(l.exp_gate[0], isa).row_bytes);
      down_row = std::max(down_row, kernels::ActivationFormatFor(l.exp_down[0], isa).row_bytes);
    }
  }
  moe_router_row_ = router_row;
  moe_act_row_ = act_row;
  moe_down_row_ = down_row;
  moe_router_act_.Resize(b * moe_router_row_);
  moe_tok_act_.Resize(b * moe_act_row_);
  moe_slot_act_.Resize(slots * moe_act_row_);
  moe_down_act_.Resize(slots * moe_down_row_);
  moe_logits_.resize(b * c.n_expert);
  moe_sel_.resize(slots);
  moe_weight_.resize(slots);
  moe_slot_of_.resize(slots);
  moe_slot_token_.resize(slots);
  moe_count_.resize(c.n_expert + 1);
  moe_job_first_.resize(c.n_expert);
  moe_job_expert_.resize(c.n_expert);
  moe_gate_.resize(slots * c.n_ff_exp);
  moe_up_.resize(slots * c.n_ff_exp);
  moe_out_.resize(slots * c.n_embd);
  moe_router_.Reserve(1);
  moe_gate_up_.Reserve(c.n_expert);
  moe_down_.Reserve(c.n_expert);
}

namespace {

// SwiGLU of rows [r0, r1) of a job's slots, in place in the gate rows (r0 a multiple of 16:
// the same elements fall to the kernel's vector body as in a whole-row call).
struct MoeSwiGlu {
  float* gate;
  float* up;
  const int32_t* job_first;   // first slot of each job
  const int32_t* job_expert;  // expert of each job
  const kernels::ExpertProduct* product;
  int64_t n_ff;
  // gpt-oss: biases [n_expert][n_ff] on gate and up, then the clamped SwiGLU.
  const float* gate_b;
  const float* up_b;
};

// gpt-oss's activation (the reference's swiglu_oai): the gate clamped above at 7, the up
// projection to [-7, 7], x sigmoid(1.702 x) (up + 1).
void SwiGluOai(float* g, const float* u, int64_t n) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::min(g[i], kLimit);
    const float y = std::clamp(u[i], -kLimit, kLimit);
    g[i] = x / (1.0f + std::exp(-kAlpha * x)) * (y + 1.0f);
  }
}

void MoeSwiGluDone(void* ctx, int job, int64_t r0, int64_t r1) {
  const auto* a = static_cast<const MoeSwiGlu*>(ctx);
  const int64_t s0 = a->job_first[job], n = a->product->job(job).n_tokens;
  for (int64_t s = s0; s < s0 + n; ++s) {
    float* g = a->gate + s * a->n_ff + r0;
    float* u = a->up + s * a->n_ff + r0;
    if (a->gate_b != nullptr) {
      const int64_t off = a->job_expert[job] * a->n_ff + r0;
      kernels::AddInPlace(g, a->gate_b + off, r1 - r0);
      kernels::AddInPlace(u, a->up_b + off, r1 - r0);
      SwiGluOai(g, u, r1 - r0);
    } else {
      kernels::SwiGlu(g, u, g, r1 - r0);
    }
  }
}

}  // namespace

void RouteExperts(const ModelConfig& c, const float* logits, int32_t* sel, float* w) {
  const int64_t ne = c.n_expert, k = c.n_expert_used;
  // Top k by logit (softmax keeps the order), ties to the lower index; insertion into the
  // sorted k best: k <= 64, and most experts fall out at the first comparison.
  int64_t have = 0;
  for (int64_t x = 0; x < ne; ++x) {
    const float v = logits[x];
    if (have == k && !(v > logits[sel[k - 1]])) continue;
    int64_t i = have < k ? have++ : k - 1;
    while (i > 0 && v > logits[sel[i - 1]]) {
      sel[i] = sel[i - 1];
      --i;
    }
    sel[i] = static_cast<int32_t>(x);
  }
  const float max = logits[sel[0]];
  if (c.expert_gating == ExpertGating::kSoftmax) {
    // The selected experts' probabilities of the softmax over all of them.
    float sum = 0.0f;
    for (int64_t x = 0; x < ne; ++x) sum += std::exp(logits[x] - max);
    for (int64_t i = 0; i < k; ++i) w[i] = std::exp(logits[sel[i]] - max) / sum;
  } else {
    float sum = 0.0f;
    for (int64_t i = 0; i < k; ++i) sum += (w[i] = std::exp(logits[sel[i]] - max));
    for (int64_t i = 0; i < k; ++i) w[i] /= sum;
  }
  if (c.expert_weights_norm) {
    float sum = 0.0f;
    for (int64_t i = 0; i < k; ++i) sum += w[i];
    sum = std::max(sum, 6.103515625e-5f);  // the reference's clamp (smallest normal f16)
    for (int64_t i = 0; i < k; ++i) w[i] /= sum;
  }
  if (c.expert_weights_scale != 0.0f && c.expert_weights_scale != 1.0f) {
    for (int64_t i = 0; i < k; ++i) w[i] *= c.expert_weights_scale;
  }
}

// Token t's k experts (best first) and their weights from its router logits.
void Decoder::Route(int64_t il, int64_t t) {
  const ModelConfig& c = config_;
  const int64_t ne = c.n_expert, k = c.n_expert_used;
  float* logits = moe_logits_.data() + t * ne;
  const std::vector<float>& bias = model_.weights().layers[il].router_b;
  if (!bias.empty()) kernels::AddInPlace(logits, bias.data(), ne);
  RouteExperts(c, logits, moe_sel_.data() + t * k, moe_weight_.data() + t * k);
}

// Groups the batch's (token, expert) slots by expert and sets up the gate/up product: one job
// per selected expert over its contiguous slots.
void Decoder::GroupSlots(int64_t il, int64_t n, int n_threads) {
  const ModelConfig& c = config_;
  const LayerWeights& l = model_.weights().layers[il];
  const int64_t ne = c.n_expert, k = c.n_expert_used, ff = c.n_ff_exp;
  const size_t act_row = kernels::ActivationFormatFor(l.exp_gate[0]).row_bytes;
  const size_t down_row = kernels::ActivationFormatFor(l.exp_down[0]).row_bytes;
  std::fill(moe_count_.begin(), moe_count_.end(), 0);
  for (int64_t s = 0; s < n * k; ++s) ++moe_count_[moe_sel_[s] + 1];
  for (int64_t x = 0; x < ne; ++x) moe_count_[x + 1] += moe_count_[x];  // now first slots
  // Token order within an expert; moe_count_[x] walks to the end of expert x's slots.
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t r = 0; r < k; ++r) {
      const int32_t slot = moe_count_[moe_sel_[t * k + r]]++;
      moe_slot_of_[t * k + r] = slot;
      moe_slot_token_[slot] = static_cast<int32_t>(t);
    }
  }
  moe_gate_up_.Clear();
  int32_t first = 0;
  for (int64_t x = 0; x < ne; ++x) {
    const int32_t end = moe_count_[x];  // expert x's slots are [first, end)
    if (end > first) {
      kernels::ExpertJob j;
      j.w[0] = &l.exp_gate[x];
      j.w[1] = &l.exp_up[x];
      j.y[0] = moe_gate_.data() + first * ff;
      j.y[1] = moe_up_.data() + first * ff;
      j.n_mats = 2;
      j.act = moe_slot_act_.data() + first * act_row;
      j.n_tokens = end - first;
      j.ldy = ff;
      moe_job_first_[moe_gate_up_.n_jobs()] = first;
      moe_job_expert_[moe_gate_up_.n_jobs()] = static_cast<int32_t>(x);
      moe_gate_up_.Add(j);
    }
    first = end;
  }
  moe_gate_up_.Reset(ranges_.get(), n_threads);
  // The down product, the same jobs.
  moe_down_.Clear();
  for (int i = 0; i < moe_gate_up_.n_jobs(); ++i) {
    const kernels::ExpertJob& g = moe_gate_up_.job(i);
    const int64_t x = g.w[0] - l.exp_gate.data();
    const int64_t s0 = moe_job_first_[i];
    kernels::ExpertJob j;
    j.w[0] = &l.exp_down[x];
    j.y[0] = moe_out_.data() + s0 * c.n_embd;
    j.n_mats = 1;
    j.act = moe_down_act_.data() + s0 * down_row;
    j.n_tokens = g.n_tokens;
    j.ldy = c.n_embd;
    moe_down_.Add(j);
  }
}

void Decoder::MoeFfn(int64_t il, int64_t n, int ti, int nt) {
  const ModelConfig& c = config_;
  const LayerWeights& l = model_.weights().layers[il];
  const int64_t e = c.n_embd, k = c.n_expert_used, ff = c.n_ff_exp;
  const kernels::ActivationFormat router_fmt = kernels::ActivationFormatFor(l.router);
  const kernels::ActivationFormat act_fmt = kernels::ActivationFormatFor(l.exp_gate[0]);
  const kernels::ActivationFormat down_fmt = kernels::ActivationFormatFor(l.exp_down[0]);
  kernels::ChunkRange* ranges = ranges_.get();

  for (int64_t t = ti; t < n; t += nt) {
    const float* x = xn_.data() + t * e;
    router_fmt.Convert(x, moe_router_act_.data() + t * router_fmt.row_bytes);
    act_fmt.Convert(x, moe_tok_act_.data() + t * act_fmt.row_bytes);
  }
  pool_->Sync([&] {
    moe_router_.Clear();
    kernels::ExpertJob j;
    j.w[0] = &l.router;
    j.y[0] = moe_logits_.data();
    j.act = moe_router_act_.data();
    j.n_tokens = n;
    j.ldy = c.n_expert;
    moe_router_.Add(j);
    moe_router_.Reset(ranges, nt);
  });
  moe_router_.Run(ranges, ti, nt);
  auto gather = [&](int64_t s0, int64_t step) {
    for (int64_t s = s0; s < n * k; s += step) {
      std::memcpy(moe_slot_act_.data() + s * act_fmt.row_bytes,
                  moe_tok_act_.data() + moe_slot_token_[s] * act_fmt.row_bytes, act_fmt.row_bytes);
    }
  };
  if (n <= kSingleDispatchTokens) {
    // Decode steps and verifies: routing, grouping and gathering a few rows cost less than the
    // two barriers that would share them out.
    pool_->Sync([&] {
      for (int64_t t = 0; t < n; ++t) Route(il, t);
      GroupSlots(il, n, nt);
      gather(0, 1);
    });
  } else {
    pool_->Sync();
    for (int64_t t = ti; t < n; t += nt) Route(il, t);
    pool_->Sync([&] { GroupSlots(il, n, nt); });
    gather(ti, nt);
    pool_->Sync();
  }
  const bool biased = !l.exp_gate_b.empty();
  MoeSwiGlu swiglu{moe_gate_.data(),
                   moe_up_.data(),
                   moe_job_first_.data(),
                   moe_job_expert_.data(),
                   &moe_gate_up_,
                   ff,
                   biased ? l.exp_gate_b.data() : nullptr,
                   biased ? l.exp_up_b.data() : nullptr};
  moe_gate_up_.Run(ranges, ti, nt, &MoeSwiGluDone, &swiglu);
  pool_->Sync();
  for (int64_t s = ti; s < n * k; s += nt) {
    down_fmt.Convert(moe_gate_.data() + s * ff, moe_down_act_.data() + s * down_fmt.row_bytes);
  }
  pool_->Sync([&] { moe_down_.Reset(ranges, nt); });
  moe_down_.Run(ranges, ti, nt);
  pool_->Sync();
  for (int64_t t = ti; t < n; t += nt) {
    float* y = y_.data() + t * e;
    const float* w = moe_weight_.data() + t * k;
    const int32_t* slot = moe_slot_of_.data() + t * k;
    if (biased) {  // each expert's output with its down bias
      const int32_t* sel = moe_sel_.data() + t * k;
      for (int64_t r = 0; r < k; ++r) {
        kernels::AddInPlace(moe_out_.data() + slot[r] * e, l.exp_down_b.data() + sel[r] * e, e);
      }
    }
    const float* o0 = moe_out_.data() + slot[0] * e;
    for (int64_t i = 0; i < e; ++i) y[i] = w[0] * o0[i];
    for (int64_t r = 1; r < k; ++r) {
      const float* o = moe_out_.data() + slot[r] * e;
      for (int64_t i = 0; i < e; ++i) y[i] += w[r] * o[i];
    }
  }
}

}  // namespace uf::model
