#include "engine/generate.h"

#include <algorithm>
#include <vector>

#include "base/clock.h"
#include "engine/seq_sampler.h"

namespace uf::engine {

std::string_view StopReasonName(StopReason r) {
  switch (r) {
    case StopReason::kEndOfGeneration:
      return "end of generation";
    case StopReason::kMaxTokens:
      return "max tokens";
    case StopReason::kContextFull:
      return "context full";
    case StopReason::kCallback:
      return "stopped";
  }
  return "?";
}

Status CheckPromptFits(int64_t n_prompt, int64_t max_tokens, int64_t ctx) {
  if (n_prompt + std::max<int64_t>(max_tokens, 0) > ctx) {
    return OutOfRangeError("generate: prompt (" + std::to_string(n_prompt) + " tokens) + " +
                           std::to_string(max_tokens) +
                           " tokens to generate exceeds the context size of " +
                           std::to_string(ctx) + " tokens");
  }
  return OkStatus();
}

void PrimeSampler(const GenerateOptions& options, const Tokenizer& tokenizer,
                  std::span<const int32_t> prompt, sampling::Sampler* sampler) {
  if (options.ignore_eos) {
    std::vector<int32_t> eog;
    for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
      if (tokenizer.IsEndOfGeneration(id)) eog.push_back(id);
    }
    sampler->SetBanned(eog);
  }
  for (int32_t t : prompt) sampler->Accept(t);
}

Status Generate(model::Decoder& decoder, const Tokenizer& tokenizer,
                std::span<const int32_t> prompt, const GenerateOptions& options,
                const TextCallback& on_text, GenerateStats* stats, const TokenCallback& on_token) {
  GenerateTarget t;
  t.forward = &decoder;
  t.cache = decoder.cache();
  t.n_vocab = decoder.model().config().n_vocab;
  t.max_batch = decoder.options().max_batch;
  t.max_outputs = decoder.options().max_outputs;
  t.pool = decoder.pool();
  return Generate(t, tokenizer, prompt, options, on_text, stats, on_token);
}

