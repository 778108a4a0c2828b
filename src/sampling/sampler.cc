#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "kernels/ops.h"

namespace uf::sampling {
namespace {

using kernels::kExpSumBlock;

// Highest logit first; ids break ties so every ordering (and so every draw) is deterministic.
bool Higher(const Sampler::Candidate& a, const Sampler::Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

}  // namespace

// Two vectorized passes: the maximum, then the first token that reaches it.
int32_t ArgMax(const float* x, int32_t n) {
  const float max = kernels::MaxValue(x, n);
  if (max == -INFINITY) return 0;  // all NaN or masked
  return static_cast<int32_t>(kernels::FirstAbove(x, n, std::nextafter(max, -INFINITY)));
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
  block_sums_.resize((n_vocab + kExpSumBlock - 1) / kExpSumBlock);
  block_exps_.resize(kExpSumBlock);
  if (params.top_k > 0 && params.top_k < n_vocab) cand_.reserve(params.top_k);
}

void Sampler::SetLogitBias(const std::vector<std::pair<int32_t, float>>& bias) {
  bias_.clear();
  for (const auto& [id, b] : bias) {
    if (id >= 0 && id < n_vocab_) bias_.emplace_back(id, b);
  }
}

void Sampler::SetBanned(const std::vector<int32_t>& ids) {
  banned_.clear();
  for (int32_t id : ids) {
    if (id >= 0 && id < n_vocab_) banned_.push_back(id);
  }
}

void Sampler::Reset() {
  rng_.seed(params_.seed);
  window_.clear();
  window_next_ = 0;
}

void Sampler::Accept(int32_t token) {
  if (token < 0 || token >= n_vocab_ || params_.penalty_last_n == 0) return;
  if (static_cast<int32_t>(window_.size()) < params_.penalty_last_n) {
    window_.push_back(token);
  } else {
    window_[window_next_] = token;
    window_next_ = (window_next_ + 1) % window_.size();
  }
}

double Sampler::NextUniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

bool Sampler::filtering() const {
  return (params_.top_k > 0 && params_.top_k < n_vocab_) || params_.top_p < 1.0f ||
         params_.min_p > 0.0f;
}

bool Sampler::HasEdits() const {
  return !bias_.empty() || !banned_.empty() || (params_.penalties() && !window_.empty());
}

template <typename Raw>
void Sampler::BuildEdits(const Raw& raw) {
  edits_.clear();
  const bool penalise = params_.penalties() && !window_.empty();
  if (slot_.empty()) slot_.assign(n_vocab_, -1);
  auto edit = [&](int32_t id) -> Edit& {
    int32_t& s = slot_[id];
    if (s < 0) {
      s = static_cast<int32_t>(edits_.size());
      edits_.push_back({id, raw(id), 0});
    }
    return edits_[s];
  };
  for (const auto& [id, b] : bias_) edit(id).value += b;
  if (penalise) {
    const SamplingParams& p = params_;
    for (int32_t t : window_) ++edit(t).count;
    for (Edit& e : edits_) {
      if (e.count == 0) continue;
      float& l = e.value;
      l = l <= 0.0f ? l * p.repeat_penalty : l / p.repeat_penalty;
      l -= static_cast<float>(e.count) * p.frequency_penalty + p.presence_penalty;
    }
  }
  for (int32_t id : banned_) edit(id).value = -INFINITY;
  for (const Edit& e : edits_) slot_[e.id] = -1;
  work_.edits = static_cast<int64_t>(edits_.size());
}

void Sampler::Prepare(const float* logits) {
  work_ = Work();
  edits_.clear();
  runs_.clear();
  if (!HasEdits()) {
    runs_.push_back({logits, 0, n_vocab_});
    return;
  }
  BuildEdits([logits](int32_t id) { return logits[id]; });

  dirty_.clear();
  for (const Edit& e : edits_) dirty_.push_back(e.id / kExpSumBlock);
  std::sort(dirty_.begin(), dirty_.end());
  dirty_.erase(std::unique(dirty_.begin(), dirty_.end()), dirty_.end());
  if (static_cast<int64_t>(dirty_.size()) * kExpSumBlock * 2 >= n_vocab_) {
    // Edits everywhere (a long penalty window over a small vocabulary): one patched copy.
    side_.resize(n_vocab_);
    std::memcpy(side_.data(), logits, sizeof(float) * n_vocab_);
    for (const Edit& e : edits_) side_[e.id] = e.value;
    runs_.push_back({side_.data(), 0, n_vocab_});
    return;
  }
  side_.resize(dirty_.size() * kExpSumBlock);
  for (size_t d = 0; d < dirty_.size(); ++d) {
    const int64_t begin = dirty_[d] * kExpSumBlock;
    const int64_t n = std::min<int64_t>(kExpSumBlock, n_vocab_ - begin);
    std::memcpy(side_.data() + d * kExpSumBlock, logits + begin, sizeof(float) * n);
  }
  for (const Edit& e : edits_) {
    const size_t d =
        std::lower_bound(dirty_.begin(), dirty_.end(), e.id / kExpSumBlock) - dirty_.begin();
    side_[d * kExpSumBlock + e.id % kExpSumBlock] = e.value;
  }
  int32_t next = 0;
  for (size_t d = 0; d < dirty_.size(); ++d) {
    const int32_t begin = dirty_[d] * kExpSumBlock;
    const int32_t n = std::min<int32_t>(kExpSumBlock, n_vocab_ - begin);
    if (begin > next) runs_.push_back({logits + next, next, begin - next});
    runs_.push_back({side_.data() + d * kExpSumBlock, begin, n});
    next = begin + n;
  }
  if (next < n_vocab_) runs_.push_back({logits + next, next, n_vocab_ - next});
}

int32_t Sampler::ArgMaxOfRuns() {
  int32_t best = 0;
  float best_v = -INFINITY;
  for (const Run& r : runs_) {
    const int32_t i = ArgMax(r.x, r.n);
    if (r.x[i] > best_v) best_v = r.x[i], best = r.begin + i;
    work_.row_reads += r.n;
  }
  return best;
}

float Sampler::MaxOfRuns() {
  float max = -INFINITY;
  for (const Run& r : runs_) {
    max = std::max(max, kernels::MaxValue(r.x, r.n));
    work_.row_reads += r.n;
  }
  return max;
}

void Sampler::TopKHeap() {
  // One scan with a k-entry heap whose top is the worst kept candidate: once it is full, the
  // kernel skips to the next token that beats it (16-64 tokens per compare).
  const size_t k = static_cast<size_t>(params_.top_k);
  for (const Run& r : runs_) {
    const float* l = r.x;
    int32_t i = 0;
    for (; i < r.n && cand_.size() < k; ++i) {
      cand_.push_back({r.begin + i, std::isnan(l[i]) ? -INFINITY : l[i], 0.0f});
      std::push_heap(cand_.begin(), cand_.end(), Higher);
    }
    while (i < r.n) {
      i += static_cast<int32_t>(kernels::FirstAbove(l + i, r.n - i, cand_.front().logit));
      if (i >= r.n) break;
      std::pop_heap(cand_.begin(), cand_.end(), Higher);
      cand_.back() = {r.begin + i, l[i], 0.0f};
      std::push_heap(cand_.begin(), cand_.end(), Higher);
      ++i;
    }
    work_.row_reads += r.n;
  }
}

float Sampler::ValueAt(int32_t id) const {
  for (const Run& r : runs_) {
    if (id < r.begin + r.n) return r.x[id - r.begin];
  }
  return NAN;
}

float Sampler::TopKCandidates() {
  cand_.clear();
  TopKHeap();
  // Best first: the draw then walks a canonical order, so a device that returns the row's best
  // tokens sorted (SampleTop) draws exactly the same token.
  std::sort_heap(cand_.begin(), cand_.end(), Higher);
  work_.sorted += static_cast<int64_t>(cand_.size());
  return FilterTopK();
}

float Sampler::FilterTopK() {
  const SamplingParams& p = params_;
  float max = -INFINITY;
  for (const Candidate& c : cand_) max = std::max(max, c.logit);
  if (max == -INFINITY) return max;
  double z = 0.0;  // untempered normaliser of the top-k set: top-p measures mass against it
  if (p.top_p < 1.0f) {
    for (const Candidate& c : cand_) z += std::exp(static_cast<double>(c.logit) - max);
  }
  if (p.min_p > 0.0f) {
    const float threshold = max + std::log(p.min_p);
    std::erase_if(cand_, [&](const Candidate& c) { return c.logit < threshold; });
  }
  work_.gathered = static_cast<int64_t>(cand_.size());
  if (p.top_p < 1.0f && cand_.size() > 1) {
    for (Candidate& c : cand_) c.p = std::exp(c.logit - max);
    cand_.resize(TopPCut(static_cast<double>(p.top_p) * z));
  }
  return max;
}

void Sampler::RowCut(float max) {
  const SamplingParams& p = params_;
  weights_.resize(n_vocab_);
  const double z = RowExpSum(max, 1.0f, weights_.data());
  const float* w = weights_.data();
  // min-p keeps p >= min_p * p_max, that is weights >= min_p; 0 keeps everything with mass.
  keep_ = p.min_p;
  extras_.clear();
  if (!(p.top_p < 1.0f)) return;
  const double need = static_cast<double>(p.top_p) * z;
  // A token with p < (1 - top_p) / n_vocab is never kept: the tokens at or below it weigh less
  // than 1 - top_p together, so the ones above it already reach top_p. 0.99 absorbs rounding.
  float lo = std::max(keep_, static_cast<float>(z * (1.0 - p.top_p) / n_vocab_ * 0.99));
  int64_t count_lo = 0, count_hi = 0;
  double mass_lo = kernels::MassAtLeast(w, n_vocab_, lo, &count_lo), mass_hi = 0.0;
  work_.row_reads += n_vocab_;
  if (mass_lo <= need) {  // min-p left no more than top_p (or rounding): keep all of it
    keep_ = lo;
    return;
  }
  // Invariant: mass(lo) > need > mass(hi). Bisect (geometrically: in logit space) until few
  // tokens lie in [lo, hi); weights are at most 1, so nothing is at or above hi at first.
  float hi = std::nextafter(1.0f, 2.0f);
  constexpr int64_t kBracket = 256;
  for (int round = 0; round < 64 && count_lo - count_hi > kBracket; ++round) {
    float mid = lo > 0.0f ? std::sqrt(lo) * std::sqrt(hi) : 0.5f * hi;
    if (!(mid > lo && mid < hi)) break;  // ties: no float between them
    int64_t count = 0;
    const double mass = kernels::MassAtLeast(w, n_vocab_, mid, &count);
    work_.row_reads += n_vocab_;
    if (mass > need) {
      lo = mid, mass_lo = mass, count_lo = count;
    } else {
      hi = mid, mass_hi = mass, count_hi = count;
    }
  }
  // The tokens straddling the cut, best first: keep them until the mass reaches top_p.
  if (ids_.empty()) ids_.resize(n_vocab_);
  const int64_t m = kernels::IndicesInRange(w, n_vocab_, lo, hi, ids_.data());
  work_.row_reads += n_vocab_;
  for (int64_t j = 0; j < m; ++j) extras_.push_back({ids_[j], ValueAt(ids_[j]), w[ids_[j]]});
  std::sort(extras_.begin(), extras_.end(), Higher);
  work_.sorted += m;
  double acc = mass_hi;
  size_t cut = extras_.size();
  for (size_t i = 0; i < extras_.size(); ++i) {
    acc += extras_[i].p;
    if (acc >= need) {
      cut = i + 1;
      break;
    }
  }
  extras_.resize(cut);
  keep_ = hi;
  work_.gathered = count_hi + static_cast<int64_t>(cut);
}

int32_t Sampler::DrawKept(float max) {
  const float* w = weights_.data();
  const float* v = w;  // e^(l - max) is already the tempered weight at T = 1
  if (params_.temperature != 1.0f) {
    tempered_.resize(n_vocab_);
    RowExpSum(max, 1.0f / params_.temperature, tempered_.data());
    v = tempered_.data();
  }
  double total = kernels::MaskedBlockSums(w, v, n_vocab_, keep_, block_sums_.data());
  work_.row_reads += n_vocab_;
  for (const Candidate& e : extras_) {
    block_sums_[e.id / kExpSumBlock] += v[e.id];
    total += v[e.id];
  }
  const double target = NextUniform() * total;
  double cum = 0.0;
  const int64_t b = FindBlock(target, &cum);
  const int32_t first = static_cast<int32_t>(b * kExpSumBlock);
  const int32_t end = std::min<int32_t>(first + kExpSumBlock, n_vocab_);
  double rest = target - cum;
  int32_t last = first;
  for (int32_t i = first; i < end; ++i) {
    bool kept = w[i] >= keep_;
    for (size_t e = 0; !kept && e < extras_.size(); ++e) kept = extras_[e].id == i;
    if (!kept || !(v[i] > 0.0f)) continue;
    last = i;
    rest -= v[i];
    if (rest < 0.0) return i;
  }
  return last;
}

size_t Sampler::TopPCut(double need) const {
  for (size_t i = 0; i < cand_.size(); ++i) {
    need -= cand_[i].p;
    if (need <= 0.0) return i + 1;
  }
  return cand_.size();  // rounding: all of them
}

int64_t Sampler::FindBlock(double target, double* cum) const {
  const int64_t n_blocks = static_cast<int64_t>(block_sums_.size());
  double c = 0.0;
  for (int64_t b = 0; b < n_blocks; ++b) {
    if (target < c + block_sums_[b]) {
      *cum = c;
      return b;
    }
    c += block_sums_[b];
  }
  // Rounding: the last block with mass, and (cum = -inf) its last token with mass.
  int64_t b = n_blocks - 1;
  while (b > 0 && !(block_sums_[b] > 0.0)) --b;
  *cum = -INFINITY;
  return b;
}

double Sampler::RowExpSum(float max, float scale, float* out) {
  // Below this many tokens a pool dispatch (1-2 us) costs about what the split saves.
  constexpr int32_t kSplitMin = 16384;
  for (const Run& r : runs_) {
    auto part = [&](int64_t b, int64_t e) {
      kernels::ExpSum(r.x + b, e - b, max, scale, out != nullptr ? out + r.begin + b : nullptr,
                      block_sums_.data() + (r.begin + b) / kExpSumBlock);
    };
    // Chunks are whole blocks (runs start on a block), so each block's sum is the same however
    // the row is split.
    if (pool_ != nullptr && pool_->size() > 1 && r.n >= kSplitMin) {
      pool_->ParallelFor(r.n, kExpSumBlock, part);
    } else {
      part(0, r.n);
    }
    work_.row_reads += r.n;
  }
  double total = 0.0;
  for (double b : block_sums_) total += b;
  return total;
}

int32_t Sampler::DrawFromRow(float max) {
  const float inv_t = 1.0f / params_.temperature;
  const double total = RowExpSum(max, inv_t, nullptr);
  const double target = NextUniform() * total;
  double cum = 0.0;
  const int64_t b = FindBlock(target, &cum);
  const int32_t first = static_cast<int32_t>(b * kExpSumBlock);
  const Run* run = &runs_.back();
  for (const Run& r : runs_) {
    if (first < r.begin + r.n) {
      run = &r;
      break;
    }
  }
  const int32_t n = std::min<int32_t>(kExpSumBlock, n_vocab_ - first);
  kernels::ExpSum(run->x + (first - run->begin), n, max, inv_t, block_exps_.data(), nullptr);
  work_.row_reads += n;
  double rest = target - cum;
  int32_t last = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (!(block_exps_[i] > 0.0f)) continue;
    last = i;
    rest -= block_exps_[i];
    if (rest < 0.0) return first + i;
  }
  return first + last;
}

int32_t Sampler::Sample(const float* logits, ThreadPool* pool) {
  pool_ = pool;
  Prepare(logits);
  if (params_.greedy()) return ArgMaxOfRuns();
  if (!(params_.top_k > 0 && params_.top_k < n_vocab_)) {
    const float max = MaxOfRuns();
    if (max == -INFINITY) return 0;  // every token masked: the lowest id
    if (!filtering()) return DrawFromRow(max);
    RowCut(max);
    return DrawKept(max);
  }
  return DrawTopK(TopKCandidates());
}

void Sampler::EditedTokens(std::span<const int32_t> pending, std::vector<int32_t>* out) const {
  out->clear();
  for (const auto& [id, b] : bias_) out->push_back(id);
  out->insert(out->end(), banned_.begin(), banned_.end());
  if (params_.penalties()) {
    out->insert(out->end(), window_.begin(), window_.end());
    for (int32_t t : pending) {
      if (t >= 0 && t < n_vocab_) out->push_back(t);
    }
  }
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
}

bool Sampler::CanSampleTop(int32_t n) const {
  if (n < 1) return false;
  return params_.greedy() || (params_.top_k > 0 && params_.top_k <= n && params_.top_k < n_vocab_);
}

int32_t Sampler::SampleTop(const int32_t* ids, const float* logits, int32_t n,
                           const int32_t* known_ids, const float* known_logits, int32_t n_known) {
  UF_CHECK(CanSampleTop(n));
  work_ = Work();
  cand_.clear();
  if (n_known > 0 && known_slot_.empty()) known_slot_.assign(n_vocab_, -1);
  for (int32_t k = 0; k < n_known; ++k) known_slot_[known_ids[k]] = k;
  known_vals_.assign(known_logits, known_logits + n_known);
  if (HasEdits()) {
    // The raw logits of the edited tokens come from `known`; the same float operations as
    // Sample()'s Prepare, in the same order.
    BuildEdits([&](int32_t id) {
      UF_CHECK(n_known > 0 && known_slot_[id] >= 0) << "edited token " << id << " is not known";
      return known_logits[known_slot_[id]];
    });
    for (const Edit& e : edits_) known_vals_[known_slot_[e.id]] = e.value;
  }
  auto clean = [](float x) { return std::isnan(x) ? -INFINITY : x; };
  for (int32_t k = 0; k < n_known; ++k)
    cand_.push_back({known_ids[k], clean(known_vals_[k]), 0.0f});
  for (int32_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= n_vocab_ || (n_known > 0 && known_slot_[id] >= 0)) continue;
    cand_.push_back({id, clean(logits[i]), 0.0f});
  }
  for (int32_t k = 0; k < n_known; ++k) known_slot_[known_ids[k]] = -1;
  if (n_known > 0) {
    // The edited row's best first, as the full-row sampler orders its top-k set.
    std::sort(cand_.begin(), cand_.end(), Higher);
    work_.sorted += static_cast<int64_t>(cand_.size());
  }
  // Greedy: sampling::ArgMax's choice is the best token, or 0 when nothing is above -inf.
  if (params_.greedy()) return !cand_.empty() && cand_[0].logit > -INFINITY ? cand_[0].id : 0;
  if (cand_.size() > static_cast<size_t>(params_.top_k)) cand_.resize(params_.top_k);
  return DrawTopK(FilterTopK());
}

