// What a client asks the serving engine for, and what flows back: one GenerationRequest in, a
// stream of GenerationEvents out through a RequestChannel shared by the HTTP thread (reader) and
// the engine thread (writer).
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"
#include "scheduler/tiers.h"

namespace uf::engine {

struct RequestSampling {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;
  int32_t top_k = 0;  // 0 = off
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repeat_penalty = 1.0f;
  uint64_t seed = 0;
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id -> bias added to its logit
};

// Drafts per verify step at most (the server's and the CLI's upper limit for k).
inline constexpr int kMaxSpecK = 16;

// Speculative decoding modes (engine/speculative.h). The server drafts with kNgram (prompt
// lookup, plus the request's prediction text); kDraft and kOracle are for `run` and `bench`.
enum class SpecMode { kOff, kNgram, kDraft, kOracle };

struct SpeculationRequest {
  SpecMode mode = SpecMode::kOff;
  int k = 8;  // drafts per step at most, [1, kMaxSpecK]; fewer when acceptance is low
};

struct GenerationRequest {
  std::vector<int32_t> prompt;  // [n_prompt] token ids, BOS included when wanted
  int64_t max_tokens = 16;      // generated tokens at most (EOS/stop may end earlier)
  RequestSampling sampling;
  std::vector<std::string> stop;  // stop strings, matched on the decoded text
  bool ignore_eos = false;        // keep generating past end-of-generation tokens (benchmarks)
  int top_logprobs = -1;          // -1: no logprobs; n >= 0: chosen token + n alternatives
  // The tier asked for; nullopt = `auto` (the service's auto_tier, which falls back to default
  // when ultrafast is full).
  std::optional<scheduler::ServiceTier> service_tier;
  // nullopt: the tier's default (the service's ultrafast_speculation for ultrafast, off
  // elsewhere).
  std::optional<SpeculationRequest> speculation;
  // Tokens the output is expected to resemble (OpenAI `prediction`): n-gram drafts come from
  // them first. Speculation defaults to n-gram when they are given.
  std::vector<int32_t> prediction;
  // Constrained decoding (src/grammar): only tokens the grammar allows are sampled, and the
  // request stops once the grammar is complete. Built by the caller (the HTTP thread compiles
  // the JSON schema); the engine caches its automaton and masks by the grammar's fingerprint.
  // Such requests do not speculate.
  std::shared_ptr<const grammar::Grammar> grammar;
};

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };

// "stop", "length", ...: the OpenAI finish_reason spelling.
const char* FinishReasonName(FinishReason reason);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // [top_logprobs] best alternatives, best first
};

struct GenerationEvent {
  std::string text;                    // new output text; stop-string safe, valid UTF-8
  std::vector<TokenLogprob> logprobs;  // tokens sampled since the previous event (if asked)
  int64_t n_tokens = 0;                // tokens sampled since the previous event
  double time = 0.0;                   // NowSeconds() when the newest token was sampled
  // The tier serving the request (after any fallback); the same on every event of a request.
  scheduler::ServiceTier service_tier = scheduler::ServiceTier::kDefault;
  FinishReason finish = FinishReason::kNone;
  Status error;               // with finish == kError
  std::string stop_sequence;  // final event: the stop string that ended it ("" for EOS, ...)
  // Set on the final event (finish != kNone).
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache
  int64_t completion_tokens = 0;
  SpecMode speculation = SpecMode::kOff;  // the mode the request ran with
  int64_t drafted_tokens = 0;             // drafts verified
  int64_t accepted_tokens = 0;            // drafts the model agreed with (part of completion)
};

