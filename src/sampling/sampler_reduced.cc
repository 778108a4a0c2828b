// Sampler::SampleReduced: a draw from a row reduced on a device to its best tokens, its max and
// its log-sum-exp, decided only where that provably gives Sample()'s token.
#include <algorithm>
#include <cmath>
#include <random>

#include "base/check.h"
#include "sampling/sampler.h"

namespace uf::sampling {

namespace {

// The relative error of a device's row mass e^(lse - max) (topk.comp, SampleReduced's z_err).
// Per chunk of kTopKChunk values: each of 256 threads sums chunk / 256 terms in float, then a
// tree of 8 levels, each term's exp within 3 + 2 * 87 ulps; each chunk's sum scaled by
// e^(max_c - max) (another 177 ulps and a product); the chunks' terms summed by 256 threads
// (n_chunks / 256 each) and a tree of 8 levels; log within 2^-21; lse rounded to a float;
// doubled for slack.
double DeviceSumError(int32_t n_vocab, float log_sum_exp) {
  const double ulp = 0x1.0p-24;
  const double chunk = std::min<double>(n_vocab, Sampler::kTopKChunk);
  const double n_chunks = std::ceil(n_vocab / static_cast<double>(Sampler::kTopKChunk));
  return 2.0 * ((chunk / 256.0 + 8.0 + 177.0 + 178.0 + std::ceil(n_chunks / 256.0) + 8.0) * ulp +
                0x1.0p-21 + std::abs(static_cast<double>(log_sum_exp)) * 2.0 * ulp);
}

}  // namespace

bool Sampler::CanSampleReduced() const {
  return !params_.greedy() && !(params_.top_k > 0 && params_.top_k < n_vocab_);
}

// The error budget. Sample() sums float terms of its own exp kernel in 64-token float blocks and
// double across them: against the exact sum in double that is off by under ~70 float ulps
// (4.2e-6) of the total. The host's weights here come from std::exp in double. So any two ways of
// computing the same cumulative agree within 1e-5 of the total; kReducedMargin (1e-4) keeps 10x
// over that. The device's log-sum-exp is held to a separate, explicit bound (z_err below),
// because a GPU's exp is only specified to 3 + 2|x| ulps and its per-thread sums are sequential.
int32_t Sampler::SampleReduced(const int32_t* ids, const float* logits, int32_t n, float max,
                               float log_sum_exp, const int32_t* known_ids,
                               const float* known_logits, int32_t n_known) {
  UF_CHECK(CanSampleReduced());
  work_ = Work();
  const SamplingParams& p = params_;
  if (n < 1 || !std::isfinite(max) || !std::isfinite(log_sum_exp) || !(logits[0] == max)) {
    return -1;
  }
  const auto clean = [](float x) { return std::isnan(x) ? -INFINITY : x; };
  // The known tokens' logits as Sample() edits them, and the edited row's max: the weights are
  // taken against it, as Sample() takes them.
  EditKnown(known_ids, known_logits, n_known);
  float top = max;
  for (int32_t k = 0; k < n_known; ++k) top = std::max(top, clean(known_vals_[k]));
  // The candidates: the listed best of the other tokens, best first, down to `last`; then the
  // known tokens above `last` (the rest of the row lies at or below it). The known tokens at or
  // below it count in the rest's mass, exactly: known_rest at T = 1, known_rest_t at T.
  const double scale = static_cast<double>(1.0f / p.temperature);
  reduced_.clear();
  cand_.clear();
  bool valid = true;
  float last = -INFINITY;
  double s1 = 0.0;  // the listed candidates' mass at T = 1
  for (int32_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= n_vocab_) {
      valid = false;
      break;
    }
    if (n_known > 0 && known_slot_[ids[i]] >= 0) continue;  // masked on the device
    last = clean(logits[i]);
    cand_.push_back({ids[i], last, 0.0f});
    s1 += std::exp(static_cast<double>(last) - top);
  }
  const int64_t n_listed = static_cast<int64_t>(cand_.size());
  double known_rest = 0.0, known_rest_t = 0.0;
  double z_known = 0.0;  // every known token's mass at T = 1, exact
  for (int32_t k = 0; valid && k < n_known; ++k) {
    const float v = clean(known_vals_[k]);
    z_known += std::exp(static_cast<double>(v) - top);
    if (v > last) {
      cand_.push_back({known_ids[k], v, 0.0f});
    } else if (v == last && v > -INFINITY) {
      valid = false;  // a tie across the boundary: the order past it is not known
    } else {
      const double d = static_cast<double>(v) - top;
      known_rest += std::exp(d);
      known_rest_t += std::exp(d * scale);
    }
  }
  for (int32_t k = 0; k < n_known; ++k) known_slot_[known_ids[k]] = -1;
  if (!valid || n_listed == 0) return -1;
  if (static_cast<int64_t>(cand_.size()) > n_listed) {
    std::sort(cand_.begin(), cand_.end(), Higher);
  }
  // Their weights e^(l - top) (w) and e^((l - top) / T) (v, in Sample()'s float scale).
  for (Candidate& c : cand_) {
    const double d = static_cast<double>(c.logit) - top;
    c.p = static_cast<float>(std::exp(d));
    reduced_.emplace_back(c.id, std::exp(d * scale));
  }
  const int64_t n_rest = n_vocab_ - static_cast<int64_t>(cand_.size());
  // Tokens neither listed nor known, none above `last`.
  const int64_t n_unseen = n_vocab_ - n_listed - n_known;
  const double w_last = n_unseen > 0 ? std::exp(static_cast<double>(last) - top) : 0;
  // The mass at T = 1 of the row without the known tokens, from the device (topk.comp):
  // z = e^(lse - top), relative error under z_err (DeviceSumError). The known tokens' mass is
  // exact (z_known), the candidates' among them included.
  const double z_err = DeviceSumError(n_vocab_, log_sum_exp);
  const double z = std::exp(static_cast<double>(log_sum_exp) - top);
  const double z_lo = z * (1.0 - z_err) + z_known, z_hi = z * (1.0 + z_err) + z_known;
  // The mass outside the candidates, at T = 1: the unseen tokens' (the device's row less the
  // listed candidates', and at most n_unseen tokens no heavier than `last`) and the known ones'
  // below `last`.
  const double r1_lo = std::max(0.0, z * (1.0 - z_err) - s1) + known_rest;
  const double r1_unseen_hi =
      std::min(std::max(0.0, z * (1.0 + z_err) - s1), static_cast<double>(n_unseen) * w_last);

