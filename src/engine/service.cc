#include "engine/service.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>

#include "base/clock.h"
#include "base/log.h"
#include "engine/service_sequence.h"

namespace uf::engine {

Service::Service(const model::Model& model, const Tokenizer& tokenizer,
                 const ServiceOptions& options)
    : model_(model), tokenizer_(tokenizer), options_(options) {}

StatusOr<std::unique_ptr<Service>> Service::Create(const model::Model& model,
                                                   const Tokenizer& tokenizer,
                                                   const ServiceOptions& options) {
  ServiceOptions o = options;
  if (o.max_seqs < 1 || o.max_seqs > 1024) {
    return InvalidArgumentError("serve: max_seqs must be in [1, 1024]");
  }
  if (o.ctx < 2) return InvalidArgumentError("serve: ctx must be at least 2");
  if (o.block_size < 1 || o.prefill_chunk < 1 || o.max_queue < 0) {
    return InvalidArgumentError("serve: block_size and prefill_chunk must be positive");
  }
  if (o.spec_k < 1 || o.spec_k > kMaxSpecK || o.max_draft_tokens < 0 || o.max_draft_tokens > 1024) {
    return InvalidArgumentError("serve: spec_k must be in [1, " + std::to_string(kMaxSpecK) +
                                "] and max_draft_tokens in [0, 1024]");
  }
  if (tokenizer.vocab_size() > model.config().n_vocab) {
    return InvalidArgumentError("serve: the tokenizer has more tokens than the model's vocabulary");
  }
  if (o.kv_tokens == 0) o.kv_tokens = o.ctx * o.max_seqs;
  // One sequence must always fit, so a request alone can never run out of blocks.
  o.kv_tokens = std::max(o.kv_tokens, o.ctx);
  if (o.n_threads <= 0) o.n_threads = ThreadPool::DefaultThreads();
  // A/B runs through `serve`: UF_PREEMPT_FOR_ULTRAFAST=0 lets the step in flight finish.
  if (const char* env = std::getenv("UF_PREEMPT_FOR_ULTRAFAST"); env && std::string(env) == "0") {
    o.preempt_for_ultrafast = false;
  }
  o.scheduler.max_step_tokens = o.max_seqs + o.prefill_chunk + o.max_draft_tokens;
  o.scheduler.max_prefill_tokens = o.prefill_chunk;
  o.scheduler.max_draft_tokens = o.max_draft_tokens;
  UF_RETURN_IF_ERROR(o.scheduler.Validate());
  if (o.admission.ultrafast_capacity < 0 || o.admission.max_retry_after_seconds < 1.0 ||
      !(o.admission.initial_token_seconds > 0.0)) {
    return InvalidArgumentError(
        "serve: ultrafast capacity must be >= 0, max Retry-After >= 1 s and the initial token "
        "time positive");
  }

  std::unique_ptr<Service> s(new Service(model, tokenizer, o));
  s->online_cost_ =
      o.learned_cost ? o.learned_cost : std::make_shared<scheduler::OnlineStepCostModel>();
  s->scheduler_ = std::make_unique<scheduler::Scheduler>(
      o.scheduler, o.cost_model != nullptr ? o.cost_model : s->online_cost_.get(), s->clock_);
  s->admission_ = std::make_unique<scheduler::TierAdmission>(o.admission, s->clock_);
  const model::ModelConfig& c = model.config();
  KvCacheOptions ko;
  ko.n_layer = c.n_layer;
  ko.n_head_kv = c.n_head_kv;
  ko.head_dim = c.head_dim;
  ko.block_size = o.block_size;
  ko.n_blocks = KvCacheOptions::BlocksFor(o.kv_tokens, o.max_seqs, o.block_size);
  ko.max_seqs = o.max_seqs;
  ko.max_seq_len = o.ctx;
  ko.type = o.kv_type;
  ko.host_storage = !o.make_forward;
  // A step appends at most a prefill chunk or a token and its drafts to a sequence; rejected
  // drafts roll it back by up to max_draft_tokens + 1.
  model::UseSlidingWindowPool(c, o.prefill_chunk + 1 + o.max_draft_tokens + o.max_draft_tokens + 1,
                              &ko);
  UF_ASSIGN_OR_RETURN(s->cache_, KvCache::Create(ko));
  s->pool_ = std::make_unique<ThreadPool>(o.n_threads);
  model::DecoderOptions dopt;
  dopt.max_batch = o.max_seqs + o.prefill_chunk + o.max_draft_tokens;
  dopt.max_outputs = o.max_seqs + o.max_draft_tokens;
  if (o.make_forward) {
    UF_ASSIGN_OR_RETURN(s->decoder_, o.make_forward(s->cache_.get(), dopt));
  } else {
    UF_ASSIGN_OR_RETURN(s->decoder_,
                        model::Decoder::Create(model, s->cache_.get(), dopt, s->pool_.get()));
  }
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.IsEndOfGeneration(id)) s->eog_ids_.push_back(id);
  }
  for (int slot = o.max_seqs - 1; slot >= 0; --slot) s->free_slots_.push_back(slot);
  s->batch_.Reserve(dopt.max_batch);
  s->PublishStats();
  s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  return s;
}

