// The engine's per-request state (private to Service): shared by service.cc (admission, the
// scheduler's plan, the batch) and service_output.cc (sampling and emitting a step's rows).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "engine/seq_sampler.h"
#include "engine/service.h"
#include "engine/speculative.h"
#include "engine/stop_matcher.h"

namespace uf::engine {

struct Service::Sequence {
  Sequence(GenerationRequest r, const Tokenizer& tokenizer)
      : request(std::move(r)), detok(tokenizer), stop(request.stop) {
    tokens = request.prompt;
    n_prompt = static_cast<int64_t>(tokens.size());
    // Prime the decoder with the last prompt token so the first generated piece keeps its
    // leading space (SPM "▁word") and a character split across the prompt boundary completes.
    detok.Push(tokens.back());
  }

  std::shared_ptr<RequestChannel> channel = std::make_shared<RequestChannel>();
  int64_t id = 0;  // unique per service: the scheduler's and TierAdmission's key
  scheduler::ServiceTier tier = scheduler::ServiceTier::kDefault;  // serving tier
  double arrival = 0.0;                                            // Clock time of Submit
  // NowSeconds() when Submit began and when it queued the request (the debug log of an
  // ultrafast first token).
  double submitted = 0.0, queued = 0.0;
  double last_served = 0.0;  // Clock time of its last step with work; arrival before that
  bool preempted = false;    // paused for ultrafast work, KV kept
  GenerationRequest request;
  std::vector<int32_t> tokens;  // [n_prompt + n_generated] prompt, then sampled tokens
  int64_t n_prompt = 0;
  int64_t n_computed = 0;  // positions whose K/V are in the cache
  int64_t n_generated = 0;
  int64_t cached_tokens = 0;  // prompt tokens served by the prefix cache at first admission
  bool admitted = false;
  int slot = -1;  // KV sequence id while running
  bool done = false;
  StreamingDecoder detok;
  StopMatcher stop;
  // Made at first admission: it holds a few vocabulary-sized buffers, too many for the queue.
  std::optional<SequenceSampler> sampler;

  // Speculative decoding (off unless the request or its tier asks).
  SpeculationRequest spec;
  std::unique_ptr<NgramDrafter> drafter;  // made at first admission
  std::optional<SpecController> controller;
  std::vector<int32_t> proposal;  // this step's proposal (PrepareDrafts)
  int64_t drafts = 0;             // drafts wanted, then (BuildBatch) granted this step
  bool decoding = false;          // this step feeds it one token (plus drafts), not a prompt
  bool top_only = false;          // this step's rows come back as their best tokens only
  bool reduced = false;  // top_only for a sampler without top-k: SampleReduced, else fetched
  // A chain ran no step (no KV blocks for it, say): the next step runs plain
  // (Service::ChainSteps), once.
  bool chain_failed = false;
  // In the chain running now: a sequence that finishes inside it keeps its slot until the chain
  // has returned (the steps queued behind its end still write there).
  bool in_chain = false;
  // A constrained stream's chained draws: the rate at which its grammar overruled the device's
  // draw (a moving average over about 64 draws), the plain steps it waits before chaining again,
  // and the next such wait (Service::JudgeConstrained, RunChain).
  double chain_miss_rate = 0.0;
  int64_t chain_wait = 0, chain_backoff = 0;
  // With top_only: the tokens each row's sampler edits (bias, bans, penalties), rows 0..drafts
  // one after another from known_begin[j], which the device reads out raw (Batch::known_ids).
  std::vector<int32_t> known, known_begin;
  SpecStats spec_stats;

  // Constrained decoding (request.grammar): the automaton state after the generated tokens,
  // this step's mask and the masked logits row it samples from. mask_fresh: the mask was found
  // before the step (MarkTopOnly, for the device's reduction) and is still this step's.
  std::shared_ptr<grammar::TokenConstraint> constraint;
  grammar::StateId grammar_state = grammar::kDead;
  std::vector<uint64_t> mask;
  bool mask_fresh = false;
  std::vector<float> masked_logits;

  int64_t to_feed() const { return static_cast<int64_t>(tokens.size()) - n_computed; }
};

}  // namespace uf::engine
