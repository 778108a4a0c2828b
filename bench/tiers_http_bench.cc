// The ultrafast tier measured through `ultrafast serve` as a client sees it (issue 31): streamed
// /v1/completions over HTTP, default streams already running when the ultrafast request arrives.
//
//   ultrafast serve -m MODEL -t 2 --max-seqs 24 --port 8080 &
//   tiers_http_bench --port 8080 --defaults 3,8,16 --rounds 3 --tokens 64 [-o tiers_http.json]
//   tiers_http_bench --port 8080 --race 5 --tokens 200      (the playground's race)
//
//   1. For each defaults count n, --rounds rounds of: n default streams started, --lead seconds
//      later an ultrafast request (mixed); then the same request alone (solo), side by side so
//      that the machine's drift hits both alike. Mixed goes first, so that on a fresh server the
//      first ultrafast request meets running defaults. Reported: the ultrafast ITL p50/p90 over
//      its round's solo ITL p50 (the first round apart too), its TTFT minus the solo TTFT in solo
//      steps, and the defaults' tokens/s while it ran and during the lead.
//   2. Then the curve: b default streams alone (b = 1..4 and each count), the median gap is the
//      step time t(b), median over --rounds. The ideal beside one ultrafast stream is the most
//      defaults k with t(1 + k) <= (1 + slack) t(1), giving k / t(1 + k); alone, n / t(n).
//   --race N instead: N rounds of an ultrafast request alone, then a default and an ultrafast
//   request sent at the same moment; who finishes first and the raced time over the alone time.
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"

namespace {

using json = nlohmann::json;
using uf::bench::Percentile;
using Clock = std::chrono::steady_clock;

struct Config {
  std::string host = "127.0.0.1", model = "default";
  int port = 8080;
  std::vector<int> defaults = {3, 8, 16};
  int rounds = 3;
  int64_t tokens = 64;  // ultrafast tokens per request
  double lead = 1.0;    // seconds the defaults run before the ultrafast request
  double slack = 0.05;  // the server's --ultrafast-slack, for the ideal
  double curve_seconds = 1.5;
  int race = 0;
  bool no_curve = false;
};

const Clock::time_point kStart = Clock::now();
double Now() { return std::chrono::duration<double>(Clock::now() - kStart).count(); }

// One streamed request on its own thread; token arrival times as the client reads them.
class Stream {
 public:
  Stream(const Config& c, const std::string& tier, int64_t max_tokens, int id) {
    body_ = json{
        {"model", c.model},
        {"prompt", "Request " + std::to_string(id) +
                       ": write a long story about a lighthouse keeper and the sea."},
        {"max_tokens", max_tokens},
        {"temperature", 0},
        {"ignore_eos", true},
        {"stream", true},
        {"service_tier",
         tier}}.dump();
    start_ = Now();
    thread_ = std::thread([this, c] { Run(c); });
  }
  ~Stream() {
    Stop();
    if (thread_.joinable()) thread_.join();
  }
  void Stop() { stop_ = true; }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  double start() const { return start_; }
  // Copies of what arrived so far (the thread appends under no lock: read after Join, or read
  // the count, which only grows).
  const std::vector<double>& times() const { return times_; }
  size_t count() const { return count_.load(); }
  const std::string& error() const { return error_; }
  const std::string& tier() const { return tier_; }

 private:
  void Run(const Config& c) {
    httplib::Client cli(c.host, c.port);
    cli.set_read_timeout(600, 0);
    uf::bench::SseChunks sse;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body_;
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
      sse.Feed(data, len, [&](const json& j) {
        if (j.contains("error")) error_ = j["error"].value("message", "error");
        if (j.contains("service_tier") && j["service_tier"].is_string()) tier_ = j["service_tier"];
        if (j.contains("choices") && !j["choices"].empty() &&
            !j["choices"][0].value("text", "").empty()) {
          times_.push_back(Now());
          ++count_;
        }
      });
      return !stop_.load();  // false closes the connection: the server cancels the request
    };
    auto res = cli.send(req);
    if (!res && !stop_ && error_.empty()) error_ = httplib::to_string(res.error());
  }

  std::string body_;
  double start_ = 0;
  std::vector<double> times_;
  std::atomic<size_t> count_{0};
  std::atomic<bool> stop_{false};
  std::string error_, tier_;
  std::thread thread_;
};

