// Per-request token choice for the serving engine: the shared sampler chain (sampling::Sampler:
// the request's logit bias and banned tokens, penalties over the generated tokens, top-k / top-p /
// min-p, temperature, a draw from a generator seeded per request), so a seeded request samples
// the same tokens whether it runs alone or batched.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "engine/request.h"
#include "model/batch.h"
#include "sampling/sampler.h"

namespace uf::engine {

// The sampler settings of a request; penalties look at up to max_tokens generated tokens.
sampling::SamplingParams ToSamplingParams(const RequestSampling& params, int64_t max_tokens);

// The token sampler draws from a reduced row (a device's): SampleTop where it can
// (CanSampleTop(row.n)), else SampleReduced (-1: the row is needed whole, nothing drawn). With
// whole (the row's [n_vocab] logits, brought after that -1: model::ChainDecide), Sample(whole).
int32_t SampleFromTop(sampling::Sampler& sampler, const model::TopRow& row,
                      const float* whole = nullptr, ThreadPool* pool = nullptr);
// A sampled chain's draw (model::BatchForward::ForwardSampledChain) for sampler's next n tokens:
// its filters, and its next n uniforms written to *uniforms, which the draw points at.
// sampler.CanChainSample(the forward's top capacity), or a greedy sampler without bias or
// penalties (ArgMaxAfterBans: drawn as top-k 1, the best token).
model::ChainDraw ChainDrawFor(const sampling::Sampler& sampler, int64_t n,
                              std::vector<float>* uniforms);
// A sampled chain's bias and penalties (model::ChainEdits) for sampler as it stands: its bias,
// its penalty window oldest first and each listed token's count in it, held in *held (which
// the edits point into) while the chain runs. Empty without bias or penalties.
struct ChainEditsHeld {
  std::vector<int32_t> ids, counts, window;
  std::vector<float> bias;
};
model::ChainEdits ChainEditsFor(const sampling::Sampler& sampler, ChainEditsHeld* held);
// The most steps a chain of sampler's stream may take on a forward listing `capacity` known
// tokens a row (BatchForward::chain_known_capacity; model::ChainKnown): model::
// kMaxSampledChainSteps without bias, bans or penalties; 0 when they do not fit.
int64_t ChainKnownRoom(const sampling::Sampler& sampler, int64_t capacity);

// SampleFromTop for a row masked by a grammar (mask: a bit per token, set where allowed; Apply
// sets the others to -inf), given only the unmasked row's reduction (a device drew from it):
// the token Sample(masked row) draws, with the same draws, or -1 (none taken) when the row is
// needed whole. The allowed listed entries are the masked row's best: SampleTop of them when k
// are listed (when fewer are but they are all the mask allows, the masked row's -inf tokens
// follow in id order), else Sampler::SampleReducedMasked. Also -1 when an allowed listed token
// is at -inf or NaN (the masked row orders those ties by id, allowed or not). The row's known
// tokens (bans, bias, the penalty window: SampleTop edits them) carry their raw logits, those
// the mask forbids at -inf (which every edit keeps: Service::JudgeConstrained sets them); a
// row with known tokens and no top-k is -1. *ids and *logits are scratch.
int32_t SampleMaskedFromTop(sampling::Sampler& sampler, const model::TopRow& row,
                            std::span<const uint64_t> mask, int32_t n_vocab,
                            std::vector<int32_t>* ids, std::vector<float>* logits);

class SequenceSampler {
 public:
  // params must pass ToSamplingParams(params, max_tokens).Validate(). banned: tokens that must
  // not be chosen (end-of-generation tokens when ignoring EOS).
  SequenceSampler(const RequestSampling& params, int32_t n_vocab, int64_t max_tokens,
                  const std::vector<int32_t>& banned);

  // Chooses the next token from raw logits [n_vocab] (read only, never copied); pool: see
  // sampling::Sampler::Sample.
  int32_t Sample(const float* logits, ThreadPool* pool = nullptr) {
    return sampler_.Sample(logits, pool);
  }
  // Sample() given only the row's best tokens (a device's reduction), when CanSampleTop(top.n):
  // the same token, the same RNG draws.
  bool CanSampleTop(int32_t n) const { return sampler_.CanSampleTop(n); }
  int32_t SampleTop(const model::TopRow& top) {
    return sampler_.SampleTop(top.ids, top.logits, top.n, top.known_ids, top.known_logits,
                              top.n_known);
  }
  // SampleReduced from a reduced row (sampling::Sampler::SampleReduced): the whole row's token,
  // or -1 when the draw needs the whole row (no RNG draw consumed then).
  bool CanSampleReduced() const { return sampler_.CanSampleReduced(); }
  int32_t SampleReduced(const model::TopRow& top) {
    return sampler_.SampleReduced(top.ids, top.logits, top.n, top.max, top.log_sum_exp,
                                  top.known_ids, top.known_logits, top.n_known);
  }
  int32_t SampleFromTop(const model::TopRow& top, const float* whole = nullptr) {
    return engine::SampleFromTop(sampler_, top, whole);
  }
  int32_t SampleMaskedFromTop(const model::TopRow& top, std::span<const uint64_t> mask,
                              int32_t n_vocab, std::vector<int32_t>* ids,
                              std::vector<float>* logits) {
    return engine::SampleMaskedFromTop(sampler_, top, mask, n_vocab, ids, logits);
  }
  // The tokens a device must read out raw (Batch::known_ids) for the row after `pending`.
  void EditedTokens(std::span<const int32_t> pending, std::vector<int32_t>* out) const {
    sampler_.EditedTokens(pending, out);
  }
  // Records a generated token (for the penalties).
  void Accept(int32_t token) { sampler_.Accept(token); }
  const sampling::Sampler& sampler() const { return sampler_; }

  // Log-probability of token under softmax(logits) and the top_n most likely tokens (best first,
  // ties by id): the model's own distribution, before bias, penalties or temperature.
  static TokenLogprob Logprobs(const float* logits, int32_t n_vocab, int32_t token, int top_n);
  // The same from a reduced row (top_n <= top.n; token one the row's sampler drew from it): the
  // row's log-sum-exp combined with its known tokens' raw logits. The top list and the token's
  // logit are the whole row's exactly; log_z differs from the whole row's by the device's
  // float summation (~1e-6 relative).
  static TokenLogprob Logprobs(const model::TopRow& top, int32_t token, int top_n);

 private:
  sampling::Sampler sampler_;
};

}  // namespace uf::engine
