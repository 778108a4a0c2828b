#include "planner/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

namespace uf::planner {
namespace {

struct StepParts {
  double memory = 0, compute = 0, overhead = 0, total = 0, roofline = 0;
};

// One step of `tokens` decode tokens attending `context_tokens` positions in all, on `devices`.
StepParts StepTime(const ModelCost& m, const HardwareProfile& hw, int64_t tokens,
                   int64_t context_tokens, int64_t devices) {
  const bool tensor = hw.parallelism == Parallelism::kTensor;
  // Devices streaming one token's weights at once: all of them under tensor parallelism; under a
  // pipeline one stage at a time, a stage being one layer split over devices / layers chips when
  // there are more chips than layers (Groq spreads a 70B layer over ~8).
  const double spread =
      tensor ? static_cast<double>(devices)
             : std::max(1.0, static_cast<double>(devices) / static_cast<double>(m.n_layer));
  const double bytes = m.StepWeightBytes(tokens) +
                       static_cast<double>(context_tokens) * m.kv_bytes_per_position +
                       static_cast<double>(tokens) * m.kv_window_bytes;
  // Sliding-window layers attend to their window only (about n_swa positions per token).
  const double flops = 2.0 * m.active_params * static_cast<double>(tokens) +
                       4.0 * static_cast<double>((m.n_layer - m.windowed_layers) * m.q_dim) *
                           static_cast<double>(context_tokens) +
                       4.0 * static_cast<double>(m.windowed_layers * m.q_dim) *
                           static_cast<double>(tokens * m.n_swa);
  const double rate = m.quantized ? hw.quantized_ops_s : hw.bf16_flops;
  StepParts s;
  s.memory = bytes / (spread * hw.bandwidth_bytes_s * hw.bandwidth_efficiency);
  s.compute = flops / (spread * rate * hw.compute_efficiency);
  s.roofline = bytes / (spread * hw.bandwidth_bytes_s);
  s.overhead = static_cast<double>(m.n_layer) * hw.layer_latency_s;
  if (tensor && devices > 1) {
    s.overhead += 2.0 * static_cast<double>(m.n_layer) * hw.link_latency_s;
  } else if (!tensor) {
    s.overhead += static_cast<double>(devices - 1) * hw.link_latency_s;
  }
  const double p = hw.overlap_exponent;
  s.total = std::pow(std::pow(s.memory, p) + std::pow(s.compute, p), 1.0 / p) + s.overhead;
  return s;
}

// Fewest devices holding `bytes`: a power of two for tensor parallelism (heads and FFN rows
// split evenly), any count for a pipeline.
int64_t DevicesFor(const HardwareProfile& hw, double bytes) {
  const double usable = hw.memory_bytes * hw.usable_memory_fraction;
  int64_t d = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(bytes / usable)));
  if (hw.parallelism == Parallelism::kTensor) {
    int64_t pow2 = 1;
    while (pow2 < d) pow2 *= 2;
    // A domain that is not a power of two (72) is used whole rather than overshot.
    if (hw.devices_per_domain > 0 && pow2 > hw.devices_per_domain && d <= hw.devices_per_domain) {
      pow2 = hw.devices_per_domain;
    }
    d = pow2;
  }
  return d;
}

double PerDevice(const PlanRow& r) {
  return r.devices > 0 ? r.aggregate_tok_s / static_cast<double>(r.devices) : 0.0;
}

}  // namespace

Status PlanOptions::Validate() const {
  if (batches.empty()) return InvalidArgumentError("--batch: no batch sizes");
  for (int64_t b : batches) {
    if (b < 1 || b > 65536) {
      return InvalidArgumentError("--batch: " + std::to_string(b) +
                                  " is not a batch size in [1, 65536]");
    }
  }
  if (context < 1 || context > (int64_t{1} << 24)) {
    return InvalidArgumentError("--ctx: " + std::to_string(context) + " is not in [1, 16M]");
  }
  if (price_per_hour != -1 && !(price_per_hour >= 0 && std::isfinite(price_per_hour))) {
    return InvalidArgumentError("--price-per-hour must be a non-negative number");
  }
  if (!(slack >= 0 && slack <= 10)) return InvalidArgumentError("--slack must be in [0, 10]");
  return OkStatus();
}

StatusOr<std::vector<int64_t>> ParseBatchList(const std::string& list) {
  std::vector<int64_t> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 65536) {
      return InvalidArgumentError("--batch: '" + item +
                                  "' is not a batch size in [1, 65536] (use e.g. 1,2,4,8)");
    }
    out.push_back(v);
  }
  if (out.empty()) return InvalidArgumentError("--batch: no batch sizes");
  return out;
}

