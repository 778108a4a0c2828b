// The serving engine: one thread owns the model's Decoder, the paged KV cache and every running
// sequence, and runs continuous batching. Each step the tier scheduler (src/scheduler) decides what
// one Batch holds: ultrafast work first, then as much default and flex work as the ultrafast
// streams' latency bound allows (decode tokens, then chunks of waiting prompts, at most
// prefill_chunk prompt tokens per step); one Forward runs it (one pass over the weights for all
// of them), its measured time trains the step-cost model, and sampled text goes to each request's
// channel. Requests join and leave only at step boundaries. Other threads only Submit, Cancel
// (through the channel) and read Stats.
//
// KV memory: a request is admitted when a sequence slot is free and the pool can hold its prompt.
// Default and flex sequences left out of a step for ultrafast work are paused with their KV kept;
// when a higher tier (or an older sequence of the same tier) needs slots or blocks, a sequence is
// evicted (its blocks released, its tokens kept) and recomputed later, so running out of KV never
// fails a request.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/kv_cache.h"
#include "engine/request.h"
#include "engine/seq_sampler.h"
#include "engine/speculative.h"
#include "grammar/token_mask.h"
#include "model/batch.h"
#include "model/decoder.h"
#include "model/model.h"
#include "scheduler/admission.h"
#include "scheduler/scheduler.h"
#include "scheduler/step_cost_model.h"
#include "scheduler/tiers.h"
#include "tokenizer/tokenizer.h"

namespace uf::engine {

// Vocabularies from this size up are sampled on the pool's threads when a step has several rows.
inline constexpr int32_t kParallelSampleMinVocab = 16384;

struct ServiceOptions {
  int max_seqs = 8;               // sequences decoded together
  int64_t ctx = 4096;             // tokens per sequence (prompt + output)
  int64_t kv_tokens = 0;          // KV pool size in tokens; 0 = ctx * max_seqs
  int64_t block_size = 16;        // tokens per KV block
  int64_t prefill_chunk = 256;    // prompt tokens per step, all sequences together
  int max_queue = 64;             // waiting requests beyond which Submit fails
  bool prefix_cache = true;       // reuse KV blocks of identical prompt prefixes
  KvType kv_type = KvType::kF16;  // K/V element type (the pool's bytes follow it)
  int n_threads = 0;              // 0 = ThreadPool::DefaultThreads()
  // Tests: runs on the engine thread before every step (e.g. to slow the engine down).
  std::function<void()> step_hook;
  // An ultrafast request that arrives while a step without ultrafast work runs abandons that
  // step at the next layer boundary (model::Decoder::Forward's abandon), so that its prompt starts
  // at once: a batch of 8-16 defaults takes 3-4 solo decode steps on a 2-core CPU, and waiting
  // for it put the first token ~2 solo steps later than alone. The abandoned sequences lose the
  // layers already run (EngineStats::abandoned_*), nothing else: their lengths do not advance and
  // the rerun rewrites the same K/V. Off: the step in flight finishes first (A/B runs; also
  // with the environment variable UF_PREEMPT_FOR_ULTRAFAST=0).
  bool preempt_for_ultrafast = true;

