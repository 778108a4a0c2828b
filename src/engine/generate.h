// Single-sequence text generation: batched prefill of the prompt (chunked by the decoder's
// max_batch), then one forward per token with sampling, streaming complete UTF-8 text to a
// callback. Used by `ultrafast run`; the server schedules sequences itself but reuses the pieces.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"
#include "engine/speculative.h"
#include "model/decoder.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace uf::engine {

struct GenerateOptions {
  int64_t max_tokens = 128;  // tokens to generate; < 0: until end of generation or context full
  sampling::SamplingParams sampling;
  int seq_id = 0;  // KV cache sequence to use (cleared first)
  // End-of-generation tokens are never sampled, so exactly max_tokens come out (benchmarks; the
  // server's ignore_eos).
  bool ignore_eos = false;
  // Speculative decoding (engine/speculative.h): drafts come from `drafter` (null: off; it must
  // outlive the call and serve this sequence only), at most spec_k per step (further capped by
  // the decoder's max_outputs - 1), chosen adaptively unless spec_adaptive is false.
  Drafter* drafter = nullptr;
  int spec_k = 8;
  bool spec_adaptive = true;
  // On a forward that chains sampled steps (a GPU's: BatchForward::ForwardSampledChain), a
  // sampler without bias or penalties and without a drafter decodes chained: the same tokens,
  // no host round trip between steps. false: one step at a time (UF_GPU_CHAIN=off).
  bool chain = true;
};

enum class StopReason { kEndOfGeneration, kMaxTokens, kContextFull, kCallback };
std::string_view StopReasonName(StopReason r);

struct GenerateStats {
  int64_t n_prompt = 0;
  int64_t n_generated = 0;           // sampled tokens, including an end-of-generation token
  int64_t n_decode_steps = 0;        // forwards after the prefill (one per verify step)
  double prefill_seconds = 0.0;      // prompt forwards (produce the first token's logits)
  double first_token_seconds = 0.0;  // start to the first sampled token
  double decode_seconds = 0.0;       // decode forwards + sampling after the first token
  StopReason stop_reason = StopReason::kMaxTokens;
  SpecStats spec;              // drafts verified and accepted (all zero without a drafter)
  double draft_seconds = 0.0;  // time spent drafting (inside decode_seconds)
  // Rows a device reduced but the sampler needed whole (Sampler::SampleReduced's fallback).
  int64_t rows_fetched = 0;
  int64_t chained_steps = 0;  // of n_decode_steps, steps run in chains (GenerateOptions::chain)

  // Tokens per second after the first token (speculation emits several per forward).
  double decode_tokens_per_second() const {
    return decode_seconds > 0.0 ? static_cast<double>(n_generated - 1) / decode_seconds : 0.0;
  }
};

// Return false to stop generating.
using TextCallback = std::function<bool(std::string_view text)>;
// Every sampled token, in order (an end-of-generation token included).
using TokenCallback = std::function<void(int32_t token)>;

// Errors: empty prompt or prompt + max_tokens past the cache's per-sequence limit (OutOfRange,
// checked before any work), out of KV blocks, bad sampling parameters.
Status Generate(model::Decoder& decoder, const Tokenizer& tokenizer,
                std::span<const int32_t> prompt, const GenerateOptions& options,
                const TextCallback& on_text, GenerateStats* stats,
                const TokenCallback& on_token = nullptr);

// What Generate steps when it is not the CPU decoder: any forward over a cache of its own (a
// gpu::GpuForward for `bench --device vulkan --spec/--serve`). Every row comes back whole.
struct GenerateTarget {
  model::BatchForward* forward = nullptr;
  KvCache* cache = nullptr;  // the forward's
  int64_t n_vocab = 0;
  int64_t max_batch = 0;       // tokens per Forward
  int64_t max_outputs = 0;     // rows per Forward that may want logits
  ThreadPool* pool = nullptr;  // for the sampler's exp-sums; may be null
};
Status Generate(const GenerateTarget& target, const Tokenizer& tokenizer,
                std::span<const int32_t> prompt, const GenerateOptions& options,
                const TextCallback& on_text, GenerateStats* stats,
                const TokenCallback& on_token = nullptr);

// The pieces every generation loop starts with (Generate, and cli/run_gpu.cc's on the GPU).
// OutOfRange when n_prompt tokens and max_tokens more (none when < 0) exceed ctx.
Status CheckPromptFits(int64_t n_prompt, int64_t max_tokens, int64_t ctx);
// Makes `sampler` see the prompt (its penalties count it); with options.ignore_eos it never
// samples an end-of-generation token.
void PrimeSampler(const GenerateOptions& options, const Tokenizer& tokenizer,
                  std::span<const int32_t> prompt, sampling::Sampler* sampler);

}  // namespace uf::engine
