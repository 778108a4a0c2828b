// The ultrafast tier's trade-off, measured on the engine Service directly (no HTTP: this measures
// scheduling, not sockets).
//   1. Step time versus batch size: b default streams decoding together (the bound is infinite
//      without ultrafast work, so every stream is in every step); step time = median inter-token
//      gap. Batch 1 is measured before and after every other size, and each size's step over
//      the mean of those two, median over --curve-rounds, is the curve's shape. This curve is the
//      physics: it says how much default work can ride beside one stream.
//   2. Solo ultrafast: one ultrafast stream alone; its ITL is the reference.
//   3. Mix, per slack, in rounds (--rounds, --tokens split among them): the ultrafast stream alone
//      (the round's solo ITL), then 16 default streams and the ultrafast stream again. Its ITL
//      over the solo ITL of its own round, pooled over the rounds (p50, p99), and the default
//      tokens per second produced during its life, against the ideal for that slack: the most
//      defaults k with t(1 + k) <= (1 + slack) t(1) on the curve, giving k / t(1 + k) with the
//      curve's shape scaled to the round's solo speed. On this shared machine the speed drifts by
//      more within a minute than the effects measured, so only ratios taken seconds apart mean
//      anything. Also against naive first-come continuous batching of all 17 (every stream in
//      every step). One `auto` and one explicit ultrafast request are sent while the stream is
//      busy: with capacity 1 they must fall back and be refused.
//   4. JSON with all of it (-o), and a table on stdout.
// Every service shares one online step-cost model, so the mixes start from what the curve taught
// it (a server learns the same from its own traffic and probes over its first few hundred steps;
// a fresh model per 64-token run would measure the warm-up, not the scheduler).
//
//   tiers_bench [model.gguf] [--threads 2] [--tokens 256] [--rounds 4] [--defaults 16] [--slacks
//   0,5,10,25,50,100]
//               [--curve 1,2,3,4,6,8,12,17] [--curve-tokens 24] [--curve-rounds 3]
//               [-o tiers.json]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/check.h"
#include "base/clock.h"
#include "bench_util.h"
#include "engine/service.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace uf {
namespace {

using json = nlohmann::json;
using bench::Percentile;
using engine::GenerationEvent;
using engine::GenerationRequest;
using engine::RequestChannel;
using engine::Service;
using engine::ServiceOptions;
using scheduler::ServiceTier;

struct Config {
  std::string model_path;
  int threads = 2;
  // Ultrafast stream length = ITL samples per run: with 64, "p99" is the single worst token.
  int64_t tokens = 256;
  int64_t curve_tokens = 24;  // tokens per stream for the step-time curve
  int curve_rounds = 3;       // the curve's sizes are measured this many times, interleaved
  int rounds = 4;             // solo / mix rounds per slack, tokens / rounds each
  int defaults = 16;
  std::vector<double> slacks = {0, 5, 10, 25, 50, 100};  // percent
  std::vector<int> curve = {1, 2, 3, 4, 6, 8, 12, 17};
  int64_t prompt_tokens = 16;
};

// Token times of one request, drained after the fact: the engine stamps each event when the token
// is sampled, so when the bench reads the channel does not matter.
struct Stream {
  std::shared_ptr<RequestChannel> channel;
  std::vector<double> times;  // [n_tokens] sample time of each token
  ServiceTier tier = ServiceTier::kDefault;
  bool finished = false;

  // Reads what is queued; waits up to timeout_s for the first event.
  void Drain(double timeout_s) {
    std::vector<GenerationEvent> events;
    if (finished || !channel->Pop(&events, timeout_s)) return;
    for (const GenerationEvent& e : events) {
      tier = e.service_tier;
      for (int64_t i = 0; i < e.n_tokens; ++i) times.push_back(e.time);
      if (e.finish != engine::FinishReason::kNone) {
        finished = true;
        if (e.finish == engine::FinishReason::kError) {
          std::fprintf(stderr, "request failed: %s\n", e.error.ToString().c_str());
        }
      }
    }
  }
  void WaitTokens(size_t n) {
    while (!finished && times.size() < n) Drain(60.0);
  }
  void WaitFinished() {
    while (!finished) Drain(60.0);
  }
  std::vector<double> Gaps() const {  // inter-token latencies (the first token is TTFT)
    std::vector<double> g;
    for (size_t i = 1; i < times.size(); ++i) g.push_back(times[i] - times[i - 1]);
    return g;
  }
  int64_t TokensIn(double a, double b) const {
    return std::count_if(times.begin(), times.end(), [&](double t) { return t > a && t <= b; });
  }
};

class Bench {
 public:
  Bench(const Config& c, const model::Model& m, const Tokenizer& t) : c_(c), model_(m), tok_(t) {}

