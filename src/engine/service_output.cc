// The output side of an engine step (Service, see service.h): which rows come back whole or as
// their best tokens only, sampling each sequence's rows (speculative drafts accepted or not),
// emitting tokens and stop strings to the request channels, and finishing sequences.
#include <algorithm>
#include <string>

#include "base/check.h"
#include "base/clock.h"
#include "base/log.h"
#include "engine/service_sequence.h"

namespace uf::engine {

void Service::MarkTopOnly() {
  const int32_t k = decoder_->top_capacity();
  if (k == 0) return;
  const int32_t known_cap = decoder_->top_known_capacity();
  // A sampler that draws beyond the best k (no top-k, or top-k > k) needs the whole row. Bias,
  // bans and penalties are applied to the best tokens and the raw logits of the tokens they edit
  // (Batch::known_ids); logprobs (top_logprobs <= k) come from those too. A grammar's mask goes
  // to the device (Batch::allowed), which reduces the masked row; not with logprobs (they are
  // the unmasked row's) nor with edited tokens (the host would merge back an edited token the
  // grammar forbids): those rows come back whole.
  std::vector<int32_t> row_known;
  bool any_allowed = false;
  for (Sequence* seq : batch_outputs_) {
    // A sampler without top-k (bias, bans and penalties on its known tokens) draws from the best
    // k when that provably gives the whole row's token, else the row is fetched after the step;
    // the drawn token is then one of the row's candidates, so its logprob and the best
    // top_logprobs (<= k) come from the reduced row too.
    const bool top = seq->sampler && seq->sampler->CanSampleTop(k);
    seq->reduced = !top && seq->sampler && seq->sampler->CanSampleReduced();
    seq->top_only = (!seq->constraint || seq->request.top_logprobs < 0) &&
                    seq->request.top_logprobs <= k && (top || seq->reduced);
    seq->reduced = seq->reduced && seq->top_only;
    seq->known.clear();
    seq->known_begin.clear();
    seq->mask_fresh = false;  // a failed step's mask is not kept
    for (int64_t j = 0; seq->top_only && j <= seq->drafts; ++j) {
      // Row j is sampled after the drafts before it were accepted into the penalty window.
      seq->sampler->EditedTokens(std::span<const int32_t>(seq->proposal.data(), j), &row_known);
      if (static_cast<int64_t>(row_known.size()) > known_cap ||
          (seq->constraint && !row_known.empty())) {
        seq->top_only = seq->reduced = false;
        break;
      }
      seq->known_begin.push_back(static_cast<int32_t>(seq->known.size()));
      seq->known.insert(seq->known.end(), row_known.begin(), row_known.end());
    }
    seq->known_begin.push_back(static_cast<int32_t>(seq->known.size()));
    if (seq->top_only && seq->constraint) {
      // Constrained requests decode plainly (Submit): one row, the mask of its state now.
      UF_CHECK(seq->drafts == 0) << "a constrained sequence with drafts";
      FindMask(*seq);
      UF_CHECK(static_cast<int64_t>(seq->mask.size()) == (model_.config().n_vocab + 63) / 64)
          << "a grammar mask of " << seq->mask.size() << " words";
      seq->mask_fresh = true;
      any_allowed = true;
    }
  }
  batch_.top_only.assign(batch_.size(), 0);
  batch_.known_begin.assign(1, 0);
  batch_.known_ids.clear();
  batch_.allowed.clear();
  if (any_allowed) batch_.allowed.assign(batch_.size(), nullptr);
  size_t i = 0;  // the output sequence of each row: rows batch_first_row_[i] + 0..drafts
  for (int64_t t = 0, row = 0; t < batch_.size(); ++t) {
    if (batch_.want_logits[t] != 0) {
      while (i + 1 < batch_outputs_.size() && batch_first_row_[i + 1] <= row) ++i;
      const Sequence& seq = *batch_outputs_[i];
      batch_.top_only[t] = seq.top_only ? 1 : 0;
      if (seq.top_only && seq.constraint) batch_.allowed[t] = seq.mask.data();
      const int64_t j = row - batch_first_row_[i];
      if (seq.top_only && j + 1 < static_cast<int64_t>(seq.known_begin.size())) {
        batch_.known_ids.insert(batch_.known_ids.end(), seq.known.begin() + seq.known_begin[j],
                                seq.known.begin() + seq.known_begin[j + 1]);
      }
      ++row;
    }
    batch_.known_begin.push_back(static_cast<int32_t>(batch_.known_ids.size()));
  }
}

void Service::FindMask(Sequence& seq) {
  // The budget is what ends generation first: max_tokens or the context.
  const int64_t remaining = std::min(seq.request.max_tokens - seq.n_generated,
                                     options_.ctx - static_cast<int64_t>(seq.tokens.size()));
  seq.constraint->Mask(seq.grammar_state, remaining, &seq.mask);
}

void Service::SampleOutputs(double step_seconds) {
  const size_t n = batch_outputs_.size();
  const int32_t n_vocab = static_cast<int32_t>(model_.config().n_vocab);
  if (sampled_.size() < n) sampled_.resize(n);
  // One row: its exp-sum is split over the pool (idle between forwards). Several: rows go to
  // different threads instead (the pool is not reentrant).
  ThreadPool* row_pool = n == 1 ? pool_.get() : nullptr;
  // Masks are found here (or before the step, MarkTopOnly), on this thread: the constraints'
  // caches are not thread-safe.
  for (size_t i = 0; i < n; ++i) {
    Sequence& seq = *batch_outputs_[i];
    if (seq.constraint && !seq.mask_fresh) FindMask(seq);
    seq.mask_fresh = false;
  }
  // Samples sequence i's rows from out.tokens.size() on: from the first, or from the row a
  // reduced draw stopped at (out.fetch) once that row was fetched whole.
  auto resume = [&](size_t i, ThreadPool* row_pool) {
    Sequence& seq = *batch_outputs_[i];
    Sampled& out = sampled_[i];
    // Rows of the pending token, then of each draft: sampled in order exactly as plain decoding
    // would sample them (each token accepted into the sampler before the next row), stopping at
    // the first token that differs from its draft. See engine/speculative.h: lossless.
    const int64_t drafts = seq.drafts;
    for (int64_t j = static_cast<int64_t>(out.tokens.size()); j <= drafts; ++j) {
      const int64_t r = batch_first_row_[i] + j;
      const bool fetched = out.fetch == r;
      out.fetch = -1;
      if (seq.reduced && !fetched) {
        const int32_t token = seq.sampler->SampleReduced(decoder_->top(r));
        if (token < 0) {  // the draw needs the whole row: fetch it after this pass
          out.fetch = r;
          return;
        }
        seq.sampler->Accept(token);
        out.tokens.push_back(token);
        if (seq.request.top_logprobs >= 0) {
          out.logprobs.push_back(
              SequenceSampler::Logprobs(decoder_->top(r), token, seq.request.top_logprobs));
        }
        if (j == drafts || token != seq.proposal[j]) break;
        if (!seq.request.ignore_eos && tokenizer_.IsEndOfGeneration(token)) break;
        ++out.accepted;
        continue;
      }
      const bool whole = !seq.top_only || fetched;
      const float* logits = whole ? decoder_->logits(r) : nullptr;
      const float* row = logits;
      if (seq.constraint && whole) {  // a reduced row was masked on the device
        seq.masked_logits.resize(n_vocab);
        grammar::TokenConstraint::Apply(seq.mask.data(), logits, n_vocab, seq.masked_logits.data());
        row = seq.masked_logits.data();
      }
      const int32_t token =
          !whole ? seq.sampler->SampleTop(decoder_->top(r)) : seq.sampler->Sample(row, row_pool);
      seq.sampler->Accept(token);
      out.tokens.push_back(token);
      if (seq.request.top_logprobs >= 0) {
        out.logprobs.push_back(
            !whole ? SequenceSampler::Logprobs(decoder_->top(r), token, seq.request.top_logprobs)
                   : SequenceSampler::Logprobs(logits, n_vocab, token, seq.request.top_logprobs));
      }
      if (j == drafts || token != seq.proposal[j]) break;
      if (!seq.request.ignore_eos && tokenizer_.IsEndOfGeneration(token)) break;
      ++out.accepted;
    }
  };
  auto pick = [&](size_t i) {
    Sampled& out = sampled_[i];
    out.tokens.clear();
    out.logprobs.clear();
    out.accepted = 0;
    out.fetch = -1;
    resume(i, row_pool);
  };
  // Each sequence's sampler reads only its own logits rows and state, so sequences can go to
  // different threads. That pays once there are several large rows: a pool dispatch costs 1-2 us,
  // one 152k-token row 20-100 us (bench/sampler_bench).
  if (n >= 2 && n_vocab >= kParallelSampleMinVocab && pool_->size() > 1) {
    std::atomic<size_t> next{0};
    pool_->Run([&](int, int) {
      for (size_t i = next++; i < n; i = next++) pick(i);
    });
  } else {
    for (size_t i = 0; i < n; ++i) pick(i);
  }
  // Reduced rows whose draw fell outside their candidates: copied back together in one small
  // transfer (the rows stay on the device until the next step), then sampled on; a later
  // draft's row may stop a sequence again.
  for (;;) {
    fetch_rows_.clear();
    for (size_t i = 0; i < n; ++i) {
      if (sampled_[i].fetch >= 0) fetch_rows_.push_back(sampled_[i].fetch);
    }
    if (fetch_rows_.empty()) break;
    const Status status = decoder_->FetchLogits(fetch_rows_);
    rows_fetched_ += static_cast<int64_t>(fetch_rows_.size());
    for (size_t i = 0; i < n; ++i) {
      if (sampled_[i].fetch < 0) continue;
      if (status.ok()) {
        resume(i, pool_.get());
        continue;
      }
      UF_LOG(ERROR) << "serve: fetching a logits row failed: " << status.ToString();
      sampled_[i].fetch = -1;
      Finish(*batch_outputs_[i], FinishReason::kError, status);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    Sequence& seq = *batch_outputs_[i];
    Sampled& out = sampled_[i];
    const int64_t drafts = seq.drafts;
    if (drafts > 0) {
      seq.spec_stats.Add(static_cast<int>(drafts), out.accepted);
      spec_drafted_ += drafts;
      spec_accepted_ += out.accepted;
      ++spec_verify_steps_;
      ++spec_hist_[out.accepted];
    }
    // Only decode steps teach the controller what a step of 1 + drafts positions costs (a step
    // that finished a prompt chunk would pass for a very slow plain decode).
    if (seq.controller && seq.decoding) {
      seq.controller->ObserveStep(static_cast<int>(drafts), out.accepted, step_seconds);
      // A proposal left unverified still says whether drafting would have paid.
      if (drafts == 0 && !seq.proposal.empty() && !out.tokens.empty()) {
        seq.controller->ObserveShadow(1, out.tokens[0] == seq.proposal[0] ? 1 : 0);
      }
    }
    for (size_t j = 0; j < out.tokens.size() && !seq.done; ++j) {
      Emit(seq, out.tokens[j], j < out.logprobs.size() ? &out.logprobs[j] : nullptr);
    }
    if (!seq.done && drafts > 0) {
      // Accepted drafts' K/V stay (they are now tokens); the rejected ones' go.
      seq.n_computed += out.accepted;
      cache_->Truncate(seq.slot, seq.n_computed);
    }
    seq.drafts = 0;
  }
}

void Service::Emit(Sequence& seq, int32_t token, TokenLogprob* logprob) {
  const GenerationRequest& r = seq.request;
  GenerationEvent ev;
  if (logprob != nullptr) ev.logprobs.push_back(std::move(*logprob));
  seq.tokens.push_back(token);
  ++seq.n_generated;
  if (!seq.in_chain && seq.chain_wait > 0) --seq.chain_wait;  // a plain step's token
  if (seq.constraint) {
    const grammar::StateId next = seq.constraint->Advance(seq.grammar_state, token);
    if (next == grammar::kDead) {
      // Not expected: the mask offers only tokens the grammar accepts.
      UF_LOG(ERROR) << "serve: grammar rejected sampled token " << token;
      Finish(seq, FinishReason::kError, InternalError("constrained decoding failed"));
      return;
    }
    seq.grammar_state = next;
  }
  ++tier_tokens_[static_cast<int>(seq.tier)];
  ev.service_tier = seq.tier;
  ev.n_tokens = 1;
  ev.time = clock_->Now();

  FinishReason finish = FinishReason::kNone;
  if ((!r.ignore_eos || seq.constraint) && tokenizer_.IsEndOfGeneration(token)) {
    finish = FinishReason::kStop;
  } else {
    ev.text = seq.stop.Push(seq.detok.Push(token));
    if (seq.stop.stopped()) finish = FinishReason::kStop;
  }
  // A complete grammar allows only the end of generation: stop now instead of sampling it.
  if (finish == FinishReason::kNone && seq.constraint &&
      seq.constraint->Complete(seq.grammar_state)) {
    finish = FinishReason::kStop;
  }
  if (finish == FinishReason::kNone && (seq.n_generated >= r.max_tokens ||
                                        static_cast<int64_t>(seq.tokens.size()) >= options_.ctx)) {
    finish = FinishReason::kLength;
  }
  if (finish != FinishReason::kNone && !seq.stop.stopped()) {
    ev.text += seq.stop.Push(seq.detok.Flush());
    ev.text += seq.stop.Flush();
    if (seq.stop.stopped()) finish = FinishReason::kStop;
  }
  if (finish == FinishReason::kNone) {
    seq.channel->Push(std::move(ev));
    return;
  }
  ev.finish = finish;
  if (seq.stop.stopped()) ev.stop_sequence = seq.stop.matched();
  SendFinal(seq, std::move(ev));
}

void Service::SendFinal(Sequence& seq, GenerationEvent ev) {
  ev.prompt_tokens = seq.n_prompt;
  ev.cached_tokens = seq.cached_tokens;
  ev.completion_tokens = seq.n_generated;
  ev.speculation = seq.spec.mode;
  ev.drafted_tokens = seq.spec_stats.drafted;
  ev.accepted_tokens = seq.spec_stats.accepted;
  // Release first: a client that sees the final event may submit again at once and must find
  // the ultrafast stream (and the KV blocks) free.
  Release(seq);
  seq.channel->Push(std::move(ev));
}

void Service::Finish(Sequence& seq, FinishReason reason, Status error) {
  if (seq.done) return;
  GenerationEvent ev;
  ev.service_tier = seq.tier;
  ev.finish = reason;
  ev.error = std::move(error);
  ev.time = clock_->Now();
  SendFinal(seq, std::move(ev));
}

void Service::Release(Sequence& seq) {
  if (!seq.in_chain) ReleaseSlot(seq);  // else once the chain returns (RunChain)
  admission_->Release(seq.id);
  seq.done = true;
}

void Service::ReleaseSlot(Sequence& seq) {
  if (seq.slot < 0) return;
  if (options_.prefix_cache && seq.n_computed > 0) {
    cache_->PublishPrefix(seq.slot, seq.tokens.data(), seq.n_computed);
  }
  cache_->Remove(seq.slot);
  free_slots_.push_back(seq.slot);
  seq.slot = -1;
}

}  // namespace uf::engine
