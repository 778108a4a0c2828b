// OpenAI response bodies: chat.completion / text_completion objects for non-streamed requests,
// and Server-Sent Events ("data: {chunk}\n\n" ... "data: [DONE]\n\n") for streamed ones, built
// from the engine's GenerationEvents.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "scheduler/tiers.h"
#include "server/api_format.h"
#include "server/openai_request.h"
#include "server/reply_parser.h"
#include "server/tool_calls.h"

namespace uf {
class Tokenizer;
}

namespace uf::server {

// text with each invalid UTF-8 sequence replaced by U+FFFD (JSON object keys must be valid).
std::string ValidUtf8(std::string_view text);
// JSON text; invalid UTF-8 (a token piece cut mid-character) becomes U+FFFD instead of throwing.
std::string Dump(const nlohmann::json& j);
// One SSE event carrying j.
std::string SseData(const nlohmann::json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// The usage object of a finished request (its final event). A request that speculated also gets
// completion_tokens_details.{accepted,rejected}_prediction_tokens (drafts the model confirmed /
// rejected, as OpenAI reports Predicted Outputs) and an extension object "speculation" with the
// mode and draft counts. Drafts are never billed: completion_tokens counts emitted tokens only.
nlohmann::json UsageJson(const engine::GenerationEvent& final_event);

struct ResponseOptions {
  Endpoint endpoint = Endpoint::kChat;
  std::string id;  // "chatcmpl-..." / "cmpl-..."
  std::string model;
  int64_t created = 0;  // unix seconds
  bool logprobs = false;
  bool include_usage = false;  // streaming: a final usage chunk
  std::string echo;            // completions: text to put before the generated text
  int n = 1;                   // choices (sequences), each with its own events
  // Chat with tools (tool_choice not "none"): replies are parsed for calls of these functions.
  // A streamed choice's text goes out as content until a call may begin (tool_calls.h:
  // StreamableContent); from there it is held until the choice ends and sent as tool_calls
  // deltas with finish_reason "tool_calls" (or as content, if it held no call after all).
  bool parse_tools = false;
  ToolCallFormat tool_format = ToolCallFormat::kHermes;
  std::set<std::string> tool_names;
  // Chat: how the reply carries its reasoning (reply_parser.h), which comes back apart from the
  // content (chat: message.reasoning_content / delta.reasoning_content). Completions: not split.
  ReasoningFormat reasoning = ReasoningFormat::kThink;
  bool starts_thinking = false;  // the prompt opened a <think> block
  // Legacy functions (ApiRequest::legacy_functions): a call comes back as message.function_call
  // (streamed: delta.function_call) with finish_reason "function_call".
  bool legacy_functions = false;
  int64_t prompt_tokens = 0;  // the prompt's tokens (known before the first event)
};

// The usage of n choices sharing one prompt: the prompt (and its cached part) counted once, the
// completions and speculation counts summed, as OpenAI bills n > 1.
engine::GenerationEvent MergeFinals(const std::vector<engine::GenerationEvent>& finals);

// Turns one request's events into its response. Streaming and non-streaming use the same builder:
// call Stream() for each event as it arrives, or Add() for each and Body() at the end. With n > 1
// the events of choice i are given with its index; the response ends once every choice has had
// its final event.
class ResponseBuilder : public ResponseWriter {
 public:
  ResponseBuilder(ResponseOptions options, const Tokenizer& tokenizer);

  // SSE bytes for one event ("" when there is nothing to send). A choice's first event also sends
  // its role chunk (chat) or the echoed prompt; its final event adds its finish chunk, and the
  // last choice's final event the usage chunk (when asked) and [DONE]. An error event becomes
  // {"error": ...} followed by [DONE].
  std::string Stream(int index, const engine::GenerationEvent& event) override;
  std::string Stream(const engine::GenerationEvent& event) { return Stream(0, event); }
  // SSE bytes for an error that ends the stream.
  std::string StreamError(const ApiError& error) override;

  void Add(int index, const engine::GenerationEvent& event) override;
  void Add(const engine::GenerationEvent& event) { Add(0, event); }
  // Every choice has had its final event.
  bool done() const { return finished_ == options_.n; }
  // The merged usage of the choices (after done()).
  engine::GenerationEvent Final() const;
  // Its usage object, with completion_tokens_details.reasoning_tokens when the replies reasoned.
  nlohmann::json Usage() const;
  // The non-streamed response body, once done().
  std::string Body() const override;

 private:
  struct Choice {
    bool started = false;
    bool finished = false;
    int64_t text_offset = 0;  // completions logprobs: byte offset of the next token's text
    // Non-streamed accumulation.
    std::string text;
    std::optional<ReplyParser> parser;                       // chat: reasoning, content and calls
    nlohmann::json chat_logprobs = nlohmann::json::array();  // content entries
    nlohmann::json cmpl_logprobs;                            // {tokens, token_logprobs, ...}
    engine::GenerationEvent final_event;
  };

  nlohmann::json Chunk(nlohmann::json choice) const;
  nlohmann::json ChoiceDelta(int index, std::string_view text,
                             const std::vector<engine::TokenLogprob>& lps,
                             const char* finish_reason, std::string_view reasoning = {});
  nlohmann::json LogprobsJson(Choice& c, const std::vector<engine::TokenLogprob>& lps);
  // Chat: the end of a finished choice's reply (what the parser held back) as reasoning, content
  // and tool_calls deltas; returns the finish reason to report.
  const char* StreamReply(int index, const char* finish, std::string* out);
  static nlohmann::json ToolCallsJson(const std::vector<ToolCall>& calls);

  ResponseOptions options_;
  const Tokenizer& tokenizer_;
  // The serving tier, from the latest event (every event of a request carries the same one).
  scheduler::ServiceTier tier_ = scheduler::ServiceTier::kDefault;
  std::vector<Choice> choices_;
  int finished_ = 0;
};

}  // namespace uf::server
