#include "cli/run_gpu.h"

#include <algorithm>

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
  // Takes a token into the output: false when generation stops at it (stats->stop_reason).
  const auto take = [&](int32_t token) {
    if (++stats->n_generated == 1) {
      t_first = NowSeconds();
      stats->first_token_seconds = t_first - t0;
    }
    sampler.Accept(token);
    if (!options.ignore_eos && tokenizer.IsEndOfGeneration(token)) {
      stats->stop_reason = engine::StopReason::kEndOfGeneration;
      return false;
    }
    const std::string piece = text.Push(token);
    if (!piece.empty() && !on_text(piece)) {
      stats->stop_reason = engine::StopReason::kCallback;
      return false;
    }
    if (options.max_tokens >= 0 && stats->n_generated >= options.max_tokens) {
      stats->stop_reason = engine::StopReason::kMaxTokens;
      return false;
    }
    if (pos >= ctx) {
      stats->stop_reason = engine::StopReason::kContextFull;
      return false;
    }
    return true;
  };
  // Greedy decoding without penalties takes each step's arg-max on the device (the banned end
  // tokens of --ignore-eos masked there first) and feeds it to the next step there
  // (GreedyChain): one token comes back instead of the logits row, and the next step is already
  // queued when it does. UF_GPU_CHAIN=off: one StepGreedy a token (no bans), else the host's.
  const bool device_greedy = sampler.ArgMaxAfterBans();
  const bool chain = device_greedy && gpu::ChainSteps();
  int32_t token = options.max_tokens != 0 ? sampler.Sample(decoder.logits()) : -1;
  if (token >= 0 && take(token)) {
    if (chain) {
      int64_t n = ctx - pos;  // steps at most; take() stops the chain at any limit before
      if (options.max_tokens >= 0) n = std::min(n, options.max_tokens - stats->n_generated);
      UF_RETURN_IF_ERROR(decoder
                             .GreedyChain(
                                 token, static_cast<int32_t>(pos), n,
                                 [&](int32_t next) {
                                   ++pos;
                                   ++stats->n_decode_steps;
                                   return take(next);
                                 },
                                 sampler.banned())
                             .status());
    } else {
      const bool step_greedy = device_greedy && sampler.banned().empty();
      do {
        if (step_greedy) {
          UF_ASSIGN_OR_RETURN(token, decoder.StepGreedy(token, static_cast<int32_t>(pos)));
        } else {
          UF_RETURN_IF_ERROR(decoder.Step(token, static_cast<int32_t>(pos)));
          token = sampler.Sample(decoder.logits());
        }
        ++pos;
        ++stats->n_decode_steps;
      } while (take(token));
    }
  }
  const std::string rest = text.Flush();
  if (!rest.empty() && stats->stop_reason != engine::StopReason::kCallback) on_text(rest);
  if (stats->n_generated > 0) stats->decode_seconds = NowSeconds() - t_first;
  return OkStatus();
}

}  // namespace uf::cli
