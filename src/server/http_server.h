// The OpenAI-compatible HTTP front end. HTTP threads (cpp-httplib's pool) authenticate, parse and
// validate requests, render chat templates, tokenize, submit to the engine Service and format its
// events as JSON or Server-Sent Events; they never touch the model. A client that disconnects
// (streamed or not) has its request cancelled, which frees its KV blocks at the next step.
//
// Routes: POST /v1/chat/completions, POST /v1/completions, POST /v1/responses (+ GET/DELETE
// /v1/responses/{id}), POST /v1/messages (+ /v1/messages/count_tokens), GET /v1/models[/{id}],
// GET /health, GET /metrics, GET /v1/usage (with a Meter), POST /v1/history/ask (with a history
// folder), and the playground page: GET / and GET /assets/NAME (web_assets.h). /v1/* needs a key
// (Authorization: Bearer, or x-api-key) when the KeyStore has keys; /health, /metrics and the
// page do not. Every generation route runs the same request core (RunGeneration).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "engine/service.h"
#include "server/api_format.h"
#include "server/auth.h"
#include "server/metering.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/reply_parser.h"
#include "server/responses_store.h"
#include "server/tool_calls.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace uf::server {

// Renders validated chat messages ([{"role", "content"}]) into prompt text (with the generation
// prompt for the assistant's turn). Errors become 400 responses.
// Renders a chat prompt from the request's messages and chat_template_kwargs (an object, or null;
// with the request's tools under "tools"). The kwargs keep their key order: templates print tool
// schemas with tojson, and the model should see them as the client wrote them.
using ChatRenderer = std::function<StatusOr<std::string>(
    const nlohmann::json& messages, const nlohmann::ordered_json& template_kwargs)>;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                   // 0 = any free port (see HttpServer::port())
  std::string model_id;              // the name clients must send as "model"
  size_t max_body_bytes = 8u << 20;  // larger bodies get 413
  int64_t max_tokens_limit = 0;      // largest max_tokens accepted; 0 = the context size
  int retry_after_s = 1;             // Retry-After of 429 (queue full) and 503 responses
  int http_threads = 0;              // 0 = enough for every slot and queue place, plus spare
  double keepalive_s = 10.0;         // SSE comment sent after this long without events
  double poll_s = 0.1;               // how often a waiting request checks for a disconnect
  // A stream's HTTP thread is woken at most this often (engine::RequestChannel::
  // SetMinWakeInterval): faster tokens share an SSE chunk.
  double stream_wake_interval_s = 0.001;
  int io_timeout_s = 10;  // read/write timeout of a stalled client
  // How the model writes tool calls (chat_prompt.h: ToolCallFormatOf, from its template).
  ToolCallFormat tool_format = ToolCallFormat::kHermes;
  // How the model's replies carry reasoning (reply_parser.h: DetectReasoningFormat, from its
  // template): chat replies report it apart from the content.
  ReasoningFormat reasoning_format = ReasoningFormat::kThink;
  // Computer History folder (`history record --dir`) that POST /v1/history/ask answers from;
  // empty: that route is 404.
  std::string history_dir;
  // POST /v1/responses with store (the default): responses kept for previous_response_id and
  // GET /v1/responses/{id} (responses_store.h).
  ResponseStoreOptions response_store;
};

// How one API binds to the request core: its metrics label, its error shape, its ids, the names
// of its fields in errors, and the writer of its responses.
struct ApiBinding {
  const char* endpoint = "";  // metrics label ("chat_completions", "responses", "messages")
  ErrorStyle errors = ErrorStyle::kOpenAI;
  std::string id_prefix = "chatcmpl-";  // response ids; also the ledger's request id
  std::string prompt_param = "messages";
  std::string max_tokens_param = "max_tokens";
  // Flat tools (Responses, Messages): what a tool's parameters schema is called in error paths
  // (RenameToolParams); "" for chat's tools[i].function.parameters.
  std::string tool_parameters_param;
  // Called once the request is admitted, with the core's options (id, model, created, n, tools).
  std::function<std::unique_ptr<ResponseWriter>(ResponseOptions)> make_writer;
};

class HttpServer {
 public:
  // service, keys and metrics must outlive the server. Ignores SIGPIPE process-wide: a write to
  // a client that went away must fail, not kill the server.
  HttpServer(ServerOptions options, engine::Service* service, ChatRenderer render_chat,
             const KeyStore* keys, Metrics* metrics);
  ~HttpServer();

  // Turns metering on (call before Serve; meter must outlive the server): requests are checked
  // against the calling key's quota, each finished request is recorded in the ledger before its
  // usage is sent, and GET /v1/usage reports the key's totals.
  void SetMeter(const Meter* meter) { meter_ = meter; }

  // Binds the listening socket; after this, port() is the real port.
  Status Bind();
  int port() const { return port_; }
  // Serves on the calling thread until Stop().
  void Serve();
  // New requests get 503 from now on; Serve() returns once open connections are done. Call after
  // the engine's Shutdown() so open streams end promptly.
  void Stop();

 private:
  void Route();
  // who (optional) gets the calling key (Authorization: Bearer KEY, or x-api-key: KEY).
  bool Authorized(const httplib::Request& req, httplib::Response& res, const char* endpoint,
                  KeyIdentity* who = nullptr, ErrorStyle style = ErrorStyle::kOpenAI);
  // Authorized, and the server is not stopping (else a 503).
  bool Admit(const httplib::Request& req, httplib::Response& res, const char* endpoint,
             ErrorStyle style, KeyIdentity* who);
  // 404 model_not_found unless the server serves `model`.
  std::optional<ApiError> CheckModel(const std::string& model) const;
  void HandleUsage(const httplib::Request& req, httplib::Response& res);
  // POST /v1/history/ask (history_ask.cc): a chat completion on the ultrafast tier over the
  // newest summaries, answered with the summaries it cites.
  void HandleHistoryAsk(const httplib::Request& req, httplib::Response& res);
  // POST /v1/chat/completions and /v1/completions.
  void HandleGenerate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  // POST /v1/responses, GET and DELETE /v1/responses/{id} (responses_api.cc).
  void HandleResponses(const httplib::Request& req, httplib::Response& res);
  void HandleStoredResponse(const httplib::Request& req, httplib::Response& res, bool remove);
  // POST /v1/messages and /v1/messages/count_tokens (anthropic_api.cc).
  void HandleMessages(const httplib::Request& req, httplib::Response& res);
  void HandleCountTokens(const httplib::Request& req, httplib::Response& res);
  // The request core (generate.cc): a parsed request of any API, from its prompt to its
  // response. Sends the response (or the error) on res.
  void RunGeneration(ApiRequest api, const ApiBinding& binding, const KeyIdentity& who,
                     double arrival, const httplib::Request& req, httplib::Response& res);
  void SendError(httplib::Response& res, const ApiError& error, const char* endpoint,
                 ErrorStyle style = ErrorStyle::kOpenAI);
  // Prompt tokens for a parsed request, or the 400 explaining why not. *opens_thinking (when
  // given): the chat prompt ends inside an open <think> block.
  std::optional<ApiError> BuildPrompt(const ApiRequest& api, std::vector<int32_t>* tokens,
                                      std::string* echo, bool* opens_thinking = nullptr);

  ServerOptions options_;
  engine::Service* service_;
  ChatRenderer render_chat_;
  const KeyStore* keys_;
  Metrics* metrics_;
  const Meter* meter_ = nullptr;  // nullptr: no metering
  std::unique_ptr<ResponseStore> responses_;
  std::unique_ptr<httplib::Server> http_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
};

}  // namespace uf::server
