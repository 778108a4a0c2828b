// Load generator for `ultrafast serve` (or any OpenAI-compatible server): streams
// /v1/completions requests from N concurrent clients with prompt and output lengths drawn from
// uniform ranges, and reports time to first token, inter-token latency (p50/p90/p99), request
// latency, throughput and goodput (requests per second meeting the TTFT and ITL objectives) as
// JSON.
//
// Prompts are token-id arrays (random ids in [100, 1100), valid in any vocabulary this engine
// loads) so their lengths are exact; `ignore_eos` makes output lengths exact too. With
// --prefix-tokens N every prompt starts with the same N tokens (prefix-cache measurements).
//
//   serve_bench --port 8080 --model tiny --concurrency 8 --requests 32
//       --prompt-len 64:256 --output-len 128 [--prefix-tokens 1000] [-o out.json]
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"

namespace {

using uf::bench::Percentile;

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Range {
  int64_t lo = 0, hi = 0;
};

Range ParseRange(const std::string& s) {
  Range r;
  const size_t colon = s.find(':');
  r.lo = std::stoll(s.substr(0, colon));
  r.hi = colon == std::string::npos ? r.lo : std::stoll(s.substr(colon + 1));
  if (r.hi < r.lo) std::swap(r.lo, r.hi);
  return r;
}

struct Result {
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;                         // from the usage chunk
  double start = 0, first = -1, last = -1, end = 0;  // seconds since the run began
  std::vector<double> gaps;                          // between content chunks
  bool ok = false;
  std::string error;
};

json Stats(std::vector<double> v) {
  if (v.empty()) return json{{"n", 0}};
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  return json{{"n", v.size()},
              {"mean", sum / static_cast<double>(v.size())},
              {"p50", Percentile(v, 0.5)},
              {"p90", Percentile(v, 0.9)},
              {"p99", Percentile(v, 0.99)},
              {"min", v.front()},
              {"max", v.back()}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("OpenAI-compatible server load generator");
  std::string host = "127.0.0.1", model, api_key, out_path, prompt_len = "128", output_len = "128";
  int port = 8080, concurrency = 8, requests = 32, prefix_tokens = 0;
  uint64_t seed = 1;
  double slo_ttft = 2.0, slo_itl = 0.25;
  app.add_option("--host", host)->capture_default_str();
  app.add_option("--port", port)->capture_default_str();
  app.add_option("--model", model, "model id to send")->required();
  app.add_option("--api-key", api_key);
  app.add_option("-c,--concurrency", concurrency, "clients sending in parallel")
      ->capture_default_str();
  app.add_option("-n,--requests", requests, "requests in total")->capture_default_str();
  app.add_option("--prompt-len", prompt_len, "prompt tokens, N or MIN:MAX (uniform)")
      ->capture_default_str();
  app.add_option("--output-len", output_len, "output tokens, N or MIN:MAX (uniform)")
      ->capture_default_str();
  app.add_option("--prefix-tokens", prefix_tokens, "tokens shared by every prompt's start")
      ->capture_default_str();
  app.add_option("--slo-ttft", slo_ttft, "goodput: max time to first token (s)")
      ->capture_default_str();
  app.add_option("--slo-itl", slo_itl, "goodput: max mean inter-token latency (s)")
      ->capture_default_str();
  app.add_option("--seed", seed)->capture_default_str();
  app.add_option("-o,--output", out_path, "write the JSON here (default stdout)");
  CLI11_PARSE(app, argc, argv);

  const Range pl = ParseRange(prompt_len), ol = ParseRange(output_len);
  std::mt19937_64 rng(seed);
  auto uniform = [&](Range r) { return std::uniform_int_distribution<int64_t>(r.lo, r.hi)(rng); };
  std::uniform_int_distribution<int> token(100, 1099);
  std::vector<int> prefix(static_cast<size_t>(prefix_tokens));
  for (int& t : prefix) t = token(rng);
  std::vector<json> bodies;
  std::vector<Result> results(static_cast<size_t>(requests));
  for (int i = 0; i < requests; ++i) {
    std::vector<int> prompt = prefix;
    const int64_t n = std::max<int64_t>(1, uniform(pl));
    while (static_cast<int64_t>(prompt.size()) < prefix_tokens + n) prompt.push_back(token(rng));
    results[static_cast<size_t>(i)].prompt_tokens = static_cast<int64_t>(prompt.size());
    bodies.push_back({{"model", model},
                      {"prompt", prompt},
                      {"max_tokens", std::max<int64_t>(1, uniform(ol))},
                      {"temperature", 0},
                      {"ignore_eos", true},
                      {"stream", true},
                      {"stream_options", {{"include_usage", true}}}});
  }

  const auto t0 = Clock::now();
  auto since = [&t0] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  std::atomic<int> next{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < concurrency; ++w) {
    workers.emplace_back([&] {
      httplib::Client cli(host, port);
      cli.set_read_timeout(600, 0);
      cli.set_keep_alive(true);
      for (int i; (i = next.fetch_add(1)) < requests;) {
        Result& r = results[static_cast<size_t>(i)];
        uf::bench::SseChunks sse;
        httplib::Request req;
        req.method = "POST";
        req.path = "/v1/completions";
        req.body = bodies[static_cast<size_t>(i)].dump();
        req.set_header("Content-Type", "application/json");
        if (!api_key.empty()) req.set_header("Authorization", "Bearer " + api_key);
        req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
          sse.Feed(data, len, [&](const json& j) {
            if (j.contains("error")) {
              r.error = j["error"].value("message", "error");
              return;
            }
            if (j.contains("usage") && j["usage"].is_object()) {
              r.output_tokens = j["usage"].value("completion_tokens", 0);
            }
            if (j.contains("choices") && !j["choices"].empty() &&
                !j["choices"][0].value("text", "").empty()) {
              const double now = since();
              if (r.first < 0) {
                r.first = now;
              } else {
                r.gaps.push_back(now - r.last);
              }
              r.last = now;
            }
          });
          return true;
        };
        r.start = since();
        auto res = cli.send(req);
        r.end = since();
        if (!res) {
          r.error = "transport error " + std::to_string(static_cast<int>(res.error()));
        } else if (res->status != 200) {
          r.error = "HTTP " + std::to_string(res->status) + ": " + res->body;
        } else if (r.error.empty() && r.first >= 0) {
          r.ok = true;
        }
      }
    });
  }
  for (std::thread& t : workers) t.join();
  const double wall = since();

  std::vector<double> ttft, itl, e2e, per_request_itl;
  int64_t out_tokens = 0, decode_tokens = 0, ok = 0, good = 0;
  double decode_begin = 1e300, decode_end = 0;
  json per_request = json::array();
  json errors = json::array();
  for (const Result& r : results) {
    if (!r.ok) {
      if (errors.size() < 5) errors.push_back(r.error);
      continue;
    }
    ++ok;
    ttft.push_back(r.first - r.start);
    e2e.push_back(r.end - r.start);
    itl.insert(itl.end(), r.gaps.begin(), r.gaps.end());
    double mean_itl = 0;
    for (double g : r.gaps) mean_itl += g;
    if (!r.gaps.empty()) mean_itl /= static_cast<double>(r.gaps.size());
    out_tokens += r.output_tokens;
    decode_tokens += std::max<int64_t>(0, r.output_tokens - 1);
    decode_begin = std::min(decode_begin, r.first);
    decode_end = std::max(decode_end, r.last);
    if (r.first - r.start <= slo_ttft && mean_itl <= slo_itl) ++good;
    per_request.push_back({{"prompt_tokens", r.prompt_tokens},
                           {"output_tokens", r.output_tokens},
                           {"ttft_s", r.first - r.start},
                           {"mean_itl_s", mean_itl},
                           {"latency_s", r.end - r.start}});
  }
  json report = {
      {"config",
       {{"concurrency", concurrency},
        {"requests", requests},
        {"prompt_len", prompt_len},
        {"output_len", output_len},
        {"prefix_tokens", prefix_tokens},
        {"slo_ttft_s", slo_ttft},
        {"slo_itl_s", slo_itl}}},
      {"completed", ok},
      {"failed", requests - ok},
      {"errors", errors},
      {"duration_s", wall},
      {"ttft_s", Stats(ttft)},
      {"itl_s", Stats(itl)},
      {"latency_s", Stats(e2e)},
      {"output_tokens", out_tokens},
      {"output_tok_s", wall > 0 ? static_cast<double>(out_tokens) / wall : 0},
      // Tokens after each request's first, over the span in which any request was decoding.
      {"decode_tok_s", decode_end > decode_begin
                           ? static_cast<double>(decode_tokens) / (decode_end - decode_begin)
                           : 0},
      {"request_s", wall > 0 ? static_cast<double>(ok) / wall : 0},
      {"goodput_request_s", wall > 0 ? static_cast<double>(good) / wall : 0},
      {"per_request", per_request}};
  const std::string text = report.dump(2) + "\n";
  if (out_path.empty()) {
    std::fputs(text.c_str(), stdout);
  } else {
    std::ofstream(out_path) << text;
  }
  return ok == requests ? 0 : 1;
}