  // Service tiers. `auto` requests ask for auto_tier; only ultrafast can fall back (to default).
  scheduler::ServiceTier auto_tier = scheduler::ServiceTier::kDefault;
  // Slack, flex max wait and probes; max_step_tokens and max_prefill_tokens are set from
  // max_seqs and prefill_chunk.
  scheduler::SchedulerOptions scheduler;
  scheduler::AdmissionOptions admission;  // ultrafast capacity
  // Tests and benchmarks: fixed step costs instead of the online fit (must outlive the service).
  const scheduler::StepCostModel* cost_model = nullptr;
  // Tests: the clock the tier scheduler and admission read and events are stamped with (a fake
  // one advanced per step makes waits count steps, not a loaded machine's seconds; must outlive
  // the service and be safe to read from any thread). nullptr = the system clock.
  const Clock* clock = nullptr;
  // Speculative decoding (engine/speculative.h): requests that ask nothing speculate with n-gram
  // drafts on the ultrafast tier when this is set, and not elsewhere.
  bool ultrafast_speculation = true;
  int spec_k = 8;  // drafts per step of a speculating sequence when it does not say
  // Drafts verified per step, all sequences together (spare logits rows of the decoder).
  int64_t max_draft_tokens = 32;
  // Tests: fixed verify costs for every sequence's speculation controller instead of measured
  // step times, so how many drafts it verifies does not depend on the machine's load.
  std::optional<SpecCostModel> spec_cost;
  // The online fit, to carry what an earlier service learned (benchmarks; one service at a time
  // may use it: the engine thread updates it unlocked). nullptr = a fresh one.
  std::shared_ptr<scheduler::OnlineStepCostModel> learned_cost;
  // A lone stream (the only request) on a forward that chains steps (a GPU's) decodes with each
  // step's token fed to the next on the device, the next step queued while one runs, so the
  // device never waits for the engine's turn between tokens; so does a decode batch of several
  // streams when the scheduler's plan is to decode every running stream and nothing else (no
  // request waiting, no prompt, pause or probe), each stream sampled as below (greedy ones
  // drawn with top-k 1), for up to 32 steps before the scheduler plans again:
  //  - greedy (an arg-max: no bias or penalties; bans such as ignore_eos's are masked on the
  //    device): BatchForward::ForwardGreedyChain;
  //  - sampled without bias or penalties, top-k at most the forward's top_capacity() or none:
  //    ForwardSampledChains, the device drawing from the row's best tokens with the request's own
  //    uniforms and the sampler checking every draw (a draw it overrules ends a lone stream's
  //    chain and costs a batch's stream one step; a row the best tokens cannot decide is fetched
  //    whole).
  // Not with a grammar, bias or penalties. A speculating stream chains while its controller
  // verifies no drafts; the chain ends after the token that makes it verify some. Each token is
  // emitted as its step ends; the chain stops within two steps of any other arrival, a
  // cancellation or a request's end. The same tokens either way.
  bool chain_steps = true;
  // Makes the forward pass the engine steps instead of the CPU decoder (serve --device vulkan:
  // gpu::GpuForward). It gets the engine's KvCache, created without host storage (the forward
  // keeps K/V itself, paged by the cache's block tables), and the batch sizes the engine uses.
  // Continuous batching, prefix reuse, the tier scheduler and speculation run unchanged on it.
  std::function<StatusOr<std::unique_ptr<model::BatchForward>>(KvCache*,
                                                               const model::DecoderOptions&)>
      make_forward;
};

class Service {
 public:
  // model and tokenizer must outlive the service. Starts the engine thread.
  static StatusOr<std::unique_ptr<Service>> Create(const model::Model& model,
                                                   const Tokenizer& tokenizer,
                                                   const ServiceOptions& options);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Queues a request. InvalidArgument for an empty prompt, OutOfRange when the prompt leaves no
  // room in the context, ResourceExhausted when the queue is full or (message starting with
  // scheduler::kTierCapacityExceeded) when an explicit ultrafast request finds every ultrafast
  // stream taken; then *retry_after_s (if given) gets the Retry-After estimate. Unavailable after
  // Shutdown. max_tokens is clamped to the room left in the context.
  StatusOr<std::shared_ptr<RequestChannel>> Submit(GenerationRequest request,
                                                   int64_t* retry_after_s = nullptr);

  // Stops the engine thread; unfinished requests get a final kError event (Unavailable).
  // Idempotent.
  void Shutdown();