Service::~Service() { Shutdown(); }

StatusOr<std::shared_ptr<RequestChannel>> Service::Submit(GenerationRequest request,
                                                          int64_t* retry_after_s) {
  const int64_t n = static_cast<int64_t>(request.prompt.size());
  if (n == 0) return InvalidArgumentError("the prompt is empty");
  if (n >= options_.ctx) {
    return OutOfRangeError("the prompt has " + std::to_string(n) +
                           " tokens, but the context holds " + std::to_string(options_.ctx) +
                           " tokens including at least one generated token");
  }
  const int64_t n_vocab = model_.config().n_vocab;
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= n_vocab) {
      return InvalidArgumentError("prompt token " + std::to_string(t) +
                                  " is outside the vocabulary");
    }
  }
  request.max_tokens = std::clamp<int64_t>(request.max_tokens, 1, options_.ctx - n);
  UF_RETURN_IF_ERROR(ToSamplingParams(request.sampling, request.max_tokens).Validate());
  for (const auto& [id, bias] : request.sampling.logit_bias) {
    if (id < 0 || id >= n_vocab) return InvalidArgumentError("logit_bias token out of range");
  }
  for (int32_t t : request.prediction) {
    if (t < 0 || t >= n_vocab) return InvalidArgumentError("prediction token out of range");
  }
  if (request.speculation) {
    const SpeculationRequest& sp = *request.speculation;
    if (sp.mode != SpecMode::kOff && sp.mode != SpecMode::kNgram) {
      return InvalidArgumentError("speculation: this server drafts with 'ngram' only");
    }
    if (sp.k < 1 || sp.k > kMaxSpecK) {
      return InvalidArgumentError("speculation: k must be in [1, " + std::to_string(kMaxSpecK) +
                                  "]");
    }
  }
  scheduler::RequestedTier requested{options_.auto_tier, true};
  if (request.service_tier) requested = {*request.service_tier, false};
  const int64_t max_tokens = request.max_tokens;
  auto seq = std::make_unique<Sequence>(std::move(request), tokenizer_);
  seq->id = next_id_++;
  seq->arrival = seq->last_served = clock_->Now();
  seq->submitted = NowSeconds();
  std::shared_ptr<RequestChannel> channel = seq->channel;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return UnavailableError("the server is shutting down");
    const int64_t free_slots = options_.max_seqs - running_count_.load();
    if (queued_.load() >= options_.max_queue + std::max<int64_t>(free_slots, 0)) {
      return ResourceExhaustedError("the request queue is full (" + std::to_string(queued_.load()) +
                                    " waiting)");
    }
    // Under mu_, after the queue check: a request refused for the queue holds no stream.
    const scheduler::AdmissionResult tier = admission_->Admit(seq->id, requested, max_tokens);
    if (!tier.admitted) {
      ++rejections_;
      if (retry_after_s != nullptr) *retry_after_s = tier.retry_after_seconds;
      return tier.ToStatus();
    }
    if (tier.fell_back) ++fallbacks_;
    seq->tier = tier.tier;
    // Speculation: as asked, else n-gram for ultrafast (when enabled) or when a prediction is
    // given, else off.
    if (seq->request.grammar) {
      // Drafts would be verified against unmasked rows; constrained requests decode plainly.
      seq->spec = {SpecMode::kOff, options_.spec_k};
    } else if (seq->request.speculation) {
      seq->spec = *seq->request.speculation;
    } else if ((tier.tier == scheduler::ServiceTier::kUltrafast &&
                options_.ultrafast_speculation) ||
               !seq->request.prediction.empty()) {
      seq->spec = {SpecMode::kNgram, options_.spec_k};
    }
    const bool ultrafast = seq->tier == scheduler::ServiceTier::kUltrafast;
    seq->queued = NowSeconds();
    incoming_.push_back(std::move(seq));
    ++queued_;
    if (ultrafast && options_.preempt_for_ultrafast) {
      ultrafast_arrived_.store(true, std::memory_order_relaxed);
    }
  }
  cv_.notify_one();
  return channel;
}