std::vector<double> Gaps(const std::vector<double>& t) {
  std::vector<double> g;
  for (size_t i = 1; i < t.size(); ++i) g.push_back(t[i] - t[i - 1]);
  return g;
}

void WaitCount(const Stream& s, size_t n) {
  while (s.count() < n && s.error().empty())
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

int64_t TokensIn(const std::vector<double>& t, double a, double b) {
  return std::count_if(t.begin(), t.end(), [&](double x) { return x > a && x <= b; });
}

int next_id = 1;

// b default streams alone for `seconds` after each has its first tokens: the median gap.
double StepTime(const Config& c, int b) {
  std::vector<std::unique_ptr<Stream>> s;
  for (int i = 0; i < b; ++i) s.push_back(std::make_unique<Stream>(c, "default", 4000, next_id++));
  for (auto& x : s) WaitCount(*x, 2);
  const double a = Now();
  std::this_thread::sleep_for(std::chrono::duration<double>(c.curve_seconds));
  const double e = Now();
  for (auto& x : s) x->Stop();
  std::vector<double> gaps;
  for (auto& x : s) {
    x->Join();
    const std::vector<double>& t = x->times();
    for (size_t i = 1; i < t.size(); ++i) {
      if (t[i - 1] >= a && t[i] <= e) gaps.push_back(t[i] - t[i - 1]);
    }
  }
  return Percentile(gaps, 0.5);
}

struct Ultrafast {
  double ttft = 0, itl_p50 = 0, itl_p90 = 0, start = 0, end = 0;
  std::string tier, error;
};

Ultrafast RunUltrafast(const Config& c) {
  Stream s(c, "ultrafast", c.tokens, next_id++);
  s.Join();
  Ultrafast u;
  u.start = s.start();
  u.error = s.error();
  u.tier = s.tier();
  if (s.times().empty()) return u;
  u.ttft = s.times().front() - s.start();
  u.end = s.times().back();
  const std::vector<double> gaps = Gaps(s.times());
  u.itl_p50 = Percentile(gaps, 0.5);
  u.itl_p90 = Percentile(gaps, 0.9);
  return u;
}

double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }

