#include "cli/serve.h"

#include <pthread.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/log.h"
#include "cli/bench_device.h"
#include "cli/common.h"
#include "engine/service.h"
#include "gpu/backend.h"
#include "model/model.h"
#include "scheduler/tiers.h"
#include "server/auth.h"
#include "server/chat_prompt.h"
#include "server/http_server.h"
#include "server/ledger.h"
#include "server/metering.h"
#include "server/metrics.h"
#include "tokenizer/tokenizer.h"

namespace uf::cli {
namespace {

int Report(std::string_view command, const Status& s) {
  std::fprintf(stderr, "ultrafast %.*s: %s\n", static_cast<int>(command.size()), command.data(),
               s.ToString().c_str());
  return 1;
}

StatusOr<std::string> ReadFileText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int RunServe(const ServeArgs& args) {
  if (!args.api_key.empty() && !args.keys_db.empty()) {
    return Report("serve", InvalidArgumentError("use --api-key or --keys-db, not both"));
  }
  // Signals go to one thread that waits for them; every thread started from here inherits the
  // mask, so SIGINT/SIGTERM never interrupt a worker.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto loaded = LoadModel(args.model);
  if (!loaded.ok()) return Report("serve", loaded.status());
  const model::Model& model = *loaded->model;
  const Tokenizer& tokenizer = *loaded->tokenizer;

  if (!args.metering_config.empty() && args.keys_db.empty()) {
    return Report("serve", InvalidArgumentError("--metering-config needs --keys-db (the ledger)"));
  }
  std::unique_ptr<server::KeyStore> keys = std::make_unique<server::KeyStore>();
  std::unique_ptr<server::UsageLedger> ledger;
  std::unique_ptr<server::Meter> meter;
  server::WallClock wall_clock;
  if (!args.api_key.empty()) {
    keys = server::KeyStore::WithKey(args.api_key);
  } else if (!args.keys_db.empty()) {
    // Read-write: the server records usage in the same file, and opening it so also adds the
    // plan column to databases made before metering.
    auto db = server::KeyStore::OpenDb(args.keys_db, /*create=*/false, /*read_only=*/false);
    if (!db.ok()) return Report("serve", db.status());
    keys = std::move(db).value();
    auto config = args.metering_config.empty()
                      ? StatusOr<server::MeteringConfig>(server::MeteringConfig::Defaults())
                      : server::MeteringConfig::FromFile(args.metering_config);
    if (!config.ok()) return Report("serve", config.status());
    auto opened = server::UsageLedger::Open(args.keys_db);
    if (!opened.ok()) return Report("serve", opened.status());
    ledger = std::move(opened).value();
    if (auto listed = keys->ListKeys(); listed.ok()) {
      for (const server::ApiKeyInfo& k : *listed) {
        if (!k.revoked && config->FindPlan(k.plan) == nullptr) {
          UF_LOG(WARNING) << "serve: key '" << k.name << "' has plan '" << k.plan
                          << "', which the metering config lacks: its requests get 403";
        }
      }
    }
    meter = std::make_unique<server::Meter>(std::move(config).value(), ledger.get(), &wall_clock);
  }

  engine::ServiceOptions so;
  const int64_t n_ctx_train = model.config().n_ctx_train;
  so.ctx = args.ctx > 0 ? args.ctx : std::min<int64_t>(4096, n_ctx_train > 0 ? n_ctx_train : 4096);
  so.max_seqs = args.max_seqs;
  so.max_queue = args.max_queue;
  so.prefill_chunk = args.prefill_chunk;
  so.kv_tokens = args.kv_tokens;
  so.block_size = args.block_size;
  so.prefix_cache = !args.no_prefix_cache;
  so.kv_type = KvTypeOrDie("serve", args.kv_type);
  so.ultrafast_speculation = !args.no_ultrafast_spec;
  so.spec_k = args.spec_k;
  so.n_threads = ResolveThreads(args.threads);
  auto auto_tier = scheduler::ParseServiceTierName(args.default_tier);
  if (!auto_tier.ok()) return Report("serve --default-tier", auto_tier.status());
  so.auto_tier = *auto_tier;
  so.scheduler.ultrafast_slack = args.ultrafast_slack;
  so.scheduler.flex_max_wait_seconds = args.flex_max_wait;
  so.admission.ultrafast_capacity = args.ultrafast_capacity;
  if (args.spec_fixed_cost) so.spec_cost = engine::SpecCostModel{};
  if (args.pace_ms > 0) {
    const auto pace = std::chrono::milliseconds(args.pace_ms);
    so.step_hook = [pace] { std::this_thread::sleep_for(pace); };
  }
  const gpu::DeviceSpec device = DeviceOrDie("serve", args.device);
  if (device.vulkan) {
    // The engine steps a gpu::GpuForward: the whole batch on the device, K/V in device memory
    // paged by the engine's block tables; everything above the step is the CPU path's.
    // (f32 K/V is refused by GpuForward::Create: the device cache is f16 or q8_0.)
    so.make_forward = GpuForwardFactory(model, device, "serve");
    so.chain_steps = gpu::ChainSteps();  // UF_GPU_CHAIN=off: A/B runs
  }
  auto service = engine::Service::Create(model, tokenizer, so);
  if (!service.ok()) return Report("serve", service.status());

  server::ServerOptions ho;
  ho.host = args.host;
  ho.port = args.port;
  ho.model_id = args.model_id;
  if (ho.model_id.empty()) ho.model_id = std::filesystem::path(args.model).stem().string();
  ho.max_tokens_limit = args.max_tokens_limit;
  ho.max_body_bytes = args.max_body_bytes;
  std::string template_source;  // "" = the model's
  if (!args.chat_template_file.empty()) {
    auto text = ReadFileText(args.chat_template_file);
    if (!text.ok()) return Report("serve --chat-template-file", text.status());
    template_source = std::move(text).value();
  }
  const std::string effective_template =
      template_source.empty() ? server::ChatTemplateSourceOf(model.file()) : template_source;
  ho.tool_format = server::DetectToolCallFormat(effective_template);
  ho.reasoning_format = server::DetectReasoningFormat(effective_template);
  ho.history_dir = args.history_dir;
  ho.response_store.max_responses = args.responses_store;
  ho.response_store.ttl_s = args.responses_ttl_s;
  std::string template_note;
  auto render = server::MakeChatRenderer(model.file(), tokenizer, &template_note, template_source);
  if (!render.ok()) return Report("serve", render.status());
  UF_LOG(INFO) << "serve: chat template: " << template_note << "; reasoning as "
               << (ho.reasoning_format == server::ReasoningFormat::kHarmony
                       ? "harmony channels"
                       : "<think> blocks");
  server::Metrics metrics;
  server::HttpServer http(ho, service->get(), std::move(render).value(), keys.get(), &metrics);
  if (meter) http.SetMeter(meter.get());
  if (Status s = http.Bind(); !s.ok()) return Report("serve", s);
  UF_LOG(INFO) << "serving " << ho.model_id << " on http://" << ho.host << ":" << http.port()
               << " (ctx " << so.ctx << ", " << so.max_seqs << " sequences, "
               << engine::KvTypeName(so.kv_type) << " KV cache of "
               << ((*service)->Stats().kv_blocks_total * (*service)->Stats().kv_block_bytes +
                   (*service)->Stats().kv_window_bytes) /
                      (1 << 20)
               << " MiB"
               << ((*service)->Stats().kv_window_bytes > 0
                       ? " (sliding-window layers: " +
                             std::to_string((*service)->Stats().kv_window_bytes / (1 << 20)) +
                             " MiB of it)"
                       : std::string())
               << (keys->enabled() ? ", API keys required" : "") << (meter ? ", usage metered" : "")
               << ")";
  UF_LOG(INFO) << "playground: open http://" << ho.host << ":" << http.port() << "/ in a browser";
  // Tests and scripts that pass --port 0 read the chosen port from this line.
  std::printf("listening on http://%s:%d\n", ho.host.c_str(), http.port());
  std::fflush(stdout);

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    UF_LOG(INFO) << "serve: " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ", shutting down";
    // Engine first: open requests end with an error event, so streams close promptly.
    (*service)->Shutdown();
    http.Stop();
  });
  http.Serve();
  // Serve() also returns when listening fails; wake the waiter so it can exit.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  (*service)->Shutdown();
  UF_LOG(INFO) << "serve: stopped";
  return 0;
}

