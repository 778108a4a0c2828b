// What differs between the APIs the server speaks (OpenAI chat/completions, OpenAI Responses,
// Anthropic Messages): the shape of their errors and of their responses. Everything else (the
// prompt, sampling, grammars, tiers, quotas, metering, metrics) is one request core
// (HttpServer::RunGeneration): each API parses its body into an ApiRequest and turns the engine's
// GenerationEvents into its own JSON through a ResponseWriter.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "server/openai_request.h"
#include "server/reply_parser.h"
#include "server/tool_calls.h"

namespace uf::server {

enum class ErrorStyle {
  kOpenAI,     // {"error": {"message", "type", "param", "code"}}
  kAnthropic,  // {"type": "error", "error": {"type", "message"}}
};

// The error body in the API's shape.
std::string ErrorBodyFor(ErrorStyle style, const ApiError& error);

// PREFIX + 24 random alphanumerics (ids of responses, messages, calls).
std::string RandomId(std::string_view prefix);

// A request's event that ends it without a reply: an engine error or a cancellation.
inline bool Failed(const engine::GenerationEvent& e) {
  return e.finish == engine::FinishReason::kError || e.finish == engine::FinishReason::kCancelled;
}

// The error a stream ends with after a Failed event (500, server_error).
ApiError FailureOf(const engine::GenerationEvent& e);

// One streamed event's part of the reply: its text through `parser`, and on the last event
// (`last`) what the parser still held too, with the reply's tool calls in *calls.
ReplyPiece PushEvent(ReplyParser& parser, const engine::GenerationEvent& e, bool last,
                     std::vector<ToolCall>* calls);

struct ResponseOptions;  // openai_response.h

// How a writer splits its replies (reply_parser.h): the reasoning format and tools of options.
ReplyFormat ReplyFormatOf(const ResponseOptions& options);

// One request's events turned into an API's response, streamed (Server-Sent Events) or not.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  // SSE bytes for one event of choice `index` ("" when nothing is to be sent yet). The final
  // event of the last choice ends the stream.
  virtual std::string Stream(int index, const engine::GenerationEvent& event) = 0;
  // SSE bytes for an error that ends the stream.
  virtual std::string StreamError(const ApiError& error) = 0;
  // Non-streamed: every event goes to Add, then Body() once each choice has finished.
  virtual void Add(int index, const engine::GenerationEvent& event) = 0;
  virtual std::string Body() const = 0;
};

}  // namespace uf::server
