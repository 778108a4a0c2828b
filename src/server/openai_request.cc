#include "server/openai_request.h"

#include <cmath>
#include <limits>
#include <set>

#include "grammar/json_schema.h"
#include "server/openai_request_tools.h"
#include "server/request_fields.h"

namespace uf::server {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxStops = 4;          // OpenAI's limit
constexpr int kMaxChatTopLogprobs = 20;  // OpenAI's limit for chat
constexpr int kMaxCompletionLogprobs = 5;
// Choices per request: each is a sequence of its own in the engine's batch.
constexpr int kMaxChoices = 16;

std::optional<ApiError> ParseLogitBias(const json& v, int64_t n_vocab,
                                       std::vector<std::pair<int32_t, float>>* out) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_object()) return WrongType("logit_bias", v, "an object");
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& key = it.key();
    int64_t id = -1;
    bool digits = !key.empty() && key.size() <= 10;
    for (char c : key) digits = digits && c >= '0' && c <= '9';
    if (digits) id = std::stoll(key);
    if (id < 0 || id >= n_vocab) {
      return InvalidRequest("Invalid 'logit_bias': key " + Quote(key) +
                                " is not a token id of this model's vocabulary [0, " +
                                std::to_string(n_vocab) + ").",
                            "logit_bias", "invalid_value");
    }
    float bias = 0;
    if (auto e = GetFloat("logit_bias", it.value(), -100, 100, &bias)) return e;
    out->emplace_back(static_cast<int32_t>(id), bias);
  }
  return std::nullopt;
}

std::optional<ApiError> ParseStreamOptions(const json& v, ApiRequest* r) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_object()) return WrongType("stream_options", v, "an object");
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it.key() == "include_usage") {
      if (auto e = GetBool("stream_options.include_usage", it.value(), &r->include_usage)) {
        return e;
      }
    } else if (it.key() == "include_obfuscation") {
      bool ignored = false;
      if (auto e = GetBool("stream_options.include_obfuscation", it.value(), &ignored)) return e;
    } else {
      return InvalidRequest("Unrecognized stream_options argument supplied: " + it.key(),
                            "stream_options." + it.key(), "unknown_parameter");
    }
  }
  return std::nullopt;
}

// Text of a message's content: a string, or an array of {"type": "text", "text"} parts (joined
// with "\n"). Other part types (images, audio, files) are rejected.
std::optional<ApiError> ContentText(const json& content, const std::string& param, bool allow_null,
                                    std::string* out) {
  out->clear();
  if (content.is_null()) {
    if (allow_null) return std::nullopt;
    return InvalidRequest("Invalid value for " + Quote(param) + ": content is required.", param);
  }
  if (content.is_string()) {
    *out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) return WrongType(param, content, "a string or an array of parts");
  bool first = true;
  for (const json& part : content) {
    if (!part.is_object()) return WrongType(param, part, "a content part object");
    const auto type = part.find("type");
    if (type == part.end() || !type->is_string()) {
      return InvalidRequest("Missing 'type' in a content part of " + Quote(param) + ".", param);
    }
    const std::string t = type->get<std::string>();
    if (t != "text") {
      return Unsupported(param, "content parts of type " + Quote(t) + " (text only).");
    }
    for (auto it = part.begin(); it != part.end(); ++it) {
      if (it.key() != "type" && it.key() != "text") {
        return InvalidRequest("Unrecognized argument in a content part: " + it.key(), param);
      }
    }
    const auto text = part.find("text");
    if (text == part.end() || !text->is_string()) {
      return InvalidRequest("A text content part of " + Quote(param) + " needs a string 'text'.",
                            param);
    }
    if (!first) out->push_back('\n');
    out->append(text->get<std::string>());
    first = false;
  }
  return std::nullopt;
}

