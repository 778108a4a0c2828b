// GpuForward and GpuDecoder on Vulkan: the llama / qwen2 / qwen3 / qwen3moe / Mixtral / gpt-oss
// forward for a batch of tokens. Here the buffers, the weight upload and each step's host work
// (batch checks, the per-token inputs, reading back); the step itself is recorded once per batch
// shape and replayed (vk_record.cc).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "base/clock.h"
#include "base/log.h"
#include "gpu/backend.h"
#include "gpu/vk_forward.h"
#include "kernels/ops.h"

namespace uf::gpu {

StatusOr<Buffer> VulkanForward::Vector(const std::vector<float>& v) {
  UF_ASSIGN_OR_RETURN(Buffer b, ctx_->CreateBuffer(v.size() * 4, Memory::kDevice));
  UF_RETURN_IF_ERROR(ctx_->Upload(b, 0, v.data(), v.size() * 4));
  return b;
}

StatusOr<GpuMatrix> VulkanForward::Matrix(const kernels::Matrix& w, const std::string& name) {
  auto m = UploadMatrix(ctx_.get(), w);
  if (!m.ok()) return Status(m.status().code(), name + ": " + m.status().message());
  return std::move(*m);
}

StatusOr<GpuMatrix> VulkanForward::Experts(const std::vector<kernels::Matrix>& w,
                                           const std::string& name) {
  auto m = UploadExperts(ctx_.get(), w);
  if (!m.ok()) return Status(m.status().code(), name + ": " + m.status().message());
  return std::move(*m);
}

Status VulkanForward::Init(const DeviceSpec& device) {
  const engine::KvCacheOptions& co = cache_->options();
  if (co.n_layer != c_.n_layer || co.n_head_kv != c_.n_head_kv || co.head_dim != c_.head_dim) {
    return InvalidArgumentError("gpu forward: kv cache shape does not match the model");
  }
  if (co.type != engine::KvType::kF16 && co.type != engine::KvType::kQ8_0) {
    return UnimplementedError("the Vulkan backend keeps K/V in f16 or q8_0 (--kv-type)");
  }
  q8_cache_ = co.type == engine::KvType::kQ8_0;  // KvCache checked head_dim % 32 == 0
  if (o_.max_batch <= 0 || o_.max_batch > 65535) {
    return InvalidArgumentError("gpu forward: max_batch must be in [1, 65535]");
  }
  if (o_.max_outputs <= 0 || o_.max_outputs > o_.max_batch) o_.max_outputs = o_.max_batch;
  if (o_.max_known < 0) return InvalidArgumentError("gpu forward: max_known < 0");
  if (o_.top_k < 0 || o_.top_k > Kernels::kMaxTopK) {
    return InvalidArgumentError("gpu forward: top_k must be in [0, 64]");
  }
  if (c_.head_dim % 2 != 0 || c_.n_embd % 32 != 0) {
    return UnimplementedError(
        "the Vulkan backend needs an even head dim and n_embd a multiple of 32");
  }
  max_len_ = cache_->max_seq_len();
  max_blocks_ = (max_len_ + co.block_size - 1) / co.block_size;
  n_rows_ = co.n_blocks * co.block_size;
  UF_ASSIGN_OR_RETURN(ctx_, Context::Create(device.index));
  UF_ASSIGN_OR_RETURN(k_, Kernels::Create(ctx_.get(), o_.gemv));
  // UF_GPU_FUSE=0: the unfused step, for A/B runs on a device (bench, tools/gpu_check.sh).
  if (const char* f = std::getenv("UF_GPU_FUSE"); f != nullptr && std::string(f) == "0") {
    o_.fuse = false;
  }
  if (const char* t = std::getenv("UF_GPU_MOE_TAILS"); t != nullptr && std::string(t) == "0") {
    o_.moe_tails = false;
  }
  o_.norm_tail = ResolveNormTail(o_.norm_tail);
  o_.matmul = ResolveMatMul(o_.matmul);
  o_.attention_tiles = ResolveAttentionTiles(o_.attention_tiles);
  if (o_.matmul != MatMul::kOff) {
    UF_RETURN_IF_ERROR(k_.AddMatMul(ctx_.get(), o_.matmul));
    o_.matmul = k_.matmul();  // kTiled where the matrix units are missing
  }
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
    const auto optional = [&](const std::vector<float>& v, Buffer* out) -> Status {
      if (v.empty()) return OkStatus();
      UF_ASSIGN_OR_RETURN(*out, Vector(v));
      return OkStatus();
    };
    UF_RETURN_IF_ERROR(optional(l.bo, &b.bo));
    UF_RETURN_IF_ERROR(optional(l.attn_sinks, &b.sinks));
    UF_RETURN_IF_ERROR(optional(l.router_b, &b.router_b));
    UF_RETURN_IF_ERROR(optional(l.exp_gate_b, &b.exp_gate_b));
    UF_RETURN_IF_ERROR(optional(l.exp_up_b, &b.exp_up_b));
    UF_RETURN_IF_ERROR(optional(l.exp_down_b, &b.exp_down_b));
    if (!l.q_norm.empty()) {
      UF_ASSIGN_OR_RETURN(b.q_norm, Vector(l.q_norm));
      UF_ASSIGN_OR_RETURN(b.k_norm, Vector(l.k_norm));
    }
    UF_ASSIGN_OR_RETURN(b.wq, Matrix(l.wq, p + "attn_q.weight"));
    UF_ASSIGN_OR_RETURN(b.wk, Matrix(l.wk, p + "attn_k.weight"));
    UF_ASSIGN_OR_RETURN(b.wv, Matrix(l.wv, p + "attn_v.weight"));
    UF_ASSIGN_OR_RETURN(b.wo, Matrix(l.wo, p + "attn_output.weight"));
    if (!l.exp_gate.empty()) {
      UF_ASSIGN_OR_RETURN(b.router, Matrix(l.router, p + "ffn_gate_inp.weight"));
      UF_ASSIGN_OR_RETURN(b.exp_gate, Experts(l.exp_gate, p + "ffn_gate_exps.weight"));
      UF_ASSIGN_OR_RETURN(b.exp_up, Experts(l.exp_up, p + "ffn_up_exps.weight"));
      UF_ASSIGN_OR_RETURN(b.exp_down, Experts(l.exp_down, p + "ffn_down_exps.weight"));
    } else {
      UF_ASSIGN_OR_RETURN(b.gate, Matrix(l.gate, p + "ffn_gate.weight"));
      UF_ASSIGN_OR_RETURN(b.up, Matrix(l.up, p + "ffn_up.weight"));
      UF_ASSIGN_OR_RETURN(b.down, Matrix(l.down, p + "ffn_down.weight"));
    }
    layers_.push_back(std::move(b));
  }
  // The stage-replacing kernels for the types that take them: Q, K, V (the RoPE / store
  // epilogue, F16's one-dispatch Q/K/V), gate (F16's gate/up with SwiGLU) and, with the norm
  // tail, o and down.
  if (o_.fuse) {
    for (const LayerBuffers& b : layers_) {
      for (const GpuMatrix* m : {&b.wq, &b.wk, &b.wv, &b.gate}) {
        if (m->buffer.valid()) UF_RETURN_IF_ERROR(k_.AddStages(ctx_.get(), m->type));
      }
      if (o_.norm_tail != NormTail::kOff) {
        for (const GpuMatrix* m : {&b.wo, &b.down}) {
          if (!m->buffer.valid()) continue;
          UF_RETURN_IF_ERROR(k_.AddStages(ctx_.get(), m->type));
          tail_stages_ = tail_stages_ || k_.HasStages(m->type);
        }
      }
      if (b.q_norm.valid() && b.k_norm.valid()) UF_RETURN_IF_ERROR(k_.AddQkNormRope(ctx_.get()));
      // A mixture of experts' tails: the route in the router GEMM, the weighted sum (and the
      // next norm) in the down experts' GEMM.
      if (b.router.buffer.valid() && o_.moe_tails) {
        UF_RETURN_IF_ERROR(k_.AddMoeTails(ctx_.get(), b.router.type, b.exp_down.type));
        tail_stages_ = tail_stages_ || o_.norm_tail != NormTail::kOff;
      }
    }
  }
  UF_ASSIGN_OR_RETURN(output_norm_, Vector(w.output_norm));
  UF_ASSIGN_OR_RETURN(output_,
                      Matrix(w.output, c_.tied_output ? "token_embd.weight" : "output.weight"));
  if (k_.gemv() == GemvVariant::kTune) {
    gemv_tunable_ = Kernels::TunesGemv(output_.type);
    for (const LayerBuffers& b : layers_) {
      for (const GpuMatrix* m : {&b.wq, &b.wk, &b.wv, &b.wo, &b.gate, &b.up, &b.down, &b.router}) {
        gemv_tunable_ = gemv_tunable_ || (m->buffer.valid() && Kernels::TunesGemv(m->type));
      }
    }
  }
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
  std::vector<float> cs(max_len_ * c_.rope_dim);
  for (int64_t pos = 0; pos < max_len_; ++pos) {
    kernels::RopeAngles(rp, static_cast<int32_t>(pos), cs.data() + pos * c_.rope_dim);
  }
  UF_ASSIGN_OR_RETURN(cs_, Vector(cs));

