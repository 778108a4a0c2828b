// The tool-calling parts of an OpenAI chat request (openai_request.cc calls these): `tools`,
// `tool_choice`, and the tool messages and assistant tool calls of the history.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/openai_request.h"

namespace uf::server {

// tools: [{"type": "function", "function": {"name", "description", "parameters", "strict"}}].
// Stores the array in r->tools, key order as sent (re-read from body).
std::optional<ApiError> ParseTools(const nlohmann::json& v, std::string_view body, ApiRequest* r);
// "none" | "auto" | "required" | {"type": "function", "function": {"name"}}.
std::optional<ApiError> ParseToolChoice(const nlohmann::json& v, ApiRequest* r);
// Legacy function calling, mapped onto tools: `functions` ([{"name", "description",
// "parameters"}]) become function tools and `function_call` ("none" | "auto" | {"name"}) the
// tool_choice; one call per reply (no parallel calls); sets r->legacy_functions. root: the whole
// request (body: its text, for the schemas' key order). A 400 when mixed with tools/tool_choice.
std::optional<ApiError> CheckLegacyFunctions(const nlohmann::json& root, std::string_view body,
                                             ApiRequest* r);
// The tool_call_id a legacy call and its "function" result message share.
std::string LegacyCallId(const std::string& name);

// After every parameter: tool_choice must fit tools.
std::optional<ApiError> CheckToolChoice(const ApiRequest& r);

// An assistant message's tool_calls ([{"id", "type": "function", "function": {"name",
// "arguments"}}]) as chat templates read them: arguments parsed into an object when they are
// JSON text (templates print them with tojson).
std::optional<ApiError> ParseAssistantToolCalls(const nlohmann::json& v, const std::string& param,
                                                nlohmann::json* out);

}  // namespace uf::server