int32_t Sampler::DrawTopK(float max) {
  if (max == -INFINITY) return 0;
  if (cand_.size() == 1) return cand_[0].id;
  const size_t m = cand_.size();
  vals_.resize(m);
  exps_.resize(m);
  for (size_t i = 0; i < m; ++i) vals_[i] = cand_[i].logit;
  const double total = kernels::ExpSum(vals_.data(), static_cast<int64_t>(m), max,
                                       1.0f / params_.temperature, exps_.data(), nullptr);
  const double target = NextUniform() * total;
  double cum = 0.0;
  size_t last = 0;
  for (size_t i = 0; i < m; ++i) {
    if (!(exps_[i] > 0.0f)) continue;
    last = i;
    cum += exps_[i];
    if (target < cum) return cand_[i].id;
  }
  return cand_[last].id;  // u within rounding of 1
}

void Sampler::Filter(const float* logits) {
  Prepare(logits);
  cand_.clear();
  if (params_.greedy()) {
    const int32_t best = ArgMaxOfRuns();
    cand_.push_back({best, ValueAt(best), 1.0f});
    return;
  }
  float max = -INFINITY;
  if (params_.top_k > 0 && params_.top_k < n_vocab_) {
    max = TopKCandidates();
  } else {
    max = MaxOfRuns();
    if (max != -INFINITY) {
      RowCut(max);
      // List the kept set: weights at or above keep_ (those with mass) and the extras.
      if (ids_.empty()) ids_.resize(n_vocab_);
      const float from = keep_ > 0.0f ? keep_ : std::numeric_limits<float>::denorm_min();
      const int64_t m =
          kernels::IndicesInRange(weights_.data(), n_vocab_, from, INFINITY, ids_.data());
      for (int64_t j = 0; j < m; ++j) cand_.push_back({ids_[j], ValueAt(ids_[j]), 0.0f});
      cand_.insert(cand_.end(), extras_.begin(), extras_.end());
    }
  }
  if (max == -INFINITY || cand_.empty()) {  // every token masked: fall back to the lowest id
    cand_.assign(1, {0, -INFINITY, 1.0f});
    return;
  }
  std::sort(cand_.begin(), cand_.end(), Higher);
  work_.sorted += static_cast<int64_t>(cand_.size());
  // Temperature, then the distribution among survivors.
  const double inv_t = 1.0 / params_.temperature;
  double total = 0.0;
  for (Candidate& c : cand_) {
    c.logit = static_cast<float>(c.logit * inv_t);
    total += std::exp(static_cast<double>(c.logit) - max * inv_t);
  }
  for (Candidate& c : cand_) {
    c.p = static_cast<float>(std::exp(static_cast<double>(c.logit) - max * inv_t) / total);
  }
}

}  // namespace uf::sampling