  const uint64_t row_words = q8_cache_ ? c_.head_dim / 32 * 9 : c_.head_dim / 2;
  const uint64_t layer_words = 2 * c_.n_head_kv * n_rows_ * row_words;
  if (layer_words * 4 > ctx_->info().max_binding_bytes && ctx_->info().binding_limit_enforced) {
    return ResourceExhaustedError(
        "the K/V cache of one layer (" + std::to_string(layer_words * 4) + " bytes for " +
        std::to_string(n_rows_) + " positions) is larger than the largest buffer " +
        ctx_->info().name + " can bind (" + std::to_string(ctx_->info().max_binding_bytes) +
        " bytes)");  // GpuForward::Create adds what a user can shrink
  }
  const int64_t mb = o_.max_batch, mo = o_.max_outputs;
  const int64_t widest = std::max({c_.n_embd, c_.q_dim(), c_.n_ff});
  const int64_t n_ff = std::max<int64_t>(c_.n_ff, 1);  // a MoE model may have no dense FFN
  const int64_t slots = c_.is_moe() ? mb * c_.n_expert_used : 0;
  if (slots > 65535 || Kernels::MaxExpertTiles(slots, c_.n_expert) > 65535) {
    return InvalidArgumentError("gpu forward: max_batch x experts used must be at most 65535");
  }
  if (c_.n_expert > Kernels::kMaxExperts) {
    return UnimplementedError("the Vulkan backend runs at most 512 experts a layer");
  }
  if (c_.is_moe() && c_.n_expert_used > Kernels::kMaxExpertsUsed) {
    return UnimplementedError("the Vulkan backend routes a token to at most 64 experts");
  }
  const auto dev = [&](uint64_t bytes) { return ctx_->CreateBuffer(bytes, Memory::kDevice); };
  UF_ASSIGN_OR_RETURN(tok_, ctx_->CreateBuffer(mb * 16, Memory::kHost));
  UF_ASSIGN_OR_RETURN(bt_, ctx_->CreateBuffer(co.max_seqs * max_blocks_ * 4, Memory::kHost));
  UF_ASSIGN_OR_RETURN(outs_, ctx_->CreateBuffer(mo * 4, Memory::kHost));
  UF_ASSIGN_OR_RETURN(x_, dev(mb * c_.n_embd * 4));
  UF_ASSIGN_OR_RETURN(xn_, dev(mb * c_.n_embd * 4));
  UF_ASSIGN_OR_RETURN(
      xq_, dev(std::max({Q8ActivationBytes(std::max(mb * (widest + 31), slots * c_.n_ff_exp + 31)),
                         Q8KActivationBytes(std::max(mb * widest, slots * c_.n_ff_exp)),
                         PairActivationBytes(std::max(mb * widest, slots * c_.n_ff_exp))})));
  UF_ASSIGN_OR_RETURN(q_, dev(mb * c_.q_dim() * 4));
  UF_ASSIGN_OR_RETURN(kbuf_, dev(mb * c_.kv_dim() * 4));
  UF_ASSIGN_OR_RETURN(vbuf_, dev(mb * c_.kv_dim() * 4));
  UF_ASSIGN_OR_RETURN(attn_, dev(mb * c_.q_dim() * 4));
  UF_ASSIGN_OR_RETURN(y_, dev(mb * c_.n_embd * 4));
  UF_ASSIGN_OR_RETURN(gate_, dev(mb * n_ff * 4));
  UF_ASSIGN_OR_RETURN(up_, dev(mb * n_ff * 4));
  if (c_.is_moe()) {
    UF_ASSIGN_OR_RETURN(moe_logits_, dev(mb * c_.n_expert * 4));
    UF_ASSIGN_OR_RETURN(moe_ids_, dev(slots * 4));
    UF_ASSIGN_OR_RETURN(moe_weights_, dev(slots * 4));
    UF_ASSIGN_OR_RETURN(moe_gate_, dev(slots * c_.n_ff_exp * 4));
    UF_ASSIGN_OR_RETURN(moe_up_, dev(slots * c_.n_ff_exp * 4));
    UF_ASSIGN_OR_RETURN(moe_out_, dev(slots * c_.n_embd * 4));
    UF_ASSIGN_OR_RETURN(moe_order_, dev(slots * 4));
    UF_ASSIGN_OR_RETURN(moe_tiles_, dev(Kernels::MaxExpertTiles(slots, c_.n_expert) * 12));
  }
  cache_dev_.clear();
  for (int64_t il = 0; il < c_.n_layer; ++il) {
    UF_ASSIGN_OR_RETURN(Buffer b, dev(layer_words * 4));
    cache_dev_.push_back(std::move(b));
  }
  if (o_.attention_chunk < 0 || o_.attention_chunk > Kernels::kMaxAttentionChunk) {
    return InvalidArgumentError("gpu forward: attention_chunk must be in [0, " +
                                std::to_string(Kernels::kMaxAttentionChunk) + "]");
  }
  if (o_.attention_chunk > 0 && max_len_ > o_.attention_chunk) {
    chunk_ = o_.attention_chunk;
    const int64_t n_chunks = (max_len_ + chunk_ - 1) / chunk_;
    UF_ASSIGN_OR_RETURN(
        part_, dev(static_cast<uint64_t>(mb) * c_.n_head * n_chunks * (c_.head_dim + 2) * 4));
  }
  // Unsplit, the scores of every position; split, a chunk's stay in the workgroup's shared
  // memory and this is a placeholder: the scratch is then bounded by the chunk, not the context.
  UF_ASSIGN_OR_RETURN(scores_,
                      dev(chunk_ > 0 ? 16 : static_cast<uint64_t>(mb) * c_.n_head * max_len_ * 4));
  UF_ASSIGN_OR_RETURN(xo_, dev(mo * c_.n_embd * 4));
  // The tails' counters: zero words, which every tail leaves zero after its dispatch.
  const auto zeroed = [&](int64_t words, Buffer* b) -> Status {
    UF_ASSIGN_OR_RETURN(*b, dev(words * 4));
    const std::vector<uint32_t> zeros(words, 0u);
    return ctx_->Upload(*b, 0, zeros.data(), words * 4);
  };
  UF_RETURN_IF_ERROR(zeroed(1, &norm_counter_));
  if (layers_[0].q_norm.valid()) {  // qwen3's head tails: a word per head
    UF_RETURN_IF_ERROR(zeroed(c_.n_head, &head_counter_q_));
    UF_RETURN_IF_ERROR(zeroed(c_.n_head_kv, &head_counter_k_));
  }
  if (c_.is_moe()) {  // the down experts' sum tail
    UF_RETURN_IF_ERROR(zeroed(k_.SumCounterWords(layers_[0].exp_down), &moe_counter_));
  }
  UF_ASSIGN_OR_RETURN(logits_dev_, ctx_->CreateBuffer(mo * c_.n_vocab * 4, Memory::kHost));
  UF_ASSIGN_OR_RETURN(logits_local_, dev(mo * c_.n_vocab * 4));
  UF_ASSIGN_OR_RETURN(argmax_, ctx_->CreateBuffer(mo * 4, Memory::kHost));
  UF_ASSIGN_OR_RETURN(argmax_part_, dev(Kernels::ArgMaxPartWords(c_.n_vocab, mo) * 4));
  chain_streams_ = std::min<int64_t>({mo, cache_->max_seqs(), 64});
  UF_ASSIGN_OR_RETURN(chain_ring_,
                      ctx_->CreateBuffer(chain_streams_ * kChainRing * 4, Memory::kHost));
  if (o_.top_k > 0) {
    UF_ASSIGN_OR_RETURN(top_, ctx_->CreateBuffer(mo * (2 * o_.top_k + 2) * 4, Memory::kHost));
    UF_ASSIGN_OR_RETURN(top_part_, dev(Kernels::TopKPartWords(c_.n_vocab, mo, o_.top_k) * 4));
    UF_ASSIGN_OR_RETURN(full_, ctx_->CreateBuffer(mo * 4, Memory::kHost));
    top_host_.resize(mo * (2 * o_.top_k + 2));
    UF_ASSIGN_OR_RETURN(chain_draw_,
                        ctx_->CreateBuffer(chain_streams_ * kDrawWords * 4, Memory::kHost));
    UF_ASSIGN_OR_RETURN(
        chain_top_,
        ctx_->CreateBuffer(chain_streams_ * kChainRing * (2 * o_.top_k + 2) * 4, Memory::kHost));
    for (Buffer& b : chain_logits_) {
      UF_ASSIGN_OR_RETURN(b, dev(chain_streams_ * c_.n_vocab * 4));
    }
    for (Buffer& b : chain_redo_) {
      UF_ASSIGN_OR_RETURN(b, ctx_->CreateBuffer(chain_streams_ * 4 * 4, Memory::kHost));
    }
    if (o_.max_known > 0) {
      UF_ASSIGN_OR_RETURN(known_, ctx_->CreateBuffer(mo * (o_.max_known + 1) * 4, Memory::kHost));
      UF_ASSIGN_OR_RETURN(known_raw_, ctx_->CreateBuffer(mo * o_.max_known * 4, Memory::kHost));
      known_ids_host_.resize(mo * o_.max_known);
      known_raw_host_.resize(mo * o_.max_known);
    }
    // A chained row lists its own edited tokens (edit_rows.comp), more than a plain row may:
    // a served penalty window is every generated token (~25 MB at 64 streams).
    chain_known_cap_ = Kernels::kMaxChainKnown;
    UF_ASSIGN_OR_RETURN(
        chain_edit_,
        ctx_->CreateBuffer(chain_streams_ * Kernels::EditStateWords(chain_known_cap_) * 4,
                           Memory::kHost));
    UF_ASSIGN_OR_RETURN(chain_known_,
                        ctx_->CreateBuffer(chain_streams_ * kChainRing *
                                               Kernels::EditRingWords(chain_known_cap_) * 4,
                                           Memory::kHost));
    UF_ASSIGN_OR_RETURN(
        allow_, ctx_->CreateBuffer(mo * Kernels::AllowWords(c_.n_vocab) * 4, Memory::kHost));
  }
  logits_.resize(mo * c_.n_vocab);
  seq_next_.assign(co.max_seqs, -1);
  seq_first_.assign(co.max_seqs, 0);
  return OkStatus();
}

