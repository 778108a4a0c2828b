// VulkanForward, the GpuForward of the Vulkan backend, shared by its two halves: the buffers,
// weight upload and per-step host work (vk_decoder.cc) and the step's recording (vk_record.cc).
// Internal to src/gpu: the rest of the engine sees backend.h only.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gpu/backend.h"
#include "gpu/step_tuner.h"
#include "gpu/top_row.h"
#include "gpu/vk_context.h"
#include "gpu/vk_kernels.h"

namespace uf::gpu {

struct LayerBuffers {
  Buffer attn_norm, ffn_norm, bq, bk, bv, q_norm, k_norm;
  // gpt-oss: the output projection's bias, the sink logits, the router's and experts' biases.
  Buffer bo, sinks, router_b, exp_gate_b, exp_up_b, exp_down_b;
  GpuMatrix wq, wk, wv, wo, gate, up, down;
  // Mixture of experts: the router and each of gate, up and down as one stacked matrix.
  GpuMatrix router, exp_gate, exp_up, exp_down;
};

// What a recording leaves behind: every row in host-visible memory, each row's arg-max, or each
// row's best tokens (topk.comp) and the rows flagged in full_ (copy_rows.comp); kTopMasked: the
// same after the rows' known tokens were read out and masked (mask_rows.comp). A top recording
// made `allowed` first masks the rows flagged in allow_ by their grammars (allow_rows.comp).
// kChain: kGreedy's one row, its token also fed to the next step's input (ForwardGreedyChain);
// kChainMasked: the same after the row's known tokens (the banned ones) were masked; kSampled:
// kChain's with the row's best tokens (topk.comp) and a token drawn from them (sample.comp)
// instead of its arg-max, a row per stream (ForwardSampledChains); kSampledMasked: kSampled's
// after each row's bans, bias and penalties (edit_rows.comp), its edited tokens merged into the
// draw.
enum class Out {
  kLogits,
  kGreedy,
  kTop,
  kTopMasked,
  kChain,
  kChainMasked,
  kSampled,
  kSampledMasked
};
// A step's attention kernel (AttentionTiles): attention.comp; attention_tiled.comp with tiles of
// kTiledAttentionRows query rows (runs of one sequence); the same with one token a tile (a decode
// batch: only the GQA group's heads share the K/V rows).
enum class AttnKernel { kToken, kTiled, kTiledSingles };
// The choices of a step's recording that change its speed and never its bits (the tuned ones).
struct StepWay {
  AttnKernel attn = AttnKernel::kToken;
  bool norm_tail = false;  // the o and down GEMMs normalize in their last workgroup (one token)
  bool wide_gemv = false;  // the Q8_0 and Q4_0 one-token GEMVs are gemm1w_* (GemvVariant::kTune)
  auto operator<=>(const StepWay&) const = default;
};

class VulkanForward final : public GpuForward {
 public:
  VulkanForward(const model::Model& model, engine::KvCache* cache, const GpuForwardOptions& o)
      : model_(model), c_(model.config()), cache_(cache), o_(o) {}

