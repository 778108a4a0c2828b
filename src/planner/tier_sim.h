// Tier simulator: the real scheduler (scheduler::Scheduler), its online cost model
// (OnlineStepCostModel) and ultrafast admission (TierAdmission) run on a virtual clock whose steps
// take what a step-time curve says: measured here by `ultrafast bench --batch`, or the planner's
// model of a hardware profile. One ultrafast stream decodes beside N default streams; the report
// says how far its inter-token latency stays from its solo step, how much default throughput the
// tier leaves of the ideal for the slack, and what admission did with two more ultrafast-hungry
// requests. No threads, no wall clock, no randomness unless noise is asked for (then seeded):
// the same inputs give the same report, so a scheduler change can be judged where the real
// machine's run-to-run noise (a few percent) would hide it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "scheduler/step_cost_model.h"

namespace uf::planner {

// Seconds of one forward step computing `tokens` tokens (decode and prompt together) that
// attend `context_tokens` positions in all. Must not decrease when either grows.
using StepCurve = std::function<double(int64_t tokens, int64_t context_tokens)>;

// A curve from measured (batch, aggregate tok/s) points, as `bench --batch` prints them: step
// time b / tok_s(b), linear between points and past the last (its last slope; flat before the
// first), made non-decreasing (a noisy point below its predecessor is lifted to it), plus
// `seconds_per_position` per attended position. InvalidArgument on no points or non-positive
// figures.
StatusOr<StepCurve> MeasuredCurve(std::vector<std::pair<int64_t, double>> batch_tok_s,
                                  double seconds_per_position);

struct TierSimOptions {
  double slack = 0.05;
  int64_t defaults = 16;        // default streams decoding throughout (they never finish)
  int64_t prompt_tokens = 512;  // each stream's prompt
  int64_t warmup_steps = 200;   // defaults alone first: the cost model learns the machine
  int64_t ultrafast_tokens = 1200;
  // Ultrafast tokens before measuring: the model starts from a CPU prior and must find the
  // knee from the probes (docs/tiers.md).
  int64_t measure_after_tokens = 400;
  double noise = 0.0;  // relative step-time noise (normal, seeded); 0: none
  // Seconds each sequence that gets a token in a step adds to it (sampling, logprobs, the stream
  // event): on a cache-resident model this, not the weights, is most of a decode step, while a
  // prompt chunk samples once whatever its length.
  double seconds_per_output = 0.0;
  // Default streams submitted once the ultrafast stream has its 8th token (arriving beside it),
  // on top of `defaults` (running before it).
  int64_t arriving_defaults = 0;
  // The cost model's prior: the engine's built-in one (rough figures for a 1B model on two CPU
  // cores, what `ultrafast serve` starts from today), or one read off the curve (what an engine
  // on that hardware should start from; PriorFromCurve).
  bool prior_from_curve = true;
  uint32_t seed = 1;

  // InvalidArgument on a slack outside [0, 10], defaults outside [0, 200], a prompt below 1, a
  // stream that does not outlast measure_after_tokens by 2, or noise outside [0, 0.5).
  Status Validate() const;
};

struct TierSimReport {
  double slack = 0;
  int64_t measured_tokens = 0;   // ultrafast tokens in the measurement
  double solo_step_seconds = 0;  // its step alone at the median context measured
  // Each ultrafast inter-token gap over the solo step at the same context (true curve).
  double itl_p50_over_solo = 0, itl_p90_over_solo = 0, itl_p99_over_solo = 0;
  // Time from the stream's submission to its first token, and the same alone (its prompt's
  // chunks at their true cost with nothing beside them).
  double ttft_seconds = 0, solo_ttft_seconds = 0;
  // The same ratio if every stream were batched first-come (no tiers): the tier's purpose.
  double fcfs_p50_over_solo = 0;
  int64_t steps_over_bound = 0;  // ratio above 1 + slack (up probes, overdue flex, misjudged)
  // Default output tokens per second during the measurement, the ideal (each step, the most
  // defaults that fit within (1 + slack) x solo at their true cost, taken oldest first as the
  // scheduler fills) and their ratio (1 when the ideal is 0): what the cost model's misjudgement
  // and the per-token floor (SchedulerOptions::min_token_cost_fraction) lose.
  double default_tok_s = 0, ideal_default_tok_s = 0, default_fraction_of_ideal = 0;
  // The same ideal taking the shortest contexts first: the most any order could fit. Where K/V
  // reads set the cost (a GPU), oldest-first keeps serving the sequences whose contexts grow
  // longest, and this is well above the ideal.
  double any_order_default_tok_s = 0;
  // Admission: the stream (admitted), an `auto` request wanting ultrafast (falls back to
  // default), an explicit ultrafast request (429 tier_capacity_exceeded).
  int64_t admitted = 0, fallbacks = 0, rejected_429 = 0;
  int64_t retry_after_seconds = 0;  // the 429's Retry-After
  double ultrafast_tok_s = 0;       // the stream's own speed while measured
  // What the online cost model believed at the end: where it misjudges, these say how.
  scheduler::StepCostCoefficients learned;
};

// Hinge coefficients read off a curve: base = the solo step, the knee = the most tokens within
// 1% of it (at most the model's max knee), the slope past it over 8 tokens, the cost of a cached
// position from 64k of them.
scheduler::StepCostCoefficients PriorFromCurve(const StepCurve& curve, double max_knee = 16.0);

// One run. InvalidArgument on invalid options.
StatusOr<TierSimReport> SimulateTiers(const StepCurve& curve, const TierSimOptions& options);

}  // namespace uf::planner