std::optional<ApiError> ParseMessages(const json& v, json* out) {
  if (!v.is_array()) return WrongType("messages", v, "an array");
  if (v.empty()) {
    return InvalidRequest("Invalid 'messages': empty array. Expected at least one message.",
                          "messages", "empty_array");
  }
  *out = json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string param = "messages[" + std::to_string(i) + "]";
    const json& m = v[i];
    if (!m.is_object()) return WrongType(param, m, "an object");
    const auto role_it = m.find("role");
    if (role_it == m.end() || !role_it->is_string()) {
      return InvalidRequest("Missing required parameter: " + Quote(param + ".role") + ".",
                            param + ".role", "missing_required_parameter");
    }
    std::string role = role_it->get<std::string>();
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" &&
        role != "tool" && role != "function") {
      return InvalidRequest("Invalid value: " + Quote(role) +
                                ". Supported values are: 'system', 'developer', 'user', "
                                "'assistant', 'tool' and 'function'.",
                            param + ".role", "invalid_value");
    }
    std::string content;
    bool have_content = false;
    json tool_calls;
    std::string tool_call_id;
    std::string name;
    std::string reasoning;
    for (auto it = m.begin(); it != m.end(); ++it) {
      const std::string& key = it.key();
      if (key == "role") continue;
      if (key == "content") {
        if (auto e = ContentText(it.value(), param + ".content", role == "assistant", &content)) {
          return e;
        }
        have_content = true;
      } else if (key == "name") {
        if (auto e = GetString(param + ".name", it.value(), &name)) return e;
      } else if (role == "assistant" &&
                 (key == "reasoning_content" || key == "reasoning" || key == "thinking")) {
        // An earlier reply's reasoning as this server (reasoning_content), OpenRouter
        // (reasoning) or Ollama (thinking) returned it: the template decides what to keep.
        if (auto e = GetString(param + "." + key, it.value(), &reasoning)) return e;
      } else if (role == "assistant" && key == "refusal") {
        std::string ignored;
        if (auto e = GetString(param + ".refusal", it.value(), &ignored)) return e;
      } else if (role == "assistant" && key == "tool_calls") {
        if (auto e = ParseAssistantToolCalls(it.value(), param + ".tool_calls", &tool_calls)) {
          return e;
        }
      } else if (role == "tool" && key == "tool_call_id") {
        if (auto e = GetString(param + ".tool_call_id", it.value(), &tool_call_id)) return e;
      } else if (role == "assistant" && key == "function_call") {
        // Legacy: one call, as a tool call whose id the following "function" message shares.
        const json& fc = it.value();
        if (fc.is_null()) continue;
        if (!fc.is_object() || !fc.contains("name") || !fc["name"].is_string()) {
          return MissingParam(param + ".function_call.name");
        }
        json calls = json::array({{{"id", LegacyCallId(fc["name"].get<std::string>())},
                                   {"type", "function"},
                                   {"function", fc}}});
        if (auto e = ParseAssistantToolCalls(calls, param + ".function_call", &tool_calls)) {
          return e;
        }
      } else if (role == "assistant" && key == "audio") {
        if (!it.value().is_null()) return Unsupported(param + "." + key, "no audio.");
      } else {
        return InvalidRequest("Unrecognized argument in " + param + ": " + key, param + "." + key,
                              "unknown_parameter");
      }
    }
    if (!have_content && role != "assistant") {
      return InvalidRequest("Missing required parameter: " + Quote(param + ".content") + ".",
                            param + ".content", "missing_required_parameter");
    }
    if (role == "tool" && tool_call_id.empty()) {
      return InvalidRequest("Missing required parameter: " + Quote(param + ".tool_call_id") + ".",
                            param + ".tool_call_id", "missing_required_parameter");
    }
    if (role == "function") {  // legacy: a function's result is a tool message
      if (name.empty()) return MissingParam(param + ".name");
      role = "tool";
      tool_call_id = LegacyCallId(name);
    }
    if (role == "developer") role = "system";
    json msg = {{"role", role}, {"content", content}};
    if (!tool_calls.is_null()) msg["tool_calls"] = std::move(tool_calls);
    if (!tool_call_id.empty()) msg["tool_call_id"] = tool_call_id;
    if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
    out->push_back(std::move(msg));
  }
  return std::nullopt;
}