namespace uf::sampling {

bool Sampler::CanSampleReduced() const {
  return !params_.greedy() && !(params_.top_k > 0 && params_.top_k < n_vocab_) && bias_.empty() &&
         banned_.empty() && !params_.penalties();
}

// The error budget. Sample() sums float terms of its own exp kernel in 64-token float blocks and
// double across them: against the exact sum in double that is off by under ~70 float ulps
// (4.2e-6) of the total. The host's weights here come from std::exp in double. So any two ways of
// computing the same cumulative agree within 1e-5 of the total; kReducedMargin (1e-4) keeps 10x
// over that. The device's log-sum-exp is held to a separate, explicit bound (z_err below),
// because a GPU's exp is only specified to 3 + 2|x| ulps and its per-thread sums are sequential.
int32_t Sampler::SampleReduced(const int32_t* ids, const float* logits, int32_t n, float max,
                               float log_sum_exp) {
  UF_CHECK(CanSampleReduced());
  work_ = Work();
  const SamplingParams& p = params_;
  if (n < 1 || !std::isfinite(max) || !std::isfinite(log_sum_exp) || !(logits[0] == max)) {
    return -1;
  }
  // The candidates, best first, with their weights e^(l - max) (w) and e^((l - max) / T) (v, in
  // Sample()'s float scale).
  const double scale = static_cast<double>(1.0f / p.temperature);
  reduced_.clear();
  cand_.clear();
  for (int32_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= n_vocab_) return -1;
    const float l = std::isnan(logits[i]) ? -INFINITY : logits[i];
    const double d = static_cast<double>(l) - max;
    cand_.push_back({ids[i], l, static_cast<float>(std::exp(d))});
    reduced_.emplace_back(ids[i], std::exp(d * scale));
  }
  const int64_t n_rest = n_vocab_ - n;
  const double w_last = n_rest > 0 ? std::exp(static_cast<double>(cand_.back().logit) - max) : 0;
  // The row's mass at T = 1 from the device: z = e^(lse - max), relative error under z_err: each
  // of 256 threads sums n_vocab / 256 terms in float, then a tree of 8 levels; exp within
  // 3 + 2 * 87 ulps; log within 2^-21; lse rounded to a float; doubled for slack.
  const double ulp = 0x1.0p-24;
  const double z_err = 2.0 * ((n_vocab_ / 256.0 + 8.0 + 177.0) * ulp + 0x1.0p-21 +
                              std::abs(static_cast<double>(log_sum_exp)) * 2.0 * ulp);
  const double z = std::exp(static_cast<double>(log_sum_exp) - max);
  const double z_lo = z * (1.0 - z_err), z_hi = z * (1.0 + z_err);
  double s1 = 0.0;
  for (const Candidate& c : cand_) s1 += c.p;
  // The mass outside the candidates, at T = 1: the row's minus theirs, and at most n_rest tokens
  // no heavier than the last candidate.
  const double r1_lo = std::max(0.0, z_lo - s1);
  const double r1_hi = std::min(std::max(0.0, z_hi - s1), static_cast<double>(n_rest) * w_last);