  std::unique_ptr<Service> MakeService(int max_seqs, double slack_percent,
                                       ServiceTier auto_tier = ServiceTier::kDefault) const {
    ServiceOptions o;
    o.max_seqs = max_seqs;
    o.ctx = c_.prompt_tokens + std::max(c_.tokens, c_.curve_tokens) * 4 + 64;
    o.n_threads = c_.threads;
    o.prefix_cache = false;  // identical prompts must not share work across streams
    o.scheduler.ultrafast_slack = slack_percent / 100.0;
    o.admission.ultrafast_capacity = 1;
    o.auto_tier = auto_tier;
    o.learned_cost = cost_;
    auto s = Service::Create(model_, tok_, o);
    UF_CHECK(s.ok()) << s.status().ToString();
    return std::move(s).value();
  }

  GenerationRequest Request(int stream, int64_t max_tokens, std::optional<ServiceTier> tier) const {
    GenerationRequest r;
    // Distinct token-id prompts of exact length (ids valid in any vocabulary this engine loads).
    r.prompt.push_back(tok_.bos_id() >= 0 ? tok_.bos_id() : 1);
    for (int64_t i = 1; i < c_.prompt_tokens; ++i) {
      r.prompt.push_back(static_cast<int32_t>(100 + (stream * 37 + i * 11) % 900));
    }
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0.0f;
    r.ignore_eos = true;
    r.service_tier = tier;
    return r;
  }

  Stream Submit(Service& s, int stream, int64_t max_tokens, std::optional<ServiceTier> tier) {
    auto ch = s.Submit(Request(stream, max_tokens, tier));
    UF_CHECK(ch.ok()) << ch.status().ToString();
    Stream st;
    st.channel = *ch;
    return st;
  }

  // Median step time with b streams decoding together.
  double StepSeconds(int b) {
    auto s = MakeService(b, 0.0);
    std::vector<Stream> streams;
    for (int i = 0; i < b; ++i) streams.push_back(Submit(*s, i, c_.curve_tokens, std::nullopt));
    std::vector<double> gaps;
    for (Stream& st : streams) {
      st.WaitFinished();
      const std::vector<double> g = st.Gaps();
      // The first gaps can include other streams' prompt chunks: keep the steady state.
      gaps.insert(gaps.end(), g.begin() + std::min<size_t>(g.size(), 2), g.end());
    }
    return Percentile(gaps, 0.5);
  }

  json Coefficients() const {
    const scheduler::StepCostCoefficients k = cost_->coefficients();
    return {{"base_seconds", k.base_seconds},
            {"per_seq_seconds", k.per_seq_seconds},
            {"per_prefill_token_seconds", k.per_prefill_token_seconds},
            {"per_context_token_seconds", k.per_context_token_seconds},
            {"knee_tokens", k.knee_tokens},
            {"relative_noise", cost_->RelativeNoise()},
            {"samples", cost_->samples()}};
  }

