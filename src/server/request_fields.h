// Field readers shared by the request parsers of every API (openai_request.cc, responses_api.cc,
// anthropic_api.cc): typed getters that name the field in their 400s, the service tier, stop
// strings, the extensions every API accepts (seed, top_k, min_p, ...) and JSON schemas compiled
// to grammars.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "scheduler/tiers.h"
#include "server/openai_request.h"

namespace uf::server {

std::string Quote(std::string_view s);          // 'text'
std::string TypeName(const nlohmann::json& v);  // "string", "integer", ...
ApiError WrongType(const std::string& param, const nlohmann::json& v, std::string_view want);
ApiError OutOfRange(const std::string& param, std::string_view range);
// 400 unsupported_parameter: a known field this server does not implement.
ApiError Unsupported(const std::string& param, std::string_view why);
ApiError UnknownParam(const std::string& param);  // 400 unknown_parameter
ApiError MissingParam(const std::string& param);  // 400 missing_required_parameter

// Each leaves *out unchanged for null.
std::optional<ApiError> GetBool(const std::string& param, const nlohmann::json& v, bool* out);
std::optional<ApiError> GetFloat(const std::string& param, const nlohmann::json& v, double lo,
                                 double hi, float* out);
std::optional<ApiError> GetInt(const std::string& param, const nlohmann::json& v, int64_t lo,
                               int64_t hi, std::optional<int64_t>* out);
std::optional<ApiError> GetString(const std::string& param, const nlohmann::json& v,
                                  std::string* out);

// service_tier: null and "auto" leave *out unset (the server's auto tier decides).
std::optional<ApiError> ParseTier(const nlohmann::json& v,
                                  std::optional<scheduler::ServiceTier>* out);
// A string or an array of at most max_stops non-empty strings.
std::optional<ApiError> ParseStop(const std::string& param, const nlohmann::json& v,
                                  size_t max_stops, std::vector<std::string>* out);

// The extensions every API takes (as vLLM and llama.cpp do): seed, top_k, min_p,
// repetition_penalty, ignore_eos, speculation, chat_template_kwargs. *known is false (and
// nothing is done) for any other key.
std::optional<ApiError> ParseExtension(const std::string& key, const nlohmann::json& v,
                                       ApiRequest* r, bool* known);

// The body as a JSON object, or a 400: nested deeper than options.max_json_depth, not JSON at all
// (not_json is that message, which differs between the APIs), or not an object.
std::optional<ApiError> ParseBodyObject(std::string_view body, const ParseOptions& options,
                                        const std::string& not_json, nlohmann::json* root);

// parse(), with a JSON exception (a field of an unexpected JSON type that a lookup trips over)
// turned into a 400: it is the client's error, not the server's.
std::optional<ApiError> CatchJsonErrors(const std::function<std::optional<ApiError>()>& parse);

// Turns a reasoning template's thinking off (chat_template_kwargs.enable_thinking = false, which
// Qwen3's reads).
void DisableThinking(ApiRequest* r);

// A reasoning effort (OpenAI's none, minimal, low, medium, high, xhigh) as r->reasoning_effort:
// minimal becomes low and xhigh high (gpt-oss knows low, medium and high); none turns thinking
// off (DisableThinking) and asks for low effort from a model that cannot stop reasoning.
std::optional<ApiError> ParseReasoningEffort(const std::string& param, const nlohmann::json& v,
                                             ApiRequest* r);

// Renames the chat tools' paths in an error ("tools[0].function.parameters.x") to those of an API
// whose tools are flat ("tools[0]." + parameters_as + ".x", "tools[0].name").
void RenameToolParams(ApiError* e, std::string_view parameters_as);

// The tools of an API whose tools are flat ([{"name", ..., <parameters_as>}]): `v` (body's
// "tools", read again from body in key order) as chat function tools, each tool's function made by
// to_function(path "tools[i]", v[i], the tool in key order, &function), then validated by the chat
// parser (ParseTools) with its errors renamed by RenameToolParams.
using FlatToolFunction = std::function<std::optional<ApiError>(
    const std::string& param, const nlohmann::json& tool, const nlohmann::ordered_json& ordered,
    nlohmann::ordered_json* function)>;
std::optional<ApiError> ParseFlatTools(const nlohmann::json& v, std::string_view body,
                                       std::string_view parameters_as,
                                       const FlatToolFunction& to_function, ApiRequest* r);

// The grammar of a JSON schema (key order as sent), or a 400 naming the keyword the compiler
// cannot enforce (param + "." + its path).
std::optional<ApiError> SchemaGrammar(const nlohmann::ordered_json& schema,
                                      const std::string& param,
                                      std::shared_ptr<const grammar::Grammar>* out);

}  // namespace uf::server
