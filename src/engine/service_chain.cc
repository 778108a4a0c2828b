// Chained steps in the serving engine (ServiceOptions::chain_steps): a lone stream's, or a decode
// batch's of several, run on a forward that feeds each step's tokens to the next on the device
// (a GPU's), the next step queued while one runs, with the host's sampler judging every token as
// its step ends (model::BatchForward::ForwardGreedyChain, ForwardSampledChains).
#include <algorithm>
#include <limits>
#include <string>

#include "base/clock.h"
#include "base/log.h"
#include "engine/service_sequence.h"

namespace uf::engine {

namespace {

// At most this many steps a chain of several streams: the scheduler's turn (its plan, its guard
// and probes, admissions) comes back between chains; a lone stream's runs up to
// kMaxSampledChainSteps (nothing else is served then).
constexpr int64_t kMaxBatchChainSteps = 32;

// A constrained stream chains while its grammar overrules fewer than 1 in kMissRatio of the
// device's draws (the draw is of the unmasked row). An overrule costs the step queued behind it
// (a whole step), and a chained step saves only the host's turn: a submit and fence of ~40 us
// against a step of ~0.8 ms (1B) to ~4 ms (8B) on an H200 (issue 28's probe), so chaining pays
// below a miss rate of ~1-5%. Past 1 in 32 the stream decodes plainly (its mask applied on the
// device) for kFirstWait plain steps, twice as many after each return that misses as often, up
// to kMaxWait. Estimates: no GPU has measured them.
constexpr double kMissRatio = 32.0;
constexpr double kMissAverage = 1.0 / 64;  // the moving average's weight of a draw
constexpr int64_t kFirstWait = 8, kMaxWait = 256;

}  // namespace

Service::ChainWay Service::ChainWayOf(Sequence& seq) const {
  ChainWay way;
  const GenerationRequest& r = seq.request;
  // Decoding (the prompt computed, one token pending), not right after a chain that ran no step
  // (that step runs plain, once; the caller clears chain_failed).
  if (seq.done || seq.preempted || seq.slot < 0 || seq.n_generated == 0 || seq.to_feed() != 1 ||
      !seq.sampler || seq.chain_failed ||
      (seq.spec.mode != SpecMode::kOff && !(seq.drafter && seq.controller))) {
    return way;
  }
  // The token the row's arg-max once its banned tokens (ignore_eos: the end tokens) are masked,
  // or drawn from the row's best tokens (its bias and penalties applied on the device: a greedy
  // stream with them draws as top-k 1). Logprobs come from the
  // reduced row (as a plain step's do), which a greedy chain does not return, so a greedy
  // stream asking for them runs the sampled chain (its draw the best token); with bans too (the
  // banned tokens' raw logits, which logprobs count, come back as a plain step's do), not with
  // bias or penalties (a chained row lists the window's tokens in another order than a plain
  // step's, which would change the logprobs' last bits).
  const sampling::Sampler& sampler = seq.sampler->sampler();
  if (static_cast<int64_t>(sampler.banned().size()) > decoder_->top_known_capacity()) return way;
  const bool greedy = sampler.ArgMaxAfterBans();
  const bool logprobs = r.top_logprobs >= 0;
  const bool edits = !sampler.bias().empty() || sampler.params().penalties();
  // A constrained stream: the device draws from the unmasked row and the host takes the
  // grammar's token from its best tokens (JudgeConstrained), so only the sampled chain, which
  // judges every row; not with logprobs (a constrained row's come from the whole row:
  // MarkTopOnly), nor while it waits after too many overruled draws. With bias or penalties
  // the device draws from the edited unmasked row and the judge takes the known tokens the
  // grammar allows with their edits (JudgeConstrained).
  if (seq.constraint && (logprobs || seq.chain_wait > 0)) return way;
  way.greedy = greedy && !logprobs && !seq.constraint;
  // Bias and penalties are applied on the device (model::ChainEdits), within the forward's
  // list of known tokens (ChainKnownRoom: ChainRoom shortens the chain to it).
  way.sampled = decoder_->chains_sampled() &&
                (greedy || sampler.CanChainSample(decoder_->top_capacity())) &&
                (!logprobs || (!edits && r.top_logprobs <= decoder_->top_capacity()));
  return way;
}

int64_t Service::ChainRoom(const Sequence& seq) const {
  // Emit ends the request at max_tokens generated or a full context: no step past either; nor
  // past the forward's list of a row's edited tokens.
  const int64_t room = std::min(seq.request.max_tokens - seq.n_generated,
                                options_.ctx - static_cast<int64_t>(seq.tokens.size()));
  if (!seq.sampler) return room;  // (ChainWayOf does not chain it)
  return std::min(room, ChainKnownRoom(seq.sampler->sampler(), decoder_->chain_known_capacity()));
}

bool Service::ChainSteps() {
  if (!options_.chain_steps || !decoder_->chains_greedy() || running_.size() != 1 ||
      !waiting_.empty()) {
    return false;
  }
  Sequence& seq = *running_[0];
  const ChainWay way = ChainWayOf(seq);
  seq.chain_failed = false;
  if (!way.greedy && !way.sampled) return false;
  const int64_t n = std::min(ChainRoom(seq), model::kMaxSampledChainSteps);
  if (n < 2) return false;  // one step: the plain path
  // A speculating stream (ultrafast's default) chains while its controller verifies no drafts:
  // the chain ends at the token after which it would, and that verify step runs as a plain
  // step. A proposal left unverified is compared with the next token, as a plain step does.
  if (seq.drafter != nullptr) {
    DraftFor(seq);
    if (seq.drafts > 0) return false;
  }
  Sequence* one = &seq;
  return RunChain(std::span<Sequence* const>(&one, 1), n, way.greedy);
}

bool Service::ChainBatch(const scheduler::StepPlan& plan) {
  // A plan that decodes every running stream, a token each, and changes nothing else: the
  // steps it would plan next are the same while nothing arrives, ends or verifies drafts.
  if (!options_.chain_steps || decoder_->chain_streams() < 2 || running_.size() < 2 ||
      !waiting_.empty() || !plan.evict.empty() || !plan.admit.empty() || !plan.preempt.empty() ||
      !plan.resume.empty() || !plan.prefill.empty() ||
      plan.probe != scheduler::StepPlan::Probe::kNone || plan.decode.size() != running_.size() ||
      static_cast<int64_t>(running_.size()) > decoder_->chain_streams()) {
    return false;
  }
  for (int64_t d : plan.decode_drafts) {
    if (d > 0) return false;
  }
  std::vector<Sequence*> seqs;
  int64_t n = kMaxBatchChainSteps;
  bool all = true;
  for (auto& s : running_) {
    const ChainWay way = ChainWayOf(*s);
    all = all && way.sampled && s->drafts == 0;  // (PrepareDrafts ran for this plan)
    n = std::min(n, ChainRoom(*s));
    seqs.push_back(s.get());
  }
  for (Sequence* s : seqs) s->chain_failed = false;
  if (!all) return false;
  // The chain reserves every stream's blocks for its n steps up front: at most what the free
  // blocks (cached ones included; the windowed pool's too) hold, so that a tight pool shortens
  // chains instead of failing them (a stream inside its last block needs no new one).
  const int64_t bs = cache_->block_size();
  const auto fits = [&](int64_t steps) {
    int64_t need = 0;
    for (const Sequence* s : seqs) {
      const int64_t blocks = (s->n_computed + steps + bs - 1) / bs;
      need += std::max<int64_t>(0, blocks - cache_->Capacity(s->slot) / bs);
    }
    return need <= cache_->free_blocks() &&
           (!cache_->windowed() || need <= cache_->swa_free_blocks());
  };
  while (n >= 2 && !fits(n)) --n;
  if (n < 2) return false;
  return RunChain(seqs, n, /*greedy=*/false);
}

int32_t Service::JudgeConstrained(Sequence& seq, const model::TopRow& row, const float* whole) {
  // The mask of the state after the tokens emitted so far (Emit advanced it), within the
  // tokens left: the one a plain step would find before this row. A whole row follows this
  // row's -1 (ChainDecide), whose mask it still is.
  if (whole == nullptr) FindMask(seq);
  const auto n_vocab = static_cast<int32_t>(model_.config().n_vocab);
  if (whole != nullptr) {  // as SampleOutputs samples a masked row copied back whole
    seq.masked_logits.resize(n_vocab);
    grammar::TokenConstraint::Apply(seq.mask.data(), whole, n_vocab, seq.masked_logits.data());
    return seq.sampler->Sample(seq.masked_logits.data());
  }
  if (row.n_known == 0) {
    return seq.sampler->SampleMaskedFromTop(row, seq.mask, n_vocab, &judge_ids_, &judge_logits_);
  }
  // The known tokens (bans, bias, the penalty window) are the sampler's to edit: the ones the
  // grammar forbids go in at -inf, which every edit keeps at -inf, as Sample() of the masked
  // row sees them.
  judge_known_.assign(row.known_logits, row.known_logits + row.n_known);
  for (int32_t j = 0; j < row.n_known; ++j) {
    const int32_t id = row.known_ids[j];
    if (((seq.mask[id >> 6] >> (id & 63)) & 1) == 0) {
      judge_known_[j] = -std::numeric_limits<float>::infinity();
    }
  }
  model::TopRow masked = row;
  masked.known_logits = judge_known_.data();
  return seq.sampler->SampleMaskedFromTop(masked, seq.mask, n_vocab, &judge_ids_, &judge_logits_);
}

bool Service::RunChain(std::span<Sequence* const> seqs, int64_t n, bool greedy) {
  const double start = NowSeconds();
  // Per stream: whether it speculates, the unverified proposal's first token, when its last
  // token came, the steps it took.
  struct Link {
    Sequence* seq;
    bool speculating;
    int32_t shadow = -1;
    double last;
    int64_t taken = 0;
  };
  std::vector<Link> links;
  for (Sequence* s : seqs) {
    const bool speculating = s->drafter != nullptr;
    Link l{s, speculating, speculating && !s->proposal.empty() ? s->proposal[0] : -1, start};
    links.push_back(l);
    s->in_chain = true;
  }
  // Stream i's step's token into its stream; false to end the chain there.
  const auto emit = [&](int64_t i, int32_t token, TokenLogprob* logprob) {
    Link& l = links[i];
    Sequence& seq = *l.seq;
    ++l.taken;
    ++seq.n_computed;
    seq.last_served = clock_->Now();
    seq.sampler->Accept(token);
    if (l.speculating) {
      // A chained step's time is what a verify step must beat (no host turn between steps).
      const double now = NowSeconds();
      seq.controller->ObserveStep(0, 0, now - l.last);
      l.last = now;
      if (l.shadow >= 0) seq.controller->ObserveShadow(1, token == l.shadow ? 1 : 0);
    }
    Emit(seq, token, logprob);
    seq.channel->FlushIfDue(NowSeconds());
    if (seq.done || seq.channel->cancelled()) return false;
    if (l.speculating) {
      DraftFor(seq);
      if (seq.drafts > 0) return false;  // the next step verifies drafts
      l.shadow = seq.proposal.empty() ? -1 : seq.proposal[0];
    }
    std::lock_guard<std::mutex> lock(mu_);
    return incoming_.empty() && !stopping_;
  };
  StatusOr<std::vector<int64_t>> steps = std::vector<int64_t>{};
  if (greedy) {
    Sequence& seq = *links[0].seq;
    StatusOr<int64_t> one = decoder_->ForwardGreedyChain(
        seq.slot, seq.tokens.back(), static_cast<int32_t>(seq.n_computed), n,
        [&](int32_t token) { return emit(0, token, nullptr); }, seq.sampler->sampler().banned());
    if (one.ok()) {
      steps = std::vector<int64_t>{*one};
    } else {
      steps = one.status();
    }
  } else {
    chain_uniforms_.resize(links.size());
    chain_edits_.resize(links.size());
    std::vector<model::ChainStream> streams;
    std::vector<int64_t> draws;  // each sampler's draws as the chain starts
    for (size_t i = 0; i < links.size(); ++i) {
      Sequence& seq = *links[i].seq;
      const sampling::Sampler& sampler = seq.sampler->sampler();
      draws.push_back(sampler.draws());
      model::ChainStream s;
      s.seq = seq.slot;
      s.token = seq.tokens.back();
      s.pos = static_cast<int32_t>(seq.n_computed);
      s.draw = ChainDrawFor(sampler, n, &chain_uniforms_[i]);
      s.banned = sampler.banned();
      s.edits = ChainEditsFor(sampler, &chain_edits_[i]);
      streams.push_back(s);
    }
    const auto n_vocab = static_cast<int32_t>(model_.config().n_vocab);
    steps = decoder_->ForwardSampledChains(
        streams, n,
        [&](int64_t i, const model::TopRow& row, const float* whole, int32_t drawn,
            model::ChainTurn* turn) {
          Sequence& seq = *links[i].seq;
          const int32_t token = seq.constraint ? JudgeConstrained(seq, row, whole)
                                               : seq.sampler->SampleFromTop(row, whole);
          if (token < 0) return token;  // the chain brings the whole row
          turn->draws = seq.sampler->sampler().draws() - draws[i];
          if (whole != nullptr) {
            ++rows_fetched_;
          } else {
            chain_overruled_ += token != drawn;  // (a whole row's draw is rarely the device's)
          }
          bool pause = false;
          if (seq.constraint) {
            const double miss = token != drawn ? 1.0 : 0.0;
            seq.chain_miss_rate += kMissAverage * (miss - seq.chain_miss_rate);
            pause = seq.chain_miss_rate * kMissRatio > 1.0;  // (a batch's chain ends here too)
          }
          const int top = seq.request.top_logprobs;
          TokenLogprob lp;
          if (top >= 0) {
            lp = whole != nullptr ? SequenceSampler::Logprobs(whole, n_vocab, token, top)
                                  : SequenceSampler::Logprobs(row, token, top);
          }
          turn->more = emit(i, token, top >= 0 ? &lp : nullptr) && !pause;
          return token;
        });
  }
  int64_t most = 0;
  for (Link& l : links) {
    Sequence& seq = *l.seq;
    seq.in_chain = false;
    if (seq.constraint && seq.chain_miss_rate * kMissRatio > 1.0) {
      // Back to plain steps; on return, two misses in a row send it back for twice as long.
      seq.chain_backoff = std::clamp(2 * seq.chain_backoff, kFirstWait, kMaxWait);
      seq.chain_wait = seq.chain_backoff;
      seq.chain_miss_rate = 0.5 / kMissRatio;
    } else if (seq.chain_miss_rate * kMissRatio < 0.25) {
      seq.chain_backoff = 0;  // missing rarely again: the next wait is the first
    }
    seq.drafts = 0;  // the next step drafts again (PrepareDrafts)
    most = std::max(most, l.taken);
    if (seq.done) {
      ReleaseSlot(seq);  // deferred by Release while the chain's steps could still write there
    } else if (options_.prefix_cache && l.taken > 0) {
      cache_->PublishPrefix(seq.slot, seq.tokens.data(), seq.n_computed);
    }
  }
  steps_ += most;
  chained_steps_ += most;
  if (!steps.ok()) {
    bool any = false;
    for (const Link& l : links) any = any || l.taken > 0 || l.seq->done;
    if (!any) {
      // Nothing ran (e.g. no KV blocks for the whole chain): the plain step handles it.
      UF_LOG(DEBUG) << "serve: chain not run: " << steps.status().ToString();
      for (const Link& l : links) l.seq->chain_failed = true;  // (so the next step is plain)
      return false;
    }
    UF_LOG(ERROR) << "serve: chain failed: " << steps.status().ToString();
    for (const Link& l : links) Finish(*l.seq, FinishReason::kError, steps.status());
  }
  UF_LOG(DEBUG) << "serve: " << most << " chained " << (greedy ? "greedy" : "sampled")
                << " steps of " << links.size() << " stream(s) in " << NowSeconds() - start << " s";
  EndStep();
  return true;
}

}  // namespace uf::engine