  json Run() {
    json out;
    out["model"] = c_.model_path;
    out["threads"] = c_.threads;
    out["ultrafast_tokens"] = c_.tokens;
    out["default_streams"] = c_.defaults;

    // 1. Step time versus batch size, in rounds: batch 1 before and after every other size, so
    // that each size's step over batch 1 is taken seconds apart (this VM's speed drifts by more
    // than the effects measured within a minute: one curve measured once per size, one after the
    // other, had batch 2 faster than batch 1), and the median over the rounds, per size. The
    // "ideal" of every mix below is read off these ratios.
    std::vector<std::vector<double>> rounds(c_.curve.size()), ratios(c_.curve.size());
    for (int r = 0; r < c_.curve_rounds; ++r) {
      double solo_before = StepSeconds(1);
      rounds[0].push_back(solo_before);
      ratios[0].push_back(1.0);
      for (size_t i = 1; i < c_.curve.size(); ++i) {
        const double t = StepSeconds(c_.curve[i]);
        const double solo_after = StepSeconds(1);
        rounds[i].push_back(t);
        rounds[0].push_back(solo_after);
        ratios[i].push_back(t / (0.5 * (solo_before + solo_after)));
        solo_before = solo_after;
      }
    }
    json curve = json::array();
    for (size_t i = 0; i < c_.curve.size(); ++i) {
      const int b = c_.curve[i];
      const double t = Percentile(rounds[i], 0.5), ratio = Percentile(ratios[i], 0.5);
      curve_.emplace_back(b, ratio);
      curve.push_back({{"batch", b},
                       {"step_seconds", t},
                       {"tokens_per_second", b / t},
                       {"step_over_batch_1", ratio},
                       {"step_seconds_per_round", rounds[i]},
                       {"step_over_batch_1_per_round", ratios[i]}});
      std::printf("batch %2d: step %.4f s, %.1f tok/s, %.3fx batch 1 (rounds:", b, t, b / t, ratio);
      for (double x : ratios[i]) std::printf(" %.3f", x);
      std::printf(")\n");
      std::fflush(stdout);
    }
    out["step_curve"] = curve;
    out["cost_model_after_curve"] = Coefficients();
    double best_all_default = 0.0;
    for (size_t i = 0; i < c_.curve.size(); ++i) {
      best_all_default = std::max(best_all_default, c_.curve[i] / Percentile(rounds[i], 0.5));
    }
    out["all_default_best_tokens_per_second"] = best_all_default;

    // 2. Solo ultrafast.
    {
      auto s = MakeService(1, 0.0);
      Stream uf = Submit(*s, 0, c_.tokens, ServiceTier::kUltrafast);
      uf.WaitFinished();
      const std::vector<double> g = uf.Gaps();
      solo_itl_ = Percentile(g, 0.5);
      out["solo"] = {{"itl_p50", solo_itl_},
                     {"itl_p99", Percentile(g, 0.99)},
                     {"tokens_per_second", 1.0 / solo_itl_}};
      std::printf("solo ultrafast: ITL p50 %.4f s (%.1f tok/s), p99 %.4f s\n", solo_itl_,
                  1.0 / solo_itl_, Percentile(g, 0.99));
    }

    // 3. The mix per slack, then naive FCFS.
    out["naive_fcfs"] = Mix(-1.0);
    json mixes = json::array();
    for (double slack : c_.slacks) mixes.push_back(Mix(slack));
    out["mix"] = mixes;
    out["cost_model_at_end"] = Coefficients();
    return out;
  }

 private:
  // The most defaults k that fit beside one ultrafast stream at this slack, from the measured
  // curve's shape (t(1 + k) / t(1) <= 1 + slack, interpolated linearly between measured batch
  // sizes), and that k's step time over t(1). k = 0 when none fits.
  std::pair<int, double> IdealDefaults(double slack) const {
    auto t_of = [&](double b) {  // step over batch 1's
      for (size_t i = 1; i < curve_.size(); ++i) {
        if (b <= curve_[i].first) {
          const auto [b0, t0] = curve_[i - 1];
          const auto [b1, t1] = curve_[i];
          return t0 + (t1 - t0) * (b - b0) / (b1 - b0);
        }
      }
      return curve_.back().second;
    };
    int best_k = 0;  // curve_ holds t(b) / t(1)
    double best_tps = 0.0, best_ratio = 1.0;
    for (int k = 1; k <= c_.defaults && 1 + k <= curve_.back().first; ++k) {
      const double r = t_of(1 + k);
      if (r <= 1.0 + slack / 100.0 && k / r > best_tps) {
        best_k = k;
        best_tps = k / r;
        best_ratio = r;
      }
    }
    return {best_k, best_ratio};
  }

