// Token sampling, the one chain that `run`, `serve` and `bench` share: logit bias and banned
// tokens, then repetition/presence/frequency penalties over a window of recent tokens, then top-k,
// top-p and min-p filtering on the untempered distribution, then temperature and a draw from a
// seeded RNG (llama.cpp's default chain, so the same settings behave alike). The RNG is
// std::mt19937_64 with our own conversion to [0, 1), so a seed reproduces the same tokens on every
// platform and standard library.
//
// Cost: the caller's logits are never copied. Bias, bans and penalties touch a few tokens, so
// they become edits: a 64-token block holding one is patched in a small side buffer and the
// vocabulary-wide passes read the caller's row elsewhere. Each pass is a vectorized kernel
// (kernels/ops.h: max, exp-sum, threshold gather), and nothing sorts more than the survivors of
// the filters:
//   temperature only   max + exp-sum over the row + a scan for the 64 best (the draw walks them
//                      first, then the rest in id order: kHead), then it re-reads one block;
//   top-k              one scan with a k-entry heap (a kernel skips what cannot enter it);
//   min-p / top-p      max and the weights e^(l - max) over the row; min-p is a threshold on the
//     (no top-k)       weights; the top-p cut is found by bisecting the threshold with masked
//                      sums over the weights until at most 256 tokens straddle it, which alone
//                      are sorted; the draw sums the kept weights per 64-token block and
//                      walks the kept best 64 first, as above.
//                      A flat distribution whose top-p set is most of the vocabulary costs about
//                      as much as a peaked one.
//   top-k + top-p      the k candidates sorted (k log k), then a prefix sum.
// After the first call with given settings, Sample() allocates nothing.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"

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
  bool penalties() const {
    return penalty_last_n > 0 &&
           (repeat_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f);
  }
};

class Sampler {
 public:
  struct Candidate {
    int32_t id;
    float logit;  // after bias and penalties (and temperature, once Filter() applied it)
    float p;      // probability among the surviving candidates
  };

  // What the last Filter() or Sample() did, counted rather than timed so that tests can bound
  // the per-token cost on a noisy machine.
  struct Work {
    int64_t row_reads = 0;  // logits read by vocabulary-wide passes (n_vocab per pass)
    int64_t gathered = 0;   // tokens kept as candidates for the filters (heap or threshold)
    int64_t sorted = 0;     // elements given to a comparison sort
    int64_t edits = 0;      // tokens changed by bias, bans or penalties
  };

  // params must be valid (Validate()); n_vocab > 0.
  Sampler(const SamplingParams& params, int32_t n_vocab);

  const SamplingParams& params() const { return params_; }

  // Added to the raw logits before the penalties (OpenAI logit_bias). Ids must be in the
  // vocabulary; repeated ids add up.
  void SetLogitBias(const std::vector<std::pair<int32_t, float>>& bias);
  // Tokens that are never chosen (end-of-generation tokens when ignoring EOS). Ids outside the
  // vocabulary are ignored.
  void SetBanned(const std::vector<int32_t>& ids);

  // Records a token (prompt or generated) in the penalty window. Ids outside the vocabulary are
  // ignored.
  void Accept(int32_t token);
  // Clears the penalty window and reseeds the RNG with params().seed.
  void Reset();

  // Picks the next token from logits[0..n_vocab). With a pool (idle: the caller's, between
  // forwards), the exp-sum over a large row is split across its threads; the token drawn is the
  // same with or without it.
  int32_t Sample(const float* logits, ThreadPool* pool = nullptr);

  // The tokens whose logits bias, bans or penalties may change in the next row once `pending`
  // tokens are Accept()ed first (a verify step's drafts, sampled row by row): sorted, distinct,
  // appended to *out after clearing it. A superset of what the row's Sample() edits.
  void EditedTokens(std::span<const int32_t> pending, std::vector<int32_t>* out) const;
  // True when Sample() is the arg-max (sampling::ArgMax) of the row with the banned() tokens
  // at -inf, whatever was accepted: greedy, without bias or penalties. A device can then pick
  // the token (GpuForward's arg-max after masking the banned tokens).
  bool ArgMaxAfterBans() const { return params_.greedy() && !params_.penalties() && bias_.empty(); }
  const std::vector<int32_t>& banned() const { return banned_; }
  // True when SampleTop can pick from a row's n best tokens: greedy, or top-k with top_k <= n
  // (and below the vocabulary). Bias, bans and penalties are allowed: see SampleTop's known.
  bool CanSampleTop(int32_t n) const;
  // Sample(row) given only part of it (CanSampleTop(n)), e.g. reduced on a GPU: the raw logits
  // of `known` tokens, which must include every token this row's bias, bans and penalties edit
  // (EditedTokens), and the n best of the other tokens with their raw logits, best first
  // (higher logit, then lower id; NaN ranks as -inf; ids of known tokens or outside the
  // vocabulary in that list are skipped). The edits are applied here with Sample()'s own float
  // operations, so this picks the token Sample(row) picks, with the same RNG draws.
  int32_t SampleTop(const int32_t* ids, const float* logits, int32_t n,
                    const int32_t* known_ids = nullptr, const float* known_logits = nullptr,
                    int32_t n_known = 0);

