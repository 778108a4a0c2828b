// The shared decoder-only transformer forward pass (llama / qwen2 / qwen3, and the mixtures of
// experts qwen3moe / Mixtral / gpt-oss, whose FFN is model/moe.cc). One Decoder owns the
// scratch buffers for batches of up to max_batch tokens, so a decode step allocates nothing; it
// reads and writes K/V through the paged cache it was created with.
//
// A batch of up to kSingleDispatchTokens tokens (decode steps, speculative verifies) runs in one
// thread-pool dispatch for the whole forward: the threads go through the layers' steps together
// with a barrier between steps, share the elementwise work by rows, and compute SwiGLU inside
// the gate/up product. Larger batches (prefill) cost up to 6 dispatches per layer (QKV,
// attention, output projection, gate/up, SwiGLU, down), elementwise work on the pool when it is
// large enough to pay for a dispatch.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/kv_cache.h"
#include "kernels/attention.h"
#include "kernels/experts.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/batch.h"
#include "model/model.h"

namespace uf::model {

struct DecoderOptions {
  int64_t max_batch = 512;  // tokens per Forward call
  int64_t max_outputs = 0;  // tokens per call that may want logits; 0 = max_batch
  // Batches of up to kSingleDispatchTokens run the whole forward in one pool dispatch (see
  // Decoder::RunSingleDispatch). The results are bit-identical either way; off for A/B runs
  // (also with the environment variable UF_SINGLE_DISPATCH=0).
  bool single_dispatch = true;
};

// Gives co (a host cache for model config c) a pool of its own for c's sliding-window layers
// that holds only their window (KvCacheOptions::swa_*). slack: positions past the window a
// sequence keeps, at least the most one forward appends to it plus the most it may be truncated
// back by after one (speculative rollback, a benchmark's rewind). No-op for models without
// windowed layers, and with UF_SWA_CACHE=0 in the environment (A/B runs: every layer keeps every
// position, as before).
void UseSlidingWindowPool(const ModelConfig& c, int64_t slack, engine::KvCacheOptions* co);

// A token's k experts (c.n_expert_used; best first, ties to the lower index) into sel and their
// weights into w, from its c.n_expert router logits (the router's bias already added), as the
// config's gating, renormalisation and scale say. Decoder's MoE layers use it, and the GPU
// router's test compares against it.
void RouteExperts(const ModelConfig& c, const float* logits, int32_t* sel, float* w);

class Decoder final : public BatchForward {
 public:
  static constexpr int64_t kSingleDispatchTokens = 16;

  // The cache must match the model's shape (layers, kv heads, head dim). model, cache and pool
  // must outlive the decoder.
  static StatusOr<std::unique_ptr<Decoder>> Create(const Model& model, engine::KvCache* cache,
                                                   const DecoderOptions& options, ThreadPool* pool);

  // Runs the batch: writes its K/V into the cache (positions past a rewritten position are
  // forgotten), and computes logits for the tokens that want them. Errors (bad token ids,
  // positions that skip ahead of the cache, out of KV blocks, too many tokens) leave the cache
  // contents of the batch's sequences unchanged up to their previous lengths.
  //
  // abandon (the serving engine's step preemption): when given, it is read before every layer
  // after the first and before the logits product (one relaxed load each; in the single-dispatch
  // forward inside barriers that were there anyway). Once it is set the forward stops there and
  // returns Unavailable with abandoned_layers() > 0 (n_layer: before the logits); the cache
  // lengths stay as they were, and the K/V rows already written past them are rewritten with the
  // same values when the same positions run again.
  Status Forward(const Batch& batch, const std::atomic<bool>* abandon = nullptr) override;
  // Layers the last Forward ran before it was abandoned; 0 when it ran to the end.
  int64_t abandoned_layers() const override { return abandoned_layers_; }

