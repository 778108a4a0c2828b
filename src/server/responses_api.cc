#include "server/responses_api.h"

#include <httplib.h>

#include <limits>
#include <set>

#include "base/clock.h"
#include "grammar/json_schema.h"
#include "server/http_server.h"
#include "server/openai_request_tools.h"
#include "server/request_fields.h"
#include "tokenizer/tokenizer.h"

namespace uf::server {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr int64_t kMaxOutputTokens = std::numeric_limits<int32_t>::max();

// Text of a message's content: a string, or input_text / output_text parts joined with "\n" as
// chat content parts are. Images, files and audio are refused naming the part.
std::optional<ApiError> ItemText(const json& content, const std::string& param, std::string* out) {
  out->clear();
  if (content.is_string()) {
    *out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) return WrongType(param, content, "a string or an array of parts");
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string p = param + "[" + std::to_string(j) + "]";
    const json& part = content[j];
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return MissingParam(p + ".type");
    }
    const std::string type = part["type"].get<std::string>();
    if (type != "input_text" && type != "output_text" && type != "text") {
      return Unsupported(p + ".type", "content parts of type " + Quote(type) + " (text only).");
    }
    if (!part.contains("text") || !part["text"].is_string()) return MissingParam(p + ".text");
    if (j > 0) out->push_back('\n');
    out->append(part["text"].get<std::string>());
  }
  return std::nullopt;
}

// A chat tool call (arguments parsed, as templates read them) from a function_call item.
std::optional<ApiError> CallOfItem(const json& item, const std::string& param, json* call) {
  for (const char* key : {"call_id", "name", "arguments"}) {
    if (!item.contains(key) || !item[key].is_string()) return MissingParam(param + "." + key);
  }
  const json calls =
      json::array({{{"id", item["call_id"]},
                    {"type", "function"},
                    {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}}});
  json parsed;
  if (auto e = ParseAssistantToolCalls(calls, param, &parsed)) return e;
  *call = parsed[0];
  return std::nullopt;
}

// tools: [{"type": "function", "name", "description", "parameters", "strict"}] as chat tools,
// validated by the chat parser (errors renamed to this API's paths).
std::optional<ApiError> ParseResponsesTools(const json& v, std::string_view body, ApiRequest* r) {
  return ParseFlatTools(
      v, body, "parameters",
      [](const std::string& p, const json&, const ojson& t, ojson* f) -> std::optional<ApiError> {
        if (!t.is_object() || !t.contains("type")) return MissingParam(p + ".type");
        if (t["type"] != "function") {
          return Unsupported(p + ".type", "only function tools (no hosted tools such as " +
                                              t["type"].dump() + ").");
        }
        for (auto it = t.begin(); it != t.end(); ++it) {
          if (it.key() != "type") (*f)[it.key()] = it.value();
        }
        return std::nullopt;
      },
      r);
}

std::optional<ApiError> ParseResponsesToolChoice(const json& v, ApiRequest* r) {
  if (v.is_null() || v.is_string()) return ParseToolChoice(v, r);
  if (!v.is_object()) return WrongType("tool_choice", v, "a string or an object");
  if (v.value("type", json()) != "function") {
    return Unsupported("tool_choice.type", "only 'none', 'auto', 'required' or a function.");
  }
  if (!v.contains("name") || !v["name"].is_string()) return MissingParam("tool_choice.name");
  r->tool_choice = ToolChoice::kNamed;
  r->tool_choice_name = v["name"].get<std::string>();
  return std::nullopt;
}

// text: {"format": {"type": "text" | "json_object" | "json_schema", "name", "schema", "strict",
// "description"}, "verbosity"}.
std::optional<ApiError> ParseText(const json& v, std::string_view body, ApiRequest* r) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_object()) return WrongType("text", v, "an object");
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it.key() == "verbosity") {
      std::string ignored;
      if (auto e = GetString("text.verbosity", it.value(), &ignored)) return e;
    } else if (it.key() != "format") {
      return UnknownParam("text." + it.key());
    }
  }
  if (!v.contains("format") || v["format"].is_null()) return std::nullopt;
  const json& f = v["format"];
  if (!f.is_object()) return WrongType("text.format", f, "an object");
  if (!f.contains("type") || !f["type"].is_string()) return MissingParam("text.format.type");
  const std::string type = f["type"].get<std::string>();
  for (auto it = f.begin(); it != f.end(); ++it) {
    static const std::set<std::string> kSchemaKeys = {"type", "name", "schema", "strict",
                                                      "description"};
    if (type == "json_schema" ? !kSchemaKeys.count(it.key()) : it.key() != "type") {
      return UnknownParam("text.format." + it.key());
    }
  }
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    r->grammar = grammar::JsonObjectGrammar();
    return std::nullopt;
  }
  if (type != "json_schema") {
    return InvalidRequest("Invalid value for 'text.format.type': " + Quote(type) +
                              ". Supported values are: 'text', 'json_object' and 'json_schema'.",
                          "text.format.type", "invalid_value");
  }
  if (!f.contains("schema") || !f["schema"].is_object()) {
    return MissingParam("text.format.schema");
  }
  const ojson schema = ojson::parse(body.begin(), body.end())["text"]["format"]["schema"];
  return SchemaGrammar(schema, "text.format.schema", &r->grammar);
}