  const std::mt19937_64 saved = rng_;
  // The token of [P_j, P_j + v_j) in id order holding every target in [t_lo, t_hi] whatever the
  // slack r (in [0, r_hi]) that tokens outside `reduced_` add before each, or -1.
  auto walk = [&](double t_lo, double t_hi, double r_hi, double margin) -> int32_t {
    std::sort(reduced_.begin(), reduced_.end());
    double cum = 0.0;
    for (const auto& [id, v] : reduced_) {
      if (cum + r_hi + margin <= t_lo && t_hi + margin < cum + v) return id;
      cum += v;
    }
    rng_ = saved;  // not drawn: Sample(row) draws this u again
    return -1;
  };

  if (!filtering()) {
    // DrawFromRow: the whole row in id order at temperature T.
    double v_sum = 0.0;
    for (const auto& [id, v] : reduced_) v_sum += v;
    double r_lo = r1_lo, r_hi = r1_hi;
    if (scale != 1.0) {
      // A rest token's weight w <= w_last gives v = w^s: for s > 1, v <= w * w_last^(s - 1);
      // for s < 1 (Hoelder), the rest's sum is at most n_rest^(1 - s) * r1^s.
      r_lo = 0.0;
      r_hi = static_cast<double>(n_rest) * std::pow(w_last, scale);
      if (scale > 1.0) {
        r_hi = std::min(r_hi, r1_hi * std::pow(w_last, scale - 1.0));
      } else {
        r_hi = std::min(
            r_hi, std::pow(static_cast<double>(n_rest), 1.0 - scale) * std::pow(r1_hi, scale));
      }
    }
    const double u = NextUniform();
    const double margin = kReducedMargin * (v_sum + r_hi);
    return walk(u * (v_sum + r_lo), u * (v_sum + r_hi), r_hi, margin);
  }

