#include "server/http_server.h"

#include <httplib.h>

#include <csignal>
#include <ctime>
#include <random>

#include "base/clock.h"
#include "base/log.h"
#include "server/connection.h"
#include "server/openai_response.h"
#include "server/web_assets.h"
#include "tokenizer/tokenizer.h"

namespace uf::server {
namespace {

using json = nlohmann::json;

std::string RandomId(std::string_view prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  static const char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id.push_back(kAlphabet[rng() % (sizeof(kAlphabet) - 1)]);
  return id;
}

uint64_t RandomSeed() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

ApiError ServerError(int status, std::string message, std::string code = "") {
  ApiError e;
  e.status = status;
  e.type = status == 429 ? "rate_limit_error" : "server_error";
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

ApiError ContextOverflow(int64_t ctx, int64_t prompt, int64_t max_tokens, bool chat) {
  std::string m =
      "This model's maximum context length is " + std::to_string(ctx) + " tokens. However, ";
  const char* where = chat ? "messages" : "prompt";
  if (max_tokens > 0) {
    m += "you requested " + std::to_string(prompt + max_tokens) + " tokens (" +
         std::to_string(prompt) + " in the " + where + ", " + std::to_string(max_tokens) +
         " in the completion). Please reduce the length of the " + where + " or completion.";
  } else {
    m += "your " + std::string(where) + " resulted in " + std::to_string(prompt) +
         " tokens, which leaves no room for the completion. Please reduce the length of the " +
         where + ".";
  }
  return InvalidRequest(std::move(m), where, "context_length_exceeded");
}

// Per-request bookkeeping shared by the handler and the stream's content provider.
struct Exchange {
  // One channel per choice (n > 1 submits n sequences).
  std::vector<std::shared_ptr<engine::RequestChannel>> channels;  // null: not submitted yet
  // n > 1 with the prefix cache: choices 1.. wait here until choice 0's prompt is in the cache
  // (its first event), so that they map its KV blocks instead of computing the prompt again.
  std::vector<engine::GenerationRequest> deferred;
  engine::Service* service = nullptr;
  bool stream = false;
  double stream_wake_interval_s = 0.0;
  std::vector<engine::GenerationEvent> finals;  // [choice] its final event, once it came
  std::vector<bool> choice_done;
  int remaining = 0;  // choices without a final event
  std::unique_ptr<ResponseBuilder> builder;
  const char* endpoint = "";
  double arrival = 0.0;
  double last_token = 0.0;
  double last_write = 0.0;
  int64_t tokens = 0;
  bool finished = false;  // every choice finished
  int status = 200;
  int socket = -1;
  // Metering (when meter is set): who pays, and what a stream cut short had used.
  const Meter* meter = nullptr;
  std::string model;
  KeyIdentity key;
  std::string request_id;
  int64_t prompt_tokens = 0;
  scheduler::ServiceTier tier = scheduler::ServiceTier::kDefault;  // latest event's
};

// Moves queued events of every unfinished choice to *out as (choice, event), waiting up to
// timeout_s for one. With several choices each is polled in turn with a short wait, so the first
// choice's silence does not hold back the others' events.
// Submits the deferred choices (after choice 0's first event). A choice the engine refuses (queue
// full, shutting down) gets a final error event of its own.
void SubmitDeferred(Exchange& x, std::vector<std::pair<int, engine::GenerationEvent>>* out) {
  for (size_t k = 0; k < x.deferred.size(); ++k) {
    const int i = static_cast<int>(k) + 1;
    auto ch = x.service->Submit(std::move(x.deferred[k]));
    if (!ch.ok()) {
      engine::GenerationEvent ev;
      ev.finish = engine::FinishReason::kError;
      ev.error = ch.status();
      ev.time = NowSeconds();
      out->emplace_back(i, std::move(ev));
      x.channels[i] = std::make_shared<engine::RequestChannel>();  // never pushed to
      continue;
    }
    if (x.stream) {
      (*ch)->SetMinWakeInterval(x.stream_wake_interval_s);
    } else {
      (*ch)->WakeOnFinalOnly();
    }
    x.channels[i] = *ch;
  }
  x.deferred.clear();
}

bool PopEvents(Exchange& x, double timeout_s,
               std::vector<std::pair<int, engine::GenerationEvent>>* out) {
  out->clear();
  std::vector<engine::GenerationEvent> events;
  const size_t n = x.channels.size();
  const double each = n == 1 ? timeout_s : std::min(timeout_s, 0.005);
  const double deadline = NowSeconds() + timeout_s;
  do {
    for (size_t i = 0; i < n; ++i) {
      if (x.choice_done[i] || x.channels[i] == nullptr) continue;
      const bool waited = out->empty() && i == 0;
      if (!x.channels[i]->Pop(&events, waited ? each : 0.0)) continue;
      for (engine::GenerationEvent& ev : events) out->emplace_back(static_cast<int>(i), ev);
      if (i == 0 && !x.deferred.empty()) SubmitDeferred(x, out);
    }
  } while (out->empty() && NowSeconds() < deadline);
  return !out->empty();
}

void CancelAll(const Exchange& x) {
  for (const auto& ch : x.channels) {
    if (ch != nullptr) ch->Cancel();
  }
}

// Records a successfully finished request's usage before the response that reports it is sent
// (the ledger row is committed when this returns). On failure the client must not be told usage
// that is not recorded: the request fails with a 500 instead. nullopt for other events.
std::optional<ApiError> Bill(const Exchange& x, const engine::GenerationEvent& ev) {
  if (x.meter == nullptr ||
      (ev.finish != engine::FinishReason::kStop && ev.finish != engine::FinishReason::kLength)) {
    return std::nullopt;
  }
  auto r = x.meter->Record(x.key.id, x.request_id, x.model, ev.service_tier, ev.prompt_tokens,
                           ev.cached_tokens, ev.completion_tokens);
  if (r.ok()) return std::nullopt;
  UF_LOG(ERROR) << "serve: cannot record usage of " << x.request_id << ": "
                << r.status().ToString();
  return ServerError(500, "The request's usage could not be recorded: " + r.status().message(),
                     "usage_not_recorded");
}

// A request the client left (or that failed) after tokens were generated: bills the prompt and
// the tokens generated so far. No usage was reported to the client, so this is best effort.
void BillPartial(const Exchange& x) {
  if (x.meter == nullptr || x.tokens == 0) return;
  auto r = x.meter->Record(x.key.id, x.request_id, x.model, x.tier, x.prompt_tokens, 0, x.tokens);
  if (!r.ok()) {
    UF_LOG(ERROR) << "serve: cannot record usage of " << x.request_id << ": "
                  << r.status().ToString();
  }
}

// Quota admission for a request asking for *tier (nullopt = auto). An `auto` request whose
// ultrafast quota is spent is served as default when that quota allows, as it is when ultrafast
// capacity is full; the response reports the tier that served it.
std::optional<ApiError> CheckQuota(const Meter& meter, const KeyIdentity& who, int64_t n_prompt,
                                   scheduler::ServiceTier auto_tier,
                                   std::optional<scheduler::ServiceTier>* tier) {
  using scheduler::ServiceTier;
  const ServiceTier asked = tier->value_or(auto_tier);
  auto denial = meter.CheckQuota(who.id, who.plan, asked, n_prompt);
  if (!denial.ok()) {
    ApiError e;
    const bool no_plan = denial.status().code() == StatusCode::kFailedPrecondition;
    e.status = no_plan ? 403 : 500;
    e.type = no_plan ? "permission_error" : "server_error";
    e.message = denial.status().message();
    return e;
  }
  if (!denial->has_value()) return std::nullopt;
  if (!tier->has_value() && asked == ServiceTier::kUltrafast) {
    auto fallback = meter.CheckQuota(who.id, who.plan, ServiceTier::kDefault, n_prompt);
    if (fallback.ok() && !fallback->has_value()) {
      *tier = ServiceTier::kDefault;
      return std::nullopt;
    }
  }
  ApiError e = ServerError(429, (*denial)->message, "quota_exceeded");
  e.param = "service_tier";
  e.retry_after_s = (*denial)->retry_after_s;  // 0 (no header): waiting would not help
  return e;
}

// /health's "prices": USD per million tokens by tier, for clients that show what a response
// cost (the playground); the same prices the meter bills with.
json PricesJson(const MeteringConfig& config) {
  json out = json::object();
  for (int t = 0; t < scheduler::kNumServiceTiers; ++t) {
    const TierPrice& p = config.prices[t];
    out[std::string(scheduler::ServiceTierName(static_cast<scheduler::ServiceTier>(t)))] = {
        {"input", p.input / 1e6},
        {"cached_input", p.cached_input / 1e6},
        {"output", p.output / 1e6}};
  }
  return out;
}

}  // namespace

HttpServer::HttpServer(ServerOptions options, engine::Service* service, ChatRenderer render_chat,
                       const KeyStore* keys, Metrics* metrics)
    : options_(std::move(options)),
      service_(service),
      render_chat_(std::move(render_chat)),
      keys_(keys),
      metrics_(metrics),
      http_(std::make_unique<httplib::Server>()) {
  std::signal(SIGPIPE, SIG_IGN);
  int threads = options_.http_threads;
  if (threads <= 0) {
    threads =
        std::min(512, 2 * (service_->options().max_seqs + service_->options().max_queue) + 16);
  }
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_read_timeout(options_.io_timeout_s, 0);
  http_->set_write_timeout(options_.io_timeout_s, 0);
  http_->set_keep_alive_timeout(5);
  http_->set_keep_alive_max_count(1000);
  // Headers, then each SSE chunk, are small writes: with Nagle's algorithm a write waits for the
  // ACK of the previous one, which the client's delayed ACK holds for up to 40 ms. That put
  // 40-90 ms on the first token and on every non-streamed response (bench --serve).
  http_->set_tcp_nodelay(true);
  Route();
}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Bind() {
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
    if (port_ <= 0) return UnavailableError("cannot bind to " + options_.host);
  } else {
    if (!http_->bind_to_port(options_.host, options_.port)) {
      return UnavailableError("cannot bind to " + options_.host + ":" +
                              std::to_string(options_.port) + " (in use?)");
    }
    port_ = options_.port;
  }
  return OkStatus();
}

void HttpServer::Serve() { http_->listen_after_bind(); }

void HttpServer::Stop() {
  stopping_ = true;
  if (http_) http_->stop();
}

void HttpServer::SendError(httplib::Response& res, const ApiError& error, const char* endpoint) {
  res.status = error.status;
  if (error.retry_after_s > 0) res.set_header("Retry-After", std::to_string(error.retry_after_s));
  res.set_content(ErrorBody(error), "application/json");
  metrics_->CountRequest(endpoint, error.status);
}

bool HttpServer::Authorized(const httplib::Request& req, httplib::Response& res,
                            const char* endpoint, KeyIdentity* who) {
  if (keys_ == nullptr || !keys_->enabled()) return true;
  const std::string header = req.get_header_value("Authorization");
  if (std::optional<KeyIdentity> key = keys_->Authenticate(header)) {
    if (who != nullptr) *who = std::move(*key);
    return true;
  }
  ApiError e;
  e.status = 401;
  e.code = "invalid_api_key";
  e.message = header.empty()
                  ? "You didn't provide an API key. You need to provide your API key in an "
                    "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
                  : "Incorrect API key provided.";
  res.set_header("WWW-Authenticate", "Bearer");
  SendError(res, e, endpoint);
  return false;
}

void HttpServer::Route() {
  httplib::Server& s = *http_;
  s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGenerate(Endpoint::kChat, req, res);
  });
  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGenerate(Endpoint::kCompletion, req, res);
  });
  s.Post("/v1/history/ask", [this](const httplib::Request& req, httplib::Response& res) {
    HandleHistoryAsk(req, res);
  });
  auto model_json = [this] {
    return json{{"id", options_.model_id},
                {"object", "model"},
                {"created", 0},
                {"owned_by", "ultrafast"},
                {"context_length", service_->options().ctx}};
  };
  s.Get("/v1/models", [this, model_json](const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res, "models")) return;
    res.set_content(Dump({{"object", "list"}, {"data", json::array({model_json()})}}),
                    "application/json");
    metrics_->CountRequest("models", 200);
  });
  s.Get("/v1/models/(.+)", [this, model_json](const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res, "models")) return;
    if (req.matches[1] != options_.model_id) {
      ApiError e = InvalidRequest("The model '" + std::string(req.matches[1]) + "' does not exist.",
                                  "model", "model_not_found");
      e.status = 404;
      return SendError(res, e, "models");
    }
    res.set_content(Dump(model_json()), "application/json");
    metrics_->CountRequest("models", 200);
  });
  s.Get("/v1/usage",
        [this](const httplib::Request& req, httplib::Response& res) { HandleUsage(req, res); });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const engine::EngineStats st = service_->Stats();
    json body = {{"status", stopping_ ? "stopping" : "ok"},
                 {"model", options_.model_id},
                 {"running", st.running},
                 {"queued", st.queue_depth},
                 {"threads", service_->options().n_threads},
                 {"ctx", service_->options().ctx},
                 {"max_seqs", service_->options().max_seqs},
                 {"metered", meter_ != nullptr},
                 {"prices", PricesJson(meter_ != nullptr ? meter_->config()
                                                         : MeteringConfig::Defaults())}};
    res.status = stopping_ ? 503 : 200;
    res.set_content(Dump(body), "application/json");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_->Render(service_->Stats()), "text/plain; version=0.0.4");
  });
  // The playground (web/playground, built into the binary). The page itself needs no key; the
  // requests it makes to /v1/* carry the key the user types into it.
  auto send_file = [](const EmbeddedFile& f, httplib::Response& res) {
    res.set_content(f.body.data(), f.body.size(), std::string(ContentTypeFor(f.name)));
    res.set_header("Cache-Control", "no-cache");
  };
  s.Get("/", [send_file](const httplib::Request&, httplib::Response& res) {
    const EmbeddedFile* index = FindPlaygroundFile("index.html");
    UF_CHECK(index != nullptr) << "web/playground/index.html was not embedded";
    send_file(*index, res);
  });
  s.Get("/assets/([A-Za-z0-9_-]+\\.[a-z]+)",
        [send_file](const httplib::Request& req, httplib::Response& res) {
          const EmbeddedFile* f = FindPlaygroundFile(std::string(req.matches[1]));
          if (f == nullptr) {
            res.status = 404;  // the error handler writes the JSON body
            return;
          }
          send_file(*f, res);
        });
  // Anything else, and httplib's own errors (413 too large, 400 bad request line): JSON errors.
  s.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e;
    e.status = res.status;
    if (res.status == 404) {
      e.message = "Invalid URL (" + req.method + " " + req.path + ")";
    } else if (res.status == 413) {
      e.message = "The request body is larger than the limit of " +
                  std::to_string(options_.max_body_bytes) + " bytes.";
      e.code = "request_too_large";
    } else {
      e.message = "HTTP error " + std::to_string(res.status);
      if (res.status >= 500) e.type = "server_error";
    }
    res.set_content(ErrorBody(e), "application/json");
    metrics_->CountRequest("other", res.status);
  });
  s.set_exception_handler(
      [this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        metrics_->CountRequest("other", 500);
        std::string what = "unknown exception";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        UF_LOG(ERROR) << "serve: handler threw: " << what;
        res.status = 500;
        res.set_content(ErrorBody(ServerError(500, "internal error: " + what)), "application/json");
      });
}