// The batch checks of model::Decoder::Prepare, and the blocks reserved.
Status VulkanForward::CheckToken(int32_t tok) const {
  if (tok >= 0 && tok < c_.n_vocab) return OkStatus();
  return InvalidArgumentError("gpu forward: token id " + std::to_string(tok) +
                              " is outside the vocabulary [0, " + std::to_string(c_.n_vocab) + ")");
}

Status VulkanForward::CheckSequence(int32_t seq) const {
  if (seq >= 0 && seq < cache_->max_seqs()) return OkStatus();
  return InvalidArgumentError("gpu forward: sequence id " + std::to_string(seq) +
                              " is outside [0, " + std::to_string(cache_->max_seqs()) + ")");
}

Status VulkanForward::CheckStart(int32_t seq, int32_t pos) const {
  if (pos >= 0 && pos <= cache_->Length(seq)) return OkStatus();
  return InvalidArgumentError("gpu forward: sequence " + std::to_string(seq) +
                              " starts at position " + std::to_string(pos) +
                              " but its cache holds " + std::to_string(cache_->Length(seq)) +
                              " tokens");
}

Status VulkanForward::Prepare(const model::Batch& batch) {
  const int64_t n = batch.size();
  if (n == 0) return InvalidArgumentError("gpu forward: empty batch");
  if (n > o_.max_batch) {
    return InvalidArgumentError("gpu forward: batch of " + std::to_string(n) +
                                " tokens exceeds max_batch " + std::to_string(o_.max_batch));
  }
  if (static_cast<int64_t>(batch.positions.size()) != n ||
      static_cast<int64_t>(batch.seq_ids.size()) != n ||
      static_cast<int64_t>(batch.want_logits.size()) != n) {
    return InvalidArgumentError("gpu forward: batch arrays have different lengths");
  }
  int64_t n_out = 0;
  for (uint8_t w : batch.want_logits) n_out += w != 0;
  if (n_out > o_.max_outputs) {
    return InvalidArgumentError("gpu forward: " + std::to_string(n_out) +
                                " tokens want logits, more than max_outputs " +
                                std::to_string(o_.max_outputs));
  }
  for (int32_t s : touched_) seq_next_[s] = -1;
  touched_.clear();
  Status status;
  for (int64_t t = 0; t < n && status.ok(); ++t) {
    const int32_t tok = batch.tokens[t], seq = batch.seq_ids[t], pos = batch.positions[t];
    status = CheckToken(tok);
    if (status.ok()) status = CheckSequence(seq);
    if (!status.ok()) break;
    if (seq_next_[seq] < 0) {
      status = CheckStart(seq, pos);
      if (status.ok()) {
        touched_.push_back(seq);
        seq_first_[seq] = pos;
        seq_next_[seq] = pos + 1;
      }
    } else if (pos != seq_next_[seq]) {
      status = InvalidArgumentError(
          "gpu forward: sequence " + std::to_string(seq) + " has position " + std::to_string(pos) +
          " after " + std::to_string(seq_next_[seq] - 1) + " (positions must be consecutive)");
    } else {
      seq_next_[seq] = pos + 1;
    }
  }
  for (int32_t s : touched_) {
    if (!status.ok()) break;
    status = cache_->Reserve(s, seq_next_[s]);
  }
  if (!status.ok()) {
    for (int32_t s : touched_) {
      cache_->Truncate(s, cache_->Length(s));  // blocks reserved for this batch, never filled
      seq_next_[s] = -1;
    }
    touched_.clear();
    return status;
  }
  n_outputs_ = n_out;
  return OkStatus();
}

