// `ultrafast plan`: per-user speed, throughput, devices and price of a model on hardware profiles
// (src/planner/), optionally the tier simulator on each profile's step-time curve. Bad input
// (unknown hardware or preset, a file that is not GGUF, batch 0, a negative price) ends the
// command with one error line and exit code 2, so scripts can tell it from a failed probe.
#include "cli/plan_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "cli/common.h"
#include "kernels/matmul.h"
#include "kernels/membw.h"
#include "kernels/peak.h"
#include "planner/hardware.h"
#include "planner/model_shape.h"
#include "planner/planner.h"
#include "planner/tier_sim.h"

namespace uf::cli {
namespace {

constexpr int kBadInput = 2;

struct PlanCommandOptions {
  std::string model;
  std::string hw = "all";
  std::string type = "bf16";  // weight type of a preset
  std::string kv_type = "f16";
  std::string ctx = "1024";
  std::string batch = "1,2,4,8,16,32,64,128,256";
  std::string price;  // empty: each profile's own
  std::string slack = "0.05";
  bool json = false;
  std::string svg;
  int threads = 0;
  bool simulate = false;
  std::string sim_slack = "0.05,0.10,0.25";
  int64_t sim_defaults = 16;
  int64_t sim_prompt = 512;
  int64_t sim_tokens = 1200;
  double sim_noise = 0.0;
  bool sim_engine_prior = false;
  std::string curve;       // bench --json output: the measured local curve for the simulator
  std::string local_from;  // bench --json output: the local profile's figures
};

[[noreturn]] void BadInput(const Status& s) {
  std::fprintf(stderr, "ultrafast plan: %s\n", s.message().c_str());
  std::exit(kBadInput);
}

template <typename T>
T OrBadInput(StatusOr<T> v) {
  if (!v.ok()) BadInput(v.status());
  return *std::move(v);
}

StatusOr<double> ParseNumber(const std::string& flag, const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0') {
    return InvalidArgumentError(flag + ": '" + s + "' is not a number");
  }
  return v;
}

StatusOr<std::vector<double>> ParseNumberList(const std::string& flag, const std::string& s) {
  std::vector<double> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    UF_ASSIGN_OR_RETURN(double v, ParseNumber(flag, item));
    out.push_back(v);
  }
  if (out.empty()) return InvalidArgumentError(flag + ": no values");
  return out;
}

// A preset name, else a GGUF file.
StatusOr<planner::ModelCost> ResolveModel(const PlanCommandOptions& o) {
  auto preset = planner::FindPlannerPreset(o.model);
  if (preset.ok()) return planner::CostFromShape(*preset, o.type, o.kv_type);
  if (access(o.model.c_str(), R_OK) != 0) {
    return NotFoundError(preset.status().message());
  }
  return planner::CostFromGguf(o.model, o.kv_type);
}

// The `local` profile: the probes `ultrafast bench` runs (read bandwidth, arithmetic peaks), a
// few hundred milliseconds.
StatusOr<planner::HardwareProfile> ProbeLocal(int threads) {
  ThreadPool pool(ResolveThreads(threads));
  kernels::ReadBandwidthProbe probe(size_t{512} << 20);
  const double bw = probe.BestGBs(&pool, 5);
  const kernels::ComputePeak peak = kernels::MeasureComputePeak(&pool, kernels::ActiveIsa(), 5);
  const double memory =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  return planner::LocalProfile(bw, std::max(peak.bf16_gflops, peak.f32_gflops), peak.int8_gops,
                               memory);
}