  EngineStats Stats() const;
  const ServiceOptions& options() const { return options_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const model::Model& model() const { return model_; }

 private:
  struct Sequence;

  Service(const model::Model& model, const Tokenizer& tokenizer, const ServiceOptions& options);
  void Loop();
  // One continuous-batching step; false when there was nothing to do.
  bool Step();
  // Runs the lone stream's steps chained on the device (ServiceOptions::chain_steps)
  // when the service holds just that; false when it does not apply or no step ran.
  bool ChainSteps();
  // The same for a decode batch of every running stream, when `plan` is just that.
  bool ChainBatch(const scheduler::StepPlan& plan);
  // How a sequence's steps may chain now: as a greedy chain (ForwardGreedyChain), a sampled one
  // (ForwardSampledChains), both or neither.
  struct ChainWay {
    bool greedy = false, sampled = false;
  };
  ChainWay ChainWayOf(Sequence& seq) const;
  // A constrained sequence's token in a sampled chain, from the device's unmasked row: its
  // grammar's mask applied to the row's best tokens (the pick SampleOutputs makes from a row
  // masked on the device), or to whole; -1 when the row is needed whole.
  int32_t JudgeConstrained(Sequence& seq, const model::TopRow& row, const float* whole);
  // Steps a sequence may still take (max_tokens, the context).
  int64_t ChainRoom(const Sequence& seq) const;
  // The chain of seqs, n steps at most (greedy: one sequence's ForwardGreedyChain), each token
  // emitted as its step ends; false when no step ran.
  bool RunChain(std::span<Sequence* const> seqs, int64_t n, bool greedy);
  // After a step (or a chain) that ran: drops the finished sequences, flushes the streams' held
  // events when due, publishes the stats.
  void EndStep();
  scheduler::StepInput SchedulerInput() const;
  void Apply(const scheduler::StepPlan& plan);
  // Fills batch_ from the plan; returns the composition actually built.
  scheduler::BatchComposition BuildBatch(const scheduler::StepPlan& plan);
  void Evict(size_t index);
  // The tokens picked for one sequence's logits rows this step (one, or up to 1 + drafts when
  // it speculated: sampling stops at the first row whose token differs from its draft), and
  // their logprobs when the request asks.
  struct Sampled {
    std::vector<int32_t> tokens;
    std::vector<TokenLogprob> logprobs;
    int accepted = 0;    // drafts confirmed
    int64_t fetch = -1;  // the row to fetch whole before sampling resumes there (SampleReduced)
  };
  // Proposes drafts for every decoding sequence that speculates (before the plan).
  void PrepareDrafts();
  // seq's proposal for this step and how many of its drafts the step verifies (seq.drafts).
  void DraftFor(Sequence& seq);
  // Samples every sequence's rows of the step (sequences in parallel when it pays), then emits
  // them in order and rolls back the KV of rejected drafts.
  void SampleOutputs(double step_seconds);
  // Marks the batch's rows whose sequence samples from the row's best tokens alone
  // (Batch::top_only), when the forward reduces rows on its device.
  void MarkTopOnly();
  // seq.mask for the step: what its grammar allows next, within the tokens it has left.
  void FindMask(Sequence& seq);
  // Appends the token to the sequence and sends its text (or the final event) to the client.
  void Emit(Sequence& seq, int32_t token, TokenLogprob* logprob);
  void Finish(Sequence& seq, FinishReason reason, Status error = OkStatus());
  // Fills the final event's counts, releases the sequence, then sends the event.
  void SendFinal(Sequence& seq, GenerationEvent ev);
  void Release(Sequence& seq);
  // Release's part on the engine thread's cache: the slot's prefix published, its blocks freed.
  void ReleaseSlot(Sequence& seq);
  void PublishStats();
  // The constraint of a grammar, shared by every request with the same one (its automaton and
  // masks are reused); built on first use, with the vocabulary trie.
  std::shared_ptr<grammar::TokenConstraint> ConstraintFor(
      const std::shared_ptr<const grammar::Grammar>& g);

  const model::Model& model_;
  const Tokenizer& tokenizer_;
  ServiceOptions options_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<model::BatchForward> decoder_;  // model::Decoder or options_.make_forward's
  SystemClock system_clock_;
  const Clock* clock_ = options_.clock != nullptr ? options_.clock : &system_clock_;
  std::shared_ptr<scheduler::OnlineStepCostModel> online_cost_;  // engine thread only
  std::unique_ptr<scheduler::Scheduler> scheduler_;
  std::unique_ptr<scheduler::TierAdmission> admission_;  // thread-safe
  std::atomic<int64_t> next_id_{1};

  // Shared with Submit (guarded by mu_).
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> incoming_;
  bool stopping_ = false;
  std::atomic<int64_t> queued_{0};  // incoming_ + waiting_
  // An ultrafast request is in incoming_ (set by Submit, cleared when the engine takes
  // incoming_, both under mu_): the abandon flag of a step without ultrafast work.
  std::atomic<bool> ultrafast_arrived_{false};

  // Engine thread only.
  std::deque<std::unique_ptr<Sequence>> waiting_;   // no slot: new or evicted
  std::vector<std::unique_ptr<Sequence>> running_;  // holding a slot, admission order
  std::vector<int> free_slots_;                     // KV sequence ids not in use
  model::Batch batch_;
  std::vector<Sequence*> batch_outputs_;  // sequences with logits this step, batch order
  std::vector<int64_t> batch_first_row_;  // [batch_outputs_] its first logits row
  std::vector<std::pair<Sequence*, int64_t>> batch_feeds_;  // tokens fed per sequence this step
  std::vector<int32_t> eog_ids_;  // end-of-generation tokens (banned when ignoring EOS)
  std::vector<Sampled> sampled_;  // [batch_outputs_] this step's tokens
  // A sampled chain's draws per stream (ChainDrawFor).
  std::vector<std::vector<float>> chain_uniforms_;
  std::vector<ChainEditsHeld> chain_edits_;  // each chained stream's bias and penalties
  // JudgeConstrained's allowed entries of a row.
  std::vector<int32_t> judge_ids_;
  std::vector<float> judge_logits_;
  std::vector<float> judge_known_;  // a row's known tokens' raw logits, the forbidden at -inf
  std::shared_ptr<const grammar::TokenTrie> token_trie_;  // built by the first grammar request
  std::unordered_map<std::string, std::shared_ptr<grammar::TokenConstraint>> constraints_;

  // Stats, written by the engine thread.
  std::atomic<int64_t> running_count_{0};
  std::atomic<int64_t> kv_used_{0}, kv_cached_{0}, kv_free_{0};
  std::atomic<int64_t> prefix_hit_tokens_{0}, prompt_tokens_computed_{0};
  std::atomic<int64_t> steps_{0}, chained_steps_{0}, chain_overruled_{0}, preemptions_{0};
  std::atomic<int64_t> abandoned_steps_{0}, abandoned_layers_{0};
  std::atomic<int64_t> rows_fetched_{0};
  std::vector<int64_t> fetch_rows_;  // SampleOutputs: reduced rows to copy back whole
  std::atomic<double> abandoned_seconds_{0.0};
  std::array<std::atomic<int64_t>, scheduler::kNumServiceTiers> tier_running_{}, tier_tokens_{},
      tier_paused_{};
  std::atomic<int64_t> rejections_{0}, fallbacks_{0};
  std::atomic<int64_t> spec_drafted_{0}, spec_accepted_{0}, spec_verify_steps_{0};
  std::array<std::atomic<int64_t>, kMaxSpecK + 1> spec_hist_{};

  std::thread thread_;
  std::once_flag shutdown_once_;
};

}  // namespace uf::engine