// Waits (up to 10 s) until the server runs and queues nothing: a cancelled stream is noticed by
// the server only when it next writes to it, and a solo request must not share the engine.
void WaitIdle(const Config& c) {
  httplib::Client cli(c.host, c.port);
  for (int i = 0; i < 1000; ++i) {
    auto res = cli.Get("/metrics");
    if (!res) return;
    auto value = [&](const std::string& name) {
      const size_t at = res->body.find("\n" + name + " ");
      return at == std::string::npos ? -1.0 : std::atof(res->body.c_str() + at + name.size() + 2);
    };
    if (value("ultrafast_running_sequences") == 0 && value("ultrafast_queue_depth") == 0) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string LoadAvg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, d;
  f >> a >> b >> d;
  return a + " " + b + " " + d;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  std::string out_path;
  CLI::App app("ultrafast tier through serve: solo and mixed rounds, defaults already running");
  app.add_option("--host", c.host)->capture_default_str();
  app.add_option("--port", c.port)->capture_default_str();
  app.add_option("--model", c.model, "model id to send")->capture_default_str();
  app.add_option("--defaults", c.defaults, "default streams running, comma separated")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--rounds", c.rounds)->capture_default_str();
  app.add_option("--tokens", c.tokens, "ultrafast tokens per request")->capture_default_str();
  app.add_option("--lead", c.lead, "seconds the defaults run first")->capture_default_str();
  app.add_option("--slack", c.slack, "the server's --ultrafast-slack")->capture_default_str();
  app.add_option("--curve-seconds", c.curve_seconds, "seconds per curve point")
      ->capture_default_str();
  app.add_flag("--no-curve", c.no_curve, "skip the step-time curve (A/B runs of the rounds)");
  app.add_option("--race", c.race,
                 "instead: this many races of a default and an ultrafast request of --tokens")
      ->capture_default_str();
  app.add_option("-o,--out", out_path, "JSON output file");
  CLI11_PARSE(app, argc, argv);

  json out;
  out["load_before"] = LoadAvg();
  if (c.race > 0) {
    // The playground's race: a default and an ultrafast request of --tokens each, sent at the
    // same moment; against an ultrafast request alone, alternating.
    std::vector<double> alone, raced;
    int first = 0;
    json races = json::array();
    Stream(c, "ultrafast", c.tokens, next_id++).Join();  // warm-up, not counted
    for (int r = 0; r < c.race; ++r) {
      WaitIdle(c);
      Stream a(c, "ultrafast", c.tokens, next_id++);
      a.Join();
      Stream d(c, "default", c.tokens, next_id++);
      Stream u(c, "ultrafast", c.tokens, next_id++);
      d.Join();
      u.Join();
      if (a.times().empty() || u.times().empty() || d.times().empty()) {
        std::fprintf(stderr, "race request failed: %s %s %s\n", a.error().c_str(),
                     u.error().c_str(), d.error().c_str());
        return 1;
      }
      const double ta = a.times().back() - a.start(), tu = u.times().back() - u.start(),
                   td = d.times().back() - d.start();
      alone.push_back(ta);
      raced.push_back(tu);
      first += tu < td;
      races.push_back(
          {{"ultrafast_alone_s", ta}, {"ultrafast_raced_s", tu}, {"default_raced_s", td}});
      std::printf("race %d: ultrafast alone %.4f s, raced %.4f s (%.3fx), default %.4f s\n", r, ta,
                  tu, tu / ta, td);
    }
    out["races"] = races;
    out["ultrafast_first"] = first;
    out["raced_over_alone_median"] = Median(raced) / Median(alone);
    std::printf(
        "ultrafast first in %d of %d; median raced %.4f s over median alone %.4f s = %.3fx\n",
        first, c.race, Median(raced), Median(alone), Median(raced) / Median(alone));
    out["load_after"] = LoadAvg();
    std::printf("load average before %s, after %s\n", out["load_before"].get<std::string>().c_str(),
                out["load_after"].get<std::string>().c_str());
    if (!out_path.empty()) std::ofstream(out_path) << out.dump(2) << "\n";
    return 0;
  }
  // The mixed rounds first: the server's first ultrafast request must meet running defaults
  // before anything else taught its cost model a solo step.
  struct Round {
    double p50 = 0, p90 = 0, ttft_steps = 0, default_tok_s = 0, lead_tok_s = 0;
  };
  std::vector<std::pair<int, std::vector<Round>>> results;
  json rounds_json = json::array();
  for (int n : c.defaults) {
    std::vector<Round> rs;
    for (int r = 0; r < c.rounds; ++r) {
      // Mixed, then solo: the very first ultrafast request meets running defaults.
      std::vector<std::unique_ptr<Stream>> d;
      for (int i = 0; i < n; ++i)
        d.push_back(std::make_unique<Stream>(c, "default", 4000, next_id++));
      for (auto& x : d) WaitCount(*x, 1);
      const double lead_start = Now();
      std::this_thread::sleep_for(std::chrono::duration<double>(c.lead));
      const Ultrafast mix = RunUltrafast(c);
      for (auto& x : d) x->Stop();
      int64_t beside = 0, lead = 0;
      for (auto& x : d) {
        x->Join();
        beside += TokensIn(x->times(), mix.start, mix.end);
        lead += TokensIn(x->times(), lead_start, mix.start);
        if (!x->error().empty()) std::fprintf(stderr, "default: %s\n", x->error().c_str());
      }
      WaitIdle(c);
      const Ultrafast solo = RunUltrafast(c);
      if (!mix.error.empty() || !solo.error.empty() || solo.itl_p50 <= 0) {
        std::fprintf(stderr, "ultrafast request failed: %s %s\n", mix.error.c_str(),
                     solo.error.c_str());
        return 1;
      }
      Round x;
      x.p50 = mix.itl_p50 / solo.itl_p50;
      x.p90 = mix.itl_p90 / solo.itl_p50;
      x.ttft_steps = (mix.ttft - solo.ttft) / solo.itl_p50;
      x.default_tok_s = static_cast<double>(beside) / std::max(1e-9, mix.end - mix.start);
      x.lead_tok_s = static_cast<double>(lead) / std::max(1e-9, mix.start - lead_start);
      rs.push_back(x);
      rounds_json.push_back({{"defaults", n},
                             {"round", r},
                             {"solo_itl_p50", solo.itl_p50},
                             {"solo_itl_p90", solo.itl_p90},
                             {"solo_ttft", solo.ttft},
                             {"mix_itl_p50", mix.itl_p50},
                             {"mix_itl_p90", mix.itl_p90},
                             {"mix_ttft", mix.ttft},
                             {"mix_tier", mix.tier},
                             {"itl_p50_over_solo", x.p50},
                             {"itl_p90_over_solo", x.p90},
                             {"ttft_over_solo_in_steps", x.ttft_steps},
                             {"default_tok_s_beside", x.default_tok_s},
                             {"default_tok_s_alone", x.lead_tok_s}});
      std::printf(
          "%2d defaults, round %d: ultrafast ITL p50 %.4f s (solo %.4f) = %.3fx, p90 %.3fx, "
          "TTFT %+.2f steps; defaults %.1f tok/s beside it, %.1f before\n",
          n, r, mix.itl_p50, solo.itl_p50, x.p50, x.p90, x.ttft_steps, x.default_tok_s,
          x.lead_tok_s);
      std::fflush(stdout);
    }
    results.emplace_back(n, rs);
  }
  out["rounds"] = rounds_json;

  // The curve, after the rounds (it teaches the server's cost model nothing about ultrafast).
  std::vector<int> sizes = {1, 2, 3, 4};
  for (int n : c.defaults) {
    if (std::find(sizes.begin(), sizes.end(), n) == sizes.end()) sizes.push_back(n);
  }
  std::vector<std::vector<double>> t(sizes.size());
  for (int r = 0; r < c.rounds && !c.no_curve; ++r) {  // --no-curve: every t(b) reads 0
    for (size_t i = 0; i < sizes.size(); ++i) t[i].push_back(StepTime(c, sizes[i]));
  }
  json curve = json::object();
  std::vector<double> step(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    step[i] = Median(t[i]);
    curve[std::to_string(sizes[i])] = step[i];
  }
  out["curve_step_seconds"] = curve;
  // Ideal defaults beside one stream at this slack: the most k (of the measured 2..4) with
  // t(1 + k) <= (1 + slack) t(1).
  int k = 0;
  for (int b = 2; b <= 4 && !c.no_curve; ++b) {
    if (step[static_cast<size_t>(b - 1)] <= (1 + c.slack) * step[0]) k = b - 1;
  }
  const double ideal = k > 0 ? k / step[static_cast<size_t>(k)] : 0.0;
  out["ideal_default_tok_s_beside"] = ideal;
  std::printf("curve (median of %d):", c.rounds);
  for (size_t i = 0; i < sizes.size(); ++i) std::printf(" t(%d) %.4f s", sizes[i], step[i]);
  std::printf("\nideal defaults beside ultrafast at slack %.2f: k=%d, %.1f tok/s\n", c.slack, k,
              ideal);

  json summary = json::array();
  std::printf(
      "\n| defaults | ITL p50 / solo | ITL p90 / solo | TTFT - solo (steps) | default tok/s "
      "beside (ideal) | default tok/s alone (curve) |\n|---|---|---|---|---|---|\n");
  for (size_t j = 0; j < results.size(); ++j) {
    const auto& [n, rs] = results[j];
    std::vector<double> p50, p90, ttft, dts, lts;
    for (const Round& x : rs) {
      p50.push_back(x.p50);
      p90.push_back(x.p90);
      ttft.push_back(x.ttft_steps);
      dts.push_back(x.default_tok_s);
      lts.push_back(x.lead_tok_s);
    }
    const auto it = std::find(sizes.begin(), sizes.end(), n);
    const double whole = n / step[static_cast<size_t>(it - sizes.begin())];
    summary.push_back({{"defaults", n},
                       {"itl_p50_over_solo", Median(p50)},
                       {"itl_p90_over_solo", Median(p90)},
                       {"ttft_over_solo_steps", Median(ttft)},
                       {"default_tok_s_beside", Median(dts)},
                       {"default_tok_s_alone", Median(lts)},
                       {"curve_tok_s_alone", whole},
                       {"first_round_itl_p50_over_solo", rs.front().p50},
                       {"first_round_itl_p90_over_solo", rs.front().p90}});
    std::printf("| %d | %.3f (first %.3f) | %.3f | %+.2f | %.1f (%.1f) | %.1f (%.1f) |\n", n,
                Median(p50), rs.front().p50, Median(p90), Median(ttft), Median(dts), ideal,
                Median(lts), whole);
  }
  out["summary"] = summary;
  out["load_after"] = LoadAvg();
  std::printf("load average before %s, after %s\n", out["load_before"].get<std::string>().c_str(),
              out["load_after"].get<std::string>().c_str());
  if (!out_path.empty()) std::ofstream(out_path) << out.dump(2) << "\n";
  return 0;
}
