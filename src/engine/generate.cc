#include "engine/generate.h"

#include <algorithm>

#include "base/clock.h"

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

Status Generate(model::Decoder& decoder, const Tokenizer& tokenizer,
                std::span<const int32_t> prompt, const GenerateOptions& options,
                const TextCallback& on_text, GenerateStats* stats) {
  UF_CHECK(stats != nullptr);
  *stats = GenerateStats();
  UF_RETURN_IF_ERROR(options.sampling.Validate());
  KvCache& cache = *decoder.cache();
  const int64_t n_vocab = decoder.model().config().n_vocab;
  const int64_t ctx = cache.max_seq_len();
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt == 0) return InvalidArgumentError("generate: the prompt has no tokens");
  if (options.seq_id < 0 || options.seq_id >= cache.max_seqs()) {
    return InvalidArgumentError("generate: bad sequence id");
  }
  if (n_prompt + std::max<int64_t>(options.max_tokens, 0) > ctx) {
    return OutOfRangeError("generate: prompt (" + std::to_string(n_prompt) + " tokens) + " +
                           std::to_string(options.max_tokens) +
                           " tokens to generate exceeds the context size of " +
                           std::to_string(ctx) + " tokens");
  }
  for (int32_t t : prompt) {
    if (t < 0 || t >= n_vocab) {
      return InvalidArgumentError("generate: prompt token " + std::to_string(t) +
                                  " is outside the vocabulary");
    }
  }

  const int seq = options.seq_id;
  cache.Remove(seq);
  sampling::Sampler sampler(options.sampling, static_cast<int32_t>(n_vocab));
  if (options.ignore_eos) {
    std::vector<int32_t> eog;
    for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
      if (tokenizer.IsEndOfGeneration(id)) eog.push_back(id);
    }
    sampler.SetBanned(eog);
  }
  for (int32_t t : prompt) sampler.Accept(t);
  // Primed with the prompt so the first generated piece keeps its leading space (a fresh decoder
  // drops it, as detokenizing a whole sequence does).
  StreamingDecoder text(tokenizer);
  for (int32_t t : prompt) text.Push(t);
  model::Batch batch;
  batch.Reserve(decoder.options().max_batch);

  const double t0 = NowSeconds();
  for (int64_t i = 0; i < n_prompt; i += decoder.options().max_batch) {
    const int64_t end = std::min(n_prompt, i + decoder.options().max_batch);
    batch.Clear();
    for (int64_t j = i; j < end; ++j) {
      batch.Add(prompt[j], static_cast<int32_t>(j), seq, j == n_prompt - 1);
    }
    UF_RETURN_IF_ERROR(decoder.Forward(batch));
  }
  stats->n_prompt = n_prompt;
  const double t_prefill = NowSeconds();
  stats->prefill_seconds = t_prefill - t0;

  if (options.max_tokens == 0) {
    stats->stop_reason = StopReason::kMaxTokens;
    return OkStatus();
  }
  int64_t pos = n_prompt;
  double t_first = 0.0;
  for (;;) {
    const int32_t token = sampler.Sample(decoder.logits(0), decoder.pool());
    ++stats->n_generated;
    if (stats->n_generated == 1) {
      t_first = NowSeconds();
      stats->first_token_seconds = t_first - t0;
    }
    sampler.Accept(token);
    if (!options.ignore_eos && tokenizer.IsEndOfGeneration(token)) {
      stats->stop_reason = StopReason::kEndOfGeneration;
      break;
    }
    const std::string piece = text.Push(token);
    if (!piece.empty() && !on_text(piece)) {
      stats->stop_reason = StopReason::kCallback;
      break;
    }
    if (options.max_tokens >= 0 && stats->n_generated >= options.max_tokens) {
      stats->stop_reason = StopReason::kMaxTokens;
      break;
    }
    if (pos >= ctx) {
      stats->stop_reason = StopReason::kContextFull;
      break;
    }
    batch.Clear();
    batch.Add(token, static_cast<int32_t>(pos), seq, true);
    UF_RETURN_IF_ERROR(decoder.Forward(batch));
    ++pos;
    ++stats->n_decode_steps;
  }
  const std::string rest = text.Flush();
  if (!rest.empty() && stats->stop_reason != StopReason::kCallback) on_text(rest);
  if (stats->n_generated > 0) stats->decode_seconds = NowSeconds() - t_first;
  return OkStatus();
}

}  // namespace uf::engine