  if (!filtering()) {
    return DrawReduced({.r1_lo = r1_lo,
                        .r1_unseen_hi = r1_unseen_hi,
                        .known_rest = known_rest,
                        .known_rest_t = known_rest_t,
                        .n_unseen = n_unseen,
                        .w_last = w_last});
  }

  return DrawReducedFiltered(z_lo, z_hi, n_rest);
}

int32_t Sampler::DrawReducedFiltered(double z_lo, double z_hi, int64_t n_rest) {
  const SamplingParams& p = params_;
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
  // DrawKept: the kept set (a best-first prefix: the first m) at temperature T, its head best
  // first and the rest in id order; nothing outside it counts, so the order is fully known.
  reduced_.resize(m);
  if (m > kHead) std::sort(reduced_.begin() + kHead, reduced_.end());
  work_.gathered = static_cast<int64_t>(m);
  double total = 0.0;
  for (const auto& [id, v] : reduced_) total += v;
  const std::mt19937_64 saved = rng_;
  const int64_t saved_draws = draws_;
  const double t = NextUniform() * total;
  return WalkReduced(m, t, t, kReducedMargin * total, saved, saved_draws);
}

int32_t Sampler::WalkReduced(size_t order, double t_lo, double t_hi, double margin,
                             const std::mt19937_64& saved, int64_t saved_draws) {
  // Sample() walks the row's kHead best first, best first, then the rest in id order. The first
  // `order` of reduced_ (the candidates, best first) lead that walk, so their intervals
  // [P_j, P_j + v_j) are known; what follows them only changes the total, which the caller
  // brackets in [t_lo, t_hi] (u times its bounds).
  double cum = 0.0;
  for (size_t j = 0; j < order; ++j) {
    const auto& [id, v] = reduced_[j];
    if (cum + margin <= t_lo && t_hi + margin < cum + v) return id;
    cum += v;
  }
  rng_ = saved;  // not drawn: Sample(row) draws this u again
  draws_ = saved_draws;
  return -1;
}

