#include "engine/seq_sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "kernels/ops.h"

namespace uf::engine {

sampling::SamplingParams ToSamplingParams(const RequestSampling& r, int64_t max_tokens) {
  sampling::SamplingParams p;
  // OpenAI's top_p = 0 keeps only the most likely token: greedy.
  p.temperature = r.top_p > 0.0f ? r.temperature : 0.0f;
  p.top_k = r.top_k;
  p.top_p = r.top_p > 0.0f ? std::min(r.top_p, 1.0f) : 1.0f;
  p.min_p = r.min_p;
  p.repeat_penalty = r.repeat_penalty;
  p.presence_penalty = r.presence_penalty;
  p.frequency_penalty = r.frequency_penalty;
  p.penalty_last_n = static_cast<int32_t>(std::clamp<int64_t>(max_tokens, 0, 1 << 20));
  p.seed = r.seed;
  return p;
}

int32_t SampleFromTop(sampling::Sampler& sampler, const model::TopRow& row, const float* whole,
                      ThreadPool* pool) {
  if (whole != nullptr) return sampler.Sample(whole, pool);
  if (sampler.CanSampleTop(row.n)) {
    return sampler.SampleTop(row.ids, row.logits, row.n, row.known_ids, row.known_logits,
                             row.n_known);
  }
  return sampler.SampleReduced(row.ids, row.logits, row.n, row.max, row.log_sum_exp, row.known_ids,
                               row.known_logits, row.n_known);
}

int32_t SampleMaskedFromTop(sampling::Sampler& sampler, const model::TopRow& row,
                            std::span<const uint64_t> mask, int32_t n_vocab,
                            std::vector<int32_t>* ids, std::vector<float>* logits) {
  // Every token outside the row ranks below each one in it, so the allowed entries, in order,
  // are the masked row's best tokens: exactly its top-k when k of them are listed. The known
  // (banned) tokens stay out of the list: SampleTop edits them itself.
  const std::span<const int32_t> known(row.known_ids, row.n_known);
  const auto allowed = [&](int32_t id) { return ((mask[id >> 6] >> (id & 63)) & 1) != 0; };
  const auto is_known = [&](int32_t id) {
    return std::find(known.begin(), known.end(), id) != known.end();
  };
  ids->clear();
  logits->clear();
  for (int32_t j = 0; j < row.n; ++j) {
    const int32_t id = row.ids[j];
    if (id < 0 || id >= n_vocab || !allowed(id) || is_known(id)) continue;
    ids->push_back(id);
    logits->push_back(row.logits[j]);
  }
  auto m = static_cast<int32_t>(ids->size());
  if (m == 0 || !(logits->back() > -std::numeric_limits<float>::infinity())) return -1;
  // Tokens the mask allows (counted only where the pick needs it: not for a top-k listed whole).
  const auto n_allowed = [&] {
    int64_t n = 0;
    for (uint64_t w : mask) n += std::popcount(w);
    return n;
  };
  if (!sampler.CanSampleTop(row.n)) {  // no top-k
    if (!sampler.CanSampleReduced() || row.n_known > 0) return -1;
    return sampler.SampleReducedMasked(row.ids, row.logits, row.n, row.max, row.log_sum_exp,
                                       mask.data(), n_allowed());
  }
  if (!sampler.CanSampleTop(m)) {
    // Fewer listed than the top-k: decided only where they are all the mask allows (a
    // grammar's structural position), the rest of the masked row's best being -inf.
    if (n_allowed() != m) return -1;
    for (int32_t id = 0; id < n_vocab && !sampler.CanSampleTop(m); ++id) {
      if (allowed(id) || is_known(id)) continue;
      ids->push_back(id);
      logits->push_back(-std::numeric_limits<float>::infinity());
      ++m;
    }
    if (!sampler.CanSampleTop(m)) return -1;
  }
  return sampler.SampleTop(ids->data(), logits->data(), m, row.known_ids, row.known_logits,
                           row.n_known);
}

model::ChainDraw ChainDrawFor(const sampling::Sampler& sampler, int64_t n,
                              std::vector<float>* uniforms) {
  const sampling::SamplingParams& p = sampler.params();
  uniforms->resize(n);
  sampler.PeekUniforms(n, uniforms->data());
  model::ChainDraw d;
  d.uniforms = *uniforms;
  if (p.greedy()) {
    d.top_k = 1;  // the best token, no draw: SampleTop's greedy pick
    return d;
  }
  d.temperature = p.temperature;
  d.top_k = p.top_k;
  d.top_p = p.top_p;
  d.min_p = p.min_p;
  return d;
}

model::ChainEdits ChainEditsFor(const sampling::Sampler& sampler, ChainEditsHeld* held) {
  const sampling::SamplingParams& p = sampler.params();
  held->ids.clear();
  held->bias.clear();
  held->counts.clear();
  sampler.PenaltyWindow(&held->window);
  const bool penalties = p.penalties();
  const auto& counts = sampler.window_counts();
  const auto count_of = [&](int32_t id) {
    const auto it = counts.find(id);
    return penalties && it != counts.end() ? it->second : 0;
  };
  for (const auto& [id, b] : sampler.bias()) {  // distinct (Sampler::CanChainSample)
    held->ids.push_back(id);
    held->bias.push_back(b);
    held->counts.push_back(count_of(id));
  }
  if (penalties) {
    // The window's other tokens, by id (the sampler keeps their counts: nothing is sorted but
    // the distinct tokens, a few hundred where a served window holds thousands).
    const size_t n_bias = held->ids.size();
    for (const auto& [id, c] : counts) {
      if (std::find(held->ids.begin(), held->ids.begin() + n_bias, id) ==
          held->ids.begin() + n_bias) {
        held->ids.push_back(id);
      }
    }
    std::sort(held->ids.begin() + n_bias, held->ids.end());
    for (size_t j = n_bias; j < held->ids.size(); ++j) {
      held->bias.push_back(0.0f);
      held->counts.push_back(count_of(held->ids[j]));
    }
  }
  model::ChainEdits e;
  e.ids = held->ids;
  e.bias = held->bias;
  e.counts = held->counts;
  e.window = held->window;
  if (penalties) {
    e.repeat_penalty = p.repeat_penalty;
    e.presence_penalty = p.presence_penalty;
    e.frequency_penalty = p.frequency_penalty;
    e.last_n = p.penalty_last_n;
  }
  return e;
}

int64_t ChainKnownRoom(const sampling::Sampler& sampler, int64_t capacity) {
  const bool penalties = sampler.params().penalties();
  if (sampler.bias().empty() && !penalties && sampler.banned().empty()) {
    return model::kMaxSampledChainSteps;
  }
  // model::ChainKnown of the chain's stream, counted without building its list: the bias ids,
  // the window's other tokens, the bans outside both.
  const auto& counts = sampler.window_counts();
  const auto in_bias = [&](int32_t id) {
    return std::any_of(sampler.bias().begin(), sampler.bias().end(),
                       [&](const auto& b) { return b.first == id; });
  };
  int64_t listed = static_cast<int64_t>(sampler.bias().size());
  if (penalties) {
    listed += static_cast<int64_t>(counts.size());
    for (const auto& [id, b] : sampler.bias()) listed -= counts.count(id) > 0 ? 1 : 0;
  }
  for (int32_t id : sampler.banned()) {
    if (!in_bias(id) && !(penalties && counts.count(id) > 0)) ++listed;
  }
  if (listed > capacity) return 0;
  return penalties ? std::min(capacity - listed, model::kMaxSampledChainSteps)
                   : model::kMaxSampledChainSteps;
}

SequenceSampler::SequenceSampler(const RequestSampling& params, int32_t n_vocab, int64_t max_tokens,
                                 const std::vector<int32_t>& banned)
    : sampler_(ToSamplingParams(params, max_tokens), n_vocab) {
  sampler_.SetLogitBias(params.logit_bias);
  sampler_.SetBanned(banned);
}

TokenLogprob SequenceSampler::Logprobs(const float* logits, int32_t n_vocab, int32_t token,
                                       int top_n) {
  const float max_logit = kernels::MaxValue(logits, n_vocab);
  const double sum = kernels::ExpSum(logits, n_vocab, max_logit, 1.0f, nullptr, nullptr);
  const float log_z = max_logit + static_cast<float>(std::log(sum));
  TokenLogprob out;
  out.token = token;
  out.logprob = logits[token] - log_z;
  if (top_n > 0) {
    // Keep the top_n in a small sorted list: O(n_vocab * top_n) worst case, top_n <= 20.
    std::vector<std::pair<float, int32_t>> best;
    for (int32_t i = 0; i < n_vocab; ++i) {
      if (static_cast<int>(best.size()) == top_n && logits[i] <= best.back().first) continue;
      auto pos = std::upper_bound(best.begin(), best.end(), std::pair<float, int32_t>(logits[i], i),
                                  [](const auto& a, const auto& b) { return a.first > b.first; });
      best.insert(pos, {logits[i], i});
      if (static_cast<int>(best.size()) > top_n) best.pop_back();
    }
    for (const auto& [l, id] : best) out.top.emplace_back(id, l - log_z);
  }
  return out;
}

TokenLogprob SequenceSampler::Logprobs(const model::TopRow& top, int32_t token, int top_n) {
  // The row without its known tokens (max, log-sum-exp), then the known tokens' raw logits.
  float max_logit = top.max;
  for (int32_t k = 0; k < top.n_known; ++k) max_logit = std::max(max_logit, top.known_logits[k]);
  double sum = 0.0;
  if (max_logit > -INFINITY) {
    if (top.max > -INFINITY) sum += std::exp(static_cast<double>(top.log_sum_exp) - max_logit);
    for (int32_t k = 0; k < top.n_known; ++k) {
      const float x = top.known_logits[k];
      if (x > -INFINITY) sum += std::exp(static_cast<double>(x) - max_logit);
    }
  }
  const float log_z = max_logit + static_cast<float>(std::log(sum));
  // Candidates of the raw row: the known tokens, then the reduced list without them.
  std::vector<std::pair<float, int32_t>> cand;
  cand.reserve(top.n + top.n_known);
  for (int32_t k = 0; k < top.n_known; ++k) {
    cand.emplace_back(top.known_logits[k], top.known_ids[k]);
  }
  const int32_t* known_end = top.known_ids + top.n_known;
  for (int32_t i = 0; i < top.n; ++i) {
    const int32_t id = top.ids[i];
    if (id < 0 || std::find(top.known_ids, known_end, id) != known_end) continue;
    cand.emplace_back(top.logits[i], id);
  }
  TokenLogprob out;
  out.token = token;
  out.logprob = -INFINITY;
  for (const auto& [l, id] : cand) {
    if (id == token) out.logprob = l - log_z;
  }
  if (top_n > 0) {
    // Best first, ties by id (as the whole-row Logprobs orders them).
    const size_t m = std::min(cand.size(), static_cast<size_t>(top_n));
    std::partial_sort(cand.begin(), cand.begin() + m, cand.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    for (size_t i = 0; i < m; ++i) out.top.emplace_back(cand[i].second, cand[i].first - log_z);
  }
  return out;
}

}  // namespace uf::engine