  // Logits of the i-th token of the last batch that wanted logits (batch order). [n_vocab]
  const float* logits(int64_t i) const override { return logits_.data() + i * config_.n_vocab; }
  int64_t n_outputs() const override { return n_outputs_; }

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
  // The forward with a pool dispatch per step (any batch size), layer by layer.
  void RunLayers(const Batch& batch);
  void Layer(int64_t il, const Batch& batch);
  // One unit of a layer's attention: item `item` (see Forward), chunks [c_begin, c_end) merged
  // and written to attn_, or with `partial` set, the one chunk c_begin's partial state there.
  void Attention(int64_t il, const Batch& batch, int64_t item, int64_t c_begin, int64_t c_end,
                 int thread, float* partial);
  // Merges the split partials of the layer (chunk order) and writes attn_.
  void FinishSplit(int64_t il);
  // Attention rows of `nt` tokens finished into attn_ (with the layer's sinks, if any).
  void FinishRows(int64_t il, const kernels::AttentionState& run, int64_t t0, int64_t nt,
                  int64_t kvh);
  kernels::AttentionState StateAt(float* base) const;
  // Writes one head's K or V row of head_dim floats into the cache in its type.
  void StoreKvRow(const float* x, uint8_t* dst) const;
  // Writes one head's key as column `slot` of a transposed F32/F16 slice ([head_dim][block]).
  void StoreKeyColumn(const float* x, uint8_t* slice, int64_t slot) const;
  // The single-dispatch forward (batch of at most kSingleDispatchTokens) and one thread's part.
  void RunSingleDispatch(const Batch& batch);
  void SingleDispatchThread(const Batch& batch, int thread, int n_threads);
  // (Re)builds the matmul tasks of the single-dispatch path for the active ISA.
  void InitTasks();
  // Token t's biases, q/k norms and RoPE, then its K and V into the cache, for KV heads
  // [h0, h1) and their query heads.
  void QkvToCache(int64_t il, const Batch& batch, int64_t t, int64_t h0, int64_t h1);
  // Thread `thread`'s share of a layer's attention units (split partials or whole items).
  void AttentionShare(int64_t il, const Batch& batch, int thread, int n_threads);
  // Mixture of experts (model/moe.cc): scratch, then the FFN of rows [0, n) of xn_ into y_,
  // called by every thread of a pool job (it syncs them between its steps).
  void AllocateMoe();
  void MoeFfn(int64_t il, int64_t n, int thread, int n_threads);
  void Route(int64_t il, int64_t t);
  void GroupSlots(int64_t il, int64_t n, int n_threads);
  // Moves the rows that want logits to the front (batch order); returns their count.
  int64_t CompactOutputs(const Batch& batch, int64_t n);
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
  GgmlType kernel_kv_type_ = GgmlType::kF32;       // the same, as the attention kernel names it
  bool keys_transposed_ = false;                   // KvCache::keys_transposed()

  std::vector<std::vector<MatGroup>> qkv_groups_;  // [n_layer]
  std::vector<std::vector<MatGroup>> ffn_groups_;  // [n_layer] gate/up