PlanRow EstimateStep(const ModelCost& m, const HardwareProfile& hw, int64_t batch, int64_t context,
                     double price_per_hour) {
  PlanRow r;
  r.batch = batch;
  const double held = m.held_bytes + static_cast<double>(batch) *
                                         (static_cast<double>(context) * m.kv_bytes_per_position +
                                          m.kv_window_bytes);
  r.devices = DevicesFor(hw, held);
  r.within_domain = hw.devices_per_domain <= 0 || r.devices <= hw.devices_per_domain;
  // A pipeline of d devices runs up to d micro-batches at once, one per device: each user's
  // token still crosses every device, but a step carries only batch / d of the sequences.
  int64_t step_batch = batch;
  if (hw.parallelism == Parallelism::kPipeline) {
    const int64_t in_flight = std::min(batch, r.devices);
    step_batch = (batch + in_flight - 1) / in_flight;
  }
  const StepParts s = StepTime(m, hw, step_batch, step_batch * context, r.devices);
  r.memory_seconds = s.memory;
  r.compute_seconds = s.compute;
  r.overhead_seconds = s.overhead;
  r.step_seconds = s.total;
  r.per_user_tok_s = 1.0 / s.total;
  r.aggregate_tok_s = static_cast<double>(batch) / s.total;
  r.per_device_tok_s = PerDevice(r);
  r.roofline_tok_s = 1.0 / s.roofline;
  if (s.overhead > std::max(s.memory, s.compute)) {
    r.bound = "latency";
  } else {
    r.bound = s.memory >= s.compute ? "memory" : "compute";
  }
  r.usd_per_mtok =
      static_cast<double>(r.devices) * price_per_hour / (r.aggregate_tok_s * 3600.0) * 1e6;
  return r;
}

double CurveStepSeconds(const ModelCost& m, const HardwareProfile& hw, int64_t tokens,
                        int64_t context_tokens) {
  const int64_t devices = DevicesFor(hw, m.held_bytes);
  return StepTime(m, hw, std::max<int64_t>(tokens, 1), context_tokens, devices).total;
}

StatusOr<PlanReport> Plan(const ModelCost& m, const std::vector<HardwareProfile>& hws,
                          const PlanOptions& o) {
  UF_RETURN_IF_ERROR(o.Validate());
  PlanReport report;
  report.model = m;
  report.options = o;
  for (const HardwareProfile& hw : hws) {
    HardwarePlan h;
    h.hw = hw;
    h.price_per_hour = o.price_per_hour >= 0 ? o.price_per_hour : hw.price_per_hour;
    for (int64_t b : o.batches)
      h.rows.push_back(EstimateStep(m, hw, b, o.context, h.price_per_hour));
    h.solo = EstimateStep(m, hw, 1, o.context, h.price_per_hour);
    for (size_t i = 1; i < h.rows.size(); ++i) {
      if (PerDevice(h.rows[i]) > PerDevice(h.rows[h.best])) h.best = i;
    }
    const double best = std::max(PerDevice(h.rows[h.best]), PerDevice(h.solo));
    h.ultrafast_multiplier = best / PerDevice(h.solo);
    // Defaults beside the stream: the most k with step(1 + k) <= (1 + slack) x solo step, on the
    // stream's devices (their K/V must fit there too). Revenue per device-second at price P:
    // (multiplier + k) x P / step(1 + k) must equal best x P, so multiplier = best x devices x
    // step(1 + k) - k.
    int64_t k = 0;
    PlanRow mix = h.solo;
    for (int64_t n = 1; n <= 4096; ++n) {
      const PlanRow next = EstimateStep(m, hw, 1 + n, o.context, h.price_per_hour);
      if (next.devices != h.solo.devices ||
          next.step_seconds > (1.0 + o.slack) * h.solo.step_seconds * (1 + 1e-12)) {
        break;
      }
      k = n;
      mix = next;
    }
    h.slack_defaults = k;
    // At least the standard price: below 1 the defaults alone would pay for the devices (latency
    // bound hardware, where dozens ride along), and nobody sells the faster tier for less.
    h.ultrafast_multiplier_with_slack = std::max(
        1.0, best * static_cast<double>(mix.devices) * mix.step_seconds - static_cast<double>(k));
    report.hardware.push_back(std::move(h));
  }
  return report;
}

namespace {

// "1.24B" or "135.0M", "2.5 GB" or "8.6 MB": tiny test models and 405B ones in one format.
std::string Count(double x, const char* big, const char* small) {
  char buf[32];
  if (x >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.2f%s", x / 1e9, big);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f%s", x / 1e6, small);
  }
  return buf;
}

}  // namespace

