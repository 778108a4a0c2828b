// GpuDecoder on Vulkan: the llama / qwen2 / qwen3 forward for one token per step, recorded once
// into one command buffer (about 14 dispatches per layer) and replayed for every token.
#include <cmath>
#include <cstring>

#include "gpu/backend.h"
#include "gpu/vk_context.h"
#include "gpu/vk_kernels.h"
#include "kernels/ops.h"

namespace uf::gpu {
namespace {

struct LayerBuffers {
  Buffer attn_norm, ffn_norm, bq, bk, bv, q_norm, k_norm;
  GpuMatrix wq, wk, wv, wo, gate, up, down;
};

bool Quantized(const GpuMatrix& m) {
  return m.type == GgmlType::kQ8_0 || m.type == GgmlType::kQ4_0;
}

class VulkanDecoder final : public GpuDecoder {
 public:
  VulkanDecoder(const model::Model& model, int64_t max_ctx)
      : model_(model), c_(model.config()), max_ctx_(max_ctx) {}

  Status Init(const DeviceSpec& device);
  Status Step(int32_t token, int32_t pos) override;
  const float* logits() const override { return logits_.data(); }
  double last_step_gpu_seconds() const override { return rec_->last_gpu_seconds(); }
  int64_t max_ctx() const override { return max_ctx_; }
  int64_t n_vocab() const override { return c_.n_vocab; }
  const DeviceInfo& device() const override { return ctx_->info(); }
  uint64_t device_bytes() const override { return ctx_->allocated_bytes(); }

 private:
  StatusOr<Buffer> Vector(const std::vector<float>& v);
  StatusOr<GpuMatrix> Matrix(const kernels::Matrix& w, const std::string& name);
  Status Record();
  // y = W x, quantizing x into xq_ first when W is quantized and xq_ does not hold x yet.
  void Gemv(const GpuMatrix& w, const Buffer& x, int64_t cols, const Buffer& y);

