// The planner: decode speed, throughput, devices and price per hardware profile and batch size.
//
// One decode step of `batch` sequences at `context` cached positions each:
//   memory  m = (weights the step touches + batch x context x K/V per position) / bandwidth
//   compute c = batch x (2 x active params + 4 x layers x q_dim x context) / matmul rate
//   step    t = (m^p + c^p)^(1/p) + layers x layer latency + link latencies
// with bandwidth and rate the profile's peaks times its efficiencies, summed over the devices
// for tensor parallelism (every device streams its share at once) and not for pipeline
// parallelism (a token visits the devices in turn; a layer split over several chips counts them).
// Devices: the fewest that hold the weights plus every sequence's K/V (a power of two under tensor
// parallelism). Per-user speed is 1 / t and aggregate speed batch / t; a pipeline keeps up to one
// micro-batch per device in flight, so its step is that of batch / devices sequences. Price per
// million output tokens: devices x price per device-hour over the aggregate tokens per hour.
//
// The ultrafast price multiplier: an ultrafast stream occupies the devices of batch 1; to earn
// what the standard tier earns per device-hour at its best batch (most tokens per device-second)
// it needs best_per_device / ultrafast_per_device times the standard price. With slack s, the
// defaults that fit beside it within (1 + s) x its solo step pay part of the bill (the multiplier
// is then at least 1: below that the defaults alone pay).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "planner/hardware.h"
#include "planner/model_shape.h"

namespace uf::planner {

struct PlanOptions {
  std::vector<int64_t> batches = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  int64_t context = 1024;      // cached positions per sequence
  double price_per_hour = -1;  // USD per device-hour; negative: each profile's own
  double slack = 0.05;         // for the multiplier with defaults riding beside ultrafast

  // InvalidArgument: no batches, a batch below 1 or above 65536, context below 1, a price that
  // is set but negative or not finite, slack negative or above 10.
  Status Validate() const;
};

// "1,2,4" -> {1, 2, 4}; InvalidArgument for anything else (0, negatives, junk, empty items).
StatusOr<std::vector<int64_t>> ParseBatchList(const std::string& list);

struct PlanRow {
  int64_t batch = 0;
  int64_t devices = 0;        // to hold weights + K/V of every sequence
  bool within_domain = true;  // devices fit the profile's fast fabric
  double memory_seconds = 0, compute_seconds = 0, overhead_seconds = 0;
  double step_seconds = 0;
  double per_user_tok_s = 0;
  double aggregate_tok_s = 0;
  double per_device_tok_s = 0;
  // Bandwidth roofline per user: peak bandwidth (no efficiency, no latency) over the bytes read.
  double roofline_tok_s = 0;
  std::string bound;  // "memory", "compute" or "latency": the largest of m, c and the overhead
  double usd_per_mtok = 0;
};

struct HardwarePlan {
  HardwareProfile hw;
  double price_per_hour = 0;
  std::vector<PlanRow> rows;  // one per requested batch
  PlanRow solo;               // batch 1 (the ultrafast stream)
  size_t best = 0;            // index of the row with the most tokens per device-second
  double ultrafast_multiplier = 0;
  // With slack: defaults that fit beside the stream (at context) and the multiplier left.
  int64_t slack_defaults = 0;
  double ultrafast_multiplier_with_slack = 0;
};

struct PlanReport {
  ModelCost model;
  PlanOptions options;
  std::vector<HardwarePlan> hardware;
};

// One step on `hw`. Options must be valid.
PlanRow EstimateStep(const ModelCost& model, const HardwareProfile& hw, int64_t batch,
                     int64_t context, double price_per_hour);

// Every batch on every profile, and the multipliers. InvalidArgument on invalid options.
StatusOr<PlanReport> Plan(const ModelCost& model, const std::vector<HardwareProfile>& hw,
                          const PlanOptions& options);

// A step-time curve for the tier simulator: seconds of one step of `tokens` decode tokens
// attending `context_tokens` positions in all, on `hw` (single replica, its devices at batch 1).
double CurveStepSeconds(const ModelCost& model, const HardwareProfile& hw, int64_t tokens,
                        int64_t context_tokens);

std::string PlanText(const PlanReport& report);
std::string PlanJson(const PlanReport& report);  // one JSON object
// Per-user tok/s against aggregate tok/s per device, one curve per profile, log axes.
std::string PlanSvg(const PlanReport& report);

}  // namespace uf::planner