  // Single-dispatch path: each layer's products as tasks the threads share between barriers.
  struct LayerTasks {
    kernels::MatMulTask qkv, wo, gate_up, down;
    bool fused_swiglu = false;  // gate_up is paired: SwiGLU runs on each finished chunk
  };
  bool single_dispatch_ = false;  // options and the model allow it (one QKV and gate/up group)
  kernels::Isa tasks_isa_ = kernels::Isa::kScalar;  // the ISA the tasks were built for
  bool tasks_built_ = false;
  std::vector<LayerTasks> tasks_;                  // [n_layer]
  kernels::MatMulTask out_task_;                   // the logits
  std::unique_ptr<kernels::ChunkRange[]> ranges_;  // [n_threads], reset before each product
  std::vector<uint8_t> act_buf_;  // kSingleDispatchTokens rows of converted activations (+ 64)
  uint8_t* act_ = nullptr;        // act_buf_ aligned to 64 bytes
  int64_t rows_left_ = 0;         // rows the last layer still computes (set between barriers)

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
  // Attention (see Decoder::Attention). Per thread: AttendChunk's scratch, the item's queries
  // [kAttentionTokens * group][head_dim], visible keys per row, two states (running and chunk
  // partial: [rows] max, [rows] sum, [rows][head_dim] acc) and the item's block pointers (K and
  // V, [max_seq_len / block_size] each).
  std::vector<float> attn_scratch_;       // [n_threads][attn_thread_floats_]
  std::vector<const void*> attn_blocks_;  // [n_threads][2][max blocks per sequence]
  std::vector<int32_t> attn_visible_;     // [n_threads][kAttentionTokens * group]
  std::vector<int32_t> attn_first_;       // the same: first key in the window (sliding layers)
  size_t attn_thread_floats_ = 0;
  int64_t attn_chunk_ = 0;  // keys per chunk (kernels::kAttentionChunk rounded)
  // Split mode (flash-decoding): work units (item, chunk) and their partial states,
  // [max_split_units_][rows x (head_dim + 2)].
  std::vector<std::pair<int32_t, int32_t>> split_units_;
  std::vector<float> split_partials_;
  int64_t max_split_units_ = 0;
  std::vector<int64_t> attn_groups_;      // [groups + 1] first token of each attention token group
  std::vector<int64_t> attn_group_keys_;  // [groups] keys the group's last token attends to
  int64_t attn_cost_ = 0;                 // a layer's attention multiply-adds (x4) for this batch
  std::vector<float> xo_;                 // [max_outputs][n_embd] normed rows that want logits
  std::vector<float> logits_;             // [max_outputs][n_vocab]
  std::vector<int32_t> seq_next_;         // [max_seqs] next position per sequence, -1 if unseen
  std::vector<int32_t> touched_seqs_;     // sequences of the current batch
  int64_t n_outputs_ = 0;
  // Forward's abandon flag while it runs, and the layers it ran when it stopped for it.
  const std::atomic<bool>* abandon_ = nullptr;
  int64_t abandoned_layers_ = 0;
  bool Abandoning() const {
    return abandon_ != nullptr && abandon_->load(std::memory_order_relaxed);
  }

  // Bytes aligned to 64 (activation rows for the kernels).
  struct AlignedBytes {
    std::vector<uint8_t> buf;
    uint8_t* p = nullptr;
    void Resize(size_t n) {
      buf.resize(n + 64);
      p = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64;
    }
    uint8_t* data() const { return p; }
  };
  // Mixture of experts (model/moe.cc). A slot is a (token, selected expert) pair; slots are
  // grouped by expert. Sized for max_batch tokens.
  size_t moe_router_row_ = 0, moe_act_row_ = 0, moe_down_row_ = 0;  // activation row strides
  AlignedBytes moe_router_act_;           // [max_batch] router activations
  AlignedBytes moe_tok_act_;              // [max_batch] expert gate/up activations
  AlignedBytes moe_slot_act_;             // [slots] the same, gathered by slot
  AlignedBytes moe_down_act_;             // [slots] SwiGLU output in the down format
  std::vector<float> moe_logits_;         // [max_batch][n_expert]
  std::vector<int32_t> moe_sel_;          // [max_batch][k] selected experts, best first
  std::vector<float> moe_weight_;         // [max_batch][k] their weights
  std::vector<int32_t> moe_slot_of_;      // [max_batch][k] slot of each (token, rank)
  std::vector<int32_t> moe_slot_token_;   // [slots] token of each slot
  std::vector<int32_t> moe_count_;        // [n_expert + 1] slot counts, then bounds
  std::vector<int32_t> moe_job_first_;    // [n_expert] first slot of each gate/up job
  std::vector<int32_t> moe_job_expert_;   // [n_expert] expert of each gate/up job
  std::vector<float> moe_gate_, moe_up_;  // [slots][n_ff_exp]
  std::vector<float> moe_out_;            // [slots][n_embd] each expert's output
  kernels::ExpertProduct moe_router_, moe_gate_up_, moe_down_;
};

}  // namespace uf::model