Status Generate(const GenerateTarget& target, const Tokenizer& tokenizer,
                std::span<const int32_t> prompt, const GenerateOptions& options,
                const TextCallback& on_text, GenerateStats* stats, const TokenCallback& on_token) {
  UF_CHECK(stats != nullptr);
  UF_CHECK(target.forward != nullptr && target.cache != nullptr && target.max_batch > 0);
  *stats = GenerateStats();
  UF_RETURN_IF_ERROR(options.sampling.Validate());
  model::BatchForward& decoder = *target.forward;
  KvCache& cache = *target.cache;
  const int64_t n_vocab = target.n_vocab;
  const int64_t ctx = cache.max_seq_len();
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt == 0) return InvalidArgumentError("generate: the prompt has no tokens");
  if (options.seq_id < 0 || options.seq_id >= cache.max_seqs()) {
    return InvalidArgumentError("generate: bad sequence id");
  }
  if (options.drafter != nullptr && options.spec_k < 0) {
    return InvalidArgumentError("generate: spec_k must be >= 0");
  }
  UF_RETURN_IF_ERROR(CheckPromptFits(n_prompt, options.max_tokens, ctx));
  for (int32_t t : prompt) {
    if (t < 0 || t >= n_vocab) {
      return InvalidArgumentError("generate: prompt token " + std::to_string(t) +
                                  " is outside the vocabulary");
    }
  }

  const int seq = options.seq_id;
  cache.Remove(seq);
  sampling::Sampler sampler(options.sampling, static_cast<int32_t>(n_vocab));
  PrimeSampler(options, tokenizer, prompt, &sampler);
  // Primed with the prompt so the first generated piece keeps its leading space (a fresh decoder
  // drops it, as detokenizing a whole sequence does).
  StreamingDecoder text(tokenizer);
  for (int32_t t : prompt) text.Push(t);
  model::Batch batch;
  batch.Reserve(target.max_batch);
  // A forward that reduces rows on its device (a GPU's top-k) sends back only the best tokens
  // and the raw logits of those the sampler edits, when the sampler can draw from them.
  const int32_t top_cap = decoder.top_capacity();
  // A sampler without top-k draws from the best tokens when it provably can (SampleReduced) and
  // fetches the row whole from the device when it cannot.
  const bool top_only = top_cap > 0 && sampler.CanSampleTop(top_cap);
  const bool reduce = top_only || (top_cap > 0 && sampler.CanSampleReduced());
  std::vector<uint8_t> reduced;  // per output row of the last forward
  std::vector<int32_t> known;
  const auto mark = [&](std::span<const int32_t> row_drafts) {
    reduced.clear();
    if (!reduce) return;
    batch.top_only.assign(batch.size(), 0);
    batch.known_begin.assign(1, 0);
    batch.known_ids.clear();
    for (int64_t t = 0, row = 0; t < batch.size(); ++t) {
      if (batch.want_logits[t] != 0) {
        // Row `row` is sampled after the drafts before it were accepted.
        sampler.EditedTokens(row_drafts.first(std::min<size_t>(row, row_drafts.size())), &known);
        const bool fits = static_cast<int64_t>(known.size()) <= decoder.top_known_capacity();
        batch.top_only[t] = fits ? 1 : 0;
        if (fits) batch.known_ids.insert(batch.known_ids.end(), known.begin(), known.end());
        reduced.push_back(fits ? 1 : 0);
        ++row;
      }
      batch.known_begin.push_back(static_cast<int32_t>(batch.known_ids.size()));
    }
  };

  const double t0 = NowSeconds();
  for (int64_t i = 0; i < n_prompt; i += target.max_batch) {
    const int64_t end = std::min(n_prompt, i + target.max_batch);
    batch.Clear();
    for (int64_t j = i; j < end; ++j) {
      batch.Add(prompt[j], static_cast<int32_t>(j), seq, j == n_prompt - 1);
    }
    if (end == n_prompt) mark({});
    UF_RETURN_IF_ERROR(decoder.Forward(batch));
  }
  stats->n_prompt = n_prompt;
  const double t_prefill = NowSeconds();
  stats->prefill_seconds = t_prefill - t0;

  if (options.max_tokens == 0) {
    stats->stop_reason = StopReason::kMaxTokens;
    return OkStatus();
  }
  // Speculation: proposals for the next step, the part verified, and the controller.
  const int max_k = static_cast<int>(
      std::clamp<int64_t>(std::min<int64_t>(options.spec_k, target.max_outputs - 1), 0, kMaxSpecK));
  Drafter* drafter = max_k > 0 ? options.drafter : nullptr;
  SpecController controller(std::max(max_k, 1), options.spec_adaptive,
                            drafter != nullptr && drafter->costly());
  std::vector<int32_t> context(prompt.begin(), prompt.end());
  context.reserve(n_prompt + std::max<int64_t>(options.max_tokens, 0) + kMaxSpecK);
  std::vector<int32_t> proposal, drafts;
  proposal.reserve(kMaxSpecK);
  drafts.reserve(kMaxSpecK);
  int shadow = 0;  // proposal tokens not verified, compared with what is sampled instead
  double step_seconds = 0.0;
  double t_first = 0.0;
  bool stop = false;
  // A sampled token into the output; sets stop (and the reason) when generation ends at it.
  const auto take = [&](int32_t token) {
    ++stats->n_generated;
    if (stats->n_generated == 1) {
      t_first = NowSeconds();
      stats->first_token_seconds = t_first - t0;
    }
    sampler.Accept(token);
    context.push_back(token);
    if (on_token) on_token(token);
    if (!options.ignore_eos && tokenizer.IsEndOfGeneration(token)) {
      stats->stop_reason = StopReason::kEndOfGeneration;
      stop = true;
      return;
    }
    const std::string piece = text.Push(token);
    if (!piece.empty() && !on_text(piece)) {
      stats->stop_reason = StopReason::kCallback;
      stop = true;
      return;
    }
    if (options.max_tokens >= 0 && stats->n_generated >= options.max_tokens) {
      stats->stop_reason = StopReason::kMaxTokens;
      stop = true;
    }
  };
  // A forward that chains sampled steps (a GPU's) decodes without drafts chained: each step's
  // token drawn on the device from the row's best tokens (after its bans, bias and penalties)
  // and checked here (BatchForward::ForwardSampledChain); a row those cannot decide is sampled
  // whole, as a plain step's is. A chain's edited tokens must fit the forward's list
  // (ChainKnownRoom; a long penalty window's distinct tokens may not: plain steps then).
  const bool chain = options.chain && drafter == nullptr && decoder.chains_sampled() &&
                     sampler.CanChainSample(top_cap);
  std::vector<float> uniforms;
  ChainEditsHeld held;
  for (;;) {
    // Rows 0..drafts.size() of the last forward: the pending token's, then each draft's.
    const int n_drafts = static_cast<int>(drafts.size());
    int accepted = 0;
    int32_t first = -1;
    for (int i = 0; i <= n_drafts && !stop; ++i) {
      int32_t token = 0;
      if (i < static_cast<int>(reduced.size()) && reduced[i] != 0) {
        const model::TopRow top = decoder.top(i);
        if (top_only) {
          token = sampler.SampleTop(top.ids, top.logits, top.n, top.known_ids, top.known_logits,
                                    top.n_known);
        } else {
          token = sampler.SampleReduced(top.ids, top.logits, top.n, top.max, top.log_sum_exp,
                                        top.known_ids, top.known_logits, top.n_known);
          if (token < 0) {
            const int64_t row = i;
            UF_RETURN_IF_ERROR(decoder.FetchLogits(std::span<const int64_t>(&row, 1)));
            ++stats->rows_fetched;
            token = sampler.Sample(decoder.logits(i), target.pool);
          }
        }
      } else {
        token = sampler.Sample(decoder.logits(i), target.pool);
      }
      if (i == 0) first = token;
      take(token);
      if (stop || i == n_drafts || token != drafts[i]) break;
      ++accepted;
    }
    if (n_drafts > 0) {
      stats->spec.Add(n_drafts, accepted);
      controller.ObserveStep(n_drafts, accepted, step_seconds);
    } else if (drafter != nullptr) {
      controller.ObserveStep(0, 0, step_seconds);
    }
    if (shadow > 0 && first >= 0) controller.ObserveShadow(1, first == proposal[0] ? 1 : 0);
    shadow = 0;
    // Positions [0, context.size() - 1) hold verified K/V; the rejected drafts' go.
    int64_t pos = static_cast<int64_t>(context.size()) - 1;
    if (n_drafts > 0) cache.Truncate(seq, pos);
    // Chains until the generation ends (each ends at a draw the device got wrong, or after
    // kMaxSampledChainSteps).
    const auto decide = [&](const model::TopRow& row, const float* whole, int32_t, bool* more) {
      const int32_t token = SampleFromTop(sampler, row, whole, target.pool);
      if (token < 0) return token;  // the chain brings the whole row
      stats->rows_fetched += whole != nullptr;
      take(token);
      *more = !stop && static_cast<int64_t>(context.size()) - 1 < ctx;
      return token;
    };
    while (chain && !stop && pos < ctx) {
      int64_t n = std::min(ctx - pos, model::kMaxSampledChainSteps);
      if (options.max_tokens >= 0) n = std::min(n, options.max_tokens - stats->n_generated);
      n = std::min(n, ChainKnownRoom(sampler, decoder.chain_known_capacity()));
      if (n < 1) break;
      const model::ChainDraw draw = ChainDrawFor(sampler, n, &uniforms);
      UF_ASSIGN_OR_RETURN(
          const int64_t steps,
          decoder.ForwardSampledChain(seq, context.back(), static_cast<int32_t>(pos), n, draw,
                                      decide, sampler.banned(), ChainEditsFor(sampler, &held)));
      stats->n_decode_steps += steps;
      stats->chained_steps += steps;
      pos = static_cast<int64_t>(context.size()) - 1;
    }
    if (stop) break;
    if (pos >= ctx) {
      stats->stop_reason = StopReason::kContextFull;
      break;
    }
    drafts.clear();
    if (drafter != nullptr) {
      int want = controller.DraftsWanted();
      want = static_cast<int>(std::min<int64_t>(want, ctx - pos - 1));
      if (options.max_tokens >= 0) {
        want =
            static_cast<int>(std::min<int64_t>(want, options.max_tokens - stats->n_generated - 1));
      }
      proposal.clear();
      if (want > 0) {
        const double d0 = NowSeconds();
        UF_RETURN_IF_ERROR(drafter->Draft(context, want, &proposal));
        if (drafter->costly()) {
          const double d = NowSeconds() - d0;
          stats->draft_seconds += d;
          controller.ObserveDraft(want, static_cast<int>(proposal.size()), d);
        }
      }
      const int n = controller.Choose(static_cast<int>(proposal.size()));
      drafts.assign(proposal.begin(), proposal.begin() + n);
      if (n == 0 && !proposal.empty()) shadow = 1;
    }
    batch.Clear();
    batch.Add(context.back(), static_cast<int32_t>(pos), seq, true);
    for (size_t i = 0; i < drafts.size(); ++i) {
      batch.Add(drafts[i], static_cast<int32_t>(pos + 1 + i), seq, true);
    }
    mark(drafts);
    const double s0 = NowSeconds();
    UF_RETURN_IF_ERROR(decoder.Forward(batch));
    step_seconds = NowSeconds() - s0;
    ++stats->n_decode_steps;
  }
  const std::string rest = text.Flush();
  if (!rest.empty() && stats->stop_reason != StopReason::kCallback) on_text(rest);
  if (stats->n_generated > 0) stats->decode_seconds = NowSeconds() - t_first;
  return OkStatus();
}

}  // namespace uf::engine
