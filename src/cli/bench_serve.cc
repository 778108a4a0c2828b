// `ultrafast bench --serve`: one stream through the real serving path against the engine alone.
//
// The engine alone is what `run` does (engine::Generate on its own decoder and pool). The serving
// path is measured twice: the serving engine on its own (engine::Service, a request submitted and
// its events read in-process as a stream's HTTP thread reads them: scheduler, batch building,
// per-request sampler, detokenizer, stop matcher, event channel) and through HTTP (an in-process
// `serve` on a loopback port, requests from an HTTP client thread: JSON, SSE framing, sockets),
// streaming and not, at temperature 0 and 1 (the OpenAI default, with top_p 1 and no top-k: the
// whole vocabulary is sampled every token). Modes alternate within each repetition so that all see
// the same machine; medians are printed with the ratio of each mode's decode rate to the engine's,
// and the time to first token above the engine's prefill time.
//
// Every mode feeds the same prompt of token ids with the prefix cache off (a repeated prompt
// would otherwise skip its prefill on the serving side) and generates exactly n tokens
// (end-of-generation tokens are banned, as with ignore_eos).
#include "cli/bench_serve.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/thread_pool.h"
#include "cli/bench_device.h"
#include "engine/generate.h"
#include "engine/host_only_forward.h"
#include "engine/kv_cache.h"
#include "engine/seq_sampler.h"
#include "engine/service.h"
#include "kernels/matmul.h"
#include "model/decoder.h"
#include "server/chat_prompt.h"
#include "server/http_server.h"
#include "server/metrics.h"

namespace uf::cli {
namespace {

using json = nlohmann::json;

// One request's timings, in seconds from its start.
struct Sample {
  double first = 0;  // first token (streaming modes and the engine)
  double end = 0;    // last token / response complete
  int64_t n = 0;     // tokens generated
  // Decode rate after the first token, as `run` reports it.
  double decode_tok_s() const { return end > first && n > 1 ? (n - 1) / (end - first) : 0.0; }
};

class Bench {
 public:
  Bench(const ServeBenchOptions& o, const LoadedModel& loaded)
      : o_(o), model_(*loaded.model), tokenizer_(*loaded.tokenizer) {}

