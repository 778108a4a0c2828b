// Step time versus batch composition. The scheduler asks "how long would this batch take?" for
// every candidate it considers, so predictions are cheap (a dot product); the engine feeds back
// the measured time of every step it runs, so the model tracks the machine it is on.
//
// Shape of the model (one "hinge" per candidate knee k, in steps of a quarter token):
//   t = base + per_seq * s' + per_prefill_token * p' + per_context_token * ctx
// where the first k tokens of the batch ride free (decode is memory bound: the weights are read
// once whatever the batch, until compute catches up), taken from the decode sequences first:
//   s' = max(0, s - k),  p' = max(0, p - max(0, k - s)).
// k = 0 is the plain linear model. The knee is where a roofline turns (weight streaming time over
// compute per token), so it need not be whole. On a GPU it is far out; on a 2-core CPU it is a few
// tokens, and a linear fit would wrongly charge every extra sequence, starving default traffic.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace uf::scheduler {

// What one forward step computes.
struct BatchComposition {
  int64_t decode_seqs = 0;     // sequences feeding one token each (and producing logits)
  int64_t prefill_tokens = 0;  // prompt tokens, all sequences together
  int64_t context_tokens = 0;  // attention work: positions attended, summed over all tokens

  // A decode token at position `context` (the sequence holds `context` positions) attends
  // context + 1 positions.
  void AddDecode(int64_t context) {
    ++decode_seqs;
    context_tokens += context + 1;
  }
  // n prompt tokens at positions [context, context + n): token i attends context + i + 1.
  void AddPrefill(int64_t context, int64_t n) {
    prefill_tokens += n;
    context_tokens += n * context + n * (n + 1) / 2;
  }
  int64_t tokens() const { return decode_seqs + prefill_tokens; }
  bool empty() const { return tokens() == 0; }
};

class StepCostModel {
 public:
  virtual ~StepCostModel() = default;
  // Expected seconds for one step computing `c`. Must not decrease when work is added.
  virtual double Predict(const BatchComposition& c) const = 0;
  // Standard deviation of measured step times around the predictions, relative to a typical
  // step (0 when unknown or exact). The scheduler probes more often on a noisy machine.
  virtual double RelativeNoise() const { return 0.0; }
};

struct StepCostCoefficients {
  double base_seconds = 0.0;
  double per_seq_seconds = 0.0;            // per decode sequence past the knee
  double per_prefill_token_seconds = 0.0;  // per prompt token past the knee
  double per_context_token_seconds = 0.0;  // per attended position
  double knee_tokens = 0.0;                // tokens that ride free
};

// The hinge formula above.
double StepSeconds(const StepCostCoefficients& k, const BatchComposition& c);

struct OnlineStepCostOptions {
  // Used until min_samples steps were seen, and as the ridge target for directions the data has
  // not explored (e.g. prefill cost while only decoding). Rough figures for a 1B Q4_0 model on
  // two CPU cores; a wrong prior costs a few steps of misprediction, not correctness.
  StepCostCoefficients prior{0.05, 0.012, 0.010, 2e-8, 3};
  // Weight of the past per new sample: the fit averages over ~1 / (1 - forgetting) steps, so
  // it follows thermal throttling, other load and growing contexts.
  double forgetting = 0.98;
  // Ridge toward the prior, in samples' worth of evidence (features scaled to ~1).
  double prior_weight = 0.05;
  int64_t min_samples = 8;
  double max_knee = 16.0;  // knees 0, 0.25, ..., max_knee are fitted side by side
};

// Exponentially weighted least squares, one fit per knee; predictions come from the knee in use
// (the prior's at first), which changes only when another knee's fit leaves a clearly smaller
// weighted residual: knees the data cannot tell apart must not flip with the noise, since
// the scheduler only explores batch sizes the model lets it try. Not thread-safe: the engine
// thread owns it.
class OnlineStepCostModel final : public StepCostModel {
 public:
  explicit OnlineStepCostModel(const OnlineStepCostOptions& options = {});

  double Predict(const BatchComposition& c) const override;
  // Residual standard deviation of the fit in use over the RMS step time, over the window.
  double RelativeNoise() const override;
  // Learns one measured step, counted as `weight` ordinary steps (probe steps carry more: they
  // are the only samples of the batch sizes beside the one in use). Ignores non-finite or
  // non-positive times or weights and empty batches.
  void Observe(const BatchComposition& c, double seconds, double weight = 1.0);

  // The coefficients Predict uses now (the prior before min_samples).
  StepCostCoefficients coefficients() const;
  int64_t samples() const { return samples_; }

 private:
  static constexpr int kDim = 4;
  struct Fit {
    std::array<double, kDim * kDim> s{};  // weighted sum of x x^T
    std::array<double, kDim> r{};         // weighted sum of x t
    std::array<double, kDim> theta{};     // solution, scaled units
    double rss = 0.0;                     // weighted residual sum of squares
  };

  // Rescales the prior to the first measured step (see the .cc).
  void ScalePrior(const BatchComposition& c, double seconds);
  double Knee(size_t index) const;
  std::array<double, kDim> Features(double knee, const BatchComposition& c) const;
  StepCostCoefficients Coefficients(double knee, const Fit& fit) const;
  void Solve(Fit& fit) const;

  OnlineStepCostOptions options_;
  std::array<double, kDim> prior_theta_{};  // prior in scaled units
  std::vector<Fit> fits_;                   // [n_knees] knee = index * kKneeStep
  double tt_ = 0.0;                         // weighted sum of t^2
  double weight_ = 0.0;                     // sum of the sample weights
  size_t prior_index_ = 0;                  // fit of the prior's knee
  size_t best_ = 0;                         // fit Predict uses
  int64_t samples_ = 0;
};

}  // namespace uf::scheduler