std::optional<ApiError> HttpServer::BuildPrompt(const ApiRequest& api, std::vector<int32_t>* tokens,
                                                std::string* echo) {
  const Tokenizer& tok = service_->tokenizer();
  auto encode = [&tok](const std::string& text) {
    // Templates usually write the BOS text themselves; do not add a second one.
    bool add_bos = tok.add_bos_default();
    if (add_bos && tok.bos_id() >= 0) {
      const std::string_view bos = tok.TokenText(tok.bos_id());
      if (!bos.empty() && text.compare(0, bos.size(), bos) == 0) add_bos = false;
    }
    return tok.Encode(text, add_bos, /*parse_special=*/true);
  };
  if (api.endpoint == Endpoint::kChat) {
    nlohmann::ordered_json kwargs = api.chat_template_kwargs;
    // The template describes the tools to the model (not when tool_choice is "none": then the
    // model must not call any).
    if (!api.tools.is_null() && api.tool_choice != ToolChoice::kNone) {
      if (kwargs.is_null()) kwargs = nlohmann::ordered_json::object();
      kwargs["tools"] = api.tools;
    }
    StatusOr<std::string> text = render_chat_(api.messages, kwargs);
    if (!text.ok()) {
      return InvalidRequest(
          "Cannot apply the model's chat template to these messages: " + text.status().message(),
          "messages", "invalid_value");
    }
    *tokens = encode(*text);
  } else if (api.prompt_is_tokens) {
    *tokens = api.prompt_tokens;
    if (api.echo) *echo = tok.Decode(*tokens);
  } else {
    *tokens = encode(api.prompt);
    if (api.echo) *echo = api.prompt;
  }
  if (tokens->empty()) return InvalidRequest("The prompt is empty.", "prompt", "invalid_value");
  return std::nullopt;
}