  Status Init(const DeviceSpec& device);
  // abandon is not read: a step is one submitted command buffer, too short to be worth cutting.
  Status Forward(const model::Batch& batch,
                 const std::atomic<bool>* /*abandon*/ = nullptr) override {
    return Run(batch, nullptr);
  }
  Status ForwardGreedy(const model::Batch& batch, int32_t* tokens) override {
    return Run(batch, tokens);
  }
  bool chains_greedy() const override { return true; }
  StatusOr<int64_t> ForwardGreedyChain(int32_t seq, int32_t token, int32_t pos, int64_t n,
                                       const std::function<bool(int32_t)>& on_token,
                                       std::span<const int32_t> banned = {}) override;
  bool chains_sampled() const override { return o_.top_k > 0; }
  int64_t chain_streams() const override { return o_.top_k > 0 ? chain_streams_ : 0; }
  StatusOr<std::vector<int64_t>> ForwardSampledChains(std::span<const model::ChainStream> streams,
                                                      int64_t n,
                                                      const model::ChainsDecide& decide) override;
  const float* logits(int64_t i) const override { return logits_.data() + i * c_.n_vocab; }
  int64_t n_outputs() const override { return n_outputs_; }
  int32_t top_capacity() const override { return o_.top_k; }
  model::TopRow top(int64_t i) const override {
    model::TopRow t = TopRowOf(top_host_.data() + i * (2 * o_.top_k + 2), o_.top_k, c_.n_vocab);
    if (i < static_cast<int64_t>(known_n_.size())) {
      t.n_known = known_n_[i];
      t.known_ids = known_ids_host_.data() + i * o_.max_known;
      t.known_logits = known_raw_host_.data() + i * o_.max_known;
    }
    return t;
  }
  int32_t top_known_capacity() const override { return o_.top_k > 0 ? o_.max_known : 0; }
  int64_t chain_known_capacity() const override { return chain_known_cap_; }
  int64_t rows_reduced() const override { return rows_reduced_; }
  int64_t rows_fetched() const override { return rows_fetched_; }
  Status FetchLogits(std::span<const int64_t> rows) override;
  double last_step_gpu_seconds() const override {
    return last_ != nullptr ? last_->last_gpu_seconds() : 0.0;
  }
  int last_step_dispatches() const override { return last_ != nullptr ? last_->dispatches() : 0; }
  int last_step_barriers() const override { return last_ != nullptr ? last_->barriers() : 0; }
  std::vector<KernelTime> last_step_profile() const override {
    return last_ != nullptr ? last_->Profile() : std::vector<KernelTime>{};
  }
  const DeviceInfo& device() const override { return ctx_->info(); }
  std::vector<std::string> step_tuning() const override;
  bool last_step_trial() const override { return last_trial_; }
  uint64_t device_bytes() const override { return ctx_->allocated_bytes(); }