  // True when SampleReduced may try a reduced row: a draw beyond any top-k set (no top-k; top-p,
  // min-p and temperature allowed). Bias, bans and penalties are allowed: see its known.
  bool CanSampleReduced() const;
  // Sample(row) given only part of it: the raw logits of `known` tokens, which must include every
  // token this row's bias, bans and penalties edit (EditedTokens; none without edits), and the
  // n best of the other tokens (raw logits, best first as for SampleTop), their maximum and
  // log-sum-exp (TopRow: the row without the known tokens), when that is provably enough:
  // returns the token Sample(row) draws, or -1 when the draw may land on a token outside the
  // candidates or the nucleus may close outside them (then no RNG draw is consumed: call
  // Sample(row) on the whole row). The candidates are the n best and the known tokens whose
  // edited logit lies above the n-th: together the edited row's best, since every other token
  // lies at or below the n-th; the known tokens below it add their exact mass to the rest's.
  //
  // Why this is exact. Sample() walks the row's kHead best tokens first, best first, then the
  // rest in id order: target = u * total, the token whose cumulative interval holds target. With
  // no filter the candidates' intervals [P_j, P_j + v_j) are known exactly; only the total is
  // not: outside the n best lies a mass R (the row's total minus the candidates', bounded from
  // the log-sum-exp; at temperature T != 1 by the last candidate's weight, see the .cc), so the
  // target lies in [u (V + R_lo), u (V + R_hi)], and a candidate holding all of that is the draw.
  // A draw landing past the head (in the tail's mass) falls back. With top-p the kept set is the
  // best prefix reaching top_p of the total, known when that prefix closes within the n; with
  // min-p, when a candidate falls below it; then the whole walk is known. Every comparison keeps
  // a margin of kReducedMargin of the total (see the .cc): a draw that close to a boundary falls
  // back to the whole row.
  int32_t SampleReduced(const int32_t* ids, const float* logits, int32_t n, float max,
                        float log_sum_exp, const int32_t* known_ids = nullptr,
                        const float* known_logits = nullptr, int32_t n_known = 0);
  // SampleReduced for the row masked by a grammar (mask: a bit per token, set where allowed;
  // Sample() of the row with the others at -inf, grammar::TokenConstraint::Apply) from the
  // unmasked row's reduction (ids, logits, max, log_sum_exp as for SampleReduced, no known
  // tokens: no bias, bans or penalties). The allowed listed tokens are the masked row's best;
  // the n_allowed - (allowed listed) others lie at or below the n-th, together weigh at most
  // the row's mass outside the list, and perhaps nothing: the draw (and with top-p or min-p
  // the kept set) is decided where every total in that range gives the same candidate. -1 (no
  // draw taken) otherwise, and when no listed token is allowed. CanSampleReduced(). Exact
  // where the list holds every allowed token (a grammar's structural position).
  int32_t SampleReducedMasked(const int32_t* ids, const float* logits, int32_t n, float max,
                              float log_sum_exp, const uint64_t* mask, int64_t n_allowed);
  // Sample()'s draws without top-k walk the row's kHead best tokens first (best first: higher
  // logit, then lower id, NaN as -inf, as SampleTop's list and the device's reduction order
  // them), then the other tokens in id order. The distribution does not depend on the order;
  // this one lets a reduced row decide every draw that lands in its best tokens.
  static constexpr int32_t kHead = 64;
  // Relative margin of SampleReduced's decisions (of the row's or the kept set's mass).
  static constexpr double kReducedMargin = 1e-4;
  // The chunk of the device's top-64 kernel (gpu::Kernels::kTopKChunk), whose log-sum-exp
  // SampleReduced bounds.
  static constexpr int64_t kTopKChunk = 4096;

