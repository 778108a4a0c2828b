#include "server/anthropic_api.h"

#include <httplib.h>

#include <limits>
#include <set>

#include "base/clock.h"
#include "server/http_server.h"
#include "server/openai_request_tools.h"
#include "server/request_fields.h"
#include "tokenizer/tokenizer.h"

namespace uf::server {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr size_t kMaxStopSequences = 16;

// Joined text of text blocks (system prompts, tool results): a string or [{"type": "text"}].
std::optional<ApiError> BlocksText(const json& v, const std::string& param, std::string* out) {
  out->clear();
  if (v.is_string()) {
    *out = v.get<std::string>();
    return std::nullopt;
  }
  if (!v.is_array()) return WrongType(param, v, "a string or an array of text blocks");
  for (size_t j = 0; j < v.size(); ++j) {
    const std::string p = param + "[" + std::to_string(j) + "]";
    if (!v[j].is_object() || v[j].value("type", "") != "text") {
      return Unsupported(p + ".type", "only text blocks here.");
    }
    if (!v[j].contains("text") || !v[j]["text"].is_string()) return MissingParam(p + ".text");
    if (j > 0) out->push_back('\n');
    out->append(v[j]["text"].get<std::string>());
  }
  return std::nullopt;
}

// One Anthropic message as chat messages: a user turn's tool_result blocks become tool messages
// (before its text), an assistant turn's tool_use blocks its tool_calls and its thinking blocks
// its reasoning_content (the template decides what to keep; redacted thinking is dropped).
std::optional<ApiError> ConvertMessage(const json& m, const std::string& param, json* out) {
  if (!m.is_object()) return WrongType(param, m, "an object");
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (it.key() != "role" && it.key() != "content") return UnknownParam(param + "." + it.key());
  }
  if (!m.contains("role") || !m["role"].is_string()) return MissingParam(param + ".role");
  const std::string role = m["role"].get<std::string>();
  if (role != "user" && role != "assistant") {
    return InvalidRequest("Invalid value for " + Quote(param + ".role") + ": " + Quote(role) +
                              ". Supported values are: 'user' and 'assistant'.",
                          param + ".role", "invalid_value");
  }
  if (!m.contains("content")) return MissingParam(param + ".content");
  const json& content = m["content"];
  if (content.is_string()) {
    out->push_back({{"role", role}, {"content", content}});
    return std::nullopt;
  }
  if (!content.is_array()) return WrongType(param + ".content", content, "a string or blocks");
  std::string text, reasoning;
  bool have_text = false;
  json calls = json::array();
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string p = param + ".content[" + std::to_string(j) + "]";
    const json& b = content[j];
    if (!b.is_object() || !b.contains("type") || !b["type"].is_string()) {
      return MissingParam(p + ".type");
    }
    const std::string type = b["type"].get<std::string>();
    if (type == "text") {
      if (!b.contains("text") || !b["text"].is_string()) return MissingParam(p + ".text");
      if (have_text) text.push_back('\n');
      text += b["text"].get<std::string>();
      have_text = true;
    } else if (type == "tool_use" && role == "assistant") {
      if (!b.contains("id") || !b["id"].is_string()) return MissingParam(p + ".id");
      if (!b.contains("name") || !b["name"].is_string()) return MissingParam(p + ".name");
      const json input = b.contains("input") ? b["input"] : json::object();
      if (!input.is_object()) return WrongType(p + ".input", input, "an object");
      calls.push_back({{"id", b["id"]},
                       {"type", "function"},
                       {"function", {{"name", b["name"]}, {"arguments", input}}}});
    } else if (type == "tool_result" && role == "user") {
      if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string()) {
        return MissingParam(p + ".tool_use_id");
      }
      std::string result;
      if (b.contains("content") && !b["content"].is_null()) {
        if (auto e = BlocksText(b["content"], p + ".content", &result)) return e;
      }
      if (b.value("is_error", false)) result = "Error: " + result;
      out->push_back({{"role", "tool"}, {"content", result}, {"tool_call_id", b["tool_use_id"]}});
    } else if (type == "thinking" && role == "assistant") {
      if (b.contains("thinking") && b["thinking"].is_string()) {
        reasoning += b["thinking"].get<std::string>();
      }
    } else if (type == "redacted_thinking" && role == "assistant") {
      // dropped: nothing readable in it
    } else {
      return Unsupported(p + ".type", "content blocks of type " + Quote(type) + " in a " + role +
                                          " message (supported: text, tool_use in assistant "
                                          "turns, tool_result in user turns).");
    }
  }
  if (role == "assistant") {
    json msg = {{"role", "assistant"}, {"content", text}};
    if (!calls.empty()) msg["tool_calls"] = std::move(calls);
    if (!reasoning.empty()) msg["reasoning_content"] = std::move(reasoning);
    out->push_back(std::move(msg));
  } else if (have_text || content.empty()) {
    out->push_back({{"role", "user"}, {"content", text}});
  }
  return std::nullopt;
}