void AddServeCommands(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* serve = app.add_subcommand(
      "serve", "HTTP server: OpenAI chat/completions and responses, Anthropic messages");
  serve->add_option("-m,--model", args->model, "GGUF model file")->required();
  serve->add_option("--model-id", args->model_id, "model name clients send (default: file stem)");
  serve->add_option("--host", args->host, "address to listen on")->capture_default_str();
  serve->add_option("--port", args->port, "port (0 = any free port)")->capture_default_str();
  serve->add_option("--ctx", args->ctx, "tokens per sequence (default min(4096, training ctx))");
  serve->add_option("--max-seqs", args->max_seqs, "sequences decoded together")
      ->capture_default_str();
  serve->add_option("--max-queue", args->max_queue, "requests that may wait; more get 429")
      ->capture_default_str();
  serve->add_option("--prefill-chunk", args->prefill_chunk, "prompt tokens per engine step")
      ->capture_default_str();
  serve->add_option("--kv-tokens", args->kv_tokens, "KV pool in tokens (default ctx*max-seqs)");
  serve->add_option("--block-size", args->block_size, "tokens per KV block")->capture_default_str();
  serve->add_flag("--no-prefix-cache", args->no_prefix_cache, "do not reuse prompt prefixes");
  AddKvTypeOption(serve, &args->kv_type);
  AddDeviceOption(serve, &args->device);
  serve->add_option("--max-tokens-limit", args->max_tokens_limit,
                    "largest max_tokens accepted (default ctx)");
  serve->add_option("--max-body-bytes", args->max_body_bytes, "request body limit")
      ->capture_default_str();
  auto* key = serve->add_option("--api-key", args->api_key, "require this Bearer key");
  serve
      ->add_option("--keys-db", args->keys_db,
                   "require a key from this SQLite keys db, and meter usage into it")
      ->excludes(key);
  serve->add_option("--metering-config", args->metering_config,
                    "JSON prices, quota window and plans (default: built-in; docs/serving.md)");
  serve->add_option("-t,--threads", args->threads, "compute threads (default: physical cores)");
  serve->add_option("--ultrafast-slack", args->ultrafast_slack,
                    "allowed slowdown of ultrafast decode vs. running alone (0.05 = 5%)")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  serve->add_option("--ultrafast-capacity", args->ultrafast_capacity,
                    "concurrent ultrafast streams (0 disables the tier; more get 429)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  serve->add_option("--flex-max-wait", args->flex_max_wait,
                    "seconds a flex request may wait for idle capacity before it is served")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  serve->add_flag("--no-ultrafast-spec", args->no_ultrafast_spec,
                  "ultrafast requests do not speculate unless they ask (\"speculation\" field)");
  serve->add_option("--spec-k", args->spec_k,
                    "drafts per step at most for speculating requests that give no k")
      ->capture_default_str();
  serve->add_option("--default-tier", args->default_tier,
                    "tier for service_tier \"auto\" or absent: ultrafast, default or flex")
      ->capture_default_str();
  serve->add_option("--responses-store", args->responses_store,
                    "Responses API: stored responses kept at most, for previous_response_id "
                    "(in memory; 0 = none)")
      ->capture_default_str();
  serve->add_option("--responses-ttl", args->responses_ttl_s,
                    "Responses API: seconds a stored response is kept")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  serve->add_option("--chat-template-file", args->chat_template_file,
                    "Jinja chat template to use instead of the model's own (its reply formats, "
                    "tool calls and reasoning, follow it too)")
      ->check(CLI::ExistingFile);
  serve->add_option("--history-dir", args->history_dir,
                    "Computer History folder that POST /v1/history/ask answers from "
                    "(ultrafast tier; behind the API key)");
  serve->add_option("--pace-ms", args->pace_ms,
                    "testing: sleep this many ms before every engine step (slows every stream "
                    "by a fixed amount, so a browser test sees it stream)")
      ->check(CLI::Range(0, 10000));
  serve->add_flag("--spec-fixed-cost", args->spec_fixed_cost,
                  "testing: speculation assumes fixed verify costs instead of measured ones (how "
                  "much it drafts then does not depend on the machine's load)");
  serve->callback([args] {
    if (const int code = RunServe(*args); code != 0) throw CLI::RuntimeError(code);
  });

  AddAdminCommands(app);
}

}  // namespace uf::cli
