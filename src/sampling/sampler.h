// Token sampling: repetition/presence/frequency penalties over a window of recent tokens, then
// top-k, top-p and min-p filtering on the untempered distribution, then temperature and a draw
// from a seeded RNG (llama.cpp's default chain, so the same settings behave alike). The RNG is
// std::mt19937_64 with our own conversion to [0, 1), so a seed reproduces the same tokens on
// every platform and standard library.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "base/status.h"

namespace uf::sampling {

// Index of the first largest non-NaN value of x[0..n) (0 if all are NaN): greedy decoding.
int32_t ArgMax(const float* x, int32_t n);

struct SamplingParams {
  float temperature = 0.8f;        // <= 0: greedy (arg-max after penalties)
  int32_t top_k = 40;              // <= 0: off
  float top_p = 0.95f;             // >= 1: off
  float min_p = 0.05f;             // <= 0: off; keep tokens with p >= min_p * p_max
  float repeat_penalty = 1.0f;     // 1: off; logit / penalty if > 0, * penalty if <= 0
  float presence_penalty = 0.0f;   // subtracted once from every token in the window
  float frequency_penalty = 0.0f;  // subtracted per occurrence in the window
  int32_t penalty_last_n = 64;     // window of recent tokens the penalties look at; 0: off
  uint64_t seed = 0;

  // InvalidArgument naming the first bad field.
  Status Validate() const;
  bool greedy() const { return !(temperature > 0.0f); }
};

class Sampler {
 public:
  struct Candidate {
    int32_t id;
    float logit;  // after penalties (and temperature, once Sample() applied it)
    float p;      // probability among the surviving candidates
  };

  // params must be valid (Validate()); n_vocab > 0.
  Sampler(const SamplingParams& params, int32_t n_vocab);

  const SamplingParams& params() const { return params_; }

  // Records a token (prompt or generated) in the penalty window. Ids outside the vocabulary are
  // ignored.
  void Accept(int32_t token);
  // Clears the penalty window and reseeds the RNG with params().seed.
  void Reset();

  // Picks the next token from logits[0..n_vocab).
  int32_t Sample(const float* logits);

  // Applies penalties, filters and temperature, leaving the surviving candidates (highest first,
  // probabilities summing to 1) in candidates(); Sample() = Filter() + one draw. In greedy mode
  // the only candidate is the arg-max.
  void Filter(const float* logits);
  const std::vector<Candidate>& candidates() const { return candidates_; }

  // Uniform double in [0, 1) from 53 random bits.
  double NextUniform();

 private:
  void ApplyPenalties();

  SamplingParams params_;
  int32_t n_vocab_;
  std::mt19937_64 rng_;
  std::vector<float> logits_;          // [n_vocab] working copy
  std::vector<Candidate> candidates_;  // [<= n_vocab]
  std::vector<int32_t> window_;        // ring of the last penalty_last_n tokens
  size_t window_next_ = 0;             // ring write position once full
  std::vector<int32_t> counts_;        // [n_vocab] occurrences in the window
  std::vector<uint8_t> penalised_;     // [n_vocab] scratch marks for ApplyPenalties
};

}  // namespace uf::sampling