// reasoning: {"effort", "summary", "generate_summary"}. The effort goes to the template's
// reasoning_effort (gpt-oss reads it); "none" also turns a reasoning template's thinking off
// (chat_template_kwargs.enable_thinking = false, which Qwen3's reads). ParseReasoningEffort.
std::optional<ApiError> ParseReasoning(const json& v, ApiRequest* r) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_object()) return WrongType("reasoning", v, "an object");
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string p = "reasoning." + it.key();
    if (it.key() != "effort" && it.key() != "summary" && it.key() != "generate_summary") {
      return UnknownParam(p);
    }
    if (it.key() == "effort") {
      if (auto e = ParseReasoningEffort(p, it.value(), r)) return e;
      continue;
    }
    std::string s;
    if (auto e = GetString(p, it.value(), &s)) return e;
  }
  return std::nullopt;
}

// Fields that change nothing in the output: accepted when well-typed, and ignored.
std::optional<ApiError> IgnoredResponsesParam(const std::string& key, const json& v, bool* known) {
  static const std::set<std::string> kStrings = {"user", "prompt_cache_key", "safety_identifier",
                                                 "prompt_cache_retention"};
  *known = true;
  if (kStrings.count(key)) {
    std::string ignored;
    return GetString(key, v, &ignored);
  }
  if (key == "stream_options") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_object()) return WrongType(key, v, "an object");
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (it.key() != "include_obfuscation") return UnknownParam(key + "." + it.key());
    }
    return std::nullopt;
  }
  if (key == "truncation") {
    if (v.is_null() || v == "disabled") return std::nullopt;
    return Unsupported(key, "only 'disabled' (a prompt that does not fit is a 400).");
  }
  if (key == "include") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_array()) return WrongType(key, v, "an array");
    for (size_t i = 0; i < v.size(); ++i) {
      // Nothing is encrypted: there is no encrypted reasoning to include.
      if (v[i] != "reasoning.encrypted_content") {
        return Unsupported(key + "[" + std::to_string(i) + "]",
                           "only 'reasoning.encrypted_content' (which adds nothing here).");
      }
    }
    return std::nullopt;
  }
  if (key == "background" || key == "top_logprobs") {
    if (v.is_null() || v == false || v == 0) return std::nullopt;
    return Unsupported(key, key == "background" ? "no background responses." : "no logprobs.");
  }
  if (key == "max_tool_calls" || key == "conversation" || key == "prompt") {
    if (v.is_null()) return std::nullopt;
    return Unsupported(key, "not implemented (send the input itself).");
  }
  *known = false;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ResponsesInputMessages(const json& input, json* messages) {
  if (input.is_string()) {
    messages->push_back({{"role", "user"}, {"content", input.get<std::string>()}});
    return std::nullopt;
  }
  if (!input.is_array()) return WrongType("input", input, "a string or an array of items");
  std::string reasoning;  // a reasoning item's text, for the assistant turn after it
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string p = "input[" + std::to_string(i) + "]";
    const json& item = input[i];
    if (!item.is_object()) return WrongType(p, item, "an object");
    const std::string type = item.value("type", item.contains("role") ? "message" : "");
    if (type == "message") {
      if (!item.contains("role") || !item["role"].is_string()) return MissingParam(p + ".role");
      std::string role = item["role"].get<std::string>();
      if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
        return InvalidRequest("Invalid value for " + Quote(p + ".role") + ": " + Quote(role) +
                                  ". Supported values are: 'user', 'assistant', 'system' and "
                                  "'developer'.",
                              p + ".role", "invalid_value");
      }
      if (!item.contains("content")) return MissingParam(p + ".content");
      std::string text;
      if (auto e = ItemText(item["content"], p + ".content", &text)) return e;
      if (role == "developer") role = "system";
      messages->push_back({{"role", role}, {"content", text}});
      if (role == "assistant" && !reasoning.empty()) {
        messages->back()["reasoning_content"] = reasoning;
        reasoning.clear();
      }
    } else if (type == "function_call") {
      json call;
      if (auto e = CallOfItem(item, p, &call)) return e;
      // A call joins the assistant turn before it (its text, or the calls beside it).
      if (messages->empty() || messages->back()["role"] != "assistant") {
        messages->push_back({{"role", "assistant"}, {"content", ""}});
      }
      json& turn = messages->back();
      if (!reasoning.empty()) {
        turn["reasoning_content"] = reasoning;
        reasoning.clear();
      }
      if (!turn.contains("tool_calls")) turn["tool_calls"] = json::array();
      turn["tool_calls"].push_back(std::move(call));
    } else if (type == "function_call_output") {
      if (!item.contains("call_id") || !item["call_id"].is_string()) {
        return MissingParam(p + ".call_id");
      }
      if (!item.contains("output")) return MissingParam(p + ".output");
      std::string text;
      if (auto e = ItemText(item["output"], p + ".output", &text)) return e;
      messages->push_back({{"role", "tool"}, {"content", text}, {"tool_call_id", item["call_id"]}});
    } else if (type == "reasoning") {
      // An earlier output's reasoning: the assistant turn after it carries it (templates keep
      // it for the turns since the last user message, a tool loop's).
      for (const char* key : {"content", "summary"}) {
        if (!item.contains(key) || !item[key].is_array()) continue;
        for (const json& part : item[key]) {
          if (part.is_object() && part.contains("text") && part["text"].is_string()) {
            reasoning += part["text"].get<std::string>();
          }
        }
        if (!reasoning.empty()) break;  // the summary only when the text itself is not there
      }
    } else {
      return Unsupported(p + ".type", "input items of type " + Quote(type) +
                                          " (supported: message, function_call, "
                                          "function_call_output, reasoning).");
    }
  }
  return std::nullopt;
}