StepWay VulkanForward::ChooseWay(int64_t n, bool long_runs, int64_t depth, Trial* trial) {
  // The tuner's way for class c; the step is its trial when no other tuner tries one in it.
  const auto tuned = [trial](StepTuner* tuner, const StepTuner::Class& c) {
    const int pick = tuner->Pick(c);
    if (trial->tuner == nullptr && tuner->Chosen(c) < 0) *trial = {tuner, c, pick};
    return pick;
  };
  StepWay way;
  // The one-token choices first: their one class each does not depend on the depth, so they
  // settle in the first few one-token steps (the norm tail, then the GEMV); attention's classes
  // (by depth) are tried after them, with them fixed.
  const StepTuner::Class one = StepTuner::ClassOf(false, 1, 0);
  if (n == 1 && o_.fuse && tail_stages_) {
    way.norm_tail = o_.norm_tail == NormTail::kTune ? tuned(&tail_tuner_, one) == 1  // 0: off
                                                    : o_.norm_tail == NormTail::kOn;
  }
  if (n == 1 && gemv_tunable_) way.wide_gemv = tuned(&gemv_tuner_, one) == 1;  // 0: basic
  const AttnKernel tiled = long_runs ? AttnKernel::kTiled : AttnKernel::kTiledSingles;
  switch (o_.attention_tiles) {
    case AttentionTiles::kTiled:
      way.attn = tiled;
      break;
    case AttentionTiles::kAuto:
      way.attn = long_runs ? AttnKernel::kTiled : AttnKernel::kToken;
      break;
    case AttentionTiles::kTune:  // 0: tiled, 1: token
      way.attn = tuned(&attn_tuner_, StepTuner::ClassOf(long_runs, n, depth)) == 0
                     ? tiled
                     : AttnKernel::kToken;
      break;
    default:
      break;
  }
  return way;
}