void Service::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& seq : incoming_) {
      admission_->Release(seq->id);
      GenerationEvent ev;
      ev.service_tier = seq->tier;
      ev.finish = FinishReason::kError;
      ev.error = UnavailableError("the server is shutting down");
      seq->channel->Push(std::move(ev));
    }
    incoming_.clear();
    queued_ = 0;
  });
}

EngineStats Service::Stats() const {
  EngineStats s;
  s.queue_depth = queued_.load();
  s.running = running_count_.load();
  s.kv_blocks_total = cache_->n_blocks();
  s.kv_block_bytes = static_cast<int64_t>(cache_->bytes_per_token()) * cache_->block_size();
  s.kv_window_bytes = static_cast<int64_t>(cache_->swa_bytes());
  s.kv_blocks_used = kv_used_.load();
  s.kv_blocks_cached = kv_cached_.load();
  s.kv_blocks_free = kv_free_.load();
  s.prefix_hit_tokens = prefix_hit_tokens_.load();
  s.prompt_tokens_computed = prompt_tokens_computed_.load();
  s.steps = steps_.load();
  s.chained_steps = chained_steps_.load();
  s.chain_overruled = chain_overruled_.load();
  s.preemptions = preemptions_.load();
  s.abandoned_steps = abandoned_steps_.load();
  s.rows_fetched = rows_fetched_.load();
  s.abandoned_layers = abandoned_layers_.load();
  s.abandoned_seconds = abandoned_seconds_.load();
  for (int t = 0; t < scheduler::kNumServiceTiers; ++t) {
    s.tiers[t].running = tier_running_[t].load();
    s.tiers[t].generated_tokens = tier_tokens_[t].load();
    s.tiers[t].paused = tier_paused_[t].load();
  }
  s.ultrafast_rejections = rejections_.load();
  s.ultrafast_fallbacks = fallbacks_.load();
  s.spec_drafted = spec_drafted_.load();
  s.spec_accepted = spec_accepted_.load();
  s.spec_verify_steps = spec_verify_steps_.load();
  for (int i = 0; i <= kMaxSpecK; ++i) s.spec_accepted_hist[i] = spec_hist_[i].load();
  return s;
}

