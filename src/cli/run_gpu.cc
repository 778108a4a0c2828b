#include "cli/run_gpu.h"

#include "base/clock.h"
#include "sampling/sampler.h"

namespace uf::cli {

Status GenerateOnGpu(gpu::GpuDecoder& decoder, const Tokenizer& tokenizer,
                     std::span<const int32_t> prompt, const engine::GenerateOptions& options,
                     const engine::TextCallback& on_text, engine::GenerateStats* stats) {
  *stats = engine::GenerateStats();
  UF_RETURN_IF_ERROR(options.sampling.Validate());
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  const int64_t ctx = decoder.max_ctx();
  if (n_prompt == 0) return InvalidArgumentError("generate: the prompt has no tokens");
  UF_RETURN_IF_ERROR(engine::CheckPromptFits(n_prompt, options.max_tokens, ctx));
  const auto n_vocab = static_cast<int32_t>(decoder.n_vocab());
  sampling::Sampler sampler(options.sampling, n_vocab);
  engine::PrimeSampler(options, tokenizer, prompt, &sampler);
  StreamingDecoder text(tokenizer);
  for (int32_t t : prompt) text.Push(t);

  const double t0 = NowSeconds();
  UF_RETURN_IF_ERROR(decoder.Prefill(prompt, 0));  // in batches of decoder.max_batch()
  stats->n_prompt = n_prompt;
  stats->prefill_seconds = NowSeconds() - t0;
  double t_first = 0.0;
  int64_t pos = n_prompt;
  // Plain greedy decoding (no penalties, no bans) takes each step's arg-max on the device: one
  // token comes back instead of the logits row.
  const bool device_greedy =
      options.sampling.greedy() && !options.sampling.penalties() && !options.ignore_eos;
  int32_t next = -1;  // the device's arg-max of the last step
  while (options.max_tokens != 0) {
    const int32_t token = next >= 0 ? next : sampler.Sample(decoder.logits());
    if (++stats->n_generated == 1) {
      t_first = NowSeconds();
      stats->first_token_seconds = t_first - t0;
    }
    sampler.Accept(token);
    if (!options.ignore_eos && tokenizer.IsEndOfGeneration(token)) {
      stats->stop_reason = engine::StopReason::kEndOfGeneration;
      break;
    }
    const std::string piece = text.Push(token);
    if (!piece.empty() && !on_text(piece)) {
      stats->stop_reason = engine::StopReason::kCallback;
      break;
    }
    if (options.max_tokens >= 0 && stats->n_generated >= options.max_tokens) {
      stats->stop_reason = engine::StopReason::kMaxTokens;
      break;
    }
    if (pos >= ctx) {
      stats->stop_reason = engine::StopReason::kContextFull;
      break;
    }
    if (device_greedy) {
      UF_ASSIGN_OR_RETURN(next, decoder.StepGreedy(token, static_cast<int32_t>(pos)));
    } else {
      UF_RETURN_IF_ERROR(decoder.Step(token, static_cast<int32_t>(pos)));
    }
    ++pos;
    ++stats->n_decode_steps;
  }
  const std::string rest = text.Flush();
  if (!rest.empty() && stats->stop_reason != engine::StopReason::kCallback) on_text(rest);
  if (stats->n_generated > 0) stats->decode_seconds = NowSeconds() - t_first;
  return OkStatus();
}

}  // namespace uf::cli
