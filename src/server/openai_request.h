// OpenAI request bodies for POST /v1/chat/completions and /v1/completions: parsed and validated
// into ApiRequest, or rejected with an ApiError in OpenAI's error shape. Like the OpenAI API,
// unknown top-level arguments are rejected; known ones this server cannot honour (audio, images,
// ...) are rejected with a message saying so rather than silently ignored, and known ones that do
// not change the output (user, store, metadata, prompt_cache_key, ...) are accepted and ignored.
// ApiRequest is also what the Responses and Messages APIs translate into (the request core's
// input).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "grammar/grammar.h"
#include "scheduler/tiers.h"

namespace uf::server {

// {"error": {"message", "type", "param", "code"}} plus the HTTP status it goes with.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;      // "" -> null
  std::string code;       // "" -> null
  int retry_after_s = 0;  // > 0: sent as Retry-After
};

ApiError InvalidRequest(std::string message, std::string param = "", std::string code = "");
// 5xx (type server_error) or 429 (rate_limit_error).
ApiError ServerError(int status, std::string message, std::string code = "");
// The JSON body of an error response.
std::string ErrorBody(const ApiError& error);

enum class Endpoint { kChat, kCompletion };

struct ParseOptions {
  int64_t n_vocab = 0;         // token ids in prompts and logit_bias must be below this
  size_t max_json_depth = 64;  // deeper bodies are rejected before parsing
};

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

struct ApiRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;
  // Chat: [{"role", "content"}] with content flattened to a string and "developer" mapped to
  // "system", ready for a chat template; tool messages keep tool_call_id, assistant messages
  // their tool_calls (arguments parsed to objects) and reasoning_content (an earlier reply's
  // reasoning, sent back).
  nlohmann::json messages;
  // Extension (as vLLM and SGLang accept it): extra variables for the chat template, e.g.
  // {"enable_thinking": false} for Qwen3. An object; null when absent.
  nlohmann::json chat_template_kwargs;
  // reasoning_effort (chat) / reasoning.effort (Responses): "low", "medium" or "high" as the
  // templates that read it (gpt-oss's) know it; "" when absent. The core puts it in the
  // template's variables unless chat_template_kwargs sets reasoning_effort itself.
  std::string reasoning_effort;
  // Completions: the prompt as text, or as token ids when prompt_is_tokens.
  std::string prompt;
  std::vector<int32_t> prompt_tokens;
  bool prompt_is_tokens = false;
  bool echo = false;

  int n = 1;  // choices, each its own sequence (seed + i)
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  std::optional<int64_t> max_tokens;  // max_completion_tokens, else max_tokens
  engine::RequestSampling sampling;
  bool has_seed = false;
  std::vector<std::string> stop;
  bool logprobs = false;  // chat: logprobs; completions: logprobs != null
  int top_logprobs = 0;   // alternatives per token
  bool ignore_eos = false;
  // service_tier: ultrafast (or priority), default (or standard), flex; nullopt = auto.
  std::optional<scheduler::ServiceTier> service_tier;
  // Extension: "speculation": "off" | "ngram" | {"mode": "off" | "ngram", "k": 1..16};
  // nullopt = the tier's default (n-gram on ultrafast).
  std::optional<engine::SpeculationRequest> speculation;
  // OpenAI Predicted Outputs: prediction.content, the text the output is expected to resemble
  // (drafts come from it). has_prediction when given, even empty.
  std::string prediction;
  bool has_prediction = false;
  // response_format json_object / json_schema: the grammar the output must follow (compiled
  // here, on the HTTP thread); null for text.
  std::shared_ptr<const grammar::Grammar> grammar;
  // Chat tools: the request's `tools` array as sent (key order kept; null when absent), the
  // tool_choice, and whether several calls may come in one reply.
  nlohmann::ordered_json tools;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;  // kNamed
  bool parallel_tool_calls = true;
  // The request used legacy `functions` / `function_call` (mapped onto tools): the reply's call
  // comes back as message.function_call with finish_reason "function_call".
  bool legacy_functions = false;
};

// Returns the request or the reason it is invalid (always status 400).
std::optional<ApiError> ParseRequest(Endpoint endpoint, std::string_view body,
                                     const ParseOptions& options, ApiRequest* out);

// "speculation": "off" | "ngram" | {"mode": ..., "k": ...} (extension).
std::optional<ApiError> ParseSpeculation(const nlohmann::json& v, ApiRequest* r);

// Nesting depth of the JSON text's arrays/objects (strings skipped), or SIZE_MAX once it exceeds
// limit. Bounds the parser's work on hostile input.
size_t JsonDepth(std::string_view text, size_t limit);

}  // namespace uf::server