static std::optional<ApiError> ParseResponsesRequestImpl(std::string_view body,
                                                         const ParseOptions& options,
                                                         ResponsesRequest* out) {
  *out = ResponsesRequest();
  ApiRequest& r = out->api;
  r.endpoint = Endpoint::kChat;
  r.messages = json::array();
  json root;
  if (auto e = ParseBodyObject(body, options, "We could not parse the JSON body of your request.",
                               &root)) {
    return e;
  }
  json& echo = out->echo;
  echo = {{"instructions", nullptr},
          {"max_output_tokens", nullptr},
          {"metadata", json::object()},
          {"parallel_tool_calls", true},
          {"previous_response_id", nullptr},
          {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
          {"store", true},
          {"temperature", 1.0},
          {"text", {{"format", {{"type", "text"}}}}},
          {"tool_choice", "auto"},
          {"tools", json::array()},
          {"top_p", 1.0},
          {"truncation", "disabled"},
          {"user", nullptr}};
  bool have_model = false, have_input = false;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    std::optional<ApiError> e;
    bool known = false;
    if (key == "model") {
      e = GetString(key, v, &r.model);
      have_model = v.is_string();
    } else if (key == "input") {
      have_input = !v.is_null();
      if (have_input) e = ResponsesInputMessages(v, &r.messages);
    } else if (key == "instructions") {
      if (!v.is_null() && !v.is_string()) e = WrongType(key, v, "a string");
      out->instructions = v;
    } else if (key == "previous_response_id") {
      e = GetString(key, v, &out->previous_response_id);
    } else if (key == "store") {
      e = GetBool(key, v, &out->store);
    } else if (key == "stream") {
      e = GetBool(key, v, &r.stream);
      continue;  // not echoed
    } else if (key == "max_output_tokens") {
      e = GetInt(key, v, 1, kMaxOutputTokens, &r.max_tokens);
    } else if (key == "temperature") {
      e = GetFloat(key, v, 0, 2, &r.sampling.temperature);
    } else if (key == "top_p") {
      e = GetFloat(key, v, 0, 1, &r.sampling.top_p);
    } else if (key == "tools") {
      e = ParseResponsesTools(v, body, &r);
    } else if (key == "tool_choice") {
      e = ParseResponsesToolChoice(v, &r);
    } else if (key == "parallel_tool_calls") {
      e = GetBool(key, v, &r.parallel_tool_calls);
    } else if (key == "text") {
      e = ParseText(v, body, &r);
    } else if (key == "reasoning") {
      e = ParseReasoning(v, &r);
    } else if (key == "service_tier") {
      e = ParseTier(v, &r.service_tier);
      continue;  // the response reports the serving tier
    } else if (key == "metadata") {
      if (!v.is_null() && !v.is_object()) e = WrongType(key, v, "an object");
    } else if ((e = IgnoredResponsesParam(key, v, &known)) || known) {
    } else if ((e = ParseExtension(key, v, &r, &known)) || known) {
      continue;  // extensions are not echoed
    } else {
      e = UnknownParam(key);
    }
    if (e) return e;
    if (echo.contains(key) && !v.is_null()) echo[key] = v;
  }
  if (!have_model) return MissingParam("model");
  if (!have_input && out->previous_response_id.empty()) return MissingParam("input");
  if (auto e = CheckToolChoice(r)) return e;
  return std::nullopt;
}

