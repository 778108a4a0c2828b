#include "server/request_fields.h"

#include <limits>

#include "grammar/json_schema.h"
#include "server/openai_request_tools.h"

namespace uf::server {

using json = nlohmann::json;

ApiError ServerError(int status, std::string message, std::string code) {
  ApiError e;
  e.status = status;
  e.type = status == 429 ? "rate_limit_error" : "server_error";
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string TypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer";
    case json::value_t::number_float:
      return "number";
    case json::value_t::string:
      return "string";
    case json::value_t::array:
      return "array";
    case json::value_t::object:
      return "object";
    default:
      return "value";
  }
}

ApiError WrongType(const std::string& param, const json& v, std::string_view want) {
  return InvalidRequest("Invalid type for " + Quote(param) + ": expected " + std::string(want) +
                            ", but got " + TypeName(v) + ".",
                        param, "invalid_type");
}

ApiError OutOfRange(const std::string& param, std::string_view range) {
  return InvalidRequest(
      "Invalid value for " + Quote(param) + ": must be " + std::string(range) + ".", param,
      "invalid_value");
}

ApiError Unsupported(const std::string& param, std::string_view why) {
  return InvalidRequest(Quote(param) + " is not supported by this server: " + std::string(why),
                        param, "unsupported_parameter");
}

std::optional<ApiError> GetBool(const std::string& param, const json& v, bool* out) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_boolean()) return WrongType(param, v, "a boolean");
  *out = v.get<bool>();
  return std::nullopt;
}

std::optional<ApiError> GetFloat(const std::string& param, const json& v, double lo, double hi,
                                 float* out) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_number()) return WrongType(param, v, "a number");
  const double d = v.get<double>();
  if (!(d >= lo && d <= hi)) {
    return OutOfRange(param, "between " + json(lo).dump() + " and " + json(hi).dump());
  }
  *out = static_cast<float>(d);
  return std::nullopt;
}

std::optional<ApiError> GetInt(const std::string& param, const json& v, int64_t lo, int64_t hi,
                               std::optional<int64_t>* out) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_number_integer()) return WrongType(param, v, "an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return OutOfRange(param, "between " + std::to_string(lo) + " and " + std::to_string(hi));
  }
  const int64_t i = v.get<int64_t>();
  if (i < lo || i > hi) {
    return OutOfRange(param, "between " + std::to_string(lo) + " and " + std::to_string(hi));
  }
  *out = i;
  return std::nullopt;
}

std::optional<ApiError> GetString(const std::string& param, const json& v, std::string* out) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_string()) return WrongType(param, v, "a string");
  *out = v.get<std::string>();
  return std::nullopt;
}

// null and "auto" leave *out unset: the server's auto tier decides.
std::optional<ApiError> ParseTier(const json& v, std::optional<scheduler::ServiceTier>* out) {
  if (v.is_null()) return std::nullopt;
  std::string name;
  if (auto e = GetString("service_tier", v, &name)) return e;
  if (name == "auto") return std::nullopt;
  StatusOr<scheduler::ServiceTier> tier = scheduler::ParseServiceTierName(name);
  if (!tier.ok()) return InvalidRequest(tier.status().message(), "service_tier", "invalid_value");
  *out = *tier;
  return std::nullopt;
}

std::optional<ApiError> ParseStop(const std::string& param, const json& v, size_t max_stops,
                                  std::vector<std::string>* out) {
  out->clear();
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) {
    out->push_back(v.get<std::string>());
  } else if (v.is_array()) {
    if (v.size() > max_stops) {
      return InvalidRequest("Invalid " + Quote(param) + ": at most " + std::to_string(max_stops) +
                                " stop sequences are allowed.",
                            param, "invalid_value");
    }
    for (const json& s : v) {
      if (!s.is_string()) return WrongType(param, s, "a string or an array of strings");
      out->push_back(s.get<std::string>());
    }
  } else {
    return WrongType(param, v, "a string or an array of strings");
  }
  for (const std::string& s : *out) {
    if (s.empty())
      return InvalidRequest("Invalid " + Quote(param) + ": empty stop sequence.", param);
  }
  return std::nullopt;
}

ApiError UnknownParam(const std::string& param) {
  return InvalidRequest("Unrecognized request argument supplied: " + param, param,
                        "unknown_parameter");
}

ApiError MissingParam(const std::string& param) {
  return InvalidRequest("Missing required parameter: " + Quote(param) + ".", param,
                        "missing_required_parameter");
}