  const model::Model& model_;
  const model::ModelConfig& c_;
  int64_t max_ctx_;
  std::unique_ptr<Context> ctx_;
  Kernels k_;
  std::vector<LayerBuffers> layers_;
  Buffer output_norm_;
  GpuMatrix output_, embd_;
  const GpuMatrix* embd_table_ = nullptr;  // output_ when tied, else embd_
  Buffer step_, cs_, x_, xn_, xq_, q_, kbuf_, vbuf_, attn_, y_, gate_, up_, scores_, cache_;
  Buffer logits_dev_;
  std::unique_ptr<Recorder> rec_;
  const Buffer* xq_holds_ = nullptr;  // while recording: the buffer xq_ is the quantization of
  std::vector<float> logits_;
  int32_t next_pos_ = 0;
};

StatusOr<Buffer> VulkanDecoder::Vector(const std::vector<float>& v) {
  UF_ASSIGN_OR_RETURN(Buffer b, ctx_->CreateBuffer(v.size() * 4, Memory::kDevice));
  UF_RETURN_IF_ERROR(ctx_->Upload(b, 0, v.data(), v.size() * 4));
  return b;
}

StatusOr<GpuMatrix> VulkanDecoder::Matrix(const kernels::Matrix& w, const std::string& name) {
  auto m = UploadMatrix(ctx_.get(), w);
  if (!m.ok()) return Status(m.status().code(), name + ": " + m.status().message());
  return std::move(*m);
}

Status VulkanDecoder::Init(const DeviceSpec& device) {
  if (max_ctx_ <= 0) return InvalidArgumentError("GpuDecoder: max_ctx must be positive");
  if (c_.is_moe()) {
    return UnimplementedError("the Vulkan backend does not run mixture-of-experts models yet");
  }
  if (c_.head_dim % 2 != 0 || c_.n_embd % 32 != 0) {
    return UnimplementedError(
        "the Vulkan backend needs an even head dim and n_embd a multiple "
        "of 32");
  }
  UF_ASSIGN_OR_RETURN(ctx_, Context::Create(device.index));
  UF_ASSIGN_OR_RETURN(k_, Kernels::Create(ctx_.get()));
  const model::ModelWeights& w = model_.weights();
  for (int64_t il = 0; il < c_.n_layer; ++il) {
    const model::LayerWeights& l = w.layers[il];
    const std::string p = "blk." + std::to_string(il) + ".";
    LayerBuffers b;
    UF_ASSIGN_OR_RETURN(b.attn_norm, Vector(l.attn_norm));
    UF_ASSIGN_OR_RETURN(b.ffn_norm, Vector(l.ffn_norm));
    if (!l.bq.empty()) {
      UF_ASSIGN_OR_RETURN(b.bq, Vector(l.bq));
      UF_ASSIGN_OR_RETURN(b.bk, Vector(l.bk));
      UF_ASSIGN_OR_RETURN(b.bv, Vector(l.bv));
    }
    if (!l.q_norm.empty()) {
      UF_ASSIGN_OR_RETURN(b.q_norm, Vector(l.q_norm));
      UF_ASSIGN_OR_RETURN(b.k_norm, Vector(l.k_norm));
    }
    UF_ASSIGN_OR_RETURN(b.wq, Matrix(l.wq, p + "attn_q.weight"));
    UF_ASSIGN_OR_RETURN(b.wk, Matrix(l.wk, p + "attn_k.weight"));
    UF_ASSIGN_OR_RETURN(b.wv, Matrix(l.wv, p + "attn_v.weight"));
    UF_ASSIGN_OR_RETURN(b.wo, Matrix(l.wo, p + "attn_output.weight"));
    UF_ASSIGN_OR_RETURN(b.gate, Matrix(l.gate, p + "ffn_gate.weight"));
    UF_ASSIGN_OR_RETURN(b.up, Matrix(l.up, p + "ffn_up.weight"));
    UF_ASSIGN_OR_RETURN(b.down, Matrix(l.down, p + "ffn_down.weight"));
    layers_.push_back(std::move(b));
  }
  UF_ASSIGN_OR_RETURN(output_norm_, Vector(w.output_norm));
  UF_ASSIGN_OR_RETURN(output_,
                      Matrix(w.output, c_.tied_output ? "token_embd.weight" : "output.weight"));
  if (c_.tied_output) {
    embd_table_ = &output_;
  } else {
    // The embedding table as a matrix of n_vocab rows, in the layout the embed kernel reads.
    const gguf::TensorInfo* t = w.token_embd;
    auto m = kernels::Matrix::Create(t->type, t->data, c_.n_vocab, c_.n_embd);
    if (!m.ok()) return m.status();
    UF_ASSIGN_OR_RETURN(embd_, Matrix(*m, "token_embd.weight"));
    embd_table_ = &embd_;
  }

  // RoPE angles of every position, from the CPU path's own function (bit-identical angles).
  kernels::RopeParams rp;
  rp.rope_dim = c_.rope_dim;
  rp.freq_base = c_.rope_freq_base;
  rp.freq_scale = c_.rope_freq_scale;
  rp.neox = c_.rope_type == model::RopeType::kNeox;
  rp.freq_factors = w.rope_freq_factors.empty() ? nullptr : w.rope_freq_factors.data();
  rp.ext_factor = c_.rope_ext_factor;
  rp.yarn_low = c_.rope_yarn_low;
  rp.yarn_high = c_.rope_yarn_high;
  rp.mscale = c_.rope_mscale;
  std::vector<float> cs(max_ctx_ * c_.rope_dim);
  for (int64_t pos = 0; pos < max_ctx_; ++pos) {
    kernels::RopeAngles(rp, static_cast<int32_t>(pos), cs.data() + pos * c_.rope_dim);
  }
  UF_ASSIGN_OR_RETURN(cs_, Vector(cs));

  const uint64_t hp = c_.head_dim / 2;
  const uint64_t cache_words = c_.n_layer * 2 * c_.n_head_kv * max_ctx_ * hp;
  if (cache_words >= (uint64_t{1} << 32)) {
    return UnimplementedError(
        "the Vulkan backend's K/V cache is limited to 2^32 words; lower "
        "the context");
  }
  const int64_t widest = std::max({c_.n_embd, c_.q_dim(), c_.n_ff});
  UF_ASSIGN_OR_RETURN(step_, ctx_->CreateBuffer(16, Memory::kHost));
  UF_ASSIGN_OR_RETURN(x_, ctx_->CreateBuffer(c_.n_embd * 4, Memory::kDevice));
  UF_ASSIGN_OR_RETURN(xn_, ctx_->CreateBuffer(c_.n_embd * 4, Memory::kDevice));
  UF_ASSIGN_OR_RETURN(xq_, ctx_->CreateBuffer(Q8ActivationBytes(widest + 31), Memory::kDevice));
  UF_ASSIGN_OR_RETURN(q_, ctx_->CreateBuffer(c_.q_dim() * 4, Memory::kDevice));
  UF_ASSIGN_OR_RETURN(kbuf_, ctx_->CreateBuffer(c_.kv_dim() * 4, Memory::kDevice));
  UF_ASSIGN_OR_RETURN(vbuf_, ctx_->CreateBuffer(c_.kv_dim() * 4, Memory::kDevice));
  UF_ASSIGN_OR_RETURN(attn_, ctx_->CreateBuffer(c_.q_dim() * 4, Memory::kDevice));
  UF_ASSIGN_OR_RETURN(y_, ctx_->CreateBuffer(c_.n_embd * 4, Memory::kDevice));
  UF_ASSIGN_OR_RETURN(gate_, ctx_->CreateBuffer(c_.n_ff * 4, Memory::kDevice));
  UF_ASSIGN_OR_RETURN(up_, ctx_->CreateBuffer(c_.n_ff * 4, Memory::kDevice));
  UF_ASSIGN_OR_RETURN(scores_, ctx_->CreateBuffer(c_.n_head * max_ctx_ * 4, Memory::kDevice));
  UF_ASSIGN_OR_RETURN(cache_, ctx_->CreateBuffer(cache_words * 4, Memory::kDevice));
  UF_ASSIGN_OR_RETURN(logits_dev_, ctx_->CreateBuffer(c_.n_vocab * 4, Memory::kHost));
  logits_.resize(c_.n_vocab);
  return Record();
}

void VulkanDecoder::Gemv(const GpuMatrix& w, const Buffer& x, int64_t cols, const Buffer& y) {
  if (!Quantized(w)) {
    k_.Gemv(rec_.get(), w, x, 0, y, 0);
    return;
  }
  if (xq_holds_ != &x) {
    k_.Quantize(rec_.get(), x, 0, cols, xq_);
    xq_holds_ = &x;
  }
  k_.Gemv(rec_.get(), w, xq_, 0, y, 0);
}

Status VulkanDecoder::Record() {
  rec_ = std::make_unique<Recorder>(ctx_.get());
  Recorder* r = rec_.get();
  const int64_t e = c_.n_embd, hd = c_.head_dim;
  const uint64_t hp = hd / 2, layer_words = 2 * c_.n_head_kv * max_ctx_ * hp;
  const bool neox = c_.rope_type == model::RopeType::kNeox;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  k_.Embed(r, *embd_table_, x_, step_);
  for (int64_t il = 0; il < c_.n_layer; ++il) {
    const LayerBuffers& l = layers_[il];
    k_.RmsNorm(r, x_, 0, l.attn_norm, xn_, 0, 1, e, c_.rms_eps);
    xq_holds_ = nullptr;  // xn_ was rewritten
    Gemv(l.wq, xn_, e, q_);
    Gemv(l.wk, xn_, e, kbuf_);
    Gemv(l.wv, xn_, e, vbuf_);
    if (l.bq.valid()) {
      k_.Add(r, l.bq, 0, q_, 0, c_.q_dim());
      k_.Add(r, l.bk, 0, kbuf_, 0, c_.kv_dim());
      k_.Add(r, l.bv, 0, vbuf_, 0, c_.kv_dim());
    }
    if (l.q_norm.valid()) {
      k_.RmsNorm(r, q_, 0, l.q_norm, q_, 0, c_.n_head, hd, c_.rms_eps);
      k_.RmsNorm(r, kbuf_, 0, l.k_norm, kbuf_, 0, c_.n_head_kv, hd, c_.rms_eps);
    }
    k_.Rope(r, q_, 0, cs_, step_, c_.n_head, hd, c_.rope_dim, neox);
    k_.Rope(r, kbuf_, 0, cs_, step_, c_.n_head_kv, hd, c_.rope_dim, neox);
    const auto k_off = static_cast<uint32_t>(il * layer_words);
    const auto v_off = static_cast<uint32_t>(il * layer_words + layer_words / 2);
    k_.KvStore(r, kbuf_, vbuf_, cache_, step_, c_.n_head_kv, hd, max_ctx_, k_off, v_off);
    k_.Attention(r, q_, cache_, scores_, attn_, step_, c_.n_head, c_.n_head_kv, hd, max_ctx_, k_off,
                 v_off, scale);
    Gemv(l.wo, attn_, c_.q_dim(), y_);
    k_.Add(r, y_, 0, x_, 0, e);
    k_.RmsNorm(r, x_, 0, l.ffn_norm, xn_, 0, 1, e, c_.rms_eps);
    xq_holds_ = nullptr;
    Gemv(l.gate, xn_, e, gate_);
    Gemv(l.up, xn_, e, up_);
    k_.SwiGlu(r, gate_, up_, gate_, c_.n_ff);
    xq_holds_ = nullptr;  // gate_ was rewritten
    Gemv(l.down, gate_, c_.n_ff, y_);
    k_.Add(r, y_, 0, x_, 0, e);
  }
  k_.RmsNorm(r, x_, 0, output_norm_, xn_, 0, 1, e, c_.rms_eps);
  xq_holds_ = nullptr;
  Gemv(output_, xn_, e, logits_dev_);
  xq_holds_ = nullptr;
  return r->Finish();
}

Status VulkanDecoder::Step(int32_t token, int32_t pos) {
  if (token < 0 || token >= c_.n_vocab) {
    return InvalidArgumentError("gpu forward: token id " + std::to_string(token) +
                                " is outside the vocabulary");
  }
  if (pos < 0 || pos >= max_ctx_ || pos > next_pos_) {
    return InvalidArgumentError("gpu forward: position " + std::to_string(pos) + " is not in [0, " +
                                std::to_string(std::min<int64_t>(next_pos_, max_ctx_ - 1)) + "]");
  }
  auto* step = static_cast<uint32_t*>(step_.mapped());
  step[0] = static_cast<uint32_t>(token);
  step[1] = static_cast<uint32_t>(pos);
  UF_RETURN_IF_ERROR(rec_->Run());
  std::memcpy(logits_.data(), logits_dev_.mapped(), logits_.size() * 4);
  next_pos_ = pos + 1;
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<GpuDecoder>> GpuDecoder::Create(const model::Model& model,
                                                         const DeviceSpec& device,
                                                         int64_t max_ctx) {
  auto d = std::make_unique<VulkanDecoder>(model, max_ctx);
  UF_RETURN_IF_ERROR(d->Init(device));
  return std::unique_ptr<GpuDecoder>(std::move(d));
}

}  // namespace uf::gpu