// response_format: {"type": "text"}, {"type": "json_object"} or {"type": "json_schema",
// "json_schema": {"name", "schema", "strict", "description"}}. The schema is compiled here so that
// a schema the grammar compiler cannot enforce is a 400 naming the keyword, before any work.
std::optional<ApiError> ParseResponseFormat(const json& v, std::string_view body, ApiRequest* r) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_object()) return WrongType("response_format", v, "an object");
  const auto t = v.find("type");
  if (t == v.end() || !t->is_string()) {
    return InvalidRequest("Missing required parameter: 'response_format.type'.",
                          "response_format.type", "missing_required_parameter");
  }
  const std::string type = t->get<std::string>();
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it.key() != "type" && !(type == "json_schema" && it.key() == "json_schema")) {
      return InvalidRequest("Unrecognized argument in response_format: " + it.key(),
                            "response_format." + it.key(), "unknown_parameter");
    }
  }
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    r->grammar = grammar::JsonObjectGrammar();
    return std::nullopt;
  }
  if (type != "json_schema") {
    return InvalidRequest("Invalid value for 'response_format.type': " + Quote(type) +
                              ". Supported values are: 'text', 'json_object' and 'json_schema'.",
                          "response_format.type", "invalid_value");
  }
  const auto js = v.find("json_schema");
  if (js == v.end() || js->is_null()) {
    return InvalidRequest("Missing required parameter: 'response_format.json_schema'.",
                          "response_format.json_schema", "missing_required_parameter");
  }
  if (!js->is_object()) return WrongType("response_format.json_schema", *js, "an object");
  const json* schema = nullptr;
  bool have_name = false;
  for (auto it = js->begin(); it != js->end(); ++it) {
    const std::string param = "response_format.json_schema." + it.key();
    if (it.key() == "name") {
      std::string name;
      if (auto e = GetString(param, it.value(), &name)) return e;
      have_name = !name.empty();
    } else if (it.key() == "description") {
      std::string ignored;
      if (auto e = GetString(param, it.value(), &ignored)) return e;
    } else if (it.key() == "strict") {
      // Always strict: the output follows the schema whenever the server accepts it.
      bool ignored = false;
      if (auto e = GetBool(param, it.value(), &ignored)) return e;
    } else if (it.key() == "schema") {
      schema = &it.value();
    } else {
      return InvalidRequest("Unrecognized argument in response_format.json_schema: " + it.key(),
                            param, "unknown_parameter");
    }
  }
  if (!have_name) {
    return InvalidRequest("Missing required parameter: 'response_format.json_schema.name'.",
                          "response_format.json_schema.name", "missing_required_parameter");
  }
  // Parsed again, keeping the order of properties (json sorts object keys); the body already
  // parsed once, so this cannot fail.
  nlohmann::ordered_json ordered = {{"type", "object"}};
  if (schema != nullptr) {
    ordered = nlohmann::ordered_json::parse(body.begin(),
                                            body.end())["response_format"]["json_schema"]["schema"];
  }
  std::string path;
  auto g = grammar::JsonSchemaGrammar(ordered, &path);
  if (!g.ok()) {
    const std::string param =
        "response_format.json_schema.schema" + (path.empty() ? "" : "." + path);
    return InvalidRequest(
        "Invalid schema for response_format " + Quote(param) + ": " + g.status().message(), param,
        "invalid_value");
  }
  r->grammar = *g;
  return std::nullopt;
}