// tools: [{"name", "description", "input_schema", "type": "custom"}] as chat function tools,
// validated by the chat parser (errors renamed to this API's paths).
std::optional<ApiError> ParseAnthropicTools(const json& v, std::string_view body, ApiRequest* r) {
  return ParseFlatTools(
      v, body, "input_schema",
      [](const std::string& p, const json& raw, const ojson& t,
         ojson* f) -> std::optional<ApiError> {
        if (!t.is_object()) return WrongType(p, raw, "an object");
        if (t.contains("type") && t["type"] != "custom") {
          return Unsupported(p + ".type", "only custom tools (no server or client tools such as " +
                                              t["type"].dump() + ").");
        }
        for (auto it = t.begin(); it != t.end(); ++it) {
          if (it.key() == "type" || it.key() == "cache_control") continue;
          (*f)[it.key() == "input_schema" ? "parameters" : it.key()] = it.value();
        }
        return std::nullopt;
      },
      r);
}

// tool_choice: {"type": "auto" | "any" | "tool" | "none", "name", "disable_parallel_tool_use"}.
std::optional<ApiError> ParseAnthropicToolChoice(const json& v, ApiRequest* r) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_object()) return WrongType("tool_choice", v, "an object");
  if (!v.contains("type") || !v["type"].is_string()) return MissingParam("tool_choice.type");
  const std::string type = v["type"].get<std::string>();
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it.key() == "disable_parallel_tool_use") {
      bool disable = false;
      if (auto e = GetBool("tool_choice." + it.key(), it.value(), &disable)) return e;
      r->parallel_tool_calls = !disable;
    } else if (it.key() != "type" && !(type == "tool" && it.key() == "name")) {
      return UnknownParam("tool_choice." + it.key());
    }
  }
  if (type == "auto") {
    r->tool_choice = ToolChoice::kAuto;
  } else if (type == "any") {
    r->tool_choice = ToolChoice::kRequired;
  } else if (type == "none") {
    r->tool_choice = ToolChoice::kNone;
  } else if (type == "tool") {
    if (!v.contains("name") || !v["name"].is_string()) return MissingParam("tool_choice.name");
    r->tool_choice = ToolChoice::kNamed;
    r->tool_choice_name = v["name"].get<std::string>();
  } else {
    return InvalidRequest("Invalid value for 'tool_choice.type': " + Quote(type) +
                              ". Supported values are: 'auto', 'any', 'tool' and 'none'.",
                          "tool_choice.type", "invalid_value");
  }
  return std::nullopt;
}

}  // namespace