  // One slack, in rounds: the ultrafast stream alone (its solo ITL for this round), then 16 default
  // streams and the ultrafast stream again. On a shared machine the speed drifts by more than the
  // effects measured within a minute, so every ratio is taken against the solo run of its own
  // round, seconds apart, and the rounds are pooled: ITL p50/p99 over the round's solo p50, and
  // default tok/s over that round's ideal (the curve's shape at the round's solo speed:
  // k / (t(1 + k) / t(1) x solo)).
  // slack < 0: naive FCFS, all 17 streams default (stream 0 plays the ultrafast one).
  json Mix(double slack) {
    const bool naive = slack < 0.0;
    const ServiceTier stream_tier = naive ? ServiceTier::kDefault : ServiceTier::kUltrafast;
    auto s = MakeService(c_.defaults + 1 + (naive ? 0 : 1), naive ? 0.0 : slack,
                         ServiceTier::kUltrafast);
    const int64_t round_tokens = std::max<int64_t>(4, c_.tokens / c_.rounds);
    const auto [ideal_k, ideal_ratio] =
        naive ? std::pair<int, double>{0, 1.0} : IdealDefaults(slack);
    // Gaps over their round's solo p50: the mix's, and the solo runs' own (their tail is the
    // machine's jitter with nothing beside the stream).
    std::vector<double> normalized, solo_normalized, solo_ratios_p99, round_default_over_ideal;
    double default_tokens_total = 0.0, window_total = 0.0, ideal_tokens_total = 0.0;
    std::vector<double> solos;
    int fallbacks = 0, rejections = 0;
    ServiceTier reported = stream_tier;
    for (int r = 0; r < c_.rounds; ++r) {
      Stream alone = Submit(*s, 0, round_tokens, stream_tier);
      alone.WaitFinished();
      const std::vector<double> sg = alone.Gaps();
      const double solo = Percentile(sg, 0.5);
      solos.push_back(solo);
      solo_ratios_p99.push_back(Percentile(sg, 0.99) / solo);
      for (double g : sg) solo_normalized.push_back(g / solo);

      std::vector<Stream> defaults;
      for (int i = 0; i < c_.defaults; ++i) {
        // Long enough never to finish inside the window; cancelled after it.
        defaults.push_back(Submit(*s, i + 1, 1000000, ServiceTier::kDefault));
      }
      for (Stream& d : defaults) d.WaitTokens(1);  // every prompt read: a steady decode mix
      Stream uf = Submit(*s, 0, round_tokens, stream_tier);
      uf.WaitTokens(1);
      if (!naive && r == 0) {
        // Capacity is 1 and taken: auto must fall back, explicit ultrafast must be refused.
        auto a = s->Submit(Request(99, 1, std::nullopt));
        if (a.ok()) (*a)->Cancel();
        int64_t retry_after = 0;
        auto b = s->Submit(Request(98, 1, ServiceTier::kUltrafast), &retry_after);
        if (b.ok()) (*b)->Cancel();
        const engine::EngineStats st = s->Stats();
        fallbacks = static_cast<int>(st.ultrafast_fallbacks);
        rejections = static_cast<int>(st.ultrafast_rejections);
      }
      uf.WaitFinished();
      reported = uf.tier;
      for (Stream& d : defaults) d.channel->Cancel();
      for (Stream& d : defaults) d.WaitFinished();
      for (double g : uf.Gaps()) normalized.push_back(g / solo);
      // Default tokens while the stream decoded (after its first token: its prompt is read).
      const double start = uf.times.front(), end = uf.times.back();
      int64_t in_window = 0;
      for (const Stream& d : defaults) in_window += d.TokensIn(start, end);
      default_tokens_total += static_cast<double>(in_window);
      window_total += end - start;
      const double ideal_tps = ideal_k / (ideal_ratio * solo);
      ideal_tokens_total += ideal_tps * (end - start);
      if (ideal_tps > 0) round_default_over_ideal.push_back(in_window / (end - start) / ideal_tps);
    }
    const double p50 = Percentile(normalized, 0.5), p99 = Percentile(normalized, 0.99);
    const double solo_p99 = Percentile(solo_normalized, 0.99);
    const double default_tps = default_tokens_total / window_total;
    const double ideal_tps = ideal_tokens_total / window_total;
    const double solo_p50 = Percentile(solos, 0.5);
    json j = {{"rounds", c_.rounds},
              {"tokens_per_round", round_tokens},
              {"solo_itl_p50_per_round", solos},
              {"solo_itl_p99_over_p50_per_round", solo_ratios_p99},
              {"solo_itl_p99_over_p50", solo_p99},
              {"itl_p99_over_solo_p99", p99 / solo_p99},
              {"itl_p50_over_solo", p50},
              {"itl_p99_over_solo", p99},
              {"itl_p50", p50 * solo_p50},
              {"itl_p99", p99 * solo_p50},
              {"default_tokens_per_second", default_tps},
              {"cost_model", Coefficients()},
              {"engine_preemptions_paused", s->Stats().tiers[1].paused}};
    if (naive) {
      naive_tps_ = default_tps;
      std::printf(
          "naive FCFS (17 default): stream ITL p50 %.2fx p99 %.2fx solo, others %.1f tok/s\n", p50,
          p99, default_tps);
    } else {
      j["slack_percent"] = slack;
      j["ideal_defaults_per_step"] = ideal_k;
      j["ideal_step_over_solo"] = ideal_ratio;
      j["ideal_default_tokens_per_second"] = ideal_tps;
      j["default_over_ideal"] = ideal_tps > 0 ? default_tps / ideal_tps : 0.0;
      j["default_over_ideal_per_round"] = round_default_over_ideal;
      j["default_over_naive_fcfs"] = default_tps / naive_tps_;
      j["fallbacks"] = fallbacks;
      j["rejections"] = rejections;
      j["tier_reported"] = std::string(scheduler::ServiceTierName(reported));
      std::printf(
          "slack %5.1f%%: ultrafast ITL p50 %.3fx p99 %.3fx solo (bound %.2fx; solo's own p99 "
          "%.3fx); default %.1f tok/s, ideal %.1f (%d defaults, %.0f%%); fallbacks %d "
          "rejections %d\n",
          slack, p50, p99, 1.0 + slack / 100.0, solo_p99, default_tps, ideal_tps, ideal_k,
          ideal_tps > 0 ? 100.0 * default_tps / ideal_tps : 0.0, fallbacks, rejections);
    }
    std::fflush(stdout);
    return j;
  }

