// The single-dispatch forward of small batches (Decoder::kSingleDispatchTokens tokens at most:
// decode steps and speculative verifies). A decode step of a 1B model made 6 pool dispatches per
// layer, ~100 per token, each a wake-up of the workers and a wait for the slowest, with the
// elementwise steps between them on the calling thread alone. Here the threads enter once per
// forward and walk the layers together:
//
//   rows: residual add, RMS norm, activation conversion   | Sync
//   QKV product (work-stealing chunks)                     | Sync
//   (token, heads): biases, q/k norms, RoPE, K/V to cache  | Sync
//   attention units (flash-decoding partials or items)     | Sync (last: merge partials, compact)
//   rows: convert the attention output                     | Sync
//   output projection                                      | Sync
//   rows: residual add, RMS norm, conversion               | Sync
//   gate/up product with SwiGLU on each finished chunk     | Sync
//   rows: convert the SwiGLU output                        | Sync
//   down product                                           | Sync
//
// Row and token steps go to threads in turn (token t on thread t % n), so one thread's rows are
// the same from step to step. Every kernel computes each row the same way whichever thread runs
// it and however the products are chunked, so the logits are bit-identical to RunLayers' (the
// speculative verifier relies on a verify row equalling a decode step).
#include <algorithm>
#include <cstring>

#include "model/decoder.h"

namespace uf::model {
namespace {

struct SwiGluRows {
  float* gate;  // [tokens][n_ff]
  const float* up;
  int64_t n_ff, tokens;
};

// SwiGLU of rows [r0, r1) of every token, in place in gate. r0 is a multiple of 16, so the
// kernel's 8-wide body and scalar tail cover the same elements as a whole-row call.
void SwiGluDone(void* ctx, int64_t r0, int64_t r1) {
  const auto* a = static_cast<const SwiGluRows*>(ctx);
  for (int64_t t = 0; t < a->tokens; ++t) {
    float* g = a->gate + t * a->n_ff + r0;
    kernels::SwiGlu(g, a->up + t * a->n_ff + r0, g, r1 - r0);
  }
}

}  // namespace

void Decoder::InitTasks() {
  const ModelConfig& c = config_;
  const auto& layers = model_.weights().layers;
  tasks_.resize(c.n_layer);
  size_t act_row = 0;
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const LayerWeights& l = layers[il];
    LayerTasks& lt = tasks_[il];
    const MatGroup& qkv = qkv_groups_[il][0];
    lt.qkv.Init(qkv.ws.data(), qkv.ys.data(), static_cast<int>(qkv.ws.size()));
    float* y = y_.data();
    const kernels::Matrix* wo = &l.wo;
    lt.wo.Init(&wo, &y, 1);
    // The attention output's rows are n_head x head_dim wide, wider than n_embd in some models
    // (Qwen3-30B-A3B, gpt-oss): counted for every layer, MoE layers included.
    act_row = std::max({act_row, lt.qkv.act_row_bytes(), lt.wo.act_row_bytes()});
    if (!l.exp_gate.empty()) continue;  // MoeFfn
    const MatGroup& ffn = ffn_groups_[il][0];
    lt.fused_swiglu = ffn.ws.size() == 2 && l.gate.type() == l.up.type() &&
                      l.gate.rows() == l.up.rows() && ffn.ws[0] == &l.gate;
    lt.gate_up.Init(ffn.ws.data(), ffn.ys.data(), static_cast<int>(ffn.ws.size()), lt.fused_swiglu);
    const kernels::Matrix* down = &l.down;
    lt.down.Init(&down, &y, 1);
    act_row = std::max({act_row, lt.gate_up.act_row_bytes(), lt.down.act_row_bytes()});
  }
  const kernels::Matrix* out = &model_.weights().output;
  float* logits = logits_.data();
  out_task_.Init(&out, &logits, 1);
  act_row = std::max(act_row, out_task_.act_row_bytes());
  act_buf_.resize(kSingleDispatchTokens * act_row + 64);
  act_ = act_buf_.data() + (64 - reinterpret_cast<uintptr_t>(act_buf_.data()) % 64) % 64;
  tasks_isa_ = kernels::ActiveIsa();
}

void Decoder::RunSingleDispatch(const Batch& batch) {
  if (tasks_isa_ != kernels::ActiveIsa()) InitTasks();  // tests switch tiers between forwards
  rows_left_ = batch.size();
  struct Args {
    Decoder* self;
    const Batch* batch;
  } args{this, &batch};
  // Captures one pointer, so std::function stores it without allocating.
  pool_->Run([a = &args](int i, int nt) { a->self->SingleDispatchThread(*a->batch, i, nt); });
}

