// The request core behind every API (api_format.h): the prompt from the chat messages or the
// completion prompt, limits, the engine request (sampling, grammar, tool-call grammar, tier,
// speculation), quota admission, submission (n choices), then the events: metrics, metering and
// disconnects here, their JSON in the API's ResponseWriter.
#include <httplib.h>

#include <ctime>
#include <random>

#include "base/clock.h"
#include "base/log.h"
#include "server/connection.h"
#include "server/http_server.h"
#include "server/openai_response.h"
#include "server/request_fields.h"
#include "tokenizer/tokenizer.h"

namespace uf::server {
namespace {

using json = nlohmann::json;

uint64_t RandomSeed() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

ApiError ContextOverflow(int64_t ctx, int64_t prompt, int64_t max_tokens,
                         const std::string& where) {
  std::string m =
      "This model's maximum context length is " + std::to_string(ctx) + " tokens. However, ";
  if (max_tokens > 0) {
    m += "you requested " + std::to_string(prompt + max_tokens) + " tokens (" +
         std::to_string(prompt) + " in the " + where + ", " + std::to_string(max_tokens) +
         " in the completion). Please reduce the length of the " + where + " or completion.";
  } else {
    m += "your " + where + " resulted in " + std::to_string(prompt) +
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
  std::unique_ptr<ResponseWriter> builder;
  std::vector<int64_t> choice_tokens;  // [choice] tokens seen so far
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

// Metrics of one event of choice i; returns true on the final one of the last choice.
bool Account(Metrics* metrics, Exchange& x, int i, const engine::GenerationEvent& ev) {
  x.tier = ev.service_tier;
  if (ev.n_tokens > 0) {
    if (x.tokens == 0) {
      metrics->ObserveTimeToFirstToken(ev.service_tier, ev.time - x.arrival);
    } else {
      metrics->ObserveInterTokenLatency(ev.service_tier, (ev.time - x.last_token) / ev.n_tokens);
    }
    x.tokens += ev.n_tokens;
    x.choice_tokens[i] += ev.n_tokens;
    x.last_token = ev.time;
  }
  if (ev.finish == engine::FinishReason::kNone || x.choice_done[i]) return false;
  x.choice_done[i] = true;
  x.finals[i] = ev;
  metrics->AddPromptTokens(ev.prompt_tokens);
  metrics->AddGeneratedTokens(ev.completion_tokens);
  if (ev.finish == engine::FinishReason::kError) {
    x.status = ev.error.code() == StatusCode::kUnavailable ? 503 : 500;
  }
  if (--x.remaining > 0) return false;
  metrics->ObserveRequestDuration(NowSeconds() - x.arrival);
  x.finished = true;
  return true;
}

// A request whose client left before it finished: cancels its choices, takes in the events
// already queued for it, and counts what it computed as a finished request is counted: the
// generated tokens of every unfinished choice (and the prompt, when no choice finished) in
// /metrics, and the tokens in the ledger (best effort: no usage was reported to the client).
void Abandon(Metrics* metrics, Exchange& x) {
  CancelAll(x);
  std::vector<engine::GenerationEvent> events;
  for (size_t i = 0; i < x.channels.size(); ++i) {
    if (x.channels[i] == nullptr || x.choice_done[i]) continue;
    if (!x.channels[i]->Pop(&events, 0.0)) continue;
    for (const engine::GenerationEvent& ev : events) Account(metrics, x, static_cast<int>(i), ev);
  }
  bool any_done = false;
  for (size_t i = 0; i < x.choice_done.size(); ++i) {
    if (x.choice_done[i]) {
      any_done = true;
    } else {
      metrics->AddGeneratedTokens(x.choice_tokens[i]);
    }
  }
  if (!any_done) metrics->AddPromptTokens(x.prompt_tokens);
  BillPartial(x);
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

}  // namespace

std::string RandomId(std::string_view prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  static const char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id.push_back(kAlphabet[rng() % (sizeof(kAlphabet) - 1)]);
  return id;
}

ReplyFormat ReplyFormatOf(const ResponseOptions& options) {
  ReplyFormat f;
  f.reasoning = options.reasoning;
  f.starts_thinking = options.starts_thinking;
  f.parse_tools = options.parse_tools;
  f.tool_format = options.tool_format;
  f.tool_names = options.tool_names;
  return f;
}

ApiError FailureOf(const engine::GenerationEvent& e) {
  return ServerError(500, e.error.ok() ? "generation was cancelled" : e.error.message());
}

ReplyPiece PushEvent(ReplyParser& parser, const engine::GenerationEvent& e, bool last,
                     std::vector<ToolCall>* calls) {
  ReplyPiece piece = parser.Push(e.text, e.n_tokens);
  if (last) {
    ReplyEnd end = parser.Finish();
    piece.reasoning += end.reasoning;
    piece.content += end.content;
    *calls = std::move(end.calls);
  }
  return piece;
}

std::string ErrorBodyFor(ErrorStyle style, const ApiError& error) {
  if (style == ErrorStyle::kOpenAI) return ErrorBody(error);
  // Anthropic's error types by status (its documented set; 503 is its "overloaded").
  const char* type = "api_error";
  switch (error.status) {
    case 400:
      type = "invalid_request_error";
      break;
    case 401:
      type = "authentication_error";
      break;
    case 403:
      type = "permission_error";
      break;
    case 404:
      type = "not_found_error";
      break;
    case 413:
      type = "request_too_large";
      break;
    case 429:
      type = "rate_limit_error";
      break;
    case 503:
      type = "overloaded_error";
      break;
  }
  json e = {{"type", type}, {"message", error.message}};
  // Not in Anthropic's shape, but what a client needs to fix the request; SDKs ignore them.
  if (!error.param.empty()) e["param"] = error.param;
  if (!error.code.empty()) e["code"] = error.code;
  return Dump(json{{"type", "error"}, {"error", std::move(e)}});
}

std::optional<ApiError> HttpServer::BuildPrompt(const ApiRequest& api, std::vector<int32_t>* tokens,
                                                std::string* echo, bool* opens_thinking) {
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
    if (!api.reasoning_effort.empty() &&
        (kwargs.is_null() || !kwargs.contains("reasoning_effort"))) {
      if (kwargs.is_null()) kwargs = nlohmann::ordered_json::object();
      kwargs["reasoning_effort"] = api.reasoning_effort;
    }
    StatusOr<std::string> text = render_chat_(api.messages, kwargs);
    if (!text.ok()) {
      return InvalidRequest(
          "Cannot apply the model's chat template to these messages: " + text.status().message(),
          "messages", "invalid_value");
    }
    *tokens = encode(*text);
    if (opens_thinking != nullptr) *opens_thinking = PromptOpensThinking(*text);
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

bool HttpServer::Admit(const httplib::Request& req, httplib::Response& res, const char* endpoint,
                       ErrorStyle style, KeyIdentity* who) {
  if (!Authorized(req, res, endpoint, who, style)) return false;
  if (stopping_) {
    ApiError e = ServerError(503, "The server is shutting down.", "shutting_down");
    e.retry_after_s = options_.retry_after_s;
    SendError(res, e, endpoint, style);
    return false;
  }
  return true;
}

std::optional<ApiError> HttpServer::CheckModel(const std::string& model) const {
  if (model == options_.model_id) return std::nullopt;
  ApiError e = InvalidRequest(
      "The model '" + model + "' does not exist. This server serves '" + options_.model_id + "'.",
      "model", "model_not_found");
  e.status = 404;
  return e;
}

void HttpServer::HandleGenerate(Endpoint endpoint, const httplib::Request& req,
                                httplib::Response& res) {
  const double arrival = NowSeconds();
  ApiBinding api_binding;
  api_binding.endpoint = endpoint == Endpoint::kChat ? "chat_completions" : "completions";
  api_binding.id_prefix = endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-";
  api_binding.prompt_param = endpoint == Endpoint::kChat ? "messages" : "prompt";
  KeyIdentity who;
  if (!Admit(req, res, api_binding.endpoint, ErrorStyle::kOpenAI, &who)) return;
  ParseOptions popts;
  popts.n_vocab = service_->tokenizer().vocab_size();
  ApiRequest api;
  if (auto e = ParseRequest(endpoint, req.body, popts, &api)) {
    return SendError(res, *e, api_binding.endpoint);
  }
  const Tokenizer& tok = service_->tokenizer();
  api_binding.make_writer = [&tok](ResponseOptions ro) -> std::unique_ptr<ResponseWriter> {
    return std::make_unique<ResponseBuilder>(std::move(ro), tok);
  };
  RunGeneration(std::move(api), api_binding, who, arrival, req, res);
}

void HttpServer::RunGeneration(ApiRequest api, const ApiBinding& binding, const KeyIdentity& who,
                               double arrival, const httplib::Request& req,
                               httplib::Response& res) {
  const char* name = binding.endpoint;
  const ErrorStyle style = binding.errors;
  auto fail = [&](ApiError e) {
    if (!binding.tool_parameters_param.empty()) {
      RenameToolParams(&e, binding.tool_parameters_param);
    }
    SendError(res, e, name, style);
  };
  if (auto e = CheckModel(api.model)) return fail(*e);
  std::vector<int32_t> prompt;
  std::string echo;
  bool opens_thinking = false;
  if (auto e = BuildPrompt(api, &prompt, &echo, &opens_thinking)) return fail(*e);

  const int64_t ctx = service_->options().ctx;
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  const int64_t limit = options_.max_tokens_limit > 0 ? options_.max_tokens_limit : ctx;
  int64_t max_tokens;
  if (api.max_tokens) {
    max_tokens = *api.max_tokens;
    if (max_tokens > limit) {
      return fail(InvalidRequest(
          binding.max_tokens_param + " is too large: " + std::to_string(max_tokens) +
              ". This server allows at most " + std::to_string(limit) + " completion tokens.",
          binding.max_tokens_param, "invalid_value"));
    }
    if (n_prompt + max_tokens > ctx) {
      return fail(ContextOverflow(ctx, n_prompt, max_tokens, binding.prompt_param));
    }
  } else {
    if (n_prompt >= ctx) return fail(ContextOverflow(ctx, n_prompt, 0, binding.prompt_param));
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
      return fail(InvalidRequest(
          "Cannot constrain the tool call to '" + param + "': " + tg.status().message(), param,
          "invalid_value"));
    }
    g.grammar = *tg;
  }
  if (api.has_prediction) {
    g.prediction = service_->tokenizer().Encode(api.prediction, false, false);
    if (static_cast<int64_t>(g.prediction.size()) > ctx) {
      return fail(InvalidRequest("prediction.content has " + std::to_string(g.prediction.size()) +
                                     " tokens, more than the context of " + std::to_string(ctx) +
                                     " tokens.",
                                 "prediction.content", "invalid_value"));
    }
  }
  if (meter_ != nullptr) {
    if (auto e =
            CheckQuota(*meter_, who, n_prompt, service_->options().auto_tier, &g.service_tier)) {
      return fail(*e);
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
        e = ContextOverflow(ctx, n_prompt, 0, binding.prompt_param);
        break;
      case StatusCode::kInvalidArgument:
        e = InvalidRequest(s.message());
        break;
      default:
        e = ServerError(500, s.message());
    }
    return fail(e);
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
  ex->choice_tokens.assign(api.n, 0);
  ResponseOptions ro;
  ro.endpoint = api.endpoint;
  ro.id = RandomId(binding.id_prefix);
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
  ro.prompt_tokens = n_prompt;
  ro.legacy_functions = api.legacy_functions;
  if (!api.tools.is_null() && api.tool_choice != ToolChoice::kNone) {
    ro.parse_tools = true;
    ro.tool_format = options_.tool_format;
    for (const auto& t : api.tools) ro.tool_names.insert(t["function"]["name"].get<std::string>());
  }
  if (api.endpoint == Endpoint::kChat) {
    ro.reasoning = options_.reasoning_format;
    // A grammar shapes the reply from its first token: it cannot close a block the prompt
    // opened, so the reply is the answer.
    ro.starts_thinking = opens_thinking && g.grammar == nullptr;
  }
  ex->builder = binding.make_writer(std::move(ro));

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
          Account(metrics_, *ex, i, ev);
        }
      }
      if (ex->finished || NowSeconds() < next_check) continue;
      next_check = NowSeconds() + options_.poll_s;
      if (PeerClosed(ex->socket)) {
        Abandon(metrics_, *ex);             // billed and counted, as for a stream cut short
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
        return fail(e);
      }
    }
    if (auto e = Bill(*ex, MergeFinals(ex->finals))) return fail(*e);
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
      [this, ex](size_t, httplib::DataSink& sink) {
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
          if (Account(metrics_, *ex, i, ev)) {
            // The last choice's final event: bill the merged usage before reporting it.
            if (auto e = Bill(*ex, MergeFinals(ex->finals))) {
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
        if (!ex->finished) Abandon(metrics_, *ex);
        metrics_->CountRequest(ex->endpoint, ex->finished ? (success ? ex->status : 499) : 499);
      });
}

}  // namespace uf::server