int32_t Sampler::DrawReduced(const ReducedRest& rest) {
  // DrawFromRow: the best 64 first, then the rest of the row in id order, at temperature T.
  const double scale = static_cast<double>(1.0f / params_.temperature);
  double v_sum = 0.0;
  for (const auto& [id, v] : reduced_) v_sum += v;
  double r_lo = rest.r1_lo, r_hi = rest.r1_unseen_hi + rest.known_rest;
  if (scale != 1.0) {
    // An unseen token's weight w <= w_last gives v = w^s: for s > 1, v <= w * w_last^(s - 1);
    // for s < 1 (Hoelder), their sum is at most n_unseen^(1 - s) * r1^s.
    // The known tokens below `last` add their exact mass at T.
    const auto n_unseen = static_cast<double>(rest.n_unseen);
    r_lo = rest.known_rest_t;
    r_hi = n_unseen * std::pow(rest.w_last, scale);
    if (scale > 1.0) {
      r_hi = std::min(r_hi, rest.r1_unseen_hi * std::pow(rest.w_last, scale - 1.0));
    } else {
      r_hi = std::min(r_hi, std::pow(n_unseen, 1.0 - scale) * std::pow(rest.r1_unseen_hi, scale));
    }
    r_hi += rest.known_rest_t;
  }
  const std::mt19937_64 saved = rng_;
  const int64_t saved_draws = draws_;
  const double u = NextUniform();
  const double margin = kReducedMargin * (v_sum + r_hi);
  return WalkReduced(std::min<size_t>(reduced_.size(), kHead), u * (v_sum + r_lo),
                     u * (v_sum + r_hi), margin, saved, saved_draws);
}

int32_t Sampler::SampleReducedMasked(const int32_t* ids, const float* logits, int32_t n, float max,
                                     float log_sum_exp, const uint64_t* mask, int64_t n_allowed) {
  UF_CHECK(CanSampleReduced());
  work_ = Work();
  if (n < 1 || !std::isfinite(max) || !std::isfinite(log_sum_exp) || !(logits[0] == max)) {
    return -1;
  }
  const auto clean = [](float x) { return std::isnan(x) ? -INFINITY : x; };
  const auto allowed = [&](int32_t id) { return ((mask[id >> 6] >> (id & 63)) & 1) != 0; };
  // The masked row's max, against which Sample() takes its weights: the best allowed listed
  // token (an allowed token outside the list lies below every listed one).
  float top = -INFINITY;
  for (int32_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= n_vocab_) return -1;
    if (allowed(ids[i])) {
      top = clean(logits[i]);
      break;
    }
  }
  if (!std::isfinite(top)) return -1;
  // The candidates: the allowed listed tokens, the masked row's best. Every listed token counts
  // in s1, the listed mass that the device's total z holds.
  const double scale = static_cast<double>(1.0f / params_.temperature);
  reduced_.clear();
  cand_.clear();
  float last = -INFINITY;
  double s1 = 0.0, s1_allowed = 0.0;  // at T = 1: every listed token's mass, the allowed ones'
  for (int32_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= n_vocab_) return -1;
    last = clean(logits[i]);
    const double d = static_cast<double>(last) - top;
    const double w = std::exp(d);
    s1 += w;
    if (allowed(ids[i])) {
      s1_allowed += w;
      cand_.push_back({ids[i], last, static_cast<float>(w)});
      reduced_.emplace_back(ids[i], std::exp(d * scale));
    }
  }
  const auto n_listed_allowed = static_cast<int64_t>(cand_.size());
  // The allowed tokens outside the list: n_unseen of them, each at or below `last`, together at
  // most the row's mass outside the list, and perhaps nothing (r1_lo = 0).
  const int64_t n_unseen = n_allowed - n_listed_allowed;
  if (n_unseen < 0) return -1;  // a mask that does not count what it allows
  const double w_last = n_unseen > 0 ? std::exp(static_cast<double>(last) - top) : 0.0;
  const double z = std::exp(static_cast<double>(log_sum_exp) - top);
  const double z_hi = z * (1.0 + DeviceSumError(n_vocab_, log_sum_exp));
  const double r1_unseen_hi =
      std::min(std::max(0.0, z_hi - s1), static_cast<double>(n_unseen) * w_last);
  if (filtering()) {
    // The masked row's total at T = 1 lies in [s1_allowed, s1_allowed + r1_unseen_hi].
    return DrawReducedFiltered(s1_allowed, s1_allowed + r1_unseen_hi, n_unseen);
  }
  return DrawReduced({.r1_lo = 0.0,
                      .r1_unseen_hi = r1_unseen_hi,
                      .known_rest = 0.0,
                      .known_rest_t = 0.0,
                      .n_unseen = n_unseen,
                      .w_last = w_last});
}

}  // namespace uf::sampling