void Service::Loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (running_.empty() && waiting_.empty()) {
        cv_.wait(lock, [this] { return stopping_ || !incoming_.empty(); });
      }
      if (stopping_) break;
      while (!incoming_.empty()) {
        waiting_.push_back(std::move(incoming_.front()));
        incoming_.pop_front();
      }
      // The next plan sees them: no step of this loop is to be abandoned for them.
      ultrafast_arrived_.store(false, std::memory_order_relaxed);
    }
    if (!Step()) {
      // No step ran: nothing more will flush held-back stream events until one does.
      const double now = NowSeconds();
      for (auto& seq : running_) seq->channel->FlushIfDue(now, /*force=*/true);
      for (auto& seq : waiting_) seq->channel->FlushIfDue(now, /*force=*/true);
      // Nothing could run (everything waiting was cancelled): wait for news, briefly.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(5),
                   [this] { return stopping_ || !incoming_.empty(); });
    }
  }
  const Status gone = UnavailableError("the server is shutting down");
  for (auto& seq : running_) Finish(*seq, FinishReason::kError, gone);
  for (auto& seq : waiting_) Finish(*seq, FinishReason::kError, gone);
  running_.clear();
  waiting_.clear();
  PublishStats();
}

bool Service::Step() {
  if (options_.step_hook) options_.step_hook();
  for (auto& seq : running_) {
    if (seq->channel->cancelled()) Finish(*seq, FinishReason::kCancelled);
  }
  for (auto& seq : waiting_) {
    if (seq->channel->cancelled()) Finish(*seq, FinishReason::kCancelled);
  }
  auto gone = [](const std::unique_ptr<Sequence>& s) { return s->done; };
  running_.erase(std::remove_if(running_.begin(), running_.end(), gone), running_.end());
  const size_t n_waiting = waiting_.size();
  waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), gone), waiting_.end());
  queued_ -= static_cast<int64_t>(n_waiting - waiting_.size());
  if (running_.empty() && waiting_.empty()) {
    PublishStats();
    return false;
  }

  if (ChainSteps()) return true;
  PrepareDrafts();
  const scheduler::StepPlan plan = scheduler_->Plan(SchedulerInput());
  if (plan.ultrafast_solo_seconds > 0.0) {
    admission_->SetUltrafastTokenSeconds(plan.ultrafast_solo_seconds);
  }
  if (ChainBatch(plan)) return true;
  Apply(plan);
  const scheduler::BatchComposition composition = BuildBatch(plan);
  MarkTopOnly();
  if (batch_.size() == 0) {
    PublishStats();
    return false;
  }
  const double now = clock_->Now();
  const double start = NowSeconds();
  // A step with no ultrafast work stops for an ultrafast request that arrives meanwhile
  // (ServiceOptions::preempt_for_ultrafast).
  const bool preemptible = plan.ultrafast_composition.empty();
  const Status status = decoder_->Forward(batch_, preemptible ? &ultrafast_arrived_ : nullptr);
  const double seconds = NowSeconds() - start;
  if (!status.ok() && decoder_->abandoned_layers() > 0) {
    // Nothing advanced: the sequences run these positions again when next scheduled (the cache
    // gave back the blocks reserved past their lengths, drafts included); the cost model and the
    // scheduler learn nothing from a partial step.
    ++abandoned_steps_;
    abandoned_layers_ += decoder_->abandoned_layers();
    abandoned_seconds_.store(abandoned_seconds_.load() + seconds);
    for (auto& [seq, n] : batch_feeds_) {
      seq->drafts = 0;
      if (!seq->decoding) prompt_tokens_computed_ -= n;  // counted again when they run
    }
    UF_LOG(DEBUG) << "serve: " << status.message() << " (" << seconds << " s) for an ultrafast "
                  << "request";
    PublishStats();
    return true;
  }
  for (auto& [seq, n] : batch_feeds_) seq->last_served = now;
  ++steps_;
  if (!status.ok()) {
    // Not expected (blocks were reserved above); fail the sequences in it, keep serving.
    UF_LOG(ERROR) << "serve: forward failed: " << status.ToString();
    for (auto& [seq, n] : batch_feeds_) Finish(*seq, FinishReason::kError, status);
  } else {
    for (auto& [seq, n] : batch_feeds_) {
      seq->n_computed += n;
      if (options_.prefix_cache) {
        cache_->PublishPrefix(seq->slot, seq->tokens.data(), seq->n_computed);
      }
    }
    // Where an ultrafast request's time to first token goes (UF_LOG_LEVEL=debug): what it
    // waited for before the step that reads its prompt's last chunk, and that step.
    if (MinLogLevel() <= LogLevel::kDebug) {
      for (auto& [seq, n] : batch_feeds_) {
        if (seq->tier == scheduler::ServiceTier::kUltrafast && seq->n_generated == 0 &&
            seq->to_feed() == 0) {
          UF_LOG(DEBUG) << "serve: ultrafast first token " << NowSeconds() - seq->submitted
                        << " s after submission: queued after " << seq->queued - seq->submitted
                        << " s, " << start - seq->submitted << " s before its last prompt step, "
                        << seconds << " s that step (" << composition.decode_seqs << " decodes, "
                        << composition.prefill_tokens << " prompt tokens)";
        }
      }
    }
    SampleOutputs(seconds);
    // The cost model learns the whole step, sampling and emitting included: a stream's speed
    // is what its steps take, and each sequence's sampling (a pass or two over the vocabulary,
    // logprobs, the stream event) is a large share of a cache-resident model's step.
    const double step_seconds = NowSeconds() - start;
    online_cost_->Observe(composition, step_seconds, plan.sample_weight);
    // The scheduler's measured guard: the solo step and what was measured to fit beside it.
    scheduler_->Observe(plan, step_seconds);
  }
  EndStep();
  return true;
}