  // Applies bias, bans, penalties, filters and temperature, leaving the surviving candidates
  // (highest first, probabilities summing to 1) in candidates(). Sample() draws from the same
  // distribution without sorting or listing the survivors. In greedy mode the only candidate is
  // the arg-max.
  void Filter(const float* logits);
  const std::vector<Candidate>& candidates() const { return cand_; }

  const Work& work() const { return work_; }

  // Uniform double in [0, 1) from 53 random bits.
  double NextUniform();
  // The next n NextUniform() values, as floats, without drawing them (a device draws with them
  // ahead of the host: GpuForward::ForwardSampledChain).
  void PeekUniforms(int64_t n, float* out) const;
  // NextUniform() values drawn since construction or Reset(): a device drawing with
  // PeekUniforms' values ahead of the host takes its next one at the host's count (a batch of
  // sampled chains resets a stream's count after the host overrules its draw).
  int64_t draws() const { return draws_; }
  // True when a device may draw this sampler's tokens from a row's n best (a sampled chain):
  // SampleTop or SampleReduced decides them from such a row. Bans, bias and penalties are
  // allowed: the device applies them to each row as Sample() does (the penalties from the
  // window at the chain's start and the tokens the chain drew since: model::ChainEdits), and a
  // greedy sampler with bias or penalties draws as top-k 1. A bias listing a token twice is not
  // (Sample() adds its values one by one, a device their sum).
  bool CanChainSample(int32_t n) const;
  // The logit bias (SetLogitBias's valid entries, in order).
  const std::vector<std::pair<int32_t, float>>& bias() const { return bias_; }
  // The penalty window's tokens, oldest first, into *out (empty without penalties).
  void PenaltyWindow(std::vector<int32_t>* out) const;
  // The penalty window's distinct tokens and their counts in it, kept as tokens are accepted
  // (a served window is every generated token: a chain's start must not sort it). Empty
  // without penalties.
  const std::unordered_map<int32_t, int32_t>& window_counts() const { return window_count_; }

 private:
  struct Edit {
    int32_t id;
    float value;    // the adjusted logit
    int32_t count;  // occurrences in the penalty window
  };
  // A stretch of the adjusted row: the caller's logits, or a patched block in side_.
  struct Run {
    const float* x;
    int32_t begin;  // first token id (a multiple of kernels::kExpSumBlock)
    int32_t n;
  };

  bool filtering() const;
  // Builds edits_ and runs_ for this row.
  void Prepare(const float* logits);
  // True when this row has edits (bias, bans, or penalties over a non-empty window).
  bool HasEdits() const;
  // edits_ for this row, raw(id) giving a token's raw logit: bias, then penalties, then bans.
  template <typename Raw>
  void BuildEdits(const Raw& raw);
  int32_t ArgMaxOfRuns();
  float MaxOfRuns();
  float ValueAt(int32_t id) const;
  // Top-k path: leaves the survivors of top-k, min-p and top-p in cand_ (best first); returns
  // their best logit (-inf when every token is masked).
  float TopKCandidates();
  // The filters of the top-k path over cand_ (the top-k set, best first).
  float FilterTopK();
  // SampleTop's and SampleReduced's known tokens: known_slot_[id] = their index (the caller
  // sets them back to -1), known_vals_ = their logits as Sample() edits them (bias, penalties,
  // bans from the raw known_logits; every edited token must be known).
  void EditKnown(const int32_t* known_ids, const float* known_logits, int32_t n_known);
  // The draw among cand_ (FilterTopK's survivors) at the sampling temperature.
  int32_t DrawTopK(float max);
  // Row path (min-p / top-p without top-k), given the row's max: fills weights_ with
  // e^(l - max) and decides the kept set: weights_[i] >= keep_ or one of extras_.
  void RowCut(float max);
  // Draws from the kept set of RowCut at the sampling temperature.
  int32_t DrawKept(float max);
  // Highest logit first; ids break ties so every ordering (and so every draw) is deterministic.
  static bool Higher(const Candidate& a, const Candidate& b);
  // The k best of the row (runs_) into *heap, as a heap under Higher.
  void TopKHeap(size_t k, std::vector<Candidate>* heap);
  // head_ = the row's kHead best, best first; head_ids_ = their ids, ascending.
  void SelectHead();
  // The draw among the tokens outside the head in id order: rest is the target less the head's
  // mass, block_sums_ the rest's mass per block, fill(first, n, out) a block's terms (0 for
  // tokens not drawable). Returns fallback if nothing outside the head has mass.
  template <typename Fill>
  int32_t WalkRest(double rest, int32_t fallback, const Fill& fill);
  // SampleReduced's draw without filters: the mass outside the candidates (reduced_) at T = 1
  // lies in [r1_lo, r1_unseen_hi + known_rest]: n_unseen tokens none heavier than w_last
  // (relative to the candidates' max), and the known ones below the list, known_rest at T = 1
  // and known_rest_t at T.
  struct ReducedRest {
    double r1_lo, r1_unseen_hi, known_rest, known_rest_t;
    int64_t n_unseen;
    double w_last;
  };
  int32_t DrawReduced(const ReducedRest& rest);
  // SampleReduced's draw with top-p or min-p: the candidates in cand_ (best first, .p their
  // weight at T = 1) and reduced_ (their weights at T), the row's total at T = 1 in
  // [z_lo, z_hi], n_rest tokens besides the candidates.
  int32_t DrawReducedFiltered(double z_lo, double z_hi, int64_t n_rest);
  // The token of reduced_'s first `order` whose interval holds every target in [t_lo, t_hi], a
  // margin inside both ends; else -1, the RNG set back to (saved, saved_draws).
  int32_t WalkReduced(size_t order, double t_lo, double t_hi, double margin,
                      const std::mt19937_64& saved, int64_t saved_draws);
  // The fewest m best entries of cand_ (best first) whose weights (in .p) reach `need`.
  size_t TopPCut(double need) const;
  // Fills block_sums_ (and out, if not null) with e^((l - max) * scale) over the row; returns
  // the total, summed in block order so that it does not depend on how the row was split.
  double RowExpSum(float max, float scale, float* out);
  // Draw over the whole row at temperature T with max logit m (no filter active).
  int32_t DrawFromRow(float max);