std::optional<ApiError> ParseResponsesRequest(std::string_view body, const ParseOptions& options,
                                              ResponsesRequest* out) {
  return CatchJsonErrors([&] { return ParseResponsesRequestImpl(body, options, out); });
}

void HttpServer::HandleResponses(const httplib::Request& req, httplib::Response& res) {
  const double arrival = NowSeconds();
  const char* name = "responses";
  KeyIdentity who;
  if (!Admit(req, res, name, ErrorStyle::kOpenAI, &who)) return;
  ParseOptions popts;
  popts.n_vocab = service_->tokenizer().vocab_size();
  ResponsesRequest rr;
  if (auto e = ParseResponsesRequest(req.body, popts, &rr)) return SendError(res, *e, name);
  // The conversation: the previous response's (its inputs and output), then this input.
  json conversation = json::array();
  if (!rr.previous_response_id.empty()) {
    std::optional<StoredResponse> prev = responses_->Get(rr.previous_response_id, who.id);
    if (!prev) {
      return SendError(res,
                       InvalidRequest("Previous response with id '" + rr.previous_response_id +
                                          "' not found (responses are kept in memory for a "
                                          "limited time; see docs/serving.md).",
                                      "previous_response_id", "previous_response_not_found"),
                       name);
    }
    conversation = std::move(prev->messages);
  }
  for (json& m : rr.api.messages) conversation.push_back(std::move(m));
  if (conversation.empty()) {
    return SendError(res, InvalidRequest("Invalid 'input': no items.", "input", "empty_array"),
                     name);
  }
  rr.api.messages = json::array();
  if (rr.instructions.is_string()) {
    rr.api.messages.push_back({{"role", "system"}, {"content", rr.instructions}});
  }
  for (const json& m : conversation) rr.api.messages.push_back(m);
  ResponsesStoreTarget target;
  if (rr.store) {
    target.store = responses_.get();
    target.key_id = who.id;
    target.conversation = std::move(conversation);
  }
  ApiBinding binding;
  binding.endpoint = name;
  binding.id_prefix = "resp_";
  binding.prompt_param = "input";
  binding.max_tokens_param = "max_output_tokens";
  binding.tool_parameters_param = "parameters";
  binding.make_writer = [echo = std::move(rr.echo),
                         target = std::move(target)](ResponseOptions ro) {
    return std::unique_ptr<ResponseWriter>(
        std::make_unique<ResponsesWriter>(std::move(ro), echo, target));
  };
  RunGeneration(std::move(rr.api), binding, who, arrival, req, res);
}

void HttpServer::HandleStoredResponse(const httplib::Request& req, httplib::Response& res,
                                      bool remove) {
  const char* name = "responses";
  KeyIdentity who;
  if (!Authorized(req, res, name, &who)) return;
  const std::string id = req.matches[1];
  std::optional<StoredResponse> stored;
  if (!remove) stored = responses_->Get(id, who.id);
  if (remove ? !responses_->Remove(id, who.id) : !stored.has_value()) {
    ApiError e = InvalidRequest("No response found with id '" + id + "'.", "", "not_found");
    e.status = 404;
    return SendError(res, e, name);
  }
  json body = remove ? json{{"id", id}, {"object", "response.deleted"}, {"deleted", true}}
                     : stored->response;
  res.set_content(Dump(body), "application/json");
  metrics_->CountRequest(name, 200);
}

}  // namespace uf::server
