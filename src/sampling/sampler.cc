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

// The top 53 bits of one output, scaled into [0, 1).
double Uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace

bool Sampler::Higher(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

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
  // Once here, not in CanChainSample (asked for every stream at every step).
  std::vector<int32_t> ids;
  for (const auto& [id, b] : bias_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  bias_repeats_ = std::adjacent_find(ids.begin(), ids.end()) != ids.end();
}

void Sampler::SetBanned(const std::vector<int32_t>& ids) {
  banned_.clear();
  for (int32_t id : ids) {
    if (id >= 0 && id < n_vocab_) banned_.push_back(id);
  }
}

void Sampler::Reset() {
  rng_.seed(params_.seed);
  draws_ = 0;
  window_.clear();
  window_next_ = 0;
  window_count_.clear();
}

void Sampler::Accept(int32_t token) {
  if (token < 0 || token >= n_vocab_ || params_.penalty_last_n == 0) return;
  const bool counted = params_.penalties();  // (window_counts(): none without penalties)
  if (counted) ++window_count_[token];
  if (static_cast<int32_t>(window_.size()) < params_.penalty_last_n) {
    window_.push_back(token);
  } else {
    if (counted) {
      const auto out = window_count_.find(window_[window_next_]);
      if (--out->second == 0) window_count_.erase(out);
    }
    window_[window_next_] = token;
    window_next_ = (window_next_ + 1) % window_.size();
  }
}

double Sampler::NextUniform() {
  ++draws_;
  return Uniform(rng_);
}

void Sampler::PeekUniforms(int64_t n, float* out) const {
  std::mt19937_64 ahead = rng_;  // 2.5 KB of state, copied once a chain
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(Uniform(ahead));
}

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

void Sampler::TopKHeap(size_t k, std::vector<Candidate>* heap) {
  // One scan with a k-entry heap whose top is the worst kept candidate: once it is full, the
  // kernel skips to the next token that beats it (16-64 tokens per compare).
  std::vector<Candidate>& h = *heap;
  for (const Run& r : runs_) {
    const float* l = r.x;
    int32_t i = 0;
    for (; i < r.n && h.size() < k; ++i) {
      h.push_back({r.begin + i, std::isnan(l[i]) ? -INFINITY : l[i], 0.0f});
      std::push_heap(h.begin(), h.end(), Higher);
    }
    while (i < r.n) {
      i += static_cast<int32_t>(kernels::FirstAbove(l + i, r.n - i, h.front().logit));
      if (i >= r.n) break;
      std::pop_heap(h.begin(), h.end(), Higher);
      h.back() = {r.begin + i, l[i], 0.0f};
      std::push_heap(h.begin(), h.end(), Higher);
      ++i;
    }
    work_.row_reads += r.n;
  }
}

void Sampler::SelectHead() {
  head_.clear();
  TopKHeap(static_cast<size_t>(std::min(kHead, n_vocab_)), &head_);
  std::sort_heap(head_.begin(), head_.end(), Higher);
  head_ids_.clear();
  for (const Candidate& c : head_) head_ids_.push_back(c.id);
  std::sort(head_ids_.begin(), head_ids_.end());
}

template <typename Fill>
int32_t Sampler::WalkRest(double rest, int32_t fallback, const Fill& fill) {
  // block_sums_ hold the rest's mass per block (the head's terms subtracted; rounding can leave
  // a sliver, positive or negative, where a block's mass is all in the head).
  const int64_t n_blocks = static_cast<int64_t>(block_sums_.size());
  int64_t b = 0;
  for (; b < n_blocks; ++b) {
    const double s = std::max(0.0, block_sums_[b]);
    if (rest < s) break;
    rest -= s;
  }
  if (b == n_blocks) {  // rounding: the last rest token with mass
    b = n_blocks - 1;
    while (b > 0 && !(block_sums_[b] > 0.0)) --b;
    rest = INFINITY;
  }
  int32_t last = -1;
  for (; b < n_blocks; ++b) {
    const int32_t first = static_cast<int32_t>(b * kExpSumBlock);
    const int32_t n = std::min<int32_t>(kExpSumBlock, n_vocab_ - first);
    if (!(block_sums_[b] > 0.0) && rest != INFINITY) continue;
    fill(first, n, block_exps_.data());
    work_.row_reads += n;
    auto h = std::lower_bound(head_ids_.begin(), head_ids_.end(), first);
    for (int32_t i = 0; i < n; ++i) {
      if (h != head_ids_.end() && *h == first + i) {
        ++h;
        continue;
      }
      if (!(block_exps_[i] > 0.0f)) continue;
      last = first + i;
      rest -= block_exps_[i];
      if (rest < 0.0) return last;
    }
    if (last >= 0 && rest != INFINITY) return last;  // rounding within the block
  }
  return last >= 0 ? last : fallback;
}

float Sampler::ValueAt(int32_t id) const {
  for (const Run& r : runs_) {
    if (id < r.begin + r.n) return r.x[id - r.begin];
  }
  return NAN;
}

float Sampler::TopKCandidates() {
  cand_.clear();
  TopKHeap(static_cast<size_t>(params_.top_k), &cand_);
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
  auto kept = [&](int32_t i) {
    bool k = w[i] >= keep_;
    for (size_t e = 0; !k && e < extras_.size(); ++e) k = extras_[e].id == i;
    return k;
  };
  // The kept set is a best-first prefix of the row, so its part of the head is the head's
  // prefix: walked first, best first, then the rest of the kept set in id order.
  SelectHead();
  const double target = NextUniform() * total;
  double cum = 0.0;
  int32_t last_head = 0;
  for (const Candidate& c : head_) {
    if (!kept(c.id) || !(v[c.id] > 0.0f)) continue;
    last_head = c.id;
    cum += v[c.id];
    if (target < cum) return c.id;
    block_sums_[c.id / kExpSumBlock] -= v[c.id];
  }
  return WalkRest(target - cum, last_head, [&](int32_t first, int32_t n, float* out) {
    for (int32_t i = 0; i < n; ++i) out[i] = kept(first + i) ? v[first + i] : 0.0f;
  });
}

size_t Sampler::TopPCut(double need) const {
  for (size_t i = 0; i < cand_.size(); ++i) {
    need -= cand_[i].p;
    if (need <= 0.0) return i + 1;
  }
  return cand_.size();  // rounding: all of them
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
  // The head's terms from the same kernel as the block sums they are taken out of.
  SelectHead();
  const size_t h = head_.size();
  vals_.resize(h);
  exps_.resize(h);
  for (size_t i = 0; i < h; ++i) vals_[i] = head_[i].logit;
  kernels::ExpSum(vals_.data(), static_cast<int64_t>(h), max, inv_t, exps_.data(), nullptr);
  const double target = NextUniform() * total;
  double cum = 0.0;
  int32_t last_head = 0;
  for (size_t i = 0; i < h; ++i) {
    if (!(exps_[i] > 0.0f)) continue;
    last_head = head_[i].id;
    cum += exps_[i];
    if (target < cum) return head_[i].id;
    block_sums_[head_[i].id / kExpSumBlock] -= exps_[i];
  }
  return WalkRest(target - cum, last_head, [&](int32_t first, int32_t n, float* out) {
    const Run* run = &runs_.back();
    for (const Run& r : runs_) {
      if (first < r.begin + r.n) {
        run = &r;
        break;
      }
    }
    kernels::ExpSum(run->x + (first - run->begin), n, max, inv_t, out, nullptr);
  });
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

bool Sampler::CanChainSample(int32_t n) const {
  if (bias_repeats_) return false;
  if (params_.greedy()) return params_.penalties() || !bias_.empty();  // else ArgMaxAfterBans
  return CanSampleTop(n) || CanSampleReduced();
}

void Sampler::PenaltyWindow(std::vector<int32_t>* out) const {
  out->clear();
  if (!params_.penalties()) return;
  // A full ring's oldest token is the next one overwritten.
  const size_t from =
      static_cast<int32_t>(window_.size()) < params_.penalty_last_n ? 0 : window_next_;
  for (size_t i = 0; i < window_.size(); ++i) out->push_back(window_[(from + i) % window_.size()]);
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
  EditKnown(known_ids, known_logits, n_known);
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

void Sampler::EditKnown(const int32_t* known_ids, const float* known_logits, int32_t n_known) {
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