void VulkanForward::ReportTrial(const Trial& trial, const Recorder& rec, double started) {
  // GPU time where the device has timestamps, else the wall clock around the submit.
  const double gpu_s = rec.last_gpu_seconds();
  trial.tuner->Report(trial.c, trial.way, gpu_s > 0 ? gpu_s : NowSeconds() - started);
  // Settled by this step: said once, so that a server's log shows what its device chose (the
  // one-token choices, once a process; attention's classes, a few per power of two of depth, at
  // UF_LOG_LEVEL=debug).
  if (trial.tuner->Chosen(trial.c) >= 0) {
    if (trial.tuner == &attn_tuner_) {
      UF_LOG(DEBUG) << "gpu: " << trial.tuner->Describe(trial.c);
    } else {
      UF_LOG(INFO) << "gpu: " << trial.tuner->Describe(trial.c);
    }
  }
}

std::vector<std::string> VulkanForward::step_tuning() const {
  std::vector<std::string> lines;
  for (const StepTuner* t : {&tail_tuner_, &gemv_tuner_, &attn_tuner_}) {
    for (std::string& line : t->Describe()) lines.push_back(std::move(line));
  }
  return lines;
}

Status VulkanForward::Run(const model::Batch& batch, int32_t* greedy) {
  if (!batch.known_begin.empty()) {  // checked before Prepare reserves any blocks
    if (static_cast<int64_t>(batch.known_begin.size()) != batch.size() + 1 ||
        batch.known_begin[0] != 0 ||
        batch.known_begin.back() != static_cast<int32_t>(batch.known_ids.size())) {
      return InvalidArgumentError("gpu forward: known_begin does not match the batch");
    }
    for (int64_t t = 0; t < batch.size(); ++t) {
      const int32_t c = batch.known_begin[t + 1] - batch.known_begin[t];
      if (c < 0 || c > o_.max_known) {
        return InvalidArgumentError("gpu forward: a row lists " + std::to_string(c) +
                                    " known tokens; max_known is " + std::to_string(o_.max_known));
      }
    }
    for (int32_t id : batch.known_ids) {
      if (id < 0 || id >= c_.n_vocab) {
        return InvalidArgumentError("gpu forward: known token " + std::to_string(id) +
                                    " is outside the vocabulary");
      }
    }
  }
  if (!batch.allowed.empty()) {
    if (batch.allowed.size() != batch.tokens.size()) {
      return InvalidArgumentError("gpu forward: allowed does not match the batch");
    }
    for (int64_t t = 0; t < batch.size(); ++t) {
      const bool known =
          !batch.known_begin.empty() && batch.known_begin[t + 1] > batch.known_begin[t];
      if (batch.allowed[t] != nullptr && known) {
        return InvalidArgumentError("gpu forward: a row has a grammar mask and known tokens");
      }
    }
  }
  UF_RETURN_IF_ERROR(Prepare(batch));
  const int64_t n = batch.size(), bs = cache_->block_size();
  auto* tok = static_cast<uint32_t*>(tok_.mapped());
  auto* outs = static_cast<uint32_t*>(outs_.mapped());
  // Reduce the rows on the device when some output row wants only its best tokens.
  const bool reduce =
      greedy == nullptr && o_.top_k > 0 && batch.top_only.size() == batch.tokens.size();
  auto* full = reduce ? static_cast<uint32_t*>(full_.mapped()) : nullptr;
  const bool with_known =
      reduce && o_.max_known > 0 && static_cast<int64_t>(batch.known_begin.size()) == n + 1;
  auto* known = with_known ? static_cast<uint32_t*>(known_.mapped()) : nullptr;
  const bool with_allowed = reduce && batch.allowed.size() == batch.tokens.size();
  auto* allow = with_allowed ? static_cast<uint32_t*>(allow_.mapped()) : nullptr;
  const int64_t allow_words = Kernels::AllowWords(c_.n_vocab);
  known_n_.clear();
  int64_t j = 0, n_top = 0, n_known = 0, n_allowed = 0;
  for (int64_t t = 0; t < n; ++t) {
    const int32_t seq = batch.seq_ids[t], pos = batch.positions[t];
    const int32_t block = cache_->BlockTable(seq)[pos / bs];
    tok[4 * t] = static_cast<uint32_t>(batch.tokens[t]);
    tok[4 * t + 1] = static_cast<uint32_t>(pos);
    tok[4 * t + 2] = static_cast<uint32_t>(block * bs + pos % bs);
    tok[4 * t + 3] = static_cast<uint32_t>(seq);
    if (batch.want_logits[t] == 0) continue;
    if (full != nullptr) {
      full[j] = batch.top_only[t] != 0 ? 0 : 1;
      n_top += batch.top_only[t] != 0;
    }
    if (known != nullptr) {
      // Only a reduced row's: a row that comes back whole is not masked.
      const int32_t b = batch.known_begin[t];
      const int32_t c = batch.top_only[t] != 0 ? batch.known_begin[t + 1] - b : 0;
      uint32_t* dst = known + j * (o_.max_known + 1);
      dst[0] = static_cast<uint32_t>(c);
      for (int32_t i = 0; i < c; ++i) {
        const int32_t id = batch.known_ids[b + i];
        dst[1 + i] = static_cast<uint32_t>(id);
        known_ids_host_[j * o_.max_known + i] = id;
      }
      known_n_.push_back(c);
      n_known += c;
    }
    if (allow != nullptr) {
      // Only a reduced row's: a row that comes back whole is masked by the host.
      uint32_t* dst = allow + j * allow_words;
      const bool masked = batch.top_only[t] != 0 && batch.allowed[t] != nullptr;
      dst[0] = masked ? 1u : 0u;
      if (masked) std::memcpy(dst + 1, batch.allowed[t], (allow_words - 1) * 4);
      n_allowed += masked;
    }
    outs[j++] = static_cast<uint32_t>(t);
  }
  const Out mode = greedy != nullptr ? Out::kGreedy
                   : n_top > 0       ? (n_known > 0 ? Out::kTopMasked : Out::kTop)
                                     : Out::kLogits;
  auto* bt = static_cast<int32_t*>(bt_.mapped());
  for (int32_t s : touched_) {
    const int64_t blocks = (seq_next_[s] + bs - 1) / bs;
    std::memcpy(bt + s * max_blocks_, cache_->BlockTable(s), blocks * 4);
  }
  // Runs of one sequence: a prefill chunk is one long run, a decode batch n runs of one.
  int64_t runs = 0, depth = 0;
  for (int64_t t = 0; t < n; ++t) {
    runs += t == 0 || batch.seq_ids[t] != batch.seq_ids[t - 1];
    depth = std::max<int64_t>(depth, batch.positions[t] + 1);
  }
  Trial trial;
  const StepWay way = ChooseWay(n, n >= kTiledAttentionRun * runs, depth, &trial);
  auto rec = RecordingFor(n, n_outputs_, mode, n_allowed > 0 && n_top > 0, way);
  const double started = NowSeconds();
  Status status = rec.ok() ? (*rec)->Run() : rec.status();
  last_trial_ = status.ok() && trial.tuner != nullptr;
  if (last_trial_) ReportTrial(trial, **rec, started);
  last_mode_ = status.ok() ? mode : Out::kLogits;
  if (status.ok()) {
    last_ = *rec;
    if (greedy != nullptr) {
      std::memcpy(greedy, argmax_.mapped(), n_outputs_ * 4);
    } else if (mode == Out::kTop || mode == Out::kTopMasked) {
      std::memcpy(top_host_.data(), top_.mapped(), n_outputs_ * (2 * o_.top_k + 2) * 4);
      const auto* raw = static_cast<const float*>(known_raw_.mapped());
      for (int64_t r = 0; mode == Out::kTopMasked && r < n_outputs_; ++r) {
        std::memcpy(known_raw_host_.data() + r * o_.max_known, raw + r * o_.max_known,
                    known_n_[r] * 4);
      }
      const auto* src = static_cast<const float*>(logits_dev_.mapped());
      for (int64_t r = 0; r < n_outputs_; ++r) {
        if (full[r] == 0) continue;
        std::memcpy(logits_.data() + r * c_.n_vocab, src + r * c_.n_vocab, c_.n_vocab * 4);
      }
      rows_reduced_ += n_top;
    } else {
      std::memcpy(logits_.data(), logits_dev_.mapped(), n_outputs_ * c_.n_vocab * 4);
    }
  }
  for (int32_t s : touched_) {
    // On failure the device cache may hold part of the batch: keep what came before it.
    const int64_t keep =
        status.ok() ? seq_next_[s] : std::min<int64_t>(cache_->Length(s), seq_first_[s]);
    cache_->Truncate(s, keep);
    cache_->SetLength(s, keep);
  }
  return status;
}

