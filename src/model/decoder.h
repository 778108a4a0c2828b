// The shared decoder-only transformer forward pass (llama / qwen2 / qwen3). One Decoder owns the
// scratch buffers for batches of up to max_batch tokens, so a decode step allocates nothing; it
// reads and writes K/V through the paged cache it was created with.
//
// Per layer a forward costs 5 thread-pool dispatches at most (QKV, attention, output projection,
// gate/up, down); elementwise work between them runs on the calling thread unless the batch is
// large enough to pay for a dispatch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/kv_cache.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/batch.h"
#include "model/model.h"

namespace uf::model {

struct DecoderOptions {
  int64_t max_batch = 512;  // tokens per Forward call
  int64_t max_outputs = 0;  // tokens per call that may want logits; 0 = max_batch
};

class Decoder {
 public:
  // The cache must match the model's shape (layers, kv heads, head dim). model, cache and pool
  // must outlive the decoder.
  static StatusOr<std::unique_ptr<Decoder>> Create(const Model& model, engine::KvCache* cache,
                                                   const DecoderOptions& options, ThreadPool* pool);

  // Runs the batch: writes its K/V into the cache (positions past a rewritten position are
  // forgotten), and computes logits for the tokens that want them. Errors (bad token ids,
  // positions that skip ahead of the cache, out of KV blocks, too many tokens) leave the cache
  // contents of the batch's sequences unchanged up to their previous lengths.
  Status Forward(const Batch& batch);

  // Logits of the i-th token of the last batch that wanted logits (batch order). [n_vocab]
  const float* logits(int64_t i) const { return logits_.data() + i * config_.n_vocab; }
  int64_t n_outputs() const { return n_outputs_; }

  const Model& model() const { return model_; }
  engine::KvCache* cache() const { return cache_; }
  const DecoderOptions& options() const { return options_; }
  // The pool the forward runs on (idle between forwards: the sampler may use it).
  ThreadPool* pool() const { return pool_; }

 private:
  // Matrices sharing one input that the kernels can run in one call (same activation type).
  struct MatGroup {
    std::vector<const kernels::Matrix*> ws;
    std::vector<float*> ys;
  };

  Decoder(const Model& model, engine::KvCache* cache, const DecoderOptions& options,
          ThreadPool* pool);
  void Allocate();
  Status Prepare(const Batch& batch);
  void RunGroups(const std::vector<MatGroup>& groups, const float* x, int64_t n);
  void Layer(int64_t il, const Batch& batch);
  void Attention(int64_t il, const Batch& batch, int64_t item_begin, int64_t item_end, int thread);
  // Writes one head's K or V row of head_dim floats into the cache in its type.
  void StoreKvRow(const float* x, uint8_t* dst) const;
  // Runs fn(begin, end) over [0, n) rows, on the pool when n * row_cost is large enough.
  template <typename F>
  void ForRows(int64_t n, int64_t row_cost, const F& fn);

  const Model& model_;
  const ModelConfig& config_;
  engine::KvCache* cache_;
  DecoderOptions options_;
  ThreadPool* pool_;
  kernels::RopeParams rope_;
  float attn_scale_ = 1.0f;
  engine::KvType kv_type_ = engine::KvType::kF32;  // how the cache stores K/V

  std::vector<std::vector<MatGroup>> qkv_groups_;  // [n_layer]
  std::vector<std::vector<MatGroup>> ffn_groups_;  // [n_layer] gate/up

  // Scratch, sized once for max_batch tokens.
  std::vector<float> x_;        // [max_batch][n_embd] residual stream
  std::vector<float> xn_;       // [max_batch][n_embd] normed input of a block
  std::vector<float> q_;        // [max_batch][q_dim]
  std::vector<float> k_;        // [max_batch][kv_dim]
  std::vector<float> v_;        // [max_batch][kv_dim]
  std::vector<float> attn_;     // [max_batch][q_dim] attention output
  std::vector<float> y_;        // [max_batch][n_embd] block output before the residual add
  std::vector<float> gate_;     // [max_batch][n_ff]
  std::vector<float> up_;       // [max_batch][n_ff]
  std::vector<float> rope_cs_;  // [max_batch][rope_dim] cos/sin pairs per token
  // [n_threads][kAttentionTokens][n_head / n_head_kv][max_seq_len] attention weights
  std::vector<float> scores_;
  std::vector<int64_t> attn_groups_;   // [groups + 1] first token of each attention token group
  int64_t attn_cost_ = 0;              // a layer's attention multiply-adds (x4) for this batch
  std::vector<float> xo_;              // [max_outputs][n_embd] normed rows that want logits
  std::vector<float> logits_;          // [max_outputs][n_vocab]
  std::vector<int32_t> seq_next_;      // [max_seqs] next position per sequence, -1 if unseen
  std::vector<int32_t> touched_seqs_;  // sequences of the current batch
  int64_t n_outputs_ = 0;
};

}  // namespace uf::model