  const Config& c_;
  const model::Model& model_;
  const Tokenizer& tok_;
  std::shared_ptr<scheduler::OnlineStepCostModel> cost_ =
      std::make_shared<scheduler::OnlineStepCostModel>();
  std::vector<std::pair<int, double>> curve_;  // (batch size, step time over batch 1's)
  double solo_itl_ = 0.0;
  double naive_tps_ = 0.0;
};

template <typename T>
std::vector<T> ParseList(const std::string& s) {
  std::vector<T> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(static_cast<T>(std::stod(item)));
  }
  return out;
}

}  // namespace
}  // namespace uf

int main(int argc, char** argv) {
  uf::Config c;
  c.model_path = std::filesystem::exists("/work/synth/llama-3.2-1b-q4_0.gguf")
                     ? "/work/synth/llama-3.2-1b-q4_0.gguf"
                     : "models/demo.gguf";
  std::string slacks = "0,5,10,25,50,100", curve = "1,2,3,4,6,8,12,17", out_path;
  CLI::App app("Ultrafast tier trade-off: ultrafast ITL versus default throughput per slack");
  app.add_option("model", c.model_path, "GGUF model")->capture_default_str();
  app.add_option("--threads", c.threads)->capture_default_str();
  app.add_option("--tokens", c.tokens, "ultrafast tokens per slack (solo and mix each)")
      ->capture_default_str();
  app.add_option("--curve-rounds", c.curve_rounds, "interleaved rounds of the curve (median)")
      ->capture_default_str();
  app.add_option("--rounds", c.rounds, "solo/mix rounds per slack (--tokens split among them)")
      ->capture_default_str();
  app.add_option("--curve-tokens", c.curve_tokens, "tokens per stream for the step-time curve")
      ->capture_default_str();
  app.add_option("--defaults", c.defaults, "default streams beside the ultrafast one")
      ->capture_default_str();
  app.add_option("--prompt-tokens", c.prompt_tokens)->capture_default_str();
  app.add_option("--slacks", slacks, "percent, comma separated")->capture_default_str();
  app.add_option("--curve", curve, "batch sizes, comma separated (include 1 and defaults + 1)")
      ->capture_default_str();
  app.add_option("-o,--out", out_path, "JSON output file");
  CLI11_PARSE(app, argc, argv);
  c.slacks = uf::ParseList<double>(slacks);
  c.curve = uf::ParseList<int>(curve);
  std::sort(c.curve.begin(), c.curve.end());
  if (c.curve.empty() || c.curve.front() != 1 || c.tokens < 4 || c.curve_tokens < 4 ||
      c.curve_rounds < 1 || c.rounds < 1 || c.defaults < 1 || c.prompt_tokens < 2) {
    std::fprintf(stderr, "tiers_bench: the curve must start at 1; tokens >= 4; defaults >= 1\n");
    return 2;
  }

  auto m = uf::model::Model::Load(c.model_path);
  if (!m.ok()) {
    std::fprintf(stderr, "tiers_bench: %s\n", m.status().ToString().c_str());
    return 1;
  }
  auto t = uf::Tokenizer::FromGguf((*m)->file());
  if (!t.ok()) {
    std::fprintf(stderr, "tiers_bench: %s\n", t.status().ToString().c_str());
    return 1;
  }
  const double start = uf::NowSeconds();
  auto loadavg = [] {
    std::ifstream in("/proc/loadavg");
    std::string line;
    std::getline(in, line);
    return line;
  };
  const std::string load_before = loadavg();
  uf::Bench bench(c, **m, **t);
  nlohmann::json j = bench.Run();
  j["wall_seconds"] = uf::NowSeconds() - start;
  // Other work on the machine moves every figure: record it beside them.
  j["loadavg_before"] = load_before;
  j["loadavg_after"] = loadavg();
  const std::string text = j.dump(2);
  if (!out_path.empty()) {
    std::ofstream(out_path) << text << "\n";
  } else {
    std::printf("%s\n", text.c_str());
  }
  return 0;
}