void Service::EndStep() {
  const auto gone = [](const std::unique_ptr<Sequence>& s) { return s->done; };
  running_.erase(std::remove_if(running_.begin(), running_.end(), gone), running_.end());
  const double flush_time = NowSeconds();
  for (auto& seq : running_) seq->channel->FlushIfDue(flush_time);
  for (auto& seq : waiting_) seq->channel->FlushIfDue(flush_time);
  PublishStats();
}

scheduler::StepInput Service::SchedulerInput() const {
  scheduler::StepInput in;
  in.block_size = cache_->block_size();
  in.free_slots = static_cast<int64_t>(free_slots_.size());
  in.free_kv_blocks = cache_->free_blocks();
  in.running.reserve(running_.size());
  for (const auto& seq : running_) {
    scheduler::SequenceState st;
    st.id = seq->id;
    st.tier = seq->tier;
    st.context = seq->n_computed;
    st.to_prefill = seq->to_feed() > 1 ? seq->to_feed() : 0;
    st.kv_blocks = cache_->Capacity(seq->slot) / cache_->block_size();
    st.arrival = seq->arrival;
    st.last_served = seq->last_served;
    st.preempted = seq->preempted;
    st.draft_tokens = seq->to_feed() == 1 ? seq->drafts : 0;
    in.running.push_back(st);
  }
  in.waiting.reserve(waiting_.size());
  for (const auto& seq : waiting_) {
    scheduler::SequenceState st;
    st.id = seq->id;
    st.tier = seq->tier;
    st.to_prefill = static_cast<int64_t>(seq->tokens.size());
    st.arrival = seq->arrival;
    st.last_served = seq->last_served;
    in.waiting.push_back(st);
  }
  return in;
}