std::optional<ApiError> ParseTokenArray(const json& v, int64_t n_vocab, std::vector<int32_t>* out) {
  for (const json& t : v) {
    if (!t.is_number_integer()) return WrongType("prompt", t, "a token id (integer)");
    const int64_t id =
        t.is_number_unsigned() && t.get<uint64_t>() > INT64_MAX ? -1 : t.get<int64_t>();
    if (id < 0 || id >= n_vocab) {
      return InvalidRequest("Invalid 'prompt': token id " + t.dump() +
                                " is outside this model's vocabulary [0, " +
                                std::to_string(n_vocab) + ").",
                            "prompt", "invalid_value");
    }
    out->push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

// string | [string] | [int] | [[int]]; batches of several prompts are not supported.
std::optional<ApiError> ParsePrompt(const json& v, int64_t n_vocab, ApiRequest* r) {
  if (v.is_string()) {
    r->prompt = v.get<std::string>();
    return std::nullopt;
  }
  if (!v.is_array()) return WrongType("prompt", v, "a string or an array");
  if (v.empty()) return InvalidRequest("Invalid 'prompt': empty array.", "prompt");
  if (v[0].is_string() || v[0].is_array()) {
    if (v.size() != 1) return Unsupported("prompt", "batches of several prompts (send one).");
    if (v[0].is_string()) {
      r->prompt = v[0].get<std::string>();
      return std::nullopt;
    }
    r->prompt_is_tokens = true;
    return ParseTokenArray(v[0], n_vocab, &r->prompt_tokens);
  }
  r->prompt_is_tokens = true;
  return ParseTokenArray(v, n_vocab, &r->prompt_tokens);
}

// Known parameters this server accepts without acting on them (validated by type only).
std::optional<ApiError> IgnoredParam(const std::string& key, const json& v) {
  static const std::set<std::string> kStrings = {"user", "verbosity", "prompt_cache_key",
                                                 "safety_identifier", "prompt_cache_retention"};
  if (kStrings.count(key)) {
    std::string ignored;
    return GetString(key, v, &ignored);
  }
  if (key == "store") {
    bool ignored = false;
    return GetBool(key, v, &ignored);
  }
  if (key == "metadata") {
    if (!v.is_null() && !v.is_object()) return WrongType(key, v, "an object");
    return std::nullopt;
  }
  return InvalidRequest("Unrecognized request argument supplied: " + key, key, "unknown_parameter");
}

std::optional<ApiError> ParseChatParam(const std::string& key, const json& v, std::string_view body,
                                       ApiRequest* r, std::optional<int64_t>* max_completion_tokens,
                                       bool* have_messages, bool* logprobs_seen,
                                       bool* top_logprobs_seen) {
  if (key == "messages") {
    *have_messages = true;
    return ParseMessages(v, &r->messages);
  }
  if (key == "max_completion_tokens") {
    return GetInt(key, v, 1, std::numeric_limits<int32_t>::max(), max_completion_tokens);
  }
  if (key == "logprobs") {
    *logprobs_seen = true;
    return GetBool(key, v, &r->logprobs);
  }
  if (key == "top_logprobs") {
    std::optional<int64_t> n;
    if (auto e = GetInt(key, v, 0, kMaxChatTopLogprobs, &n)) return e;
    if (n) {
      r->top_logprobs = static_cast<int>(*n);
      *top_logprobs_seen = true;
    }
    return std::nullopt;
  }
  if (key == "response_format") return ParseResponseFormat(v, body, r);
  if (key == "tools") return ParseTools(v, body, r);
  if (key == "tool_choice") return ParseToolChoice(v, r);
  if (key == "parallel_tool_calls") return GetBool(key, v, &r->parallel_tool_calls);
  if (key == "reasoning_effort") return ParseReasoningEffort(key, v, r);
  if (key == "functions" || key == "function_call") return std::nullopt;  // CheckLegacyFunctions
  if (key == "modalities") {
    if (v.is_null() || v == json::array({"text"})) return std::nullopt;
    return Unsupported(key, "text output only.");
  }
  if (key == "audio" || key == "web_search_options") {
    if (v.is_null()) return std::nullopt;
    return Unsupported(key, "text generation only.");
  }
  return IgnoredParam(key, v);
}

std::optional<ApiError> ParseCompletionParam(const std::string& key, const json& v,
                                             const ParseOptions& o, ApiRequest* r,
                                             bool* have_prompt) {
  if (key == "prompt") {
    *have_prompt = true;
    return ParsePrompt(v, o.n_vocab, r);
  }
  if (key == "echo") return GetBool(key, v, &r->echo);
  if (key == "logprobs") {
    std::optional<int64_t> n;
    if (auto e = GetInt(key, v, 0, kMaxCompletionLogprobs, &n)) return e;
    if (n) {
      r->logprobs = true;
      r->top_logprobs = static_cast<int>(*n);
    }
    return std::nullopt;
  }
  if (key == "best_of") {
    std::optional<int64_t> n;
    if (auto e = GetInt(key, v, 1, 20, &n)) return e;
    if (n && *n != 1) return Unsupported(key, "best_of must be 1.");
    return std::nullopt;
  }
  if (key == "suffix") {
    std::string s;
    if (auto e = GetString(key, v, &s)) return e;
    if (!s.empty()) return Unsupported(key, "no fill-in-the-middle.");
    return std::nullopt;
  }
  return IgnoredParam(key, v);
}

}  // namespace

ApiError InvalidRequest(std::string message, std::string param, std::string code) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

std::string ErrorBody(const ApiError& error) {
  json e = {{"message", error.message},
            {"type", error.type},
            {"param", error.param.empty() ? json(nullptr) : json(error.param)},
            {"code", error.code.empty() ? json(nullptr) : json(error.code)}};
  return json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

size_t JsonDepth(std::string_view text, size_t limit) {
  size_t depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) max_depth = depth;
      if (max_depth > limit) return SIZE_MAX;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return max_depth;
}

// "speculation": "off" | "ngram" | {"mode": ..., "k": ...} (extension).
std::optional<ApiError> ParseSpeculation(const json& v, ApiRequest* r) {
  if (v.is_null()) return std::nullopt;
  engine::SpeculationRequest sp;
  sp.mode = engine::SpecMode::kNgram;
  auto mode_of = [&](const std::string& param, const json& m) -> std::optional<ApiError> {
    if (!m.is_string()) return WrongType(param, m, "a string");
    const std::string name = m.get<std::string>();
    if (name == "off") {
      sp.mode = engine::SpecMode::kOff;
    } else if (name == "ngram") {
      sp.mode = engine::SpecMode::kNgram;
    } else if (name == "draft") {
      return InvalidRequest("Invalid value for '" + param +
                                "': 'draft'. This server runs no draft model; supported values "
                                "are 'off' and 'ngram'.",
                            param, "invalid_value");
    } else {
      return InvalidRequest("Invalid value for '" + param + "': " + Quote(name) +
                                ". Supported values are: 'off' and 'ngram'.",
                            param, "invalid_value");
    }
    return std::nullopt;
  };
  if (v.is_string()) {
    if (auto e = mode_of("speculation", v)) return e;
  } else if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      const std::string param = "speculation." + it.key();
      if (it.key() == "mode") {
        if (auto e = mode_of(param, it.value())) return e;
      } else if (it.key() == "k") {
        std::optional<int64_t> k;
        if (auto e = GetInt(param, it.value(), 1, engine::kMaxSpecK, &k)) return e;
        if (k) sp.k = static_cast<int>(*k);
      } else {
        return InvalidRequest("Unrecognized request argument supplied: " + param + ".", param,
                              "unknown_parameter");
      }
    }
  } else {
    return WrongType("speculation", v, "a string or an object");
  }
  r->speculation = sp;
  return std::nullopt;
}