void HttpServer::HandleGenerate(Endpoint endpoint, const httplib::Request& req,
                                httplib::Response& res) {
  const double arrival = NowSeconds();
  const char* name = endpoint == Endpoint::kChat ? "chat_completions" : "completions";
  KeyIdentity who;
  if (!Authorized(req, res, name, &who)) return;
  if (stopping_) {
    ApiError e = ServerError(503, "The server is shutting down.", "shutting_down");
    e.retry_after_s = options_.retry_after_s;
    return SendError(res, e, name);
  }
  ParseOptions popts;
  popts.n_vocab = service_->tokenizer().vocab_size();
  ApiRequest api;
  if (auto e = ParseRequest(endpoint, req.body, popts, &api)) return SendError(res, *e, name);
  if (api.model != options_.model_id) {
    ApiError e =
        InvalidRequest("The model '" + api.model + "' does not exist. This server serves '" +
                           options_.model_id + "'.",
                       "model", "model_not_found");
    e.status = 404;
    return SendError(res, e, name);
  }
  std::vector<int32_t> prompt;
  std::string echo;
  if (auto e = BuildPrompt(api, &prompt, &echo)) return SendError(res, *e, name);

  const int64_t ctx = service_->options().ctx;
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  const int64_t limit = options_.max_tokens_limit > 0 ? options_.max_tokens_limit : ctx;
  int64_t max_tokens;
  if (api.max_tokens) {
    max_tokens = *api.max_tokens;
    if (max_tokens > limit) {
      return SendError(res,
                       InvalidRequest("max_tokens is too large: " + std::to_string(max_tokens) +
                                          ". This server allows at most " + std::to_string(limit) +
                                          " completion tokens.",
                                      "max_tokens", "invalid_value"),
                       name);
    }
    if (n_prompt + max_tokens > ctx) {
      return SendError(res, ContextOverflow(ctx, n_prompt, max_tokens, endpoint == Endpoint::kChat),
                       name);
    }
  } else {
    if (n_prompt >= ctx) {
      return SendError(res, ContextOverflow(ctx, n_prompt, 0, endpoint == Endpoint::kChat), name);
    }
    max_tokens = std::min(ctx - n_prompt, limit);
  }

  engine::GenerationRequest g;
  g.prompt = std::move(prompt);
  g.max_tokens = max_tokens;
  g.sampling = api.sampling;
  if (!api.has_seed) g.sampling.seed = RandomSeed();
  g.stop = api.stop;
  g.ignore_eos = api.ignore_eos;
  g.top_logprobs = api.logprobs ? api.top_logprobs : -1;
  g.service_tier = api.service_tier;
  g.speculation = api.speculation;
  g.grammar = api.grammar;
  if (api.tool_choice == ToolChoice::kRequired || api.tool_choice == ToolChoice::kNamed) {
    // The reply must be a call: its syntax and each function's parameters are the grammar.
    std::string param = "tools";
    auto tg =
        ToolCallGrammar(api.tools, options_.tool_format,
                        api.tool_choice == ToolChoice::kRequired && api.parallel_tool_calls,
                        api.tool_choice == ToolChoice::kNamed ? api.tool_choice_name : "", &param);
    if (!tg.ok()) {
      return SendError(res,
                       InvalidRequest("Cannot constrain the tool call to '" + param +
                                          "': " + tg.status().message(),
                                      param, "invalid_value"),
                       name);
    }
    g.grammar = *tg;
  }
  if (api.has_prediction) {
    g.prediction = service_->tokenizer().Encode(api.prediction, false, false);
    if (static_cast<int64_t>(g.prediction.size()) > ctx) {
      return SendError(
          res,
          InvalidRequest("prediction.content has " + std::to_string(g.prediction.size()) +
                             " tokens, more than the context of " + std::to_string(ctx) +
                             " tokens.",
                         "prediction.content", "invalid_value"),
          name);
    }
  }
  if (meter_ != nullptr) {
    if (auto e =
            CheckQuota(*meter_, who, n_prompt, service_->options().auto_tier, &g.service_tier)) {
      return SendError(res, *e, name);
    }
  }
  int64_t tier_retry_after_s = 0;
  std::vector<std::shared_ptr<engine::RequestChannel>> channels;
  std::vector<engine::GenerationRequest> deferred;
  // With the prefix cache, choices 1.. start once choice 0 has computed the prompt.
  const bool defer = api.n > 1 && service_->options().prefix_cache;
  Status submitted = OkStatus();
  for (int i = 0; i < api.n && submitted.ok(); ++i) {
    engine::GenerationRequest gi = g;
    // Choices differ (and stay reproducible with a seed): each draws from its own stream.
    gi.sampling.seed = g.sampling.seed + static_cast<uint64_t>(i);
    if (defer && i > 0) {
      deferred.push_back(std::move(gi));
      channels.push_back(nullptr);
      continue;
    }
    StatusOr<std::shared_ptr<engine::RequestChannel>> channel =
        service_->Submit(std::move(gi), &tier_retry_after_s);
    if (channel.ok()) {
      channels.push_back(*channel);
    } else {
      submitted = channel.status();
    }
  }
  if (!submitted.ok()) {
    for (const auto& ch : channels) {
      if (ch != nullptr) ch->Cancel();
    }
    const Status& s = submitted;
    ApiError e;
    switch (s.code()) {
      case StatusCode::kResourceExhausted:
        if (s.message().starts_with(scheduler::kTierCapacityExceeded)) {
          e = ServerError(429, s.message(), std::string(scheduler::kTierCapacityExceeded));
          e.param = "service_tier";
          e.retry_after_s = static_cast<int>(std::max<int64_t>(tier_retry_after_s, 1));
          break;
        }
        e = ServerError(429, "The server is busy: " + s.message() + ". Retry shortly.",
                        "queue_full");
        e.retry_after_s = options_.retry_after_s;
        break;
      case StatusCode::kUnavailable:
        e = ServerError(503, s.message(), "shutting_down");
        e.retry_after_s = options_.retry_after_s;
        break;
      case StatusCode::kOutOfRange:
        e = ContextOverflow(ctx, n_prompt, 0, endpoint == Endpoint::kChat);
        break;
      case StatusCode::kInvalidArgument:
        e = InvalidRequest(s.message());
        break;
      default:
        e = ServerError(500, s.message());
    }
    return SendError(res, e, name);
  }

  auto ex = std::make_shared<Exchange>();
  ex->channels = std::move(channels);
  ex->deferred = std::move(deferred);
  ex->service = service_;
  ex->stream = api.stream;
  ex->stream_wake_interval_s = options_.stream_wake_interval_s;
  ex->remaining = api.n;
  ex->finals.resize(api.n);
  ex->choice_done.assign(api.n, false);
  ex->endpoint = name;
  ex->arrival = arrival;
  ex->last_write = arrival;
  ex->socket =
      FindConnectionSocket(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  ResponseOptions ro;
  ro.endpoint = endpoint;
  ro.id = RandomId(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
  ex->meter = meter_;
  ex->model = options_.model_id;
  ex->key = who;
  ex->request_id = ro.id;
  ex->prompt_tokens = n_prompt;
  ro.model = options_.model_id;
  ro.created = static_cast<int64_t>(std::time(nullptr));
  ro.logprobs = api.logprobs;
  ro.include_usage = api.include_usage;
  ro.echo = std::move(echo);
  ro.n = api.n;
  if (!api.tools.is_null() && api.tool_choice != ToolChoice::kNone) {
    ro.parse_tools = true;
    ro.tool_format = options_.tool_format;
    for (const auto& t : api.tools) ro.tool_names.insert(t["function"]["name"].get<std::string>());
  }
  ex->builder = std::make_unique<ResponseBuilder>(std::move(ro), service_->tokenizer());

  // Metrics of one event of choice i; returns true on the final one of the last choice.
  auto account = [this](Exchange& x, int i, const engine::GenerationEvent& ev) {
    x.tier = ev.service_tier;
    if (ev.n_tokens > 0) {
      if (x.tokens == 0) {
        metrics_->ObserveTimeToFirstToken(ev.service_tier, ev.time - x.arrival);
      } else {
        metrics_->ObserveInterTokenLatency(ev.service_tier, (ev.time - x.last_token) / ev.n_tokens);
      }
      x.tokens += ev.n_tokens;
      x.last_token = ev.time;
    }
    if (ev.finish == engine::FinishReason::kNone || x.choice_done[i]) return false;
    x.choice_done[i] = true;
    x.finals[i] = ev;
    metrics_->AddPromptTokens(ev.prompt_tokens);
    metrics_->AddGeneratedTokens(ev.completion_tokens);
    if (ev.finish == engine::FinishReason::kError) {
      x.status = ev.error.code() == StatusCode::kUnavailable ? 503 : 500;
    }
    if (--x.remaining > 0) return false;
    metrics_->ObserveRequestDuration(NowSeconds() - x.arrival);
    x.finished = true;
    return true;
  };
  // The merged final event once the last choice's final event ev is in (n = 1: ev itself).
  auto merged_final = [](const Exchange& x) { return MergeFinals(x.finals); };

  if (!api.stream) {
    // The poll below still checks the peer every poll_s.
    for (const auto& ch : ex->channels) {
      if (ch != nullptr) ch->WakeOnFinalOnly();
    }
    std::vector<std::pair<int, engine::GenerationEvent>> events;
    // The peer is checked every poll interval whether or not events came: a model that emits a
    // token more often than that would otherwise never notice a client that left.
    double next_check = NowSeconds() + options_.poll_s;
    while (!ex->finished) {
      // Events first: with WakeOnFinalOnly they mostly arrive in batches at the poll timeout,
      // and a client that left must still be billed for every token already generated.
      if (PopEvents(*ex, options_.poll_s, &events)) {
        for (const auto& [i, ev] : events) {
          ex->builder->Add(i, ev);
          account(*ex, i, ev);
        }
      }
      if (ex->finished || NowSeconds() < next_check) continue;
      next_check = NowSeconds() + options_.poll_s;
      if (PeerClosed(ex->socket)) {
        CancelAll(*ex);
        BillPartial(*ex);                   // the tokens were computed, as for a stream cut short
        metrics_->CountRequest(name, 499);  // nginx's "client closed request"
        return;
      }
    }
    for (const engine::GenerationEvent& f : ex->finals) {
      if (f.finish == engine::FinishReason::kError ||
          f.finish == engine::FinishReason::kCancelled) {
        ApiError e = ServerError(ex->status == 200 ? 500 : ex->status,
                                 f.error.ok() ? "generation was cancelled" : f.error.message());
        if (e.status == 503) e.retry_after_s = options_.retry_after_s;
        return SendError(res, e, name);
      }
    }
    if (auto e = Bill(*ex, merged_final(*ex))) return SendError(res, *e, name);
    res.set_content(ex->builder->Body(), "application/json");
    metrics_->CountRequest(name, 200);
    return;
  }

  for (const auto& ch : ex->channels) {
    if (ch != nullptr) ch->SetMinWakeInterval(options_.stream_wake_interval_s);
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, ex, account, merged_final](size_t, httplib::DataSink& sink) {
        std::vector<std::pair<int, engine::GenerationEvent>> events;
        if (!PopEvents(*ex, options_.poll_s, &events)) {
          if (PeerClosed(ex->socket)) return false;
          if (NowSeconds() - ex->last_write >= options_.keepalive_s) {
            static constexpr std::string_view kPing = ": keep-alive\n\n";
            ex->last_write = NowSeconds();
            return sink.write(kPing.data(), kPing.size());
          }
          return true;
        }
        std::string out;
        for (const auto& [i, ev] : events) {
          if (account(*ex, i, ev)) {
            // The last choice's final event: bill the merged usage before reporting it.
            if (auto e = Bill(*ex, merged_final(*ex))) {
              out += ex->builder->StreamError(*e);
              ex->status = e->status;
              break;
            }
          }
          out += ex->builder->Stream(i, ev);
          if (ex->finished) break;
          if (ev.finish == engine::FinishReason::kError ||
              ev.finish == engine::FinishReason::kCancelled) {
            // The stream ended with an error chunk: the other choices are not wanted.
            CancelAll(*ex);
            ex->finished = true;
            break;
          }
        }
        // An empty write would end httplib's chunk loop early: skip it.
        if (!out.empty()) {
          ex->last_write = NowSeconds();
          if (!sink.write(out.data(), out.size())) return false;
        }
        if (ex->finished) sink.done();
        return true;
      },
      [this, ex](bool success) {
        if (!ex->finished) {
          CancelAll(*ex);
          BillPartial(*ex);
        }
        metrics_->CountRequest(ex->endpoint, ex->finished ? (success ? ex->status : 499) : 499);
      });
}

void HttpServer::HandleUsage(const httplib::Request& req, httplib::Response& res) {
  KeyIdentity who;
  if (!Authorized(req, res, "usage", &who)) return;
  if (meter_ == nullptr) {
    ApiError e = InvalidRequest(
        "Usage metering is off on this server (start it with --keys-db to meter usage).", "",
        "metering_disabled");
    e.status = 404;
    return SendError(res, e, "usage");
  }
  StatusOr<json> report = meter_->Report(who.id, who.name, who.plan);
  if (!report.ok()) return SendError(res, ServerError(500, report.status().message()), "usage");
  res.set_content(Dump(*report), "application/json");
  metrics_->CountRequest("usage", 200);
}

}  // namespace uf::server