void Service::Apply(const scheduler::StepPlan& plan) {
  auto running_index = [this](int64_t id) {
    for (size_t i = 0; i < running_.size(); ++i) {
      if (running_[i]->id == id) return i;
    }
    UF_CHECK(false) << "plan names sequence " << id << ", which is not running";
    return size_t{0};
  };
  for (int64_t id : plan.evict) Evict(running_index(id));
  for (int64_t id : plan.admit) {
    auto it = std::find_if(waiting_.begin(), waiting_.end(),
                           [id](const std::unique_ptr<Sequence>& s) { return s->id == id; });
    UF_CHECK(it != waiting_.end() && !free_slots_.empty()) << "cannot admit sequence " << id;
    Sequence& seq = **it;
    const int slot = free_slots_.back();
    free_slots_.pop_back();
    const int64_t n = static_cast<int64_t>(seq.tokens.size());
    // Reuse cached blocks of the same prefix; the last token is always computed, for its logits.
    const int64_t hit =
        options_.prefix_cache ? cache_->AttachPrefix(slot, seq.tokens.data(), n - 1) : 0;
    seq.slot = slot;
    seq.n_computed = hit;
    seq.preempted = false;
    if (seq.spec.mode == SpecMode::kNgram && !seq.drafter) {
      seq.drafter = std::make_unique<NgramDrafter>();
      if (!seq.request.prediction.empty()) seq.drafter->SetReference(seq.request.prediction);
      seq.controller.emplace(seq.spec.k, /*adaptive=*/true, /*costly_drafter=*/false,
                             options_.spec_cost);
    }
    if (seq.request.grammar && !seq.constraint) {
      seq.constraint = ConstraintFor(seq.request.grammar);
      seq.grammar_state = seq.constraint->start();
    }
    if (!seq.sampler) {
      static const std::vector<int32_t> kNone;
      seq.sampler.emplace(seq.request.sampling, static_cast<int32_t>(model_.config().n_vocab),
                          seq.request.max_tokens,
                          // A grammar decides where generation may end (ignore_eos is moot).
                          seq.request.ignore_eos && !seq.request.grammar ? eog_ids_ : kNone);
    }
    prefix_hit_tokens_ += hit;
    if (!seq.admitted) {
      seq.admitted = true;
      seq.cached_tokens = std::min(hit, seq.n_prompt);
    }
    running_.push_back(std::move(*it));
    waiting_.erase(it);
    --queued_;
  }
  for (int64_t id : plan.preempt) {
    Sequence& seq = *running_[running_index(id)];
    seq.preempted = true;
    ++tier_paused_[static_cast<int>(seq.tier)];
  }
  for (int64_t id : plan.resume) running_[running_index(id)]->preempted = false;
}

void Service::Evict(size_t index) {
  Sequence& seq = *running_[index];
  // Its blocks stay cached: readmission finds most of them again unless they were reclaimed.
  if (options_.prefix_cache) cache_->PublishPrefix(seq.slot, seq.tokens.data(), seq.n_computed);
  cache_->Remove(seq.slot);
  free_slots_.push_back(seq.slot);
  seq.slot = -1;
  seq.n_computed = 0;
  seq.preempted = false;
  ++preemptions_;
  UF_LOG(DEBUG) << "serve: evicted a sequence of " << seq.tokens.size() << " tokens";
  waiting_.push_back(std::move(running_[index]));
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  ++queued_;
}

scheduler::BatchComposition Service::BuildBatch(const scheduler::StepPlan& plan) {
  batch_.Clear();
  batch_outputs_.clear();
  batch_first_row_.clear();
  batch_feeds_.clear();
  int64_t rows = 0;
  scheduler::BatchComposition composition;
  auto find = [this](int64_t id) -> Sequence* {
    for (auto& seq : running_) {
      if (seq->id == id) return seq.get();
    }
    UF_CHECK(false) << "plan feeds sequence " << id << ", which is not running";
    return nullptr;
  };
  // Reserving here, item by item, drops only the item that cannot get its blocks (evicted blocks
  // can still be held by another sequence through the prefix cache) instead of failing the step.
  auto feed = [&](Sequence& seq, int64_t n) {
    if (n <= 0 || !cache_->Reserve(seq.slot, seq.n_computed + n).ok()) return false;
    const bool last = n == seq.to_feed();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = seq.n_computed + i;
      batch_.Add(seq.tokens[pos], static_cast<int32_t>(pos), seq.slot, last && i == n - 1);
    }
    if (last) {
      batch_outputs_.push_back(&seq);
      batch_first_row_.push_back(rows++);
    }
    batch_feeds_.emplace_back(&seq, n);
    return true;
  };
  for (auto& seq : running_) {
    seq->drafts = 0;
    seq->decoding = false;
  }
  for (size_t i = 0; i < plan.decode.size(); ++i) {
    Sequence& seq = *find(plan.decode[i]);
    const int64_t n = std::min<int64_t>(1, seq.to_feed());
    if (!feed(seq, n)) continue;
    composition.AddDecode(seq.n_computed);
    // Drafts after the token, each wanting logits; their K/V go past n_computed and are kept
    // only when accepted (SampleOutputs).
    int64_t d =
        n == 1 && i < plan.decode_drafts.size()
            ? std::min<int64_t>(plan.decode_drafts[i], static_cast<int64_t>(seq.proposal.size()))
            : 0;
    if (d > 0 && !cache_->Reserve(seq.slot, seq.n_computed + 1 + d).ok()) d = 0;
    for (int64_t j = 0; j < d; ++j) {
      batch_.Add(seq.proposal[j], static_cast<int32_t>(seq.n_computed + 1 + j), seq.slot, true);
    }
    if (d > 0) composition.AddPrefill(seq.n_computed + 1, d);
    seq.drafts = d;
    seq.decoding = n == 1;
    rows += d;
  }
  for (const scheduler::PrefillChunk& chunk : plan.prefill) {
    Sequence& seq = *find(chunk.id);
    // Fewer than planned when the prefix cache covered part of the prompt.
    const int64_t n = std::min(chunk.n_tokens, seq.to_feed());
    if (!feed(seq, n)) continue;
    composition.AddPrefill(seq.n_computed, n);
    prompt_tokens_computed_ += n;
  }
  return composition;
}