// The rows stay in logits_local_ until the next Forward; copy_rows.comp brings the flagged ones
// to the host-visible rows, as a Forward does for its whole rows.
Status VulkanForward::FetchLogits(std::span<const int64_t> rows) {
  if (last_mode_ != Out::kTop && last_mode_ != Out::kTopMasked) {
    return FailedPreconditionError("gpu forward: the last forward reduced no rows");
  }
  auto* full = static_cast<uint32_t*>(full_.mapped());
  std::fill(full, full + n_outputs_, 0u);
  for (int64_t r : rows) {
    if (r < 0 || r >= n_outputs_)
      return OutOfRangeError("gpu forward: no output row " + std::to_string(r));
    full[r] = 1;
  }
  if (rows.empty()) return OkStatus();
  if (fetch_ == nullptr || fetch_rows_ != n_outputs_) {
    fetch_ = std::make_unique<Recorder>(ctx_.get());
    k_.CopyRows(fetch_.get(), logits_local_, logits_dev_, full_, c_.n_vocab, n_outputs_);
    UF_RETURN_IF_ERROR(fetch_->Finish());
    fetch_rows_ = n_outputs_;
  }
  UF_RETURN_IF_ERROR(fetch_->Run());
  const auto* src = static_cast<const float*>(logits_dev_.mapped());
  for (int64_t r : rows) {
    float* row = logits_.data() + r * c_.n_vocab;
    std::memcpy(row, src + r * c_.n_vocab, c_.n_vocab * 4);
    // A masked row's known tokens are -inf on the device (mask_rows.comp); their raw logits came
    // back beside the row, so the row is whole and raw again.
    const int32_t n_known = r < static_cast<int64_t>(known_n_.size()) ? known_n_[r] : 0;
    for (int32_t k = 0; k < n_known; ++k) {
      row[known_ids_host_[r * o_.max_known + k]] = known_raw_host_[r * o_.max_known + k];
    }
  }
  rows_fetched_ += static_cast<int64_t>(rows.size());
  return OkStatus();
}