// A snapshot of the engine for /metrics and /health.
struct EngineStats {
  int64_t queue_depth = 0;  // requests waiting for a sequence slot or KV blocks
  int64_t running = 0;      // sequences in the running batch
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;          // held by running sequences
  int64_t kv_blocks_cached = 0;        // unreferenced prefix-cache blocks (reclaimable)
  int64_t kv_blocks_free = 0;          // neither (cached blocks are not counted as free)
  int64_t kv_block_bytes = 0;          // K and V of one block, all layers (the cache's type)
                                       // but the sliding-window ones in their own pool:
  int64_t kv_window_bytes = 0;         // K and V of that pool (KvCache::swa_bytes), 0 if none
  int64_t prefix_hit_tokens = 0;       // prompt tokens served from the prefix cache, total
  int64_t prompt_tokens_computed = 0;  // prompt tokens run through the model, total
  int64_t steps = 0;                   // forward passes, total
  // Of those, steps chained on the device (ServiceOptions::chain_steps): a lone stream's, or a
  // decode batch's of several streams (a step each, however many streams)
  int64_t chained_steps = 0;
  // Sampled rows of chained steps whose device draw the host's sampler overruled from the
  // reduced row (each cost its stream the step queued behind it, and ended a lone stream's
  // chain): a share well above a few in 10,000 means the device's draw (sample.comp) disagrees
  // with the sampler. (Rows drawn whole count in rows_fetched; their draws in the tail cost a
  // step as well.)
  int64_t chain_overruled = 0;
  int64_t preemptions = 0;  // sequences evicted for KV blocks and recomputed later, total
  // Default/flex steps abandoned mid-forward because an ultrafast request arrived (its first
  // token must not wait for the step in flight, ServiceOptions::preempt_for_ultrafast), totals:
  // the steps, the layers they had run and the seconds those took (work thrown away).
  int64_t abandoned_steps = 0;
  // Rows a device reduced to their best tokens for a sampler without top-k, whose draw then
  // needed the whole row (Sampler::SampleReduced's fallback; fetched after the step), total.
  int64_t rows_fetched = 0;
  int64_t abandoned_layers = 0;
  double abandoned_seconds = 0.0;

  // Per serving tier, indexed by scheduler::ServiceTier.
  struct Tier {
    int64_t running = 0;           // sequences holding a slot now
    int64_t generated_tokens = 0;  // total
    int64_t paused = 0;            // running sequences paused for ultrafast work (KV kept), total
  };
  std::array<Tier, scheduler::kNumServiceTiers> tiers{};
  int64_t ultrafast_rejections = 0;  // explicit ultrafast requests refused (capacity), total
  int64_t ultrafast_fallbacks = 0;   // auto requests served as default (capacity), total

  // Speculative decoding, totals.
  int64_t spec_drafted = 0;       // drafts verified
  int64_t spec_accepted = 0;      // drafts accepted
  int64_t spec_verify_steps = 0;  // sequence steps that verified at least one draft
  // [accepted drafts in a verify step, 0..kMaxSpecK] -> verify steps
  std::array<int64_t, kMaxSpecK + 1> spec_accepted_hist{};
};

// One request's mailbox. The engine thread Pushes events; the HTTP thread Pops them. Either side
// may Cancel; the engine frees the sequence at its next step boundary.
class RequestChannel {
 public:
  void Push(GenerationEvent event);
  // Moves every queued event into *out (cleared first), waiting up to timeout_s for at least
  // one. Returns false on timeout.
  bool Pop(std::vector<GenerationEvent>* out, double timeout_s);
  // A reader that only needs the final event (a non-streamed response): Push wakes it only for
  // that one; Pop still returns whatever is queued when its timeout ends. Waking an HTTP thread
  // per token cost a cache-resident model ~10% of its decode speed on a 2-core box.
  void WakeOnFinalOnly();
  // A streaming reader: Push wakes it at most once per `seconds` (the first and the final event
  // always at once); the engine calls FlushIfDue after every step, so a token waits for the
  // reader at most max(seconds, one step). At 10k tokens/s a wake (futex, a context switch and
  // an SSE write) per token cost a 2-core box 25-35% of its decode speed; at 1 ms several tokens
  // share a chunk, which no reader can see, and slower models are unaffected.
  void SetMinWakeInterval(double seconds);
  // Wakes the reader for events Push held back, once the interval has passed or when forced
  // (the engine is going idle).
  void FlushIfDue(double now, bool force = false);
  // Wake-ups sent to the reader so far (tests count them: each is a context switch).
  int64_t wakeups() const { return wakeups_.load(std::memory_order_relaxed); }
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GenerationEvent> events_;
  // Guarded by mu_.
  bool final_only_ = false;
  double min_wake_interval_s_ = 0.0;
  double last_wake_ = -1e300;  // NowSeconds() of the last wake-up
  bool pending_ = false;       // events pushed since then without a wake-up
  std::atomic<bool> cancelled_{false};
  std::atomic<int64_t> wakeups_{0};
};

}  // namespace uf::engine