void Service::PrepareDrafts() {
  for (auto& seq : running_) DraftFor(*seq);
}

void Service::DraftFor(Sequence& seq) {
  seq.drafts = 0;
  seq.proposal.clear();
  if (!seq.drafter || seq.done || seq.to_feed() != 1) return;
  // Drafts at positions tokens.size() .. must stay inside the context, and a step can emit at
  // most drafts + 1 tokens of what is left to generate.
  const int64_t n = static_cast<int64_t>(seq.tokens.size());
  const int64_t room = std::min(options_.ctx - n, seq.request.max_tokens - seq.n_generated - 1);
  const int want = static_cast<int>(std::min<int64_t>(seq.controller->DraftsWanted(), room));
  if (want <= 0) return;
  // The n-gram drafter cannot fail.
  UF_CHECK(seq.drafter->Draft(seq.tokens, want, &seq.proposal).ok());
  seq.drafts = seq.controller->Choose(static_cast<int>(seq.proposal.size()));
}

std::shared_ptr<grammar::TokenConstraint> Service::ConstraintFor(
    const std::shared_ptr<const grammar::Grammar>& g) {
  if (!token_trie_) {
    token_trie_ =
        grammar::TokenTrie::Build(tokenizer_, static_cast<int32_t>(model_.config().n_vocab));
  }
  // Bound what many distinct schemas, or one grammar reaching ever new states (JSON mode nested
  // ever deeper), keep alive; running requests hold their own reference.
  constexpr size_t kMaxGrammars = 64;
  constexpr int64_t kMaxStates = 1 << 20;
  auto it = constraints_.find(g->fingerprint());
  if (it != constraints_.end() && it->second->automaton().num_states() > kMaxStates) {
    constraints_.erase(it);
    it = constraints_.end();
  }
  if (it != constraints_.end()) return it->second;
  if (constraints_.size() >= kMaxGrammars) constraints_.clear();
  auto c = std::make_shared<grammar::TokenConstraint>(g, token_trie_);
  constraints_.emplace(g->fingerprint(), c);
  return c;
}

void Service::PublishStats() {
  running_count_ = static_cast<int64_t>(running_.size());
  std::array<int64_t, scheduler::kNumServiceTiers> by_tier{};
  for (const auto& seq : running_) ++by_tier[static_cast<int>(seq->tier)];
  for (int t = 0; t < scheduler::kNumServiceTiers; ++t) tier_running_[t] = by_tier[t];
  const int64_t available = cache_->free_blocks(), cached = cache_->cached_blocks();
  kv_free_ = available - cached;
  kv_cached_ = cached;
  kv_used_ = cache_->n_blocks() - available;
}

}  // namespace uf::engine