  Status Setup() {
    prompt_ = BenchPrompt(o_.n_prompt, model_.config().n_vocab);
    const int64_t ctx = o_.n_prompt + o_.n_gen + 16;
    threads_ = ResolveThreads(o_.threads);

    pool_ = std::make_unique<ThreadPool>(threads_);
    if (o_.host_only) {
      UF_ASSIGN_OR_RETURN(forward_, MakeHostOnlyForward(model_, ctx, 512, 1));
    } else {
      UF_ASSIGN_OR_RETURN(
          forward_, MakeBenchForward(model_, o_.device, ctx, o_.kv_type, 512, 1, pool_.get()));
    }

    engine::ServiceOptions so;
    so.ctx = ctx;
    so.max_seqs = 1;
    so.prefix_cache = false;
    so.kv_type = o_.kv_type;
    so.n_threads = threads_;
    if (o_.host_only) {
      const int64_t n_vocab = model_.config().n_vocab;
      so.make_forward = [n_vocab](engine::KvCache*, const model::DecoderOptions& d)
          -> StatusOr<std::unique_ptr<model::BatchForward>> {
        return std::make_unique<engine::HostOnlyForward>(n_vocab, d.max_outputs);
      };
    } else if (o_.device.vulkan) {
      so.make_forward = GpuForwardFactory(model_, o_.device, "bench --serve");
    }
    UF_ASSIGN_OR_RETURN(service_, engine::Service::Create(model_, tokenizer_, so));
    server::ServerOptions ho;
    ho.port = 0;
    ho.model_id = "bench";
    std::string note;
    UF_ASSIGN_OR_RETURN(server::ChatRenderer render,
                        server::MakeChatRenderer(model_.file(), tokenizer_, &note));
    keys_ = std::make_unique<server::KeyStore>();
    http_ = std::make_unique<server::HttpServer>(ho, service_.get(), std::move(render), keys_.get(),
                                                 &metrics_);
    UF_RETURN_IF_ERROR(http_->Bind());
    serve_thread_ = std::thread([this] { http_->Serve(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", http_->port());
    client_->set_read_timeout(600, 0);
    client_->set_keep_alive(true);
    client_->set_tcp_nodelay(true);
    return OkStatus();
  }

  ~Bench() {
    if (service_) service_->Shutdown();
    if (http_) http_->Stop();
    if (serve_thread_.joinable()) serve_thread_.join();
  }

  StatusOr<Sample> Engine(float temperature) {
    engine::GenerateOptions g;
    g.max_tokens = o_.n_gen;
    g.sampling = Sampling(temperature);
    g.ignore_eos = true;
    engine::GenerateStats st;
    UF_RETURN_IF_ERROR(engine::Generate(
        forward_->target, tokenizer_, prompt_, g, [](std::string_view) { return true; }, &st));
    return Sample{st.first_token_seconds, st.first_token_seconds + st.decode_seconds,
                  st.n_generated};
  }

  StatusOr<Sample> Service(float temperature) {
    engine::GenerationRequest r;
    r.prompt = prompt_;
    r.max_tokens = o_.n_gen;
    r.ignore_eos = true;
    r.sampling.temperature = temperature;
    r.sampling.seed = 1;
    const double t0 = NowSeconds();
    UF_ASSIGN_OR_RETURN(std::shared_ptr<engine::RequestChannel> channel,
                        service_->Submit(std::move(r)));
    // As `serve` sets it for a stream (server::ServerOptions::stream_wake_interval_s).
    channel->SetMinWakeInterval(server::ServerOptions().stream_wake_interval_s);
    Sample s;
    std::vector<engine::GenerationEvent> events;
    for (;;) {
      if (!channel->Pop(&events, 60.0)) return UnavailableError("bench: no event in 60 s");
      for (const engine::GenerationEvent& ev : events) {
        if (ev.n_tokens > 0 && s.n == 0) s.first = ev.time - t0;
        s.n += ev.n_tokens;
        if (ev.finish == engine::FinishReason::kError) return ev.error;
        if (ev.finish != engine::FinishReason::kNone) {
          s.end = ev.time - t0;
          return s;
        }
      }
    }
  }

  StatusOr<Sample> Http(float temperature, bool stream) {
    json body = {{"model", "bench"},       {"prompt", prompt_},
                 {"max_tokens", o_.n_gen}, {"temperature", temperature},
                 {"ignore_eos", true},     {"seed", 1},
                 {"stream", stream}};
    if (stream) body["stream_options"] = {{"include_usage", true}};
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    Sample s;
    std::string pending, whole;
    const auto t0 = std::chrono::steady_clock::now();
    auto since = [&t0] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
      if (!stream) {
        whole.append(data, len);
        return true;
      }
      pending.append(data, len);
      for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
        const std::string ev = pending.substr(0, end);
        pending.erase(0, end + 2);
        if (ev.rfind("data: ", 0) != 0 || ev == "data: [DONE]") continue;
        const json j = json::parse(ev.substr(6), nullptr, false);
        if (j.is_discarded()) continue;
        if (j.contains("usage") && j["usage"].is_object()) {
          s.n = j["usage"].value("completion_tokens", int64_t{0});
        }
        if (j.contains("choices") && !j["choices"].empty()) {
          if (s.first == 0) s.first = since();
          s.end = since();
        }
      }
      return true;
    };
    auto res = client_->send(req);
    if (!res) return UnavailableError("bench: HTTP transport error");
    if (res->status != 200) {
      return InternalError("bench: HTTP " + std::to_string(res->status) + ": " + whole);
    }
    if (!stream) {
      s.end = since();
      const json j = json::parse(whole, nullptr, false);
      if (j.is_discarded()) return InternalError("bench: unparsable response");
      s.n = j["usage"].value("completion_tokens", int64_t{0});
    }
    return s;
  }

  int threads() const { return threads_; }
  std::string device_line() const { return BenchDeviceLine(*forward_); }

 private:
  // Exactly what the server makes of a request that sets only `temperature` (RequestSampling's
  // defaults through the serving engine's own mapping), so both sides run the same chain.
  sampling::SamplingParams Sampling(float temperature) const {
    engine::RequestSampling r;
    r.temperature = temperature;
    r.seed = 1;
    return engine::ToSamplingParams(r, o_.n_gen);
  }

  const ServeBenchOptions& o_;
  const model::Model& model_;
  const Tokenizer& tokenizer_;
  std::vector<int32_t> prompt_;
  int threads_ = 1;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<BenchForward> forward_;  // the engine alone's (the service has its own)
  std::unique_ptr<engine::Service> service_;
  std::unique_ptr<server::KeyStore> keys_;
  server::Metrics metrics_;
  std::unique_ptr<server::HttpServer> http_;
  std::thread serve_thread_;
  std::unique_ptr<httplib::Client> client_;
};

}  // namespace

int ServeBench(const ServeBenchOptions& o) {
  auto loaded = LoadModel(o.model);
  if (!loaded.ok()) Fail("bench --serve", loaded.status());
  Bench bench(o, *loaded);
  if (Status s = bench.Setup(); !s.ok()) Fail("bench --serve", s);

  const char* kModes[] = {"engine", "service", "http_stream", "http"};
  // [mode][temperature] -> samples
  std::map<std::string, std::map<int, std::vector<Sample>>> runs;
  for (int rep = -1; rep < o.reps; ++rep) {  // rep -1 warms caches and the cost model
    for (int t : {0, 1}) {
      for (const char* mode : kModes) {
        const std::string m = mode;
        StatusOr<Sample> s = m == "engine" ? bench.Engine(static_cast<float>(t))
                             : m == "service"
                                 ? bench.Service(static_cast<float>(t))
                                 : bench.Http(static_cast<float>(t), m == "http_stream");
        if (!s.ok()) Fail("bench --serve", s.status());
        if (rep >= 0) runs[m][t].push_back(*s);
        // Let the other pool's spinning workers go back to sleep before the next mode.
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }

  json out = {{"model", o.model},
              {"threads", bench.threads()},
              {"isa", kernels::IsaName(kernels::ActiveIsa())},
              {"device", bench.device_line()},
              {"prompt_tokens", o.n_prompt},
              {"gen_tokens", o.n_gen},
              {"reps", o.reps},
              {"host_only", o.host_only}};
  for (int t : {0, 1}) {
    const std::vector<Sample>& eng = runs["engine"][t];
    std::vector<double> eng_rate, eng_first, eng_total;
    for (const Sample& s : eng) {
      eng_rate.push_back(s.decode_tok_s());
      eng_first.push_back(s.first);
      eng_total.push_back(s.end);
    }
    for (const char* mode : kModes) {
      const std::vector<Sample>& v = runs[mode][t];
      std::vector<double> rate, first, total, rate_ratio, total_ratio, first_extra;
      for (size_t i = 0; i < v.size(); ++i) {
        rate.push_back(v[i].decode_tok_s());
        first.push_back(v[i].first);
        total.push_back(v[i].end);
        // Ratios within a repetition (side by side), then their median.
        if (eng_rate[i] > 0) rate_ratio.push_back(v[i].decode_tok_s() / eng_rate[i]);
        total_ratio.push_back(eng_total[i] / v[i].end);
        first_extra.push_back(v[i].first - eng_first[i]);
      }
      const bool streams = std::string(mode) != "http";
      json j = {{"total_ms", Median(total) * 1e3},
                {"total_speed_vs_engine", Median(total_ratio)},
                // The whole request's time a token: streams send their events coalesced
                // (ServerOptions::stream_wake_interval_s), so at host-only rates the time between
                // the first and the last event says little.
                {"us_per_token", Median(total) * 1e6 / std::max<int64_t>(o.n_gen, 1)}};
      if (streams) {
        j["decode_tok_s"] = Median(rate);
        j["decode_vs_engine"] = Median(rate_ratio);
        j["first_token_ms"] = Median(first) * 1e3;
        j["first_token_extra_ms"] = Median(first_extra) * 1e3;
      }
      out["temperature_" + std::to_string(t)][mode] = j;
    }
  }
  if (o.json) {
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("model      %s, %d threads, %s kernels\n", o.model.c_str(), bench.threads(),
              out["isa"].get<std::string>().c_str());
  std::printf("forward    %s%s\n", bench.device_line().c_str(),
              o.device.vulkan || o.host_only
                  ? " (every path; sampling, detokenizing and HTTP on the host)"
                  : "");
  std::printf("request    %lld prompt tokens, %lld generated, median of %d alternating reps\n\n",
              static_cast<long long>(o.n_prompt), static_cast<long long>(o.n_gen), o.reps);
  std::printf("%-5s %-12s %13s %10s %12s %13s %10s %10s\n", "temp", "path", "decode tok/s",
              "vs engine", "first tok ms", "vs engine ms", "total ms", "vs engine");
  for (int t : {0, 1}) {
    for (const char* mode : kModes) {
      const json& j = out["temperature_" + std::to_string(t)][mode];
      if (j.contains("decode_tok_s")) {
        std::printf("%-5d %-12s %13.1f %9.3fx %12.2f %+13.2f %10.1f %9.3fx\n", t, mode,
                    j["decode_tok_s"].get<double>(), j["decode_vs_engine"].get<double>(),
                    j["first_token_ms"].get<double>(), j["first_token_extra_ms"].get<double>(),
                    j["total_ms"].get<double>(), j["total_speed_vs_engine"].get<double>());
      } else {
        std::printf("%-5d %-12s %13s %10s %12s %13s %10.1f %9.3fx\n", t, mode, "-", "-", "-", "-",
                    j["total_ms"].get<double>(), j["total_speed_vs_engine"].get<double>());
      }
    }
  }
  std::printf(
      "\nengine: what `run` does; service: the serving engine in-process; http_stream / http: "
      "through a loopback `serve`, SSE and one JSON body.\n");
  if (o.host_only) {
    // What each path costs a token on the host alone, and what that leaves of a device step's
    // pace: at 1,300 tok/s (a 769 us step, issue 28's 1B F16 target on an H200).
    std::printf(
        "host-only: the host's own cost per generated token (no model computed; the request's "
        "total time over its tokens, prefill included):\n");
    for (int t : {0, 1}) {
      for (const char* mode : kModes) {
        const double us =
            out["temperature_" + std::to_string(t)][mode]["us_per_token"].get<double>();
        std::printf(
            "  temperature %d, %-12s %7.1f us a token: a 769 us device step would run "
            "at %.0f tok/s (%.1f%% below 1,300)\n",
            t, mode, us, 1e6 / (769.0 + us), 100.0 * us / (769.0 + us));
      }
    }
  }
  return 0;
}

}  // namespace uf::cli