static std::optional<ApiError> ParseMessagesRequestImpl(std::string_view body,
                                                        const ParseOptions& options,
                                                        bool count_tokens, ApiRequest* out) {
  *out = ApiRequest();
  ApiRequest& r = *out;
  r.endpoint = Endpoint::kChat;
  json root;
  if (auto e = ParseBodyObject(body, options, "The request body is not valid JSON.", &root)) {
    return e;
  }
  bool have_model = false, have_messages = false;
  std::string system;
  bool have_system = false;
  json messages = json::array();
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    std::optional<ApiError> e;
    bool known = false;
    static const std::set<std::string> kGeneration = {
        "max_tokens", "stream", "stop_sequences", "temperature",
        "top_p",      "top_k",  "metadata",       "service_tier",
        "seed",       "min_p",  "ignore_eos",     "repetition_penalty",
        "speculation"};
    if (count_tokens && kGeneration.count(key)) {
      e = UnknownParam(key);  // count_tokens takes the prompt's fields only
    } else if (key == "model") {
      e = GetString(key, v, &r.model);
      have_model = v.is_string();
    } else if (key == "messages") {
      have_messages = true;
      if (!v.is_array()) {
        e = WrongType(key, v, "an array");
      } else if (v.empty()) {
        e = InvalidRequest("messages: at least one message is required", key, "empty_array");
      }
      for (size_t i = 0; !e && i < v.size(); ++i) {
        e = ConvertMessage(v[i], "messages[" + std::to_string(i) + "]", &messages);
      }
    } else if (key == "system") {
      have_system = !v.is_null();
      if (have_system) e = BlocksText(v, key, &system);
    } else if (key == "max_tokens") {
      e = GetInt(key, v, 1, std::numeric_limits<int32_t>::max(), &r.max_tokens);
    } else if (key == "stream") {
      e = GetBool(key, v, &r.stream);
    } else if (key == "stop_sequences") {
      e = ParseStop(key, v, kMaxStopSequences, &r.stop);
    } else if (key == "temperature") {
      e = GetFloat(key, v, 0, 1, &r.sampling.temperature);  // Anthropic's range
    } else if (key == "top_p") {
      e = GetFloat(key, v, 0, 1, &r.sampling.top_p);
    } else if (key == "tools") {
      e = ParseAnthropicTools(v, body, &r);
    } else if (key == "tool_choice") {
      e = ParseAnthropicToolChoice(v, &r);
    } else if (key == "metadata") {
      if (!v.is_null() && !v.is_object()) e = WrongType(key, v, "an object");
    } else if (key == "service_tier") {
      // Anthropic's values: "auto" and "standard_only" (= default); this server's tier names too.
      if (v == "standard_only") {
        r.service_tier = scheduler::ServiceTier::kDefault;
      } else {
        e = ParseTier(v, &r.service_tier);
      }
    } else if (key == "thinking") {
      // {"type": "enabled", "budget_tokens"} leaves a reasoning model as it is; "disabled" turns
      // its template's thinking off (chat_template_kwargs.enable_thinking = false).
      if (!v.is_null()) {
        const std::string type = v.is_object() ? v.value("type", "") : "";
        if (type == "disabled") {
          DisableThinking(&r);
        } else if (type != "enabled" && type != "adaptive") {
          e = InvalidRequest("Invalid value for 'thinking.type': expected 'enabled' or 'disabled'.",
                             "thinking.type", "invalid_value");
        }
      }
    } else if (key == "container" || key == "mcp_servers" || key == "context_management") {
      if (!v.is_null()) e = Unsupported(key, "not implemented by this server.");
    } else if (key == "top_k") {  // native here (an extension elsewhere)
      e = ParseExtension(key, v, &r, &known);
    } else if ((e = ParseExtension(key, v, &r, &known)) || known) {
    } else {
      e = InvalidRequest(key + ": Extra inputs are not permitted", key, "unknown_parameter");
    }
    if (e) return e;
  }
  if (!have_model) return MissingParam("model");
  if (!have_messages) return MissingParam("messages");
  if (!count_tokens && !r.max_tokens) return MissingParam("max_tokens");
  r.messages = json::array();
  if (have_system) r.messages.push_back({{"role", "system"}, {"content", system}});
  for (json& m : messages) r.messages.push_back(std::move(m));
  if (auto e = CheckToolChoice(r)) return e;
  return std::nullopt;
}

std::optional<ApiError> ParseMessagesRequest(std::string_view body, const ParseOptions& options,
                                             bool count_tokens, ApiRequest* out) {
  return CatchJsonErrors(
      [&] { return ParseMessagesRequestImpl(body, options, count_tokens, out); });
}

void HttpServer::HandleMessages(const httplib::Request& req, httplib::Response& res) {
  const double arrival = NowSeconds();
  const char* name = "messages";
  KeyIdentity who;
  if (!Admit(req, res, name, ErrorStyle::kAnthropic, &who)) return;
  ParseOptions popts;
  popts.n_vocab = service_->tokenizer().vocab_size();
  ApiRequest api;
  if (auto e = ParseMessagesRequest(req.body, popts, /*count_tokens=*/false, &api)) {
    return SendError(res, *e, name, ErrorStyle::kAnthropic);
  }
  ApiBinding binding;
  binding.endpoint = name;
  binding.errors = ErrorStyle::kAnthropic;
  binding.id_prefix = "msg_";
  binding.prompt_param = "messages";
  binding.max_tokens_param = "max_tokens";
  binding.tool_parameters_param = "input_schema";
  binding.make_writer = [](ResponseOptions ro) {
    return std::unique_ptr<ResponseWriter>(std::make_unique<AnthropicWriter>(std::move(ro)));
  };
  RunGeneration(std::move(api), binding, who, arrival, req, res);
}

void HttpServer::HandleCountTokens(const httplib::Request& req, httplib::Response& res) {
  const char* name = "messages_count_tokens";
  KeyIdentity who;
  if (!Admit(req, res, name, ErrorStyle::kAnthropic, &who)) return;
  ParseOptions popts;
  popts.n_vocab = service_->tokenizer().vocab_size();
  ApiRequest api;
  std::optional<ApiError> e = ParseMessagesRequest(req.body, popts, /*count_tokens=*/true, &api);
  if (!e) e = CheckModel(api.model);
  std::vector<int32_t> prompt;
  std::string echo;
  if (!e) e = BuildPrompt(api, &prompt, &echo);  // the prompt the same request would run
  if (e) return SendError(res, *e, name, ErrorStyle::kAnthropic);
  res.set_content(Dump({{"input_tokens", prompt.size()}}), "application/json");
  metrics_->CountRequest(name, 200);
}

}  // namespace uf::server