  // RowCut: how many of the best (m) Sample() keeps. With min-p only: those with w >= min_p,
  // known once a candidate falls below it. With top-p: lo = max(min_p, z (1 - top_p) / n_vocab
  // * 0.99); the best prefix whose mass reaches top_p * z when the tokens at or above lo weigh
  // more than that, else all of those.
  const double w_err = 1e-5;  // host exp vs Sample()'s kernel, relative
  double lo_lo = p.min_p, lo_hi = p.min_p;
  if (p.top_p < 1.0f) {
    const double f = (1.0 - p.top_p) / n_vocab_ * 0.99;
    lo_lo = std::max<double>(lo_lo, static_cast<float>(z_lo * f));
    lo_hi = std::max<double>(lo_hi, static_cast<float>(z_hi * f));
  }
  size_t above = 0;  // candidates surely at or above lo
  while (above < cand_.size() && cand_[above].p >= lo_hi * (1.0 + w_err)) ++above;
  // Whether every token at or above lo is among the first `above`.
  const bool closed = above < cand_.size() ? cand_[above].p < lo_lo * (1.0 - w_err) : n_rest == 0;
  size_t m = 0;
  if (!(p.top_p < 1.0f)) {
    if (!closed) return -1;
    m = above;
  } else {
    const double margin = kReducedMargin * z_hi;
    const double need_lo = p.top_p * z_lo, need_hi = p.top_p * z_hi;
    double cum = 0.0;
    size_t cut = 0;
    while (cut < above && cum + cand_[cut].p < need_hi + margin) cum += cand_[cut++].p;
    if (cut < above) {  // the prefix reaches top_p at cut + 1, if the prefix before stays under
      if (!(cum <= need_lo - margin)) return -1;
      m = cut + 1;
    } else if (closed && cum <= need_lo - margin) {  // min-p kept less than top_p: all of it
      m = above;
    } else {
      return -1;
    }
  }
  if (m == 0) return -1;
  // DrawKept: the kept set in id order at temperature T; nothing outside it counts.
  reduced_.resize(m);
  work_.gathered = static_cast<int64_t>(m);
  double total = 0.0;
  for (const auto& [id, v] : reduced_) total += v;
  const double t = NextUniform() * total;
  return walk(t, t, 0.0, kReducedMargin * total);
}

}  // namespace uf::sampling