// A number field of a JSON object; 0 when the value is not an object, lacks it or holds another
// kind (nlohmann's value() would throw on those).
double Number(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return 0.0;
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

// The `local` profile from `bench --json` output: its same-run bandwidth (the median beside the
// decode reps) and, when it measured them (-p > 0), its arithmetic peaks; otherwise the peaks are
// probed now. On a shared host whose bandwidth moves by 30% within minutes, this compares plan
// and bench on the same moment's hardware.
StatusOr<planner::HardwareProfile> LocalFromBench(const std::string& path, int threads) {
  std::ifstream in(path);
  if (!in) return NotFoundError("--local-from: cannot read '" + path + "'");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!(Number(j, "bandwidth_gb_s") > 0)) {
    return InvalidArgumentError("--local-from: '" + path +
                                "' is not `ultrafast bench --json` output");
  }
  double bf16 = std::max(Number(j, "peak_bf16_gflops"), Number(j, "peak_f32_gflops"));
  double int8 = Number(j, "peak_int8_gops");
  if (!(bf16 > 0) || !(int8 > 0)) {
    ThreadPool pool(ResolveThreads(threads));
    const kernels::ComputePeak peak = kernels::MeasureComputePeak(&pool, kernels::ActiveIsa(), 5);
    bf16 = std::max(peak.bf16_gflops, peak.f32_gflops);
    int8 = peak.int8_gops;
  }
  const double memory =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  return planner::LocalProfile(Number(j, "bandwidth_gb_s"), bf16, int8, memory);
}

// `bench --json` output -> the measured step curve, with attention's K/V reads at the bandwidth
// bench measured.
StatusOr<planner::StepCurve> CurveFromBench(const std::string& path,
                                            const planner::ModelCost& model) {
  std::ifstream in(path);
  if (!in) return NotFoundError("--curve: cannot read '" + path + "'");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("batch_tok_s") || !j["batch_tok_s"].is_object()) {
    return InvalidArgumentError("--curve: '" + path +
                                "' is not `ultrafast bench --batch ... --json` output");
  }
  std::vector<std::pair<int64_t, double>> points;
  for (const auto& [k, v] : j["batch_tok_s"].items()) {
    if (!v.is_number()) return InvalidArgumentError("--curve: batch_tok_s holds a non-number");
    points.emplace_back(std::atoll(k.c_str()), v.get<double>());
  }
  const double bw = Number(j, "bandwidth_gb_s") * 1e9;
  return planner::MeasuredCurve(points, bw > 0 ? model.kv_bytes_per_position / bw : 0.0);
}

struct Simulations {
  std::vector<double> slacks;
  std::vector<std::pair<std::string, planner::StepCurve>> curves;
};

planner::TierSimOptions SimOptions(const PlanCommandOptions& o, double slack) {
  planner::TierSimOptions so;
  so.slack = slack;
  so.defaults = o.sim_defaults;
  so.prompt_tokens = o.sim_prompt;
  so.ultrafast_tokens = o.sim_tokens;
  so.noise = o.sim_noise;
  so.prior_from_curve = !o.sim_engine_prior;
  return so;
}

// The curves and options, checked before anything is printed: bad input must not leave a
// half-written report behind.
Simulations PrepareSimulations(const PlanCommandOptions& o, const planner::ModelCost& model,
                               const std::vector<planner::HardwareProfile>& hws) {
  Simulations sims;
  sims.slacks = OrBadInput(ParseNumberList("--sim-slack", o.sim_slack));
  for (double slack : sims.slacks) {
    if (Status s = SimOptions(o, slack).Validate(); !s.ok()) BadInput(s);
  }
  for (const planner::HardwareProfile& hw : hws) {
    sims.curves.emplace_back(hw.name, [model, hw](int64_t tokens, int64_t context) {
      return planner::CurveStepSeconds(model, hw, tokens, context);
    });
  }
  if (!o.curve.empty()) {
    sims.curves.emplace_back("measured", OrBadInput(CurveFromBench(o.curve, model)));
  }
  return sims;
}