std::string PlanText(const PlanReport& r) {
  std::string out;
  char line[512];
  const ModelCost& m = r.model;
  std::snprintf(line, sizeof line,
                "model    %s (%s weights): %s params held (%s), %s active per token, %.1f MB read "
                "per token at batch 1, K/V %.1f KB per position\n",
                m.name.c_str(), m.weight_type.c_str(), Count(m.total_params, "B", "M").c_str(),
                Count(m.held_bytes, " GB", " MB").c_str(), Count(m.active_params, "B", "M").c_str(),
                m.StepWeightBytes(1) / 1e6, m.kv_bytes_per_position / 1e3);
  out += line;
  if (m.kv_window_bytes > 0) {
    std::snprintf(line, sizeof line,
                  "         + sliding-window layers' K/V: %.2f MB per sequence (their window)\n",
                  m.kv_window_bytes / 1e6);
    out += line;
  }
  std::snprintf(line, sizeof line, "context  %lld positions per sequence\n",
                static_cast<long long>(r.options.context));
  out += line;
  for (const HardwarePlan& h : r.hardware) {
    std::snprintf(line, sizeof line, "\n%s  [%s, $%.2f per device-hour]\n", h.hw.display.c_str(),
                  h.hw.name.c_str(), h.price_per_hour);
    out += line;
    std::snprintf(line, sizeof line, "%7s %8s %12s %10s %14s %14s %9s %10s\n", "batch", "devices",
                  "user tok/s", "ms/token", "agg tok/s", "tok/s/device", "bound", "$/Mtok");
    out += line;
    for (const PlanRow& row : h.rows) {
      std::snprintf(line, sizeof line, "%7lld %7lld%s %12.1f %10.3f %14.1f %14.1f %9s %10.4g\n",
                    static_cast<long long>(row.batch), static_cast<long long>(row.devices),
                    row.within_domain ? " " : "*", row.per_user_tok_s, 1e3 * row.step_seconds,
                    row.aggregate_tok_s, row.per_device_tok_s, row.bound.c_str(), row.usd_per_mtok);
      out += line;
    }
    std::snprintf(line, sizeof line,
                  "ultrafast: %.1f tok/s alone (bandwidth roofline %.1f); price multiplier %.2fx "
                  "vs batch %lld; with %.0f%% slack %lld default(s) ride along: %.2fx\n",
                  h.solo.per_user_tok_s, h.solo.roofline_tok_s, h.ultrafast_multiplier,
                  static_cast<long long>(h.rows[h.best].batch), 100 * r.options.slack,
                  static_cast<long long>(h.slack_defaults), h.ultrafast_multiplier_with_slack);
    out += line;
    if (std::any_of(h.rows.begin(), h.rows.end(),
                    [](const PlanRow& row) { return !row.within_domain; })) {
      out += "* more devices than one fast-fabric domain holds: the figures assume one domain\n";
    }
  }
  return out;
}

std::string PlanJson(const PlanReport& r) {
  nlohmann::json j;
  const ModelCost& m = r.model;
  j["model"] = {{"name", m.name},
                {"weight_type", m.weight_type},
                {"total_params", m.total_params},
                {"active_params", m.active_params},
                {"held_bytes", m.held_bytes},
                {"bytes_per_token_batch1", m.StepWeightBytes(1)},
                {"kv_bytes_per_position", m.kv_bytes_per_position},
                {"kv_window_bytes", m.kv_window_bytes},
                {"n_expert", m.n_expert},
                {"n_expert_used", m.n_expert_used}};
  j["context"] = r.options.context;
  j["slack"] = r.options.slack;
  j["hardware"] = nlohmann::json::array();
  for (const HardwarePlan& h : r.hardware) {
    nlohmann::json hj;
    hj["name"] = h.hw.name;
    hj["display"] = h.hw.display;
    hj["source"] = h.hw.source;
    hj["price_per_device_hour"] = h.price_per_hour;
    hj["memory_bytes"] = h.hw.memory_bytes;
    hj["bandwidth_bytes_s"] = h.hw.bandwidth_bytes_s;
    hj["bf16_flops"] = h.hw.bf16_flops;
    hj["quantized_ops_s"] = h.hw.quantized_ops_s;
    hj["parallelism"] = h.hw.parallelism == Parallelism::kTensor ? "tensor" : "pipeline";
    nlohmann::json rows = nlohmann::json::array();
    for (const PlanRow& row : h.rows) {
      rows.push_back({{"batch", row.batch},
                      {"devices", row.devices},
                      {"within_domain", row.within_domain},
                      {"per_user_tok_s", row.per_user_tok_s},
                      {"aggregate_tok_s", row.aggregate_tok_s},
                      {"per_device_tok_s", row.per_device_tok_s},
                      {"step_seconds", row.step_seconds},
                      {"memory_seconds", row.memory_seconds},
                      {"compute_seconds", row.compute_seconds},
                      {"overhead_seconds", row.overhead_seconds},
                      {"roofline_tok_s", row.roofline_tok_s},
                      {"bound", row.bound},
                      {"usd_per_mtok", row.usd_per_mtok}});
    }
    hj["rows"] = rows;
    hj["ultrafast"] = {{"per_user_tok_s", h.solo.per_user_tok_s},
                       {"roofline_tok_s", h.solo.roofline_tok_s},
                       {"devices", h.solo.devices},
                       {"best_standard_batch", h.rows[h.best].batch},
                       {"price_multiplier", h.ultrafast_multiplier},
                       {"slack_defaults", h.slack_defaults},
                       {"price_multiplier_with_slack", h.ultrafast_multiplier_with_slack}};
    j["hardware"].push_back(hj);
  }
  return j.dump();
}

}  // namespace uf::planner
