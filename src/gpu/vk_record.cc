// The step of VulkanForward as one recording per batch shape: the layers' dispatches (attention,
// dense or mixture-of-experts FFN), the lm_head and what the step leaves behind (Out). Fused
// (GpuForwardOptions::fuse), a llama layer with Q8_0 / Q4_0 weights is 11 dispatches and 8
// barriers (unfused 20 and 20; Q's RoPE and the K/V store the Q, K, V GEMMs' epilogue), with
// F16 / BF16 weights 7 and 7 (Q, K, V, RoPE and the store one dispatch, gate, up and SwiGLU
// another), 2 fewer of each with the norm tail; docs/gpu.md, "One step" and "Fewer stages", lists
// what is fused and grouped.
#include <cmath>
#include <initializer_list>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "gpu/vk_forward.h"

namespace uf::gpu {

// Recordings kept at once; past this the oldest shapes are recorded again when they come back.
constexpr size_t kMaxRecordings = 64;

// Quantizes n rows of x into xq_ (Q8_0, Q8_K or 16-bit pairs, as w takes them) unless it holds
// them already. False when w takes f32 activations.
bool VulkanForward::QuantizeFor(Recorder* r, const GpuMatrix& w, const Buffer& x, int64_t n) {
  const Activation act = ActivationFor(w.type);
  if (act == Activation::kF32) return false;
  if (xq_holds_ != &x || xq_act_ != act) {
    k_.QuantizeAs(r, act, x, 0, n * w.cols, xq_);
    xq_holds_ = &x;
    xq_act_ = act;
  }
  return true;
}

void VulkanForward::Gemm(Recorder* r, const GpuMatrix& w, const Buffer& x, int64_t n,
                         const Buffer& y, bool accumulate, const Buffer* bias,
                         const Kernels::RopeStore* rope) {
  k_.Gemm(r, w, QuantizeFor(r, w, x, n) ? xq_ : x, n, y, 0, 0, accumulate, bias, nullptr, rope);
}

namespace {

// The one quantized activation the matrices read, kF32 when none reads one, nullopt when they
// read two (xq_ holds one at a time).
std::optional<Activation> SharedActivation(std::initializer_list<const GpuMatrix*> ws) {
  Activation act = Activation::kF32;
  for (const GpuMatrix* w : ws) {
    const Activation a = ActivationFor(w->type);
    if (a == Activation::kF32 || a == act) continue;
    if (act != Activation::kF32) return std::nullopt;
    act = a;
  }
  return act;
}

// The quantized activation a fused kernel (a norm, SwiGLU) writes along with its rows of
// `values` for the GEMMs that read `act`: act, or kF32 (the unfused kernels) when not fusing,
// when they read f32 or two formats, or when the rows are not whole blocks.
Activation Fused(bool fuse, std::optional<Activation> act, int64_t values) {
  if (!fuse || !act || *act == Activation::kF32 || values % ActivationBlock(*act) != 0) {
    return Activation::kF32;
  }
  return *act;
}

}  // namespace

bool VulkanForward::ResidualGemm(Recorder* r, const GpuMatrix& w, const Buffer& a, int64_t n,
                                 bool a_ready, const Buffer* norm_w,
                                 std::initializer_list<const GpuMatrix*> next) {
  const Buffer& in = a_ready || !QuantizeFor(r, w, a, n) ? a : xq_;
  if (norm_w == nullptr || !o_.fuse || !tail_ || n != 1 || !k_.HasStages(w.type)) {
    k_.Gemm(r, w, in, n, x_, 0, 0, /*accumulate=*/true);
    return false;
  }
  const Activation act = NormActivation(next);
  const Kernels::NormTail tail{
      .w = norm_w, .y = &xn_, .q = &xq_, .counter = &norm_counter_, .eps = c_.rms_eps, .act = act};
  k_.Gemm(r, w, in, n, x_, 0, 0, /*accumulate=*/true, nullptr, &tail);
  Normalized(act);
  return true;
}

Activation VulkanForward::NormActivation(std::initializer_list<const GpuMatrix*> next) const {
  return Fused(o_.fuse, SharedActivation(next), c_.n_embd);
}

void VulkanForward::Normalized(Activation act) {
  xq_holds_ = act != Activation::kF32 ? &xn_ : nullptr;  // xn_ was rewritten
  xq_act_ = act;
}

void VulkanForward::Norm(Recorder* r, const Buffer& x, const Buffer& w, int64_t n,
                         std::initializer_list<const GpuMatrix*> next) {
  const Activation act = NormActivation(next);
  if (act != Activation::kF32) {
    k_.RmsNormQuant(r, x, w, xn_, n, c_.n_embd, c_.rms_eps, act, xq_);
  } else {
    k_.RmsNorm(r, x, 0, w, xn_, 0, n, c_.n_embd, c_.rms_eps);
  }
  Normalized(act);
}

void VulkanForward::Gemms(Recorder* r, const Buffer& x, int64_t n,
                          std::initializer_list<Product> wy) {
  bool shared = o_.fuse;
  Activation act = Activation::kF32;
  for (const Product& p : wy) {
    const Activation a = ActivationFor(p.w->type);
    if (a == Activation::kF32) continue;
    if (act != Activation::kF32 && a != act) shared = false;  // xq_ holds one format at a time
    act = a;
  }
  if (!shared) {
    for (const Product& p : wy) Gemm(r, *p.w, x, n, *p.y, false, p.bias, p.rope);
    return;
  }
  // Quantize once ahead of the group (nothing when xq_ holds x already), then the products,
  // which read x or xq_ and write their own y: one barrier after them all.
  for (const Product& p : wy) {
    if (QuantizeFor(r, *p.w, x, n)) break;
  }
  r->BeginGroup();
  for (const Product& p : wy) Gemm(r, *p.w, x, n, *p.y, false, p.bias, p.rope);
  r->EndGroup();
}

void VulkanForward::GemmExperts(Recorder* r, const GpuMatrix& w, const Buffer& x, int64_t n_x,
                                int64_t n_slots, int64_t x_div, const Buffer& y) {
  const Buffer* in = QuantizeFor(r, w, x, n_x) ? &xq_ : &x;
  // One token: its k slots have k different experts, nothing to group.
  if (n_slots > c_.n_expert_used) {
    k_.GemmExpertsGrouped(r, w, *in, moe_tiles_, moe_order_, n_slots, x_div, y,
                          k_.GroupTile(n_slots, c_.n_expert));
  } else {
    k_.GemmExperts(r, w, *in, moe_ids_, n_slots, x_div, y);
  }
}

// Every step per token or per slot, so a token's row does not depend on its batch. A batch of
// several tokens groups its slots by expert (GroupSlots) and the expert GEMMs read each
// selected expert's rows once per tile of up to 8, 16 or 32 slots that chose it (GroupTile:
// the tile that holds an expert's average share); a slot's result is the same bits either way
// (gemm.glsl).
bool VulkanForward::RecordMoe(Recorder* r, const LayerBuffers& l, int64_t n, const Buffer* norm_w,
                              std::initializer_list<const GpuMatrix*> next) {
  const int64_t k = c_.n_expert_used;
  Kernels::RouteParams rp;
  rp.n_expert = c_.n_expert;
  rp.k = k;
  rp.softmax_all = c_.expert_gating == model::ExpertGating::kSoftmax;
  rp.norm = c_.expert_weights_norm;
  rp.scale = c_.expert_weights_scale;
  const Buffer* router_b = l.router_b.valid() ? &l.router_b : nullptr;
  if (o_.fuse && o_.moe_tails && k_.CanRouteTail(l.router, n, rp)) {
    // The route in the router GEMM's last workgroup; its bias added as the GEMM's (s + b, as
    // route.comp adds it).
    const Kernels::RouteTail rt{
        .params = rp, .ids = &moe_ids_, .weights = &moe_weights_, .counter = &norm_counter_};
    const Buffer& in = QuantizeFor(r, l.router, xn_, n) ? xq_ : xn_;
    k_.Gemm(r, l.router, in, n, moe_logits_, 0, 0, false, router_b, nullptr, nullptr, &rt);
  } else {
    Gemm(r, l.router, xn_, n, moe_logits_);
    k_.Route(r, moe_logits_, router_b, moe_ids_, moe_weights_, n, rp);
  }
  if (n * k > k) {
    k_.GroupSlots(r, moe_ids_, moe_order_, moe_tiles_, n * k, c_.n_expert,
                  k_.GroupTile(n * k, c_.n_expert));
  }
  // Gate and up read the same activation and write their own rows: one barrier after both when
  // they read the same format (xq_ quantized once, ahead).
  const bool group = o_.fuse && SharedActivation({&l.exp_gate, &l.exp_up}).has_value();
  if (group) {
    if (!QuantizeFor(r, l.exp_gate, xn_, n)) QuantizeFor(r, l.exp_up, xn_, n);
    r->BeginGroup();
  }
  GemmExperts(r, l.exp_gate, xn_, n, n * k, k, moe_gate_);
  GemmExperts(r, l.exp_up, xn_, n, n * k, k, moe_up_);
  if (group) r->EndGroup();
  const int64_t values = n * k * c_.n_ff_exp;
  const Activation act = Fused(o_.fuse, ActivationFor(l.exp_down.type), values);
  if (act != Activation::kF32) {
    // The down product's activation from the same dispatch.
    if (l.exp_gate_b.valid()) {
      k_.SwiGluOaiQuant(r, moe_gate_, moe_up_, l.exp_gate_b, l.exp_up_b, moe_ids_, n * k,
                        c_.n_ff_exp, act, xq_);
    } else {
      k_.SwiGluQuant(r, moe_gate_, moe_up_, moe_gate_, values, act, xq_);
    }
    xq_holds_ = &moe_gate_;
    xq_act_ = act;
  } else {
    if (l.exp_gate_b.valid()) {
      k_.SwiGluOai(r, moe_gate_, moe_up_, l.exp_gate_b, l.exp_up_b, moe_ids_, n * k, c_.n_ff_exp);
    } else {
      k_.SwiGlu(r, moe_gate_, moe_up_, moe_gate_, values);
    }
    xq_holds_ = nullptr;  // xq_ is the down product's activation from here
  }
  const bool down_b = l.exp_down_b.valid();
  // The residual add folded into the sum (x + sum, add.comp's bits) where the sum ends in an add
  // (k >= 2): with one rank, x + w * out could be contracted into one FMA.
  const bool into_x = o_.fuse && k >= 2;
  if (into_x && n == 1 && o_.moe_tails && k_.CanSumTail(l.exp_down)) {
    // One token: the sum in the down product's tail, and with the norm tail the next norm
    // after it in the same dispatch.
    const bool normed = norm_w != nullptr && tail_;
    const Activation act = normed ? NormActivation(next) : Activation::kF32;
    const Kernels::NormTail nt{.w = norm_w, .y = &xn_, .q = &xq_, .eps = c_.rms_eps, .act = act};
    const Kernels::ExpertSum sum{.weights = &moe_weights_,
                                 .x = &x_,
                                 .bias = down_b ? &l.exp_down_b : nullptr,
                                 .counter = &moe_counter_,
                                 .norm = normed ? &nt : nullptr};
    const Buffer& in = QuantizeFor(r, l.exp_down, moe_gate_, k) ? xq_ : moe_gate_;
    k_.GemmExperts(r, l.exp_down, in, moe_ids_, k, 1, moe_out_, &sum);
    if (normed) Normalized(act);
    return normed;
  }
  GemmExperts(r, l.exp_down, moe_gate_, n * k, n * k, 1, moe_out_);
  k_.MoeSum(r, moe_out_, moe_weights_, into_x ? x_ : y_, n, k, c_.n_embd,
            down_b ? &l.exp_down_b : nullptr, down_b ? &moe_ids_ : nullptr, into_x);
  if (!into_x) k_.Add(r, y_, 0, x_, 0, n * c_.n_embd);
  return false;
}

void VulkanForward::RecordQkv(Recorder* r, const LayerBuffers& l, int64_t n,
                              const AttentionShape& as, int64_t il) {
  const int64_t hd = c_.head_dim;
  const bool neox = c_.rope_type == model::RopeType::kNeox;
  const Kernels::KvRope kr{.cs = &cs_, .rope_dim = c_.rope_dim, .neox = neox};
  // Where nothing sits between the products and RoPE (no biases, no q/k norms), no stage
  // between the products and attention either:
  const bool plain =
      !l.bq.valid() && !l.bk.valid() && !l.bv.valid() && !l.q_norm.valid() && !l.k_norm.valid();
  if (o_.fuse && plain && k_.QkvRopeFits(l.wq, l.wk, l.wv, n, as, kr)) {
    // F16 / BF16 weights: Q, K and V with Q's and K's RoPE and the K/V store in one dispatch.
    QuantizeFor(r, l.wq, xn_, n);  // nothing when the norm wrote xq_
    k_.GemmQkvRope(r, l.wq, l.wk, l.wv, xq_, n, q_, kbuf_, vbuf_, cache_dev_[il], tok_, as, kr);
    return;
  }
  if (o_.fuse && plain && k_.CanRopeStore(l.wq, n, as, neox) &&
      k_.CanRopeStore(l.wk, n, as, neox) && k_.CanRopeStore(l.wv, n, as, neox)) {
    // Any weight type: Q's RoPE and the K/V store as the three products' epilogue, where a
    // GEMM workgroup holds whole RoPE pairs and the cache is f16.
    using Of = Kernels::RopeStoreOf;
    const Buffer& cache = cache_dev_[il];
    // One epilogue per matrix, differing only in what it does (Q ignores the cache).
    Kernels::RopeStore rq{.of = Of::kQ,
                          .cs = &cs_,
                          .cache = &cache,
                          .tok = &tok_,
                          .shape = &as,
                          .rope_dim = c_.rope_dim};
    Kernels::RopeStore rk = rq, rv = rq;
    rk.of = Of::kK;
    rv.of = Of::kV;
    Gemms(
        r, xn_, n,
        {{&l.wq, &q_, nullptr, &rq}, {&l.wk, &kbuf_, nullptr, &rk}, {&l.wv, &vbuf_, nullptr, &rv}});
    return;
  }
  if (l.q_norm.valid() && l.k_norm.valid() && o_.fuse && !l.bq.valid() && !l.bk.valid() &&
      !l.bv.valid() && k_.CanHeadNorm(l.wq, n, as) && k_.CanHeadNorm(l.wk, n, as) &&
      k_.CanRopeStore(l.wv, n, as, false)) {
    // qwen3, one token: the norms, Q's RoPE and K's store in the last workgroup of each head of
    // the Q and K products (their head tails), V's store as its product's epilogue: nothing
    // between the products and attention.
    using Of = Kernels::RopeStoreOf;
    const Kernels::RopeStore rq{.of = Of::kQNorm,
                                .cs = &cs_,
                                .tok = &tok_,
                                .shape = &as,
                                .rope_dim = c_.rope_dim,
                                .norm = &l.q_norm,
                                .counter = &head_counter_q_,
                                .eps = c_.rms_eps,
                                .neox = neox};
    Kernels::RopeStore rk = rq, rv = rq;
    rk.of = Of::kKNorm;
    rk.cache = rv.cache = &cache_dev_[il];
    rk.norm = &l.k_norm;
    rk.counter = &head_counter_k_;
    rv.of = Of::kV;
    rv.norm = rv.counter = nullptr;
    Gemms(
        r, xn_, n,
        {{&l.wq, &q_, nullptr, &rq}, {&l.wk, &kbuf_, nullptr, &rk}, {&l.wv, &vbuf_, nullptr, &rv}});
    return;
  }
  // qwen2's and gpt-oss's q/k/v biases: inside the GEMMs when fusing (s + b either way).
  const bool fused_bias = o_.fuse && l.bq.valid() && l.bk.valid() && l.bv.valid();
  Gemms(r, xn_, n,
        {{&l.wq, &q_, fused_bias ? &l.bq : nullptr},
         {&l.wk, &kbuf_, fused_bias ? &l.bk : nullptr},
         {&l.wv, &vbuf_, fused_bias ? &l.bv : nullptr}});
  if (l.bq.valid() && !fused_bias) {
    if (o_.fuse) r->BeginGroup();
    k_.Add(r, l.bq, 0, q_, 0, n * c_.q_dim(), c_.q_dim());
    k_.Add(r, l.bk, 0, kbuf_, 0, n * c_.kv_dim(), c_.kv_dim());
    k_.Add(r, l.bv, 0, vbuf_, 0, n * c_.kv_dim(), c_.kv_dim());
    if (o_.fuse) r->EndGroup();
  }
  if (l.q_norm.valid() && l.k_norm.valid() && o_.fuse && k_.QkNormRopeFits(as)) {
    // qwen3: the norms, Q's RoPE and the K/V store in one dispatch (its barrier the one the
    // norms' group had).
    k_.QkNormRopeStore(r, q_, kbuf_, vbuf_, l.q_norm, l.k_norm, c_.rms_eps, cache_dev_[il], tok_, n,
                       as, kr);
    return;
  }
  if (l.q_norm.valid()) {
    if (o_.fuse) r->BeginGroup();
    k_.RmsNorm(r, q_, 0, l.q_norm, q_, 0, n * c_.n_head, hd, c_.rms_eps);
    k_.RmsNorm(r, kbuf_, 0, l.k_norm, kbuf_, 0, n * c_.n_head_kv, hd, c_.rms_eps);
    if (o_.fuse) r->EndGroup();
  }
  if (o_.fuse) {
    // Q's RoPE beside the K/V store, which rotates K itself (kbuf_ stays unrotated; only the
    // cache is read after this).
    r->BeginGroup();
    k_.Rope(r, q_, cs_, tok_, n, c_.n_head, hd, c_.rope_dim, neox);
    k_.KvStore(r, kbuf_, vbuf_, cache_dev_[il], tok_, n, as, &kr);
    r->EndGroup();
  } else {
    k_.Rope(r, q_, cs_, tok_, n, c_.n_head, hd, c_.rope_dim, neox);
    k_.Rope(r, kbuf_, cs_, tok_, n, c_.n_head_kv, hd, c_.rope_dim, neox);
    k_.KvStore(r, kbuf_, vbuf_, cache_dev_[il], tok_, n, as);
  }
}

Status VulkanForward::Record(Recorder* r, int64_t n, int64_t n_out, Out out, bool allowed,
                             StepWay way, const Buffer* rows, const Buffer* redo) {
  // The device-local logits rows the reductions read (a sampled chain's slot keeps its own).
  const Buffer& local = rows != nullptr ? *rows : logits_local_;
  const AttnKernel attn = way.attn;
  tail_ = way.norm_tail;
  k_.set_wide_gemv(way.wide_gemv);
  const int64_t e = c_.n_embd, hd = c_.head_dim;
  AttentionShape as;
  as.q8 = q8_cache_;
  as.n_head = c_.n_head;
  as.n_head_kv = c_.n_head_kv;
  as.head_dim = hd;
  as.n_rows = n_rows_;
  as.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  as.block_size = cache_->block_size();
  as.max_blocks = max_blocks_;
  as.max_len = max_len_;
  as.chunk = chunk_;
  const uint64_t layer_words = 2 * c_.n_head_kv * n_rows_ * as.row_words();
  xq_holds_ = nullptr;
  // A chained step's token into the next step's input (ForwardGreedyChain, ForwardSampledChains).
  const Kernels::Feed feed{&tok_,       &bt_,      &chain_ring_, cache_->block_size(),
                           max_blocks_, kChainRing};
  if (redo != nullptr) k_.ChainRedo(r, *redo, feed, chain_draw_, n, kDrawWords);
  // Fused, the embedding and the first layer's attention norm are one dispatch.
  bool normed = false;  // x_ normalized for this layer's attention (xn_, xq_) already
  if (o_.fuse) {
    const LayerBuffers& l0 = layers_[0];
    const Activation act = NormActivation({&l0.wq, &l0.wk, &l0.wv});
    k_.EmbedNorm(r, *embd_table_, x_, tok_, n, l0.attn_norm, xn_, c_.rms_eps, act, xq_);
    Normalized(act);
    normed = true;
  } else {
    k_.Embed(r, *embd_table_, x_, tok_, n);
  }
  // Independent dispatches (each writes its own buffer, none reads another's output) share one
  // barrier when fusing.
  const auto begin = [&] {
    if (o_.fuse) r->BeginGroup();
  };
  const auto end = [&] {
    if (o_.fuse) r->EndGroup();
  };
  bool final_normed = false;  // the last down product's norm tail normalized x_ for the lm_head
  for (int64_t il = 0; il < c_.n_layer; ++il) {
    const LayerBuffers& l = layers_[il];
    if (!normed) Norm(r, x_, l.attn_norm, n, {&l.wq, &l.wk, &l.wv});
    normed = false;
    // The residual product's norm tail into the next layer's attention norm, or after the last
    // layer into the final norm when the step's one token is its one logits row (no gather).
    const LayerBuffers* next = il + 1 < c_.n_layer ? &layers_[il + 1] : nullptr;
    const auto down_into_x = [&](const Buffer& a, bool a_ready) {
      if (next != nullptr) {
        normed = ResidualGemm(r, l.down, a, n, a_ready, &next->attn_norm,
                              {&next->wq, &next->wk, &next->wv});
      } else {
        final_normed = ResidualGemm(r, l.down, a, n, a_ready, n_out == 1 ? &output_norm_ : nullptr,
                                    {&output_});
      }
    };
    as.k_off = 0;
    as.v_off = static_cast<uint32_t>(layer_words / 2);
    as.window = c_.IsSwaLayer(il) ? c_.n_swa : 0;
    // Tiles of as many tokens as give the kernel's rows, or of one token for a decode batch (the
    // GQA group's query heads still share each K/V row).
    as.tile = attn == AttnKernel::kToken || !k_.TiledAttentionFits(as) ? 0
              : attn == AttnKernel::kTiledSingles
                  ? 1
                  : Kernels::kTiledAttentionRows / (c_.n_head / c_.n_head_kv);
    RecordQkv(r, l, n, as, il);
    // The o-projection's Q8_0 or 16-bit pair activation written by attention itself (the bits
    // QuantizeAs gives): no quantize dispatch and barrier between them. Q8_K's blocks of 256 span
    // heads: apart.
    const Activation o_act = ActivationFor(l.wo.type);
    const bool attn_q = o_.fuse && o_act != Activation::kF32 && o_act != Activation::kQ8_K &&
                        hd % ActivationBlock(o_act) == 0 && hd <= Kernels::kMaxAttentionChunk;
    k_.Attention(r, q_, cache_dev_[il], scores_, attn_, tok_, bt_, n, as,
                 chunk_ > 0 ? &part_ : nullptr, l.sinks.valid() ? &l.sinks : nullptr,
                 attn_q ? &xq_ : nullptr, o_act);
    if (attn_q) {
      xq_holds_ = &attn_;
      xq_act_ = o_act;
    }
    const bool moe = l.exp_gate.buffer.valid();
    bool ffn_normed = false;
    if (o_.fuse && !l.bo.valid()) {
      // x + W attn: Add's bits; the FFN norm from the same dispatch with the norm tail.
      ffn_normed = moe ? ResidualGemm(r, l.wo, attn_, n, false, &l.ffn_norm,
                                      {&l.router, &l.exp_gate, &l.exp_up})
                       : ResidualGemm(r, l.wo, attn_, n, false, &l.ffn_norm, {&l.gate, &l.up});
    } else {
      // gpt-oss's bias goes in before the residual (x + (W attn + b)), so the add stays apart.
      Gemm(r, l.wo, attn_, n, y_);
      if (l.bo.valid()) k_.Add(r, l.bo, 0, y_, 0, n * e, e);
      k_.Add(r, y_, 0, x_, 0, n * e);
    }
    if (moe) {
      if (!ffn_normed) Norm(r, x_, l.ffn_norm, n, {&l.router, &l.exp_gate, &l.exp_up});
      // Adds into x_; with the norm tail normalizes it for what follows, as down_into_x.
      if (next != nullptr) {
        normed = RecordMoe(r, l, n, &next->attn_norm, {&next->wq, &next->wk, &next->wv});
      } else {
        final_normed = RecordMoe(r, l, n, n_out == 1 ? &output_norm_ : nullptr, {&output_});
      }
      continue;
    }
    if (!ffn_normed) Norm(r, x_, l.ffn_norm, n, {&l.gate, &l.up});
    if (o_.fuse && xq_holds_ == &xn_ && xq_act_ == ActivationFor(l.gate.type) &&
        l.down.type == l.gate.type && k_.CanGemmGlu(l.gate, l.up, n)) {
      // Gate, up and SwiGLU in one dispatch, its pairs (the down product's activation) into
      // gate_, which holds no f32 values then: no SwiGLU dispatch and barrier.
      k_.GemmGlu(r, l.gate, l.up, xq_, n, gate_);
      xq_holds_ = nullptr;  // gate_ holds the pairs the down product reads, not f32 values
      down_into_x(gate_, /*a_ready=*/true);
      continue;
    }
    Gemms(r, xn_, n, {{&l.gate, &gate_}, {&l.up, &up_}});
    const Activation act = Fused(o_.fuse, ActivationFor(l.down.type), c_.n_ff);
    if (act != Activation::kF32) {
      k_.SwiGluQuant(r, gate_, up_, gate_, n * c_.n_ff, act, xq_);
      xq_holds_ = &gate_;  // the down product's activation, from the same dispatch
      xq_act_ = act;
    } else {
      k_.SwiGlu(r, gate_, up_, gate_, n * c_.n_ff);
      xq_holds_ = nullptr;  // gate_ was rewritten
    }
    if (o_.fuse) {
      down_into_x(gate_, /*a_ready=*/false);
    } else {
      Gemm(r, l.down, gate_, n, y_);
      k_.Add(r, y_, 0, x_, 0, n * e);
    }
  }
  if (n_out > 0) {
    const Buffer& logits_in = out == Out::kLogits ? logits_dev_ : local;
    const Activation act = Fused(o_.fuse, ActivationFor(output_.type), e);
    if (final_normed) {
      Gemm(r, output_, xn_, n_out, logits_in);  // xq_ holds xn_'s activation where it reads one
    } else if (act != Activation::kF32) {
      k_.Gather(r, x_, xo_, outs_, e, n_out);
      // Normalized into xn_ (free by now; the fused kernel cannot work in place) with the lm_head's
      // activation from the same dispatch.
      k_.RmsNormQuant(r, xo_, output_norm_, xn_, n_out, e, c_.rms_eps, act, xq_);
      xq_holds_ = &xn_;
      xq_act_ = act;
      Gemm(r, output_, xn_, n_out, logits_in);
    } else {
      k_.Gather(r, x_, xo_, outs_, e, n_out);
      k_.RmsNorm(r, xo_, 0, output_norm_, xo_, 0, n_out, e, c_.rms_eps);
      xq_holds_ = nullptr;
      Gemm(r, output_, xo_, n_out, logits_in);
    }
    if (out == Out::kGreedy) k_.ArgMax(r, local, argmax_, argmax_part_, c_.n_vocab, n_out);
    if (out == Out::kChainMasked) {
      k_.MaskRows(r, local, known_, known_raw_, c_.n_vocab, n_out, o_.max_known);
    }
    if (out == Out::kSampledMasked) {  // bans, bias, penalties (CheckChain: chain_known_cap_)
      k_.EditRows(r, local, chain_edit_, tok_, chain_known_, c_.n_vocab, n_out, chain_known_cap_,
                  kChainRing);
    }
    if (out == Out::kSampled || out == Out::kSampledMasked) {
      k_.TopK(r, local, top_, top_part_, c_.n_vocab, n_out, o_.top_k);
      const bool edited = out == Out::kSampledMasked;
      k_.SampleFeed(r, top_, chain_draw_, feed, chain_top_, o_.top_k, c_.n_vocab, n_out, kDrawWords,
                    edited ? chain_known_ : chain_top_, edited ? chain_known_cap_ : 0);
    }
    if (out == Out::kChain || out == Out::kChainMasked) {
      k_.ArgMax(r, local, argmax_, argmax_part_, c_.n_vocab, n_out, Kernels::kArgMaxChunk, &feed);
    }
    // Both only set tokens of their rows to -inf (a row has a grammar mask or known tokens,
    // never both: Batch::allowed), so they share the barrier before the top-k.
    const bool both = allowed && out == Out::kTopMasked;
    if (both) begin();
    if (allowed) k_.AllowRows(r, local, allow_, c_.n_vocab, n_out);
    if (out == Out::kTopMasked) {
      k_.MaskRows(r, local, known_, known_raw_, c_.n_vocab, n_out, o_.max_known);
    }
    if (both) end();
    if (out == Out::kTop || out == Out::kTopMasked) {
      begin();  // both read the rows and write their own buffers
      k_.TopKChunks(r, local, top_, top_part_, c_.n_vocab, n_out, o_.top_k);
      k_.CopyRows(r, local, logits_dev_, full_, c_.n_vocab, n_out);
      end();
      k_.TopKMerge(r, local, top_, top_part_, c_.n_vocab, n_out, o_.top_k);
    }
  }
  xq_holds_ = nullptr;
  return r->Finish();
}

StatusOr<Recorder*> VulkanForward::RecordingFor(int64_t n, int64_t n_out, Out out, bool allowed,
                                                StepWay way) {
  const auto key = std::make_tuple(n, n_out, out, allowed, way);
  auto it = recordings_.find(key);
  if (it != recordings_.end()) return it->second.get();
  if (recordings_.size() >= kMaxRecordings) {
    recordings_.clear();  // every run has finished
    last_ = nullptr;      // (it was one of them)
  }
  auto r = std::make_unique<Recorder>(ctx_.get(), o_.profile);
  UF_RETURN_IF_ERROR(Record(r.get(), n, n_out, out, allowed, way));
  Recorder* p = r.get();
  recordings_.emplace(key, std::move(r));
  return p;
}

StatusOr<Recorder*> VulkanForward::ChainRecording(StepWay way, int slot, bool masked, bool sampled,
                                                  int64_t rows) {
  const auto key = std::make_tuple(way, slot, masked, sampled, rows);
  auto it = chain_recordings_.find(key);
  if (it != chain_recordings_.end()) return it->second.get();
  auto r = std::make_unique<Recorder>(ctx_.get(), o_.profile);
  const Out out = sampled ? (masked ? Out::kSampledMasked : Out::kSampled)
                          : (masked ? Out::kChainMasked : Out::kChain);
  // A sampled step's row stays in its slot's buffer while the next step runs, for a draw that
  // needs the whole row (ChainDecide).
  UF_RETURN_IF_ERROR(Record(r.get(), rows, rows, out, false, way,
                            sampled ? &chain_logits_[slot] : nullptr,
                            ChainRedoes(sampled, rows) ? &chain_redo_[slot] : nullptr));
  Recorder* p = r.get();
  chain_recordings_.emplace(key, std::move(r));
  return p;
}

}  // namespace uf::gpu