namespace {

// GpuDecoder: one sequence over a cache of its own (block tables only; K/V on the device).
class VulkanDecoder final : public GpuDecoder {
 public:
  Status Init(const model::Model& model, const DeviceSpec& device, int64_t max_ctx,
              int64_t max_batch, engine::KvType kv_type, GemvVariant gemv) {
    if (max_ctx <= 0) return InvalidArgumentError("GpuDecoder: max_ctx must be positive");
    const model::ModelConfig& c = model.config();
    engine::KvCacheOptions co;
    co.n_layer = c.n_layer;
    co.n_head_kv = c.n_head_kv;
    co.head_dim = c.head_dim;
    co.max_seq_len = max_ctx;
    co.n_blocks = engine::KvCacheOptions::BlocksFor(max_ctx, 1, co.block_size);
    co.type = kv_type;
    co.host_storage = false;
    UF_ASSIGN_OR_RETURN(cache_, engine::KvCache::Create(co));
    max_ctx_ = max_ctx;
    max_batch_ = std::clamp<int64_t>(max_batch, 1, max_ctx);
    n_vocab_ = c.n_vocab;
    UF_ASSIGN_OR_RETURN(fwd_, GpuForward::Create(model, device, cache_.get(),
                                                 {.max_batch = max_batch_, .gemv = gemv}));
    return OkStatus();
  }