void RunSimulations(const PlanCommandOptions& o, const Simulations& sims,
                    nlohmann::json* out_json) {
  const std::vector<double>& slacks = sims.slacks;
  const auto& curves = sims.curves;
  nlohmann::json runs = nlohmann::json::array();
  if (!o.json) {
    std::printf(
        "\ntier simulator: 1 ultrafast stream beside %lld default streams, prompts of %lld, "
        "%lld ultrafast tokens (measured after %lld)\n",
        static_cast<long long>(o.sim_defaults), static_cast<long long>(o.sim_prompt),
        static_cast<long long>(o.sim_tokens),
        static_cast<long long>(planner::TierSimOptions{}.measure_after_tokens));
    std::printf("%-9s %6s %9s %9s %9s %9s %6s %12s %12s %8s %12s %4s %5s %4s\n", "curve", "slack",
                "solo ms", "p50/solo", "p99/solo", "fcfs p50", "over", "default t/s", "ideal t/s",
                "of ideal", "any-order", "adm", "fallb", "429");
  }
  for (const auto& [name, curve] : curves) {
    for (double slack : slacks) {
      const planner::TierSimOptions so = SimOptions(o, slack);
      const planner::TierSimReport r = OrBadInput(planner::SimulateTiers(curve, so));
      if (o.json) {
        runs.push_back({{"curve", name},
                        {"slack", slack},
                        {"solo_step_seconds", r.solo_step_seconds},
                        {"itl_p50_over_solo", r.itl_p50_over_solo},
                        {"itl_p99_over_solo", r.itl_p99_over_solo},
                        {"fcfs_p50_over_solo", r.fcfs_p50_over_solo},
                        {"steps_over_bound", r.steps_over_bound},
                        {"any_order_default_tok_s", r.any_order_default_tok_s},
                        {"learned_knee_tokens", r.learned.knee_tokens},
                        {"learned_base_seconds", r.learned.base_seconds},
                        {"learned_per_seq_seconds", r.learned.per_seq_seconds},
                        {"learned_per_context_token_seconds", r.learned.per_context_token_seconds},
                        {"measured_tokens", r.measured_tokens},
                        {"ultrafast_tok_s", r.ultrafast_tok_s},
                        {"default_tok_s", r.default_tok_s},
                        {"ideal_default_tok_s", r.ideal_default_tok_s},
                        {"default_fraction_of_ideal", r.default_fraction_of_ideal},
                        {"admitted", r.admitted},
                        {"fallbacks", r.fallbacks},
                        {"rejected_429", r.rejected_429},
                        {"retry_after_seconds", r.retry_after_seconds}});
      } else {
        std::printf(
            "%-9s %5.0f%% %9.3f %9.4f %9.4f %9.2f %6lld %12.1f %12.1f %7.0f%% %12.1f %4lld %5lld "
            "%4lld\n",
            name.c_str(), 100 * slack, 1e3 * r.solo_step_seconds, r.itl_p50_over_solo,
            r.itl_p99_over_solo, r.fcfs_p50_over_solo, static_cast<long long>(r.steps_over_bound),
            r.default_tok_s, r.ideal_default_tok_s, 100 * r.default_fraction_of_ideal,
            r.any_order_default_tok_s, static_cast<long long>(r.admitted),
            static_cast<long long>(r.fallbacks), static_cast<long long>(r.rejected_429));
      }
    }
  }
  if (out_json != nullptr) (*out_json)["tier_simulation"] = runs;
}

void PlanCommand(const PlanCommandOptions& o) {
  planner::PlanOptions po;
  po.batches = OrBadInput(planner::ParseBatchList(o.batch));
  const double ctx = OrBadInput(ParseNumber("--ctx", o.ctx));
  if (ctx != static_cast<double>(static_cast<int64_t>(ctx))) {
    BadInput(InvalidArgumentError("--ctx: '" + o.ctx + "' is not a whole number"));
  }
  po.context = static_cast<int64_t>(ctx);
  if (!o.price.empty()) {
    po.price_per_hour = OrBadInput(ParseNumber("--price-per-hour", o.price));
    if (po.price_per_hour < 0) {
      BadInput(InvalidArgumentError("--price-per-hour: " + o.price + " is negative"));
    }
  }
  po.slack = OrBadInput(ParseNumber("--slack", o.slack));
  if (Status s = po.Validate(); !s.ok()) BadInput(s);
  const std::vector<std::string> names = OrBadInput(planner::ParseHardwareList(o.hw));
  const planner::ModelCost model = OrBadInput(ResolveModel(o));

  std::vector<planner::HardwareProfile> hws;
  for (const std::string& name : names) {
    if (name == "local") {
      if (!o.local_from.empty()) {
        hws.push_back(OrBadInput(LocalFromBench(o.local_from, o.threads)));
        continue;
      }
      auto local = ProbeLocal(o.threads);  // a failed probe is not bad input: exit code 1
      if (!local.ok()) Fail("plan", local.status());
      hws.push_back(*local);
    } else {
      hws.push_back(OrBadInput(planner::FindHardware(name)));
    }
  }
  const planner::PlanReport report = OrBadInput(planner::Plan(model, hws, po));
  Simulations sims;
  if (o.simulate) sims = PrepareSimulations(o, model, hws);
  if (!o.svg.empty()) {
    std::ofstream out(o.svg, std::ios::binary);
    out << planner::PlanSvg(report);
    if (!out) Fail("plan", UnavailableError("cannot write '" + o.svg + "'"));
  }
  if (o.json) {
    nlohmann::json j = nlohmann::json::parse(planner::PlanJson(report));
    if (o.simulate) RunSimulations(o, sims, &j);
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("%s", planner::PlanText(report).c_str());
  if (o.simulate) RunSimulations(o, sims, nullptr);
}

}  // namespace

