// The step of VulkanForward as one recording per batch shape: the layers' dispatches (attention,
// dense or mixture-of-experts FFN), the lm_head and what the step leaves behind (Out).
#include <cmath>
#include <memory>
#include <tuple>

#include "gpu/vk_forward.h"

namespace uf::gpu {

// Recordings kept at once; past this the oldest shapes are recorded again when they come back.
constexpr size_t kMaxRecordings = 64;

// Quantizes n rows of x into xq_ (Q8_0 or Q8_K, as w takes them) unless it holds them already.
// False when w takes f32 activations.
bool VulkanForward::QuantizeFor(Recorder* r, const GpuMatrix& w, const Buffer& x, int64_t n) {
  const bool k = TakesQ8KActivation(w.type);
  if (!k && !TakesQ8Activation(w.type)) return false;
  if (xq_holds_ != &x || xq_k_ != k) {
    if (k) {
      k_.QuantizeK(r, x, 0, n * w.cols, xq_);
    } else {
      k_.Quantize(r, x, 0, n * w.cols, xq_);
    }
    xq_holds_ = &x;
    xq_k_ = k;
  }
  return true;
}

void VulkanForward::Gemm(Recorder* r, const GpuMatrix& w, const Buffer& x, int64_t n,
                         const Buffer& y) {
  k_.Gemm(r, w, QuantizeFor(r, w, x, n) ? xq_ : x, n, y);
}

void VulkanForward::GemmExperts(Recorder* r, const GpuMatrix& w, const Buffer& x, int64_t n_x,
                                int64_t n_slots, int64_t x_div, const Buffer& y) {
  const Buffer* in = QuantizeFor(r, w, x, n_x) ? &xq_ : &x;
  // One token: its k slots have k different experts, nothing to group.
  if (n_slots > c_.n_expert_used) {
    k_.GemmExpertsGrouped(r, w, *in, moe_tiles_, moe_order_, n_slots, x_div, y);
  } else {
    k_.GemmExperts(r, w, *in, moe_ids_, n_slots, x_div, y);
  }
}

// Every step per token or per slot, so a token's row does not depend on its batch. A batch of
// several tokens groups its slots by expert (GroupSlots) and the expert GEMMs read each
// selected expert's rows once per tile of up to 8 slots that chose it; a slot's result is the
// same bits either way (gemm.glsl).
void VulkanForward::RecordMoe(Recorder* r, const LayerBuffers& l, int64_t n) {
  const int64_t k = c_.n_expert_used;
  Gemm(r, l.router, xn_, n, moe_logits_);
  Kernels::RouteParams rp;
  rp.n_expert = c_.n_expert;
  rp.k = k;
  rp.softmax_all = c_.expert_gating == model::ExpertGating::kSoftmax;
  rp.norm = c_.expert_weights_norm;
  rp.scale = c_.expert_weights_scale;
  k_.Route(r, moe_logits_, l.router_b.valid() ? &l.router_b : nullptr, moe_ids_, moe_weights_, n,
           rp);
  if (n * k > k) k_.GroupSlots(r, moe_ids_, moe_order_, moe_tiles_, n * k, c_.n_expert);
  GemmExperts(r, l.exp_gate, xn_, n, n * k, k, moe_gate_);
  GemmExperts(r, l.exp_up, xn_, n, n * k, k, moe_up_);
  if (l.exp_gate_b.valid()) {
    k_.SwiGluOai(r, moe_gate_, moe_up_, l.exp_gate_b, l.exp_up_b, moe_ids_, n * k, c_.n_ff_exp);
  } else {
    k_.SwiGlu(r, moe_gate_, moe_up_, moe_gate_, n * k * c_.n_ff_exp);
  }
  xq_holds_ = nullptr;  // xq_ is the down product's activation from here
  GemmExperts(r, l.exp_down, moe_gate_, n * k, n * k, 1, moe_out_);
  const bool down_b = l.exp_down_b.valid();
  k_.MoeSum(r, moe_out_, moe_weights_, y_, n, k, c_.n_embd, down_b ? &l.exp_down_b : nullptr,
            down_b ? &moe_ids_ : nullptr);
}

Status VulkanForward::Record(Recorder* r, int64_t n, int64_t n_out, Out out) {
  const int64_t e = c_.n_embd, hd = c_.head_dim;
  const bool neox = c_.rope_type == model::RopeType::kNeox;
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
  k_.Embed(r, *embd_table_, x_, tok_, n);
  for (int64_t il = 0; il < c_.n_layer; ++il) {
    const LayerBuffers& l = layers_[il];
    k_.RmsNorm(r, x_, 0, l.attn_norm, xn_, 0, n, e, c_.rms_eps);
    xq_holds_ = nullptr;  // xn_ was rewritten
    Gemm(r, l.wq, xn_, n, q_);
    Gemm(r, l.wk, xn_, n, kbuf_);
    Gemm(r, l.wv, xn_, n, vbuf_);
    if (l.bq.valid()) {
      k_.Add(r, l.bq, 0, q_, 0, n * c_.q_dim(), c_.q_dim());
      k_.Add(r, l.bk, 0, kbuf_, 0, n * c_.kv_dim(), c_.kv_dim());
      k_.Add(r, l.bv, 0, vbuf_, 0, n * c_.kv_dim(), c_.kv_dim());
    }
    if (l.q_norm.valid()) {
      k_.RmsNorm(r, q_, 0, l.q_norm, q_, 0, n * c_.n_head, hd, c_.rms_eps);
      k_.RmsNorm(r, kbuf_, 0, l.k_norm, kbuf_, 0, n * c_.n_head_kv, hd, c_.rms_eps);
    }
    k_.Rope(r, q_, cs_, tok_, n, c_.n_head, hd, c_.rope_dim, neox);
    k_.Rope(r, kbuf_, cs_, tok_, n, c_.n_head_kv, hd, c_.rope_dim, neox);
    as.k_off = static_cast<uint32_t>(il * layer_words);
    as.v_off = static_cast<uint32_t>(il * layer_words + layer_words / 2);
    as.window = c_.IsSwaLayer(il) ? c_.n_swa : 0;
    k_.KvStore(r, kbuf_, vbuf_, cache_dev_, tok_, n, as);
    k_.Attention(r, q_, cache_dev_, scores_, attn_, tok_, bt_, n, as, chunk_ > 0 ? &part_ : nullptr,
                 l.sinks.valid() ? &l.sinks : nullptr);
    Gemm(r, l.wo, attn_, n, y_);
    if (l.bo.valid()) k_.Add(r, l.bo, 0, y_, 0, n * e, e);
    k_.Add(r, y_, 0, x_, 0, n * e);
    k_.RmsNorm(r, x_, 0, l.ffn_norm, xn_, 0, n, e, c_.rms_eps);
    xq_holds_ = nullptr;
    if (l.exp_gate.buffer.valid()) {
      RecordMoe(r, l, n);
    } else {
      Gemm(r, l.gate, xn_, n, gate_);
      Gemm(r, l.up, xn_, n, up_);
      k_.SwiGlu(r, gate_, up_, gate_, n * c_.n_ff);
      xq_holds_ = nullptr;  // gate_ was rewritten
      Gemm(r, l.down, gate_, n, y_);
    }
    k_.Add(r, y_, 0, x_, 0, n * e);
  }
  if (n_out > 0) {
    k_.Gather(r, x_, xo_, outs_, e, n_out);
    k_.RmsNorm(r, xo_, 0, output_norm_, xo_, 0, n_out, e, c_.rms_eps);
    xq_holds_ = nullptr;
    Gemm(r, output_, xo_, n_out, out == Out::kLogits ? logits_dev_ : logits_local_);
    if (out == Out::kGreedy) k_.ArgMax(r, logits_local_, argmax_, c_.n_vocab, n_out);
    if (out == Out::kTopMasked) {
      k_.MaskRows(r, logits_local_, known_, known_raw_, c_.n_vocab, n_out, o_.max_known);
    }
    if (out == Out::kTop || out == Out::kTopMasked) {
      k_.TopK(r, logits_local_, top_, c_.n_vocab, n_out, o_.top_k);
      k_.CopyRows(r, logits_local_, logits_dev_, full_, c_.n_vocab, n_out);
    }
  }
  xq_holds_ = nullptr;
  return r->Finish();
}

StatusOr<Recorder*> VulkanForward::RecordingFor(int64_t n, int64_t n_out, Out out) {
  const auto key = std::make_tuple(n, n_out, out);
  auto it = recordings_.find(key);
  if (it != recordings_.end()) return it->second.get();
  if (recordings_.size() >= kMaxRecordings) recordings_.clear();  // every run has finished
  auto r = std::make_unique<Recorder>(ctx_.get());
  UF_RETURN_IF_ERROR(Record(r.get(), n, n_out, out));
  Recorder* p = r.get();
  recordings_.emplace(key, std::move(r));
  return p;
}

}  // namespace uf::gpu