  SamplingParams params_;
  int32_t n_vocab_;
  std::mt19937_64 rng_;
  int64_t draws_ = 0;  // NextUniform() calls (draws())
  Work work_;
  ThreadPool* pool_ = nullptr;  // during Sample() only

  std::vector<std::pair<int32_t, float>> bias_;
  bool bias_repeats_ = false;  // bias_ lists some token twice (CanChainSample)
  std::vector<int32_t> banned_;
  std::vector<int32_t> window_;                        // ring of the last penalty_last_n tokens
  size_t window_next_ = 0;                             // ring write position once full
  std::unordered_map<int32_t, int32_t> window_count_;  // window_'s distinct tokens: count

  // Per-call scratch, sized on first use and then reused.
  std::vector<int32_t> slot_;        // [n_vocab] index in edits_, or -1 (only when edits exist)
  std::vector<int32_t> known_slot_;  // [n_vocab] SampleTop / Reduced: index in known, or -1
  std::vector<float> known_vals_;    // [n_known] SampleTop / Reduced: known tokens' edited logits
  std::vector<Edit> edits_;          // [<= bias + banned + window]
  std::vector<int32_t> dirty_;       // [<= edits] blocks holding an edit, ascending
  std::vector<float> side_;          // [dirty * 64] patched copies of those blocks
  std::vector<Run> runs_;            // [<= 2 * dirty + 1] the row, in order
  std::vector<double> block_sums_;   // [n_vocab / 64] exp-sum per block (temperature-only draw)
  std::vector<float> block_exps_;    // [64] the drawn block's terms
  std::vector<int32_t> ids_;         // [<= n_vocab] threshold gather output
  std::vector<float> weights_;       // [n_vocab] row path: e^(l - max)
  std::vector<float> tempered_;      // [n_vocab] row path: e^((l - max) / T) when T != 1
  float keep_ = 0.0f;                // row path: weights at or above it are kept ...
  std::vector<Candidate> extras_;    // [<= 256 typically] ... and these (the top-p boundary)
  std::vector<Candidate> cand_;      // [<= n_vocab] candidates, then survivors
  std::vector<float> vals_, exps_;   // [<= n_vocab] survivors' logits and weights, for the kernel
  std::vector<Candidate> head_;      // [kHead] the row's best, best first (temperature draws)
  std::vector<int32_t> head_ids_;    // [kHead] their ids, ascending
  std::vector<std::pair<int32_t, double>> reduced_;  // [<= n] SampleReduced: kept (id, weight)
};

}  // namespace uf::sampling