 private:
  StatusOr<Buffer> Vector(const std::vector<float>& v);
  StatusOr<GpuMatrix> Matrix(const kernels::Matrix& w, const std::string& name);
  StatusOr<GpuMatrix> Experts(const std::vector<kernels::Matrix>& w, const std::string& name);
  // A batch's (Prepare) and a chain's (ForwardGreedyChain) checks: a token in the vocabulary, a
  // sequence of the cache, and a sequence starting at a position its cache reaches.
  Status CheckToken(int32_t tok) const;
  Status CheckSequence(int32_t seq) const;
  Status CheckStart(int32_t seq, int32_t pos) const;
  Status Prepare(const model::Batch& batch);
  // The forward; with greedy set, the rows' arg-max into greedy[] instead of logits_.
  Status Run(const model::Batch& batch, int32_t* greedy);
  // A step's tuned choices (AttentionTiles, NormTail): those fixed by the options, those tuned
  // as the tuners pick them. At most one tuner tries a way in a step, the other choice held at
  // its pick, so that neither's timings carry the other's changes; when one does, *trial says
  // which tuner, class and way to report the step's time to (tuner null: none).
  struct Trial {
    StepTuner* tuner = nullptr;
    StepTuner::Class c;
    int way = -1;
  };
  StepWay ChooseWay(int64_t n, bool long_runs, int64_t depth, Trial* trial);
  // way.attn: the attention kernel of the layers attention_tiled.comp takes.
  StatusOr<Recorder*> RecordingFor(int64_t n, int64_t n_out, Out out, bool allowed, StepWay way);
  // The chained step's recordings (Out::kChain, kSampled) of `rows` streams, one per way and
  // slot: consecutive steps of a chain take the two slots in turn, so a step is queued while the
  // one before it runs.
  // (A sampled recording of two or more rows reads its slot's chain_redo_ first: ChainRedoes.)
  StatusOr<Recorder*> ChainRecording(StepWay way, int slot, bool masked, bool sampled,
                                     int64_t rows);
  // Whether a chain of `rows` streams redoes an overruled stream's step (chain_redo.comp): a
  // sampled batch. A lone stream's chain ends at an overrule instead, which costs it one step
  // and a new chain's start rather than a dispatch and a barrier every step.
  static bool ChainRedoes(bool sampled, int64_t rows) { return sampled && rows > 1; }
  // A chain's checks: 1 to chain_streams_ streams of distinct sequences, each token, sequence,
  // start, length and ban valid.
  Status CheckChain(std::span<const model::ChainStream> streams, int64_t n) const;
  // A sampled chain stream's bans and edits fit chain_known_cap_ and are well formed.
  Status CheckEdits(const model::ChainStream& s, int64_t n) const;
  // Each stream's edits into chain_edit_ (edit_rows.comp's state) before a sampled chain.
  void WriteChainEdits(std::span<const model::ChainStream> streams);
  // Both chains: the checks, each stream's blocks and first step's input (setup, when set, once
  // they are known to fit), the steps two in flight, each cache cut to its taken steps.
  // on_step(i, p, whole) reads stream i's row of the step that fed its position p from the
  // rings and says the token taken (-1 when the row must come whole: then called again with
  // whole, the row's logits); more = false ends the stream there (and the chain: nothing more
  // is queued). A token other than the one fed to the step queued behind (the ring's) ends a
  // lone stream's chain; in a batch chain (redo: sampled, two or more streams) that queued
  // step's row is dropped and the step after it starts the stream again from the host's token
  // (chain_redo_). A batch's whole rows are copied behind the next step and judged as it ends
  // (no wait for the copy inside a step's turn); a lone stream waits for its row. Returns the
  // steps taken per stream.
  struct ChainTake {
    int32_t token = -1;
    bool more = true;
    int64_t draws = 0;  // the stream's uniforms drawn (ChainTurn::draws)
  };
  using ChainStep = std::function<StatusOr<ChainTake>(int64_t i, int64_t p, const float* whole)>;
  StatusOr<std::vector<int64_t>> Chain(std::span<const model::ChainStream> streams, int64_t n,
                                       bool sampled, const ChainStep& on_step,
                                       const std::function<void()>& setup = nullptr);
  // Rows of a sampled chain step's logits (slot's buffer, the banned tokens at -inf), copied to
  // the host-visible rows (logits_dev_, the same row numbers) behind the steps in flight:
  // submitted, not waited for (chain_fetch_[slot]->Wait()).
  Status FetchChainRows(int slot, std::span<const int64_t> rows);
  // After a step that was a tuner's trial: its time to the tuner, and the choice when settled.
  void ReportTrial(const Trial& trial, const Recorder& rec, double started);
  // rows: the device-local logits rows the step writes and reduces (default logits_local_);
  // redo: a batch of sampled chains' redone rows, read first (Kernels::ChainRedo).
  Status Record(Recorder* r, int64_t n, int64_t n_out, Out out, bool allowed, StepWay way,
                const Buffer* rows = nullptr, const Buffer* redo = nullptr);
  // y = W x for n tokens, quantizing x into xq_ first when W takes a quantized activation (Q8_0,
  // Q8_K, f16 or bf16 pairs: ActivationFor) and xq_ does not hold x in that format yet.
  // accumulate: y += W x (the residual add folded into the GEMM); bias: y = W x + bias.
  void Gemm(Recorder* r, const GpuMatrix& w, const Buffer& x, int64_t n, const Buffer& y,
            bool accumulate = false, const Buffer* bias = nullptr,
            const Kernels::RopeStore* rope = nullptr);
  // y_i = W_i x (+ bias_i) for independent products: when fusing and they read one activation
  // format, x is quantized once ahead and the products share one barrier after them.
  struct Product {
    const GpuMatrix* w;
    const Buffer* y;
    const Buffer* bias = nullptr;
    const Kernels::RopeStore* rope = nullptr;  // the RoPE / K/V-store epilogue
  };
  void Gemms(Recorder* r, const Buffer& x, int64_t n, std::initializer_list<Product> wy);
  // RMSNorm of n rows of x into xn_ (weights w); when fusing and the GEMMs that read xn_ next
  // (`next`) share one quantized activation format, that activation into xq_ in the same dispatch.
  void Norm(Recorder* r, const Buffer& x, const Buffer& w, int64_t n,
            std::initializer_list<const GpuMatrix*> next);
  // x_ += W a (the o and down products; a_ready: a is the activation w reads already, else it
  // is quantized as Gemm would), and with the norm tail (norm_w not null, tail_, one
  // token) the Norm(x_, *norm_w, next) after it from the same dispatch. True when it normalized.
  bool ResidualGemm(Recorder* r, const GpuMatrix& w, const Buffer& a, int64_t n, bool a_ready,
                    const Buffer* norm_w, std::initializer_list<const GpuMatrix*> next);
  // The activation Norm writes with xn_ for the GEMMs `next` (kF32: none), and the bookkeeping
  // after a norm wrote xn_ and that activation into xq_.
  Activation NormActivation(std::initializer_list<const GpuMatrix*> next) const;
  void Normalized(Activation act);
  bool QuantizeFor(Recorder* r, const GpuMatrix& w, const Buffer& x, int64_t n);
  // The same for stacked experts: n_slots slots reading activation rows slot / x_div of x
  // (n_x rows in all), experts from ids_.
  void GemmExperts(Recorder* r, const GpuMatrix& w, const Buffer& x, int64_t n_x, int64_t n_slots,
                   int64_t x_div, const Buffer& y);
  // The mixture-of-experts FFN of layer l from xn_, added into x_: router product, routing,
  // the selected experts' gate/up, SwiGLU, down, the weighted sum; no host round trip. One
  // token with o_.moe_tails: routed in the router GEMM's tail, summed in the down experts' GEMM's
  // and, with the norm tail, x_ normalized there with norm_w for `next` as ResidualGemm's tail
  // does (true then).
  bool RecordMoe(Recorder* r, const LayerBuffers& l, int64_t n, const Buffer* norm_w,
                 std::initializer_list<const GpuMatrix*> next);
  // Q, K and V of layer il from xn_ (its q/k/v biases and q/k norms where it has them), Q's and
  // K's RoPE and the K/V store into the cache at as's offsets: the general stage (Record takes
  // one dispatch, Kernels::GemmQkvRope, where it fits).
  void RecordQkv(Recorder* r, const LayerBuffers& l, int64_t n, const AttentionShape& as,
                 int64_t il);

