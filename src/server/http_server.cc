#include "server/http_server.h"

#include <httplib.h>

#include <sys/socket.h>

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
      responses_(std::make_unique<ResponseStore>(options_.response_store)),
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
  // httplib's default sets SO_REUSEPORT, which lets a second server bind the same port and share
  // its connections silently (a forgotten `serve` then took half of a benchmark's requests).
  // SO_REUSEADDR alone still allows a restart while old connections sit in TIME_WAIT.
  http_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
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

void HttpServer::SendError(httplib::Response& res, const ApiError& error, const char* endpoint,
                           ErrorStyle style) {
  res.status = error.status;
  if (error.retry_after_s > 0) res.set_header("Retry-After", std::to_string(error.retry_after_s));
  res.set_content(ErrorBodyFor(style, error), "application/json");
  metrics_->CountRequest(endpoint, error.status);
}

bool HttpServer::Authorized(const httplib::Request& req, httplib::Response& res,
                            const char* endpoint, KeyIdentity* who, ErrorStyle style) {
  if (keys_ == nullptr || !keys_->enabled()) return true;
  std::string header = req.get_header_value("Authorization");
  // Anthropic clients send the key as x-api-key; any client may.
  if (header.empty() && req.has_header("x-api-key")) {
    header = "Bearer " + req.get_header_value("x-api-key");
  }
  if (std::optional<KeyIdentity> key = keys_->Authenticate(header)) {
    if (who != nullptr) *who = std::move(*key);
    return true;
  }
  ApiError e;
  e.status = 401;
  e.code = "invalid_api_key";
  e.message = header.empty()
                  ? "You didn't provide an API key. You need to provide your API key in an "
                    "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY) "
                    "or in an x-api-key header."
                  : "Incorrect API key provided.";
  res.set_header("WWW-Authenticate", "Bearer");
  SendError(res, e, endpoint, style);
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
  s.Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) {
    HandleResponses(req, res);
  });
  s.Get("/v1/responses/([A-Za-z0-9_-]+)",
        [this](const httplib::Request& req, httplib::Response& res) {
          HandleStoredResponse(req, res, /*remove=*/false);
        });
  s.Delete("/v1/responses/([A-Za-z0-9_-]+)",
           [this](const httplib::Request& req, httplib::Response& res) {
             HandleStoredResponse(req, res, /*remove=*/true);
           });
  s.Post("/v1/messages",
         [this](const httplib::Request& req, httplib::Response& res) { HandleMessages(req, res); });
  s.Post("/v1/messages/count_tokens", [this](const httplib::Request& req, httplib::Response& res) {
    HandleCountTokens(req, res);
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
    json body = {
        {"status", stopping_ ? "stopping" : "ok"},
        {"model", options_.model_id},
        {"running", st.running},
        {"queued", st.queue_depth},
        {"threads", service_->options().n_threads},
        {"ctx", service_->options().ctx},
        {"max_seqs", service_->options().max_seqs},
        {"metered", meter_ != nullptr},
        {"prices", PricesJson(meter_ != nullptr ? meter_->config() : MeteringConfig::Defaults())}};
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