void Decoder::SingleDispatchThread(const Batch& batch, int ti, int nt) {
  const ModelConfig& c = config_;
  const int64_t n = batch.size(), e = c.n_embd, ff = c.n_ff;
  const float eps = c.rms_eps;
  kernels::ChunkRange* ranges = ranges_.get();
  // Per token, its heads are cut into this many parts for the RoPE / K/V store step.
  const int64_t qkv_splits = std::min<int64_t>(c.n_head_kv, (nt + n - 1) / n);
  // The activations a product reads: converted into act_, or the f32 rows themselves.
  auto act_of = [&](const kernels::MatMulTask& task, const float* x) {
    return task.converts() ? act_ : reinterpret_cast<const uint8_t*>(x);
  };
  auto convert = [&](const kernels::MatMulTask& task, const float* x, int64_t t) {
    if (task.converts()) task.Convert(x, t, t + 1, act_);
  };

  for (int64_t t = ti; t < n; t += nt) {
    model_.EmbedToken(batch.tokens[t], x_.data() + t * e);
    kernels::RopeAngles(rope_, batch.positions[t], rope_cs_.data() + t * c.rope_dim);
  }
  for (int64_t il = 0; il < c.n_layer; ++il) {
    const LayerWeights& l = model_.weights().layers[il];
    const LayerTasks& lt = tasks_[il];
    // The same rows as the embedding (or the previous layer's down product, behind a Sync).
    for (int64_t t = ti; t < n; t += nt) {
      float* xt = x_.data() + t * e;
      if (il > 0) {
        kernels::AddRmsNorm(xt, y_.data() + t * e, l.attn_norm.data(), xn_.data() + t * e, e, eps);
      } else {
        kernels::RmsNorm(xt, l.attn_norm.data(), xn_.data() + t * e, e, eps);
      }
      convert(lt.qkv, xn_.data(), t);
    }
    pool_->Sync([&] {
      lt.qkv.Reset(ranges, nt);
      if (il > 0 && Abandoning()) abandoned_layers_ = il;  // Decoder::Forward's abandon
    });
    if (abandoned_layers_ > 0) return;  // every thread reads the same value after the Sync
    lt.qkv.Run(act_of(lt.qkv, xn_.data()), n, ranges, ti, nt);
    pool_->Sync();
    // Units of (token, KV head group): a decode step's RoPE and K/V stores are split too.
    for (int64_t u = ti; u < n * qkv_splits; u += nt) {
      const int64_t t = u / qkv_splits, part = u % qkv_splits;
      QkvToCache(il, batch, t, c.n_head_kv * part / qkv_splits,
                 c.n_head_kv * (part + 1) / qkv_splits);
    }
    pool_->Sync();
    AttentionShare(il, batch, ti, nt);
    pool_->Sync([&] {
      if (!split_units_.empty()) FinishSplit(il);
      if (il == c.n_layer - 1 && n_outputs_ < n) rows_left_ = CompactOutputs(batch, n);
    });
    const int64_t rows = rows_left_;  // every thread reads the same value after the Sync
    if (rows == 0) return;            // a prefill chunk that wants no logits
    for (int64_t t = ti; t < rows; t += nt) convert(lt.wo, attn_.data(), t);
    pool_->Sync([&] { lt.wo.Reset(ranges, nt); });
    lt.wo.Run(act_of(lt.wo, attn_.data()), rows, ranges, ti, nt);
    pool_->Sync();
    if (!l.exp_gate.empty()) {
      for (int64_t t = ti; t < rows; t += nt) {
        if (!l.bo.empty()) kernels::AddInPlace(y_.data() + t * e, l.bo.data(), e);
        kernels::AddRmsNorm(x_.data() + t * e, y_.data() + t * e, l.ffn_norm.data(),
                            xn_.data() + t * e, e, eps);
      }
      // Its steps read only this thread's rows first and end with this thread's rows of y_,
      // which the next layer's first step (same rows) reads.
      MoeFfn(il, rows, ti, nt);
      continue;
    }
    for (int64_t t = ti; t < rows; t += nt) {
      kernels::AddRmsNorm(x_.data() + t * e, y_.data() + t * e, l.ffn_norm.data(),
                          xn_.data() + t * e, e, eps);
      convert(lt.gate_up, xn_.data(), t);
    }
    pool_->Sync([&] { lt.gate_up.Reset(ranges, nt); });
    SwiGluRows swiglu{gate_.data(), up_.data(), ff, rows};
    if (lt.fused_swiglu) {
      lt.gate_up.Run(act_of(lt.gate_up, xn_.data()), rows, ranges, ti, nt, &SwiGluDone, &swiglu);
      pool_->Sync();
    } else {
      lt.gate_up.Run(act_of(lt.gate_up, xn_.data()), rows, ranges, ti, nt);
      pool_->Sync();
      for (int64_t t = ti; t < rows; t += nt) {
        float* g = gate_.data() + t * ff;
        kernels::SwiGlu(g, up_.data() + t * ff, g, ff);
      }
    }
    for (int64_t t = ti; t < rows; t += nt) convert(lt.down, gate_.data(), t);
    pool_->Sync([&] { lt.down.Reset(ranges, nt); });
    lt.down.Run(act_of(lt.down, gate_.data()), rows, ranges, ti, nt);
    pool_->Sync();
  }
  // The rows that want logits, compacted at the front by the last layer: its FFN residual add,
  // the final norm, then the logits.
  if (n_outputs_ == 0) return;
  const float* out_norm = model_.weights().output_norm.data();
  for (int64_t j = ti; j < n_outputs_; j += nt) {
    kernels::AddRmsNorm(x_.data() + j * e, y_.data() + j * e, out_norm, xo_.data() + j * e, e, eps);
    convert(out_task_, xo_.data(), j);
  }
  pool_->Sync([&] {
    out_task_.Reset(ranges, nt);
    // The logits product reads the vocabulary's matrix (a few layers' worth of weights).
    if (Abandoning()) abandoned_layers_ = c.n_layer;
  });
  if (abandoned_layers_ > 0) return;
  out_task_.Run(act_of(out_task_, xo_.data()), n_outputs_, ranges, ti, nt);
}

}  // namespace uf::model