  Status CheckPosition(int32_t pos) const {
    if (pos < 0 || pos >= max_ctx_ || pos > cache_->Length(0)) {
      return InvalidArgumentError("gpu forward: position " + std::to_string(pos) +
                                  " is not in [0, " +
                                  std::to_string(std::min(cache_->Length(0), max_ctx_ - 1)) + "]");
    }
    return OkStatus();
  }

  Status Step(int32_t token, int32_t pos) override {
    UF_RETURN_IF_ERROR(CheckPosition(pos));
    batch_.Clear();
    batch_.Add(token, pos, 0, true);
    UF_RETURN_IF_ERROR(fwd_->Forward(batch_));
    last_ = fwd_->logits(0);
    return OkStatus();
  }

  StatusOr<int32_t> StepGreedy(int32_t token, int32_t pos) override {
    UF_RETURN_IF_ERROR(CheckPosition(pos));
    batch_.Clear();
    batch_.Add(token, pos, 0, true);
    int32_t next = 0;
    UF_RETURN_IF_ERROR(fwd_->ForwardGreedy(batch_, &next));
    return next;
  }

  StatusOr<int64_t> GreedyChain(int32_t token, int32_t pos, int64_t n,
                                const std::function<bool(int32_t)>& on_token,
                                std::span<const int32_t> banned) override {
    UF_RETURN_IF_ERROR(CheckPosition(pos));
    return fwd_->ForwardGreedyChain(0, token, pos, n, on_token, banned);
  }

  Status Prefill(std::span<const int32_t> tokens, int32_t pos, bool every_logits) override {
    for (size_t i = 0; i < tokens.size(); i += max_batch_) {
      const size_t end = std::min(tokens.size(), i + max_batch_);
      batch_.Clear();
      for (size_t t = i; t < end; ++t) {
        batch_.Add(tokens[t], pos + static_cast<int32_t>(t), 0, every_logits || t + 1 == end);
      }
      UF_RETURN_IF_ERROR(fwd_->Forward(batch_));
      last_ = fwd_->logits(fwd_->n_outputs() - 1);
    }
    return OkStatus();
  }

  const float* logits() const override { return last_; }
  const float* all_logits(int64_t i) const override { return fwd_->logits(i); }
  double last_step_gpu_seconds() const override { return fwd_->last_step_gpu_seconds(); }
  int64_t max_ctx() const override { return max_ctx_; }
  int64_t max_batch() const override { return max_batch_; }
  int64_t n_vocab() const override { return n_vocab_; }
  const DeviceInfo& device() const override { return fwd_->device(); }
  uint64_t device_bytes() const override { return fwd_->device_bytes(); }

 private:
  std::unique_ptr<engine::KvCache> cache_;
  std::unique_ptr<GpuForward> fwd_;
  model::Batch batch_;
  const float* last_ = nullptr;
  int64_t max_ctx_ = 0, max_batch_ = 1, n_vocab_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<GpuForward>> GpuForward::Create(const model::Model& model,
                                                         const DeviceSpec& device,
                                                         engine::KvCache* cache,
                                                         const GpuForwardOptions& options) {
  auto f = std::make_unique<VulkanForward>(model, cache, options);
  if (Status s = f->Init(device); !s.ok()) {
    // Out of device memory: say what the K/V pool takes, the part a user can shrink.
    if (s.code() != StatusCode::kResourceExhausted) return s;
    const auto kv_mib = static_cast<int64_t>(cache->bytes() >> 20);  // computed without storage
    return Status(s.code(), s.message() + "; the K/V pool alone takes " + std::to_string(kv_mib) +
                                " MiB: a shorter context (--ctx), fewer sequences (--max-seqs, "
                                "--kv-tokens), a q8_0 cache (--kv-type) or a smaller quantization "
                                "needs less");
  }
  return std::unique_ptr<GpuForward>(std::move(f));
}

StatusOr<std::unique_ptr<GpuDecoder>> GpuDecoder::Create(const model::Model& model,
                                                         const DeviceSpec& device, int64_t max_ctx,
                                                         int64_t max_batch, engine::KvType kv_type,
                                                         GemvVariant gemv) {
  auto d = std::make_unique<VulkanDecoder>();
  UF_RETURN_IF_ERROR(d->Init(model, device, max_ctx, max_batch, kv_type, gemv));
  return std::unique_ptr<GpuDecoder>(std::move(d));
}

}  // namespace uf::gpu