std::optional<ApiError> ParseExtension(const std::string& key, const json& v, ApiRequest* r,
                                       bool* known) {
  *known = true;
  if (key == "top_k") {
    std::optional<int64_t> k;
    auto e = GetInt(key, v, -1, std::numeric_limits<int32_t>::max(), &k);
    if (k) r->sampling.top_k = static_cast<int32_t>(std::max<int64_t>(*k, 0));
    return e;
  }
  if (key == "min_p") return GetFloat(key, v, 0, 1, &r->sampling.min_p);
  if (key == "repetition_penalty") return GetFloat(key, v, 0.01, 10, &r->sampling.repeat_penalty);
  if (key == "ignore_eos") return GetBool(key, v, &r->ignore_eos);  // for benchmarks
  if (key == "seed") {
    std::optional<int64_t> seed;
    auto e = GetInt(key, v, std::numeric_limits<int64_t>::min(),
                    std::numeric_limits<int64_t>::max(), &seed);
    if (seed) {
      r->has_seed = true;
      r->sampling.seed = static_cast<uint64_t>(*seed);
    }
    return e;
  }
  if (key == "speculation") return ParseSpeculation(v, r);
  if (key == "chat_template_kwargs") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_object()) return WrongType(key, v, "an object");
    for (auto it = v.begin(); it != v.end(); ++it) {
      // The prompt's own variables are the server's to set.
      if (it.key() == "messages" || it.key() == "add_generation_prompt") {
        return InvalidRequest("'chat_template_kwargs." + it.key() + "' cannot be overridden.",
                              key + "." + it.key(), "invalid_value");
      }
    }
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (r->chat_template_kwargs.is_null()) r->chat_template_kwargs = json::object();
      r->chat_template_kwargs[it.key()] = it.value();
    }
    return std::nullopt;
  }
  *known = false;
  return std::nullopt;
}

std::optional<ApiError> ParseBodyObject(std::string_view body, const ParseOptions& options,
                                        const std::string& not_json, json* root) {
  if (JsonDepth(body, options.max_json_depth) == SIZE_MAX) {
    return InvalidRequest("The request body nests JSON deeper than " +
                          std::to_string(options.max_json_depth) + " levels.");
  }
  *root = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (root->is_discarded()) return InvalidRequest(not_json);
  if (!root->is_object()) return InvalidRequest("The request body must be a JSON object.");
  return std::nullopt;
}

std::optional<ApiError> CatchJsonErrors(const std::function<std::optional<ApiError>()>& parse) {
  try {
    return parse();
  } catch (const nlohmann::json::exception& e) {
    return InvalidRequest(std::string("Invalid request body: ") + e.what());
  }
}

void DisableThinking(ApiRequest* r) {
  if (r->chat_template_kwargs.is_null()) r->chat_template_kwargs = json::object();
  r->chat_template_kwargs["enable_thinking"] = false;
}

std::optional<ApiError> ParseReasoningEffort(const std::string& param, const json& v,
                                             ApiRequest* r) {
  if (v.is_null()) return std::nullopt;
  std::string effort;
  if (auto e = GetString(param, v, &effort)) return e;
  if (effort == "none") {
    DisableThinking(r);
    effort = "low";
  } else if (effort == "minimal") {
    effort = "low";
  } else if (effort == "xhigh") {
    effort = "high";
  } else if (effort != "low" && effort != "medium" && effort != "high") {
    return InvalidRequest("Invalid value for " + Quote(param) + ": " + Quote(effort) +
                              ". Supported values are: 'none', 'minimal', 'low', 'medium', "
                              "'high' and 'xhigh'.",
                          param, "invalid_value");
  }
  r->reasoning_effort = effort;
  return std::nullopt;
}

void RenameToolParams(ApiError* e, std::string_view parameters_as) {
  const std::string params = "]." + std::string(parameters_as);
  for (std::string* s : {&e->param, &e->message}) {
    size_t at;
    while ((at = s->find("].function.parameters")) != std::string::npos) s->replace(at, 21, params);
    while ((at = s->find("].function.")) != std::string::npos) s->replace(at, 11, "].");
    while ((at = s->find("].function")) != std::string::npos) s->replace(at, 10, "]");
  }
}

std::optional<ApiError> ParseFlatTools(const json& v, std::string_view body,
                                       std::string_view parameters_as,
                                       const FlatToolFunction& to_function, ApiRequest* r) {
  using ojson = nlohmann::ordered_json;
  if (v.is_null()) return std::nullopt;
  if (!v.is_array()) return WrongType("tools", v, "an array");
  const ojson ordered = ojson::parse(body.begin(), body.end())["tools"];
  ojson tools = ojson::array();
  for (size_t i = 0; i < ordered.size(); ++i) {
    ojson f = ojson::object();
    if (auto e = to_function("tools[" + std::to_string(i) + "]", v[i], ordered[i], &f)) return e;
    tools.push_back({{"type", "function"}, {"function", std::move(f)}});
  }
  const std::string tools_body = ojson{{"tools", tools}}.dump();
  if (auto e = ParseTools(json::parse(tools_body)["tools"], tools_body, r)) {
    RenameToolParams(&*e, parameters_as);
    return e;
  }
  return std::nullopt;
}

std::optional<ApiError> SchemaGrammar(const nlohmann::ordered_json& schema,
                                      const std::string& param,
                                      std::shared_ptr<const grammar::Grammar>* out) {
  std::string path;
  auto g = grammar::JsonSchemaGrammar(schema, &path);
  if (!g.ok()) {
    const std::string where = param + (path.empty() ? "" : "." + path);
    return InvalidRequest("Invalid schema " + Quote(where) + ": " + g.status().message(), where,
                          "invalid_value");
  }
  *out = *g;
  return std::nullopt;
}

}  // namespace uf::server