// OpenAI Predicted Outputs: {"type": "content", "content": string | [{"type": "text", ...}]}.
std::optional<ApiError> ParsePrediction(const json& v, ApiRequest* r) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_object()) return WrongType("prediction", v, "an object");
  const auto type = v.find("type");
  if (type == v.end() || !type->is_string()) {
    return InvalidRequest("Missing required parameter: 'prediction.type'.", "prediction.type",
                          "missing_required_parameter");
  }
  if (*type != "content") {
    return InvalidRequest("Invalid value for 'prediction.type': only 'content' is supported.",
                          "prediction.type", "invalid_value");
  }
  const auto content = v.find("content");
  if (content == v.end()) {
    return InvalidRequest("Missing required parameter: 'prediction.content'.", "prediction.content",
                          "missing_required_parameter");
  }
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it.key() != "type" && it.key() != "content") {
      return InvalidRequest("Unrecognized request argument supplied: prediction." + it.key() + ".",
                            "prediction." + it.key(), "unknown_parameter");
    }
  }
  std::string text;
  if (content->is_string()) {
    text = content->get<std::string>();
  } else if (content->is_array()) {
    for (size_t i = 0; i < content->size(); ++i) {
      const json& part = (*content)[i];
      const std::string param = "prediction.content[" + std::to_string(i) + "]";
      if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
          !part.contains("text") || !part["text"].is_string()) {
        return InvalidRequest(
            "Invalid value for '" + param + "': expected {\"type\": \"text\", \"text\": string}.",
            param, "invalid_value");
      }
      text += part["text"].get<std::string>();
    }
  } else {
    return WrongType("prediction.content", *content, "a string or an array of text parts");
  }
  r->prediction = std::move(text);
  r->has_prediction = true;
  return std::nullopt;
}

