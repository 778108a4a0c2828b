#include "scheduler/step_cost_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/check.h"

namespace uf::scheduler {
namespace {

// Feature units that make every scaled coefficient about the same size, so one ridge weight
// suits them all: prompt tokens come in chunks of tens, contexts in thousands.
constexpr double kPrefillUnit = 64.0;
constexpr double kContextUnit = 4096.0;
constexpr double kKneeStep = 0.25;  // tokens between candidate knees
constexpr int64_t kSolveEvery = 8;  // steps between solves of the knees not in use
// Residual improvement, in noise variances, needed to change knee. Neighbouring knees fit a
// noisy window almost equally; flipping between them moves predictions for small batches by
// several percent.
constexpr double kKneeSwitchSigmas = 4.0;
// Factor by which the prior may miss the first measured step before it is rescaled.
constexpr double kPriorScaleOff = 3.0;

// Decode sequences and prompt tokens charged past `knee` free tokens (decode first).
std::pair<double, double> PastKnee(double knee, const BatchComposition& c) {
  const double s = static_cast<double>(c.decode_seqs), p = static_cast<double>(c.prefill_tokens);
  const double free = std::max(0.0, knee);
  return {std::max(0.0, s - free), std::max(0.0, p - std::max(0.0, free - s))};
}

}  // namespace

double StepSeconds(const StepCostCoefficients& k, const BatchComposition& c) {
  const auto [s, p] = PastKnee(k.knee_tokens, c);
  return k.base_seconds + k.per_seq_seconds * s + k.per_prefill_token_seconds * p +
         k.per_context_token_seconds * static_cast<double>(c.context_tokens);
}

OnlineStepCostModel::OnlineStepCostModel(const OnlineStepCostOptions& options) : options_(options) {
  UF_CHECK(options_.forgetting > 0.0 && options_.forgetting <= 1.0) << options_.forgetting;
  UF_CHECK(options_.prior_weight > 0.0) << options_.prior_weight;
  UF_CHECK(options_.max_knee >= 0.0 && options_.max_knee <= 1024.0) << options_.max_knee;
  options_.prior.knee_tokens = std::clamp(options_.prior.knee_tokens, 0.0, options_.max_knee);
  const StepCostCoefficients& p = options_.prior;
  prior_theta_ = {p.base_seconds, p.per_seq_seconds, p.per_prefill_token_seconds * kPrefillUnit,
                  p.per_context_token_seconds * kContextUnit};
  fits_.resize(static_cast<size_t>(options_.max_knee / kKneeStep) + 1);
  for (Fit& fit : fits_) fit.theta = prior_theta_;
  prior_index_ = static_cast<size_t>(std::lround(options_.prior.knee_tokens / kKneeStep));
  best_ = prior_index_;
}

double OnlineStepCostModel::Knee(size_t index) const {
  return static_cast<double>(index) * kKneeStep;
}

std::array<double, OnlineStepCostModel::kDim> OnlineStepCostModel::Features(
    double knee, const BatchComposition& c) const {
  const auto [s, p] = PastKnee(knee, c);
  return {1.0, s, p / kPrefillUnit, static_cast<double>(c.context_tokens) / kContextUnit};
}

StepCostCoefficients OnlineStepCostModel::Coefficients(double knee, const Fit& fit) const {
  StepCostCoefficients k;  // Solve keeps the slopes >= 0
  k.base_seconds = fit.theta[0];
  k.per_seq_seconds = std::max(0.0, fit.theta[1]);
  k.per_prefill_token_seconds = std::max(0.0, fit.theta[2] / kPrefillUnit);
  k.per_context_token_seconds = std::max(0.0, fit.theta[3] / kContextUnit);
  k.knee_tokens = knee;
  return k;
}

void OnlineStepCostModel::Solve(Fit& fit) const {
  // Ridge regression toward the prior, (S + w I) theta = r + w prior, with the slopes kept
  // non-negative: a negative cost per unit of work would let the scheduler "save" time by adding
  // work, and clamping after the fact would leave the other coefficients fitted to a slope that
  // is not used. Active set: a slope that comes out negative is pinned at 0 and the rest
  // re-solved; with four unknowns that settles within three passes.
  constexpr int n = kDim;
  std::array<bool, n> pinned{};
  for (int pass = 0; pass < n; ++pass) {
    std::array<double, n* n> a = fit.s;
    std::array<double, n> b = fit.r;
    for (int i = 0; i < n; ++i) {
      a[i * n + i] += options_.prior_weight;
      b[i] += options_.prior_weight * prior_theta_[i];
    }
    for (int i = 0; i < n; ++i) {
      if (!pinned[i]) continue;
      for (int j = 0; j < n; ++j) a[i * n + j] = a[j * n + i] = 0.0;
      a[i * n + i] = 1.0;
      b[i] = 0.0;
    }
    // Cholesky: S + w I is symmetric positive definite, and so is it with pinned rows replaced.
    for (int j = 0; j < n; ++j) {
      double d = a[j * n + j];
      for (int k = 0; k < j; ++k) d -= a[j * n + k] * a[j * n + k];
      UF_CHECK(d > 0.0) << "step cost normal equations lost positive definiteness";
      a[j * n + j] = std::sqrt(d);
      for (int i = j + 1; i < n; ++i) {
        double v = a[i * n + j];
        for (int k = 0; k < j; ++k) v -= a[i * n + k] * a[j * n + k];
        a[i * n + j] = v / a[j * n + j];
      }
    }
    for (int i = 0; i < n; ++i) {  // L y = b
      for (int k = 0; k < i; ++k) b[i] -= a[i * n + k] * b[k];
      b[i] /= a[i * n + i];
    }
    for (int i = n - 1; i >= 0; --i) {  // L^T x = y
      for (int k = i + 1; k < n; ++k) b[i] -= a[k * n + i] * b[k];
      b[i] /= a[i * n + i];
    }
    fit.theta = b;
    bool changed = false;
    for (int i = 1; i < n; ++i) {  // theta[0] is the base time, which may take any sign
      if (fit.theta[i] < 0.0) {
        pinned[i] = true;
        changed = true;
      }
    }
    if (!changed) break;
  }
  for (int i = 1; i < n; ++i) fit.theta[i] = std::max(0.0, fit.theta[i]);
}

void OnlineStepCostModel::ScalePrior(const BatchComposition& c, double seconds) {
  // The prior's figures are a 1B model's on two CPU cores. For a model a hundred times smaller
  // (a 75 us step), ridge regression toward them pulled every direction the data had not
  // explored toward costs a hundred times too large, and the fit came out with a base step
  // twice the measured one and no cost for a second sequence: default traffic rode beside an
  // ultrafast stream and slowed it by 40%. The prior keeps its shape and takes its scale from
  // the first step measured, when it is off by more than kPriorScaleOff either way: a prior
  // that is about right (the tier simulator's, fitted to its step curve) is better left alone
  // than rescaled by one noisy sample.
  const double predicted = StepSeconds(options_.prior, c);
  if (!(predicted > 0.0)) return;
  const double scale = seconds / predicted;
  if (scale < kPriorScaleOff && scale > 1.0 / kPriorScaleOff) return;
  options_.prior.base_seconds *= scale;
  options_.prior.per_seq_seconds *= scale;
  options_.prior.per_prefill_token_seconds *= scale;
  options_.prior.per_context_token_seconds *= scale;
  for (double& t : prior_theta_) t *= scale;
  for (Fit& fit : fits_) fit.theta = prior_theta_;
}

StepCostCoefficients OnlineStepCostModel::coefficients() const {
  if (samples_ < options_.min_samples) return options_.prior;
  return Coefficients(Knee(best_), fits_[best_]);
}

double OnlineStepCostModel::RelativeNoise() const {
  if (samples_ < options_.min_samples || tt_ <= 0.0) return 0.0;
  const double var = std::max(0.0, fits_[best_].rss) / std::max(1.0, weight_ - kDim);
  return std::sqrt(var / (tt_ / weight_));
}

double OnlineStepCostModel::Predict(const BatchComposition& c) const {
  return std::max(0.0, StepSeconds(coefficients(), c));
}

void OnlineStepCostModel::Observe(const BatchComposition& c, double seconds, double weight) {
  if (!std::isfinite(seconds) || seconds <= 0.0 || c.empty()) return;
  if (!std::isfinite(weight) || weight <= 0.0) return;
  UF_CHECK(c.decode_seqs >= 0 && c.prefill_tokens >= 0 && c.context_tokens >= 0)
      << "negative batch composition";
  if (samples_ == 0) ScalePrior(c, seconds);
  const double f = options_.forgetting;
  tt_ = f * tt_ + weight * seconds * seconds;
  weight_ = f * weight_ + weight;
  for (size_t k = 0; k < fits_.size(); ++k) {
    Fit& fit = fits_[k];
    const std::array<double, kDim> x = Features(Knee(k), c);
    for (int i = 0; i < kDim; ++i) {
      for (int j = 0; j < kDim; ++j) {
        fit.s[i * kDim + j] = f * fit.s[i * kDim + j] + weight * x[i] * x[j];
      }
      fit.r[i] = f * fit.r[i] + weight * x[i] * seconds;
    }
    // Solving all 65 knees took ~7 us of every step (a tenth of a small model's token): the fit
    // in use is solved every step, the others every kSolveEvery steps and on probe steps. In
    // between their residual is evaluated at their last solution, at or a little above the
    // fresh one, so a knee switch can wait up to kSolveEvery steps of a ~50-step window.
    if (k == best_ || samples_ % kSolveEvery == 0 || weight > 1.0 ||
        samples_ < options_.min_samples) {
      Solve(fit);
    }
    // Residual over the samples fitted: sum t^2 - 2 theta.r + theta' S theta. Every knee has as
    // many parameters, so the smallest residual is a fair choice.
    double rss = tt_;
    for (int i = 0; i < kDim; ++i) {
      double s_theta = 0.0;
      for (int j = 0; j < kDim; ++j) s_theta += fit.s[i * kDim + j] * fit.theta[j];
      rss += fit.theta[i] * (s_theta - 2.0 * fit.r[i]);
    }
    fit.rss = rss;
  }
  ++samples_;
  size_t fittest = 0;
  for (size_t k = 1; k < fits_.size(); ++k) {
    if (fits_[k].rss < fits_[fittest].rss) fittest = k;
  }
  // Hysteresis: the knee in use (the prior's at first) stays unless another fits clearly better,
  // i.e. its residual is smaller by several times the noise variance per sample (an F-test with
  // one degree of freedom: 4 ~ the 95% point). A fixed relative margin would either let noise
  // flip neighbouring knees in a short window or never let a small real difference through over
  // a long one.
  const double noise_var = fits_[fittest].rss / std::max(1.0, weight_ - kDim);
  const double tie = 1e-9 * tt_;  // rounding
  if (fits_[best_].rss - fits_[fittest].rss > kKneeSwitchSigmas * noise_var + tie) {
    best_ = fittest;
  }
}

}  // namespace uf::scheduler