void AddPlanCommand(CLI::App& app) {
  auto o = std::make_shared<PlanCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Per-user speed, throughput, devices and $/Mtok of a model on hardware profiles");
  cmd->add_option("-m,--model", o->model,
                  "GGUF file, or a preset: llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, "
                  "llama-3.1-70b, llama-3.1-405b, mixtral-8x7b, qwen2.5-0.5b, qwen3-0.6b, "
                  "smollm2-135m")
      ->required();
  cmd->add_option("--hw", o->hw,
                  "Hardware profiles, comma-separated: local (probed now), h100, h200, b200, "
                  "gb300, wse3, groq, all (every one but local)")
      ->capture_default_str();
  cmd->add_option("--type", o->type,
                  "Weight type of a preset: f32, f16, bf16, fp8, q8_0, q6_k, q4_k_m, q4_0, fp4")
      ->capture_default_str();
  cmd->add_option("--kv-type", o->kv_type, "K/V cache type: f32, f16, bf16, fp8, q8_0")
      ->capture_default_str();
  cmd->add_option("--ctx", o->ctx, "Cached positions per sequence")->capture_default_str();
  cmd->add_option("--batch", o->batch, "Batch sizes (sequences decoding together)")
      ->capture_default_str();
  cmd->add_option("--price-per-hour", o->price,
                  "USD per device-hour for every profile (default: each profile's assumption)");
  cmd->add_option("--slack", o->slack,
                  "Ultrafast slack for the price multiplier with defaults riding along")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object instead of the tables");
  cmd->add_option("--svg", o->svg, "Write the latency/throughput chart to this SVG file");
  cmd->add_option("-t,--threads", o->threads, "Threads for the local probe (0: all CPUs)")
      ->capture_default_str();
  cmd->add_option("--local-from", o->local_from,
                  "Take `local`'s bandwidth (and peaks, if measured) from `ultrafast bench --json` "
                  "output instead of probing: plan and bench on the same moment's hardware");
  cmd->add_flag("--simulate-tiers", o->simulate,
                "Replay the tier scheduler on each profile's step-time curve (docs/planner.md)");
  cmd->add_option("--sim-slack", o->sim_slack, "Simulator: ultrafast slacks")
      ->capture_default_str();
  cmd->add_option("--sim-defaults", o->sim_defaults, "Simulator: default streams")
      ->capture_default_str();
  cmd->add_option("--sim-prompt", o->sim_prompt, "Simulator: prompt tokens per stream")
      ->capture_default_str();
  cmd->add_option("--sim-tokens", o->sim_tokens, "Simulator: ultrafast tokens (first 400 warm up)")
      ->capture_default_str();
  cmd->add_option("--sim-noise", o->sim_noise,
                  "Simulator: relative step-time noise, seeded (0: none)")
      ->capture_default_str();
  cmd->add_flag("--sim-engine-prior", o->sim_engine_prior,
                "Simulator: start the cost model from the engine's built-in prior (a 1B model on "
                "2 CPU cores, what `serve` uses) instead of one read off the curve");
  cmd->add_option("--curve", o->curve,
                  "Simulator: also replay on a measured curve, `ultrafast bench --batch ... "
                  "--json` output");
  cmd->callback([o] { PlanCommand(*o); });
}

}  // namespace uf::cli