std::optional<ApiError> ParseRequest(Endpoint endpoint, std::string_view body,
                                     const ParseOptions& options, ApiRequest* out) {
  *out = ApiRequest();
  ApiRequest& r = *out;
  r.endpoint = endpoint;
  if (JsonDepth(body, options.max_json_depth) == SIZE_MAX) {
    return InvalidRequest("The request body nests JSON deeper than " +
                          std::to_string(options.max_json_depth) + " levels.");
  }
  json root;
  try {
    root = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    return InvalidRequest(
        "We could not parse the JSON body of your request. (HINT: This likely means you aren't "
        "using your HTTP library correctly. The OpenAI API expects a JSON payload.) Parser: " +
        std::string(e.what()));
  }
  if (!root.is_object()) {
    return InvalidRequest("The request body must be a JSON object, not " + TypeName(root) + ".");
  }

  bool have_model = false, have_messages = false, have_prompt = false;
  bool logprobs_seen = false, top_logprobs_seen = false;
  bool stream_options_set = false;
  std::optional<int64_t> max_tokens, max_completion_tokens;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    std::optional<ApiError> e;
    if (key == "model") {
      have_model = v.is_string();
      e = v.is_string() ? std::nullopt : std::optional(WrongType(key, v, "a string"));
      if (have_model) r.model = v.get<std::string>();
    } else if (key == "stream") {
      e = GetBool(key, v, &r.stream);
    } else if (key == "stream_options") {
      stream_options_set = !v.is_null();
      e = ParseStreamOptions(v, &r);
    } else if (key == "max_tokens") {
      e = GetInt(key, v, 1, std::numeric_limits<int32_t>::max(), &max_tokens);
    } else if (key == "temperature") {
      e = GetFloat(key, v, 0, 2, &r.sampling.temperature);
    } else if (key == "top_p") {
      e = GetFloat(key, v, 0, 1, &r.sampling.top_p);
    } else if (key == "presence_penalty") {
      e = GetFloat(key, v, -2, 2, &r.sampling.presence_penalty);
    } else if (key == "frequency_penalty") {
      e = GetFloat(key, v, -2, 2, &r.sampling.frequency_penalty);
    } else if (key == "stop") {
      e = ParseStop(key, v, kMaxStops, &r.stop);
    } else if (key == "logit_bias") {
      e = ParseLogitBias(v, options.n_vocab, &r.sampling.logit_bias);
    } else if (key == "service_tier") {
      e = ParseTier(v, &r.service_tier);
    } else if (key == "prediction") {
      e = ParsePrediction(v, &r);
    } else if (key == "n") {
      std::optional<int64_t> n;
      e = GetInt(key, v, 1, kMaxChoices, &n);
      if (n) r.n = static_cast<int>(*n);
    } else if (key == "chat_template_kwargs" && endpoint != Endpoint::kChat) {
      e = UnknownParam(key);
    } else if (bool known = false; (e = ParseExtension(key, v, &r, &known)) || known) {
      // seed, top_k, min_p, repetition_penalty, ignore_eos, speculation, chat_template_kwargs
    } else if (endpoint == Endpoint::kChat) {
      e = ParseChatParam(key, v, body, &r, &max_completion_tokens, &have_messages, &logprobs_seen,
                         &top_logprobs_seen);
    } else {
      e = ParseCompletionParam(key, v, options, &r, &have_prompt);
    }
    if (e) return e;
  }

  if (!have_model) {
    return InvalidRequest("You must provide a model parameter.", "model",
                          "missing_required_parameter");
  }
  if (endpoint == Endpoint::kChat && !have_messages) {
    return InvalidRequest("Missing required parameter: 'messages'.", "messages",
                          "missing_required_parameter");
  }
  if (endpoint == Endpoint::kCompletion && !have_prompt) {
    return InvalidRequest("Missing required parameter: 'prompt'.", "prompt",
                          "missing_required_parameter");
  }
  if (stream_options_set && !r.stream) {
    return InvalidRequest(
        "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
        "stream_options", "invalid_value");
  }
  if (endpoint == Endpoint::kChat && top_logprobs_seen && !r.logprobs) {
    return InvalidRequest("Invalid value for 'top_logprobs': 'logprobs' must be set to true.",
                          "top_logprobs", "invalid_value");
  }
  if (endpoint == Endpoint::kChat) {
    if (auto e = CheckLegacyFunctions(root, body, &r)) return e;
    if (auto e = CheckToolChoice(r)) return e;
  }
  if (r.echo && r.logprobs) {
    return Unsupported("echo", "echo together with logprobs (no prompt logprobs).");
  }
  r.max_tokens = max_completion_tokens ? max_completion_tokens : max_tokens;
  return std::nullopt;
}

}  // namespace uf::server
