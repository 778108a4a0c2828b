#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace uf::sampling {
namespace {

// Highest logit first; ids break ties so every ordering (and so every draw) is deterministic.
bool Higher(const Sampler::Candidate& a, const Sampler::Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Largest non-NaN value of x[0..16) (-inf if none). SSE2 is part of x86-64, so no dispatch.
inline float Max16(const float* x) {
#if defined(__SSE2__)
  // maxps returns its second operand when either is NaN, so NaNs never win.
  __m128 m = _mm_set1_ps(-INFINITY);
  m = _mm_max_ps(_mm_loadu_ps(x), m);
  m = _mm_max_ps(_mm_loadu_ps(x + 4), m);
  m = _mm_max_ps(_mm_loadu_ps(x + 8), m);
  m = _mm_max_ps(_mm_loadu_ps(x + 12), m);
  m = _mm_max_ps(m, _mm_shuffle_ps(m, m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm_max_ps(m, _mm_shuffle_ps(m, m, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtss_f32(m);
#else
  float m = -INFINITY;
  for (int i = 0; i < 16; ++i) m = x[i] > m ? x[i] : m;
  return m;
#endif
}

}  // namespace

// Blocks whose maximum cannot beat the best so far are skipped with one compare.
int32_t ArgMax(const float* x, int32_t n) {
  int32_t best = 0;
  float best_v = -INFINITY;
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (!(Max16(x + i) > best_v)) continue;
    for (int32_t j = i; j < i + 16; ++j) {
      if (x[j] > best_v) best_v = x[j], best = j;
    }
  }
  for (; i < n; ++i) {
    if (x[i] > best_v) best_v = x[i], best = i;
  }
  return best;
}

Status SamplingParams::Validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0f) {
    return InvalidArgumentError("sampling: temperature must be a finite value >= 0");
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return InvalidArgumentError("sampling: top_p must be in (0, 1]");
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return InvalidArgumentError("sampling: min_p must be in [0, 1]");
  }
  if (!std::isfinite(repeat_penalty) || repeat_penalty <= 0.0f) {
    return InvalidArgumentError("sampling: repeat_penalty must be > 0");
  }
  if (!std::isfinite(presence_penalty) || !std::isfinite(frequency_penalty)) {
    return InvalidArgumentError("sampling: presence/frequency penalties must be finite");
  }
  if (penalty_last_n < 0 || penalty_last_n > (1 << 20)) {
    return InvalidArgumentError("sampling: penalty window must be in [0, 2^20]");
  }
  return OkStatus();
}

Sampler::Sampler(const SamplingParams& params, int32_t n_vocab)
    : params_(params), n_vocab_(n_vocab), rng_(params.seed) {
  UF_CHECK(n_vocab > 0);
  UF_CHECK(params.Validate().ok()) << params.Validate().ToString();
  logits_.resize(n_vocab);
  candidates_.reserve(n_vocab);
  window_.reserve(params.penalty_last_n);
  counts_.assign(n_vocab, 0);
  penalised_.assign(n_vocab, 0);
}

void Sampler::Reset() {
  rng_.seed(params_.seed);
  for (int32_t t : window_) counts_[t] = 0;
  window_.clear();
  window_next_ = 0;
}

void Sampler::Accept(int32_t token) {
  if (token < 0 || token >= n_vocab_ || params_.penalty_last_n == 0) return;
  if (static_cast<int32_t>(window_.size()) < params_.penalty_last_n) {
    window_.push_back(token);
  } else {
    --counts_[window_[window_next_]];
    window_[window_next_] = token;
    window_next_ = (window_next_ + 1) % window_.size();
  }
  ++counts_[token];
}

double Sampler::NextUniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

void Sampler::ApplyPenalties() {
  const SamplingParams& p = params_;
  if (p.repeat_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f) {
    return;
  }
  for (int32_t t : window_) {
    if (penalised_[t]) continue;
    penalised_[t] = 1;
    float& l = logits_[t];
    l = l <= 0.0f ? l * p.repeat_penalty : l / p.repeat_penalty;
    l -= static_cast<float>(counts_[t]) * p.frequency_penalty + p.presence_penalty;
  }
  for (int32_t t : window_) penalised_[t] = 0;
}

void Sampler::Filter(const float* logits) {
  // NaN logits must never be chosen: the scans below skip them (every comparison with NaN is
  // false), and whole-vocabulary paths map them to -inf.
  std::memcpy(logits_.data(), logits, sizeof(float) * n_vocab_);
  ApplyPenalties();
  candidates_.clear();
  if (params_.greedy()) {
    const int32_t best = ArgMax(logits_.data(), n_vocab_);
    candidates_.push_back({best, logits_[best], 1.0f});
    return;
  }
  const float* l = logits_.data();
  if (params_.top_k > 0 && params_.top_k < n_vocab_) {
    // Top-k by one scan with a k-entry heap whose top is the worst kept candidate: once it is
    // full, a block of 16 logits that cannot beat it costs one SIMD max and one compare.
    const size_t k = params_.top_k;
    auto offer = [&](int32_t i) {
      const float v = l[i];
      if (candidates_.size() < k) {
        candidates_.push_back({i, std::isnan(v) ? -INFINITY : v, 0.0f});
        std::push_heap(candidates_.begin(), candidates_.end(), Higher);
      } else if (v > candidates_.front().logit) {
        std::pop_heap(candidates_.begin(), candidates_.end(), Higher);
        candidates_.back() = {i, v, 0.0f};
        std::push_heap(candidates_.begin(), candidates_.end(), Higher);
      }
    };
    int32_t i = 0;
    for (; i + 16 <= n_vocab_; i += 16) {
      if (candidates_.size() == k && !(Max16(l + i) > candidates_.front().logit)) continue;
      for (int32_t j = i; j < i + 16; ++j) offer(j);
    }
    for (; i < n_vocab_; ++i) offer(i);
  } else {
    for (int32_t i = 0; i < n_vocab_; ++i) {
      candidates_.push_back({i, std::isnan(l[i]) ? -INFINITY : l[i], 0.0f});
    }
  }
  float max = -INFINITY;
  for (const Candidate& c : candidates_) max = std::max(max, c.logit);
  if (max == -INFINITY) {  // every token masked: fall back to the lowest id
    candidates_.resize(1);
    candidates_[0] = {candidates_[0].id, max, 1.0f};
    return;
  }
  // Untempered normaliser of the top-k set: top-p measures mass against it.
  double sum = 0.0;
  for (const Candidate& c : candidates_) sum += std::exp(static_cast<double>(c.logit) - max);

  // Min-p is a threshold on the logit relative to the best one; filtering before the sort keeps
  // the sort small when min-p is on.
  if (params_.min_p > 0.0f) {
    const float threshold = max + std::log(params_.min_p);
    std::erase_if(candidates_, [&](const Candidate& c) { return c.logit < threshold; });
  }
  std::sort(candidates_.begin(), candidates_.end(), Higher);

  if (params_.top_p < 1.0f) {
    double cum = 0.0;
    size_t keep = candidates_.size();
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cum += std::exp(static_cast<double>(candidates_[i].logit) - max) / sum;
      if (cum >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
    candidates_.resize(keep);
  }

  // Temperature, then the distribution among survivors.
  const double inv_t = 1.0 / params_.temperature;
  double total = 0.0;
  for (Candidate& c : candidates_) {
    c.logit = static_cast<float>(c.logit * inv_t);
    total += std::exp(static_cast<double>(c.logit) - max * inv_t);
  }
  for (Candidate& c : candidates_) {
    c.p = static_cast<float>(std::exp(static_cast<double>(c.logit) - max * inv_t) / total);
  }
}

int32_t Sampler::Sample(const float* logits) {
  Filter(logits);
  if (candidates_.size() == 1) return candidates_[0].id;
  const double u = NextUniform();
  double cum = 0.0;
  for (const Candidate& c : candidates_) {
    cum += c.p;
    if (u < cum) return c.id;
  }
  return candidates_.back().id;  // u within rounding of 1
}

}  // namespace uf::sampling