  const model::Model& model_;
  const model::ModelConfig& c_;
  engine::KvCache* cache_;
  GpuForwardOptions o_;
  int64_t max_len_ = 0, max_blocks_ = 0, n_rows_ = 0;
  bool q8_cache_ = false;  // Q8_0 K/V rows instead of f16
  std::unique_ptr<Context> ctx_;
  Kernels k_;
  std::vector<LayerBuffers> layers_;
  Buffer output_norm_;
  GpuMatrix output_, embd_;
  const GpuMatrix* embd_table_ = nullptr;  // output_ when tied, else embd_
  // Host-written per step: tok_ [max_batch][4] (token, position, cache row, sequence), bt_ the
  // block tables [max_seqs][max_blocks], outs_ the batch rows that want logits.
  Buffer tok_, bt_, outs_;
  Buffer cs_, x_, xn_, xq_, q_, kbuf_, vbuf_, attn_, y_, gate_, up_, scores_, xo_;
  Buffer norm_counter_;  // [1] the norm tail's count of finished workgroups (zero between steps)
  // The K/V cache, a buffer per layer: [2 (K, V)][kv_heads][n_rows][row words]. Per layer, so
  // that the limit on a bound buffer (maxStorageBufferRange, 4 GiB - 1 on NVIDIA and AMD)
  // applies to one layer's K/V and not to the whole cache.
  std::vector<Buffer> cache_dev_;
  Buffer part_;  // split attention's partial sums (o_.attention_chunk)
  // Mixture of experts: router logits [max_batch][n_expert]; per (token, rank) slot the expert
  // and its weight [max_batch][k]; per slot the gate/up rows [.][n_ff_exp] and the output [.][e].
  Buffer moe_logits_, moe_ids_, moe_weights_, moe_gate_, moe_up_, moe_out_;
  // Batches of several tokens: the slots sorted by expert and their tiles (GroupSlots).
  Buffer moe_order_, moe_tiles_;
  // The down experts' sum tail's counters [SumCounterWords] (zero between dispatches).
  Buffer moe_counter_;
  // qwen3's head tails' counters (RopeStoreOf::kQNorm, kKNorm): [n_head], [n_head_kv] zeros.
  Buffer head_counter_q_, head_counter_k_;
  int64_t chunk_ = 0;    // positions per attention workgroup; 0: unsplit
  Buffer logits_dev_;    // host-visible: the rows Forward copies out
  Buffer logits_local_;  // device-local: the rows ForwardGreedy reduces on the device
  Buffer argmax_;        // host-visible: ForwardGreedy's tokens
  Buffer argmax_part_;   // [max outputs][n_vocab / 4096 chunks][2]: the arg-max's first pass
  Buffer top_, full_;    // host-visible: the rows' best tokens; flags of the rows copied whole
  Buffer top_part_;      // [max outputs][n_vocab / 4096 chunks][2 top_k + 2]: TopKChunks' output
  std::vector<uint32_t> top_host_;  // top_ of the last Forward
  // host-visible: per output row [count][max_known ids] of known tokens; their raw logits
  Buffer known_, known_raw_;
  std::vector<int32_t> known_n_;  // of the last Forward's rows
  std::vector<int32_t> known_ids_host_;
  std::vector<float> known_raw_host_;
  // host-visible: per output row [flag][grammar mask] (Kernels::AllowWords words; Batch::allowed)
  Buffer allow_;
  int64_t rows_reduced_ = 0, rows_fetched_ = 0;
  Out last_mode_ = Out::kLogits;
  // FetchLogits: copy_rows over the last Forward's n_outputs_ rows (re-recorded when it changes).
  std::unique_ptr<Recorder> fetch_;
  int64_t fetch_rows_ = -1;
  // By (tokens, logits rows, output, grammar masks, tuned choices).
  std::map<std::tuple<int64_t, int64_t, Out, bool, StepWay>, std::unique_ptr<Recorder>> recordings_;
  Recorder* last_ = nullptr;
  // Kept apart from recordings_ (cleared when full between any two steps) so that no step in
  // flight loses its recording: cleared only as a chain starts, past kMaxChainRecordings (8 per
  // StepWay and stream count: 2 slots, masked or not, greedy or sampled).
  std::map<std::tuple<StepWay, int, bool, bool, int64_t>, std::unique_ptr<Recorder>>
      chain_recordings_;
  static constexpr size_t kMaxChainRecordings = 64;
  // Streams a batch chain holds at most: the output rows, the sequences and 64 (each takes a
  // logits row in both chain slots' buffers).
  int64_t chain_streams_ = 1;
  // host-visible [chain_streams_][kChainRing]: the chained steps' tokens by stream and position
  // (argmax.comp's or sample.comp's feed).
  static constexpr int64_t kChainRing = 8;
  // Chained steps in flight: one running and one queued behind it hides the host's turn as long
  // as that turn is shorter than a step. More would only grow the steps dropped after a stop.
  static constexpr int kChainDepth = 2;
  Buffer chain_ring_;
  // host-visible, with top_: a sampled chain's draws [chain_streams_][kDrawWords]
  // (Kernels::kDrawHeaderWords words, then kMaxSampledChainSteps uniforms) and its steps' reduced
  // rows [chain_streams_][kChainRing][2 top_k + 2].
  Buffer chain_draw_, chain_top_;
  static constexpr int64_t kDrawWords = Kernels::kDrawHeaderWords + model::kMaxSampledChainSteps;
  // device-local [chain_streams_][n_vocab] per chain slot: a sampled step's logits, kept while
  // the next step runs (FetchChainRows); chain_fetch_: their copies to logits_dev_.
  Buffer chain_logits_[kChainDepth];
  // host-visible [chain_streams_][4] per chain slot: the redone rows of a batch of sampled
  // chains (chain_redo.comp's flag, token, position, draws), read by the slot's next step.
  Buffer chain_redo_[kChainDepth];
  std::unique_ptr<Recorder> chain_fetch_[kChainDepth];
  // host-visible, where top_k: a sampled chain's edits (bans, bias, penalties;
  // edit_rows.comp) [chain_streams_][Kernels::EditStateWords(chain_known_cap_)] and each step's
  // edited tokens [chain_streams_][kChainRing][Kernels::EditRingWords(chain_known_cap_)].
  Buffer chain_edit_, chain_known_;
  int64_t chain_known_cap_ = 0;                          // Kernels::kMaxChainKnown where top_k
  StepTuner attn_tuner_{"attention", "tiled", "token"};  // AttentionTiles::kTune
  // NormTail::kTune and GemvVariant::kTune, each one class: one-token steps at any depth.
  StepTuner tail_tuner_{"norm tail", "off", "on"};
  StepTuner gemv_tuner_{"Q8_0 / Q4_0 GEMV", "basic", "wide"};
  bool tail_stages_ = false;   // some o, down or MoE sum can take the norm tail (its stages twin)
  bool gemv_tunable_ = false;  // GemvVariant::kTune and some matrix is Q8_0 or Q4_0
  bool last_trial_ = false;    // the last Forward was a tuner's trial
  bool tail_ = false;          // while recording: the o and down GEMMs take the norm tail
  const Buffer* xq_holds_ = nullptr;      // while recording: the buffer xq_ is the quantization of
  Activation xq_act_ = Activation::kF32;  // ... in this format
  std::vector<float> logits_;
  int64_t n_outputs_ = 0;
  std::vector<int32_t> seq_next_;   // [max_seqs] next position per sequence, -1 if not in batch
  std::vector<int32_t> seq_first_;  // [max_seqs] first position in the batch
  std::vector<int32_t> touched_;    // sequences of the current batch
};

}  // namespace uf::gpu
