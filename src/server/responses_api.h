// OpenAI's Responses API (POST /v1/responses): the request translated into the request core's
// ApiRequest (a chat request), and the engine's events translated into a `response` object or
// its typed event stream (response.created, response.output_item.added,
// response.output_text.delta, response.function_call_arguments.delta, ..., response.completed).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/api_format.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/responses_store.h"

namespace uf::server {

struct ResponsesRequest {
  // What the core runs (endpoint kChat). Its messages are this request's input only: the handler
  // puts `instructions` and the previous response's conversation in front.
  ApiRequest api;
  nlohmann::json instructions;  // string or null
  std::string previous_response_id;
  bool store = true;
  // Echoed in the response object as the client sent them (or their defaults).
  nlohmann::json echo = nlohmann::json::object();
};

// Returns the request or the 400 naming the field it cannot take.
std::optional<ApiError> ParseResponsesRequest(std::string_view body, const ParseOptions& options,
                                              ResponsesRequest* out);

// The chat messages of a Responses `input` (a string, or message / function_call /
// function_call_output items; a reasoning item's text becomes the reasoning_content of the
// assistant turn after it). Appended to *messages.
std::optional<ApiError> ResponsesInputMessages(const nlohmann::json& input,
                                               nlohmann::json* messages);

// Where a finished response goes (store: true): the conversation through it.
struct ResponsesStoreTarget {
  ResponseStore* store = nullptr;  // nullptr: not stored
  int64_t key_id = 0;
  nlohmann::json conversation;  // previous + input messages (no instructions)
};

// The response object and its event stream. n is 1 (the Responses API has no choices).
class ResponsesWriter : public ResponseWriter {
 public:
  ResponsesWriter(ResponseOptions options, nlohmann::json echo, ResponsesStoreTarget target);

  std::string Stream(int index, const engine::GenerationEvent& event) override;
  std::string StreamError(const ApiError& error) override;
  void Add(int index, const engine::GenerationEvent& event) override;
  std::string Body() const override;

 private:
  // The response object with status, output and usage (null before the end).
  nlohmann::json ResponseJson(const std::string& status, const nlohmann::json& output,
                              const engine::GenerationEvent* final_event) const;
  std::string Event(nlohmann::json event);  // numbered SSE "event: TYPE\ndata: {...}"
  // Streaming: text to the open message item (opening it first, unless the text so far is blank
  // and flush is false).
  void StreamText(std::string_view text, std::string* out, bool flush = false);
  void CloseMessage(std::string* out);
  // Streaming: reasoning text to the open reasoning item (opening it first), and closing it.
  void StreamReasoning(std::string_view text, std::string* out);
  void CloseReasoning(std::string* out);
  // The finished response's object (stored first when asked): output items, usage and status.
  nlohmann::json Finish(const std::string& text, const std::string& reasoning,
                        const nlohmann::json& output, const std::vector<ToolCall>& calls,
                        const engine::GenerationEvent& final_event) const;

  ResponseOptions options_;
  nlohmann::json echo_;
  ResponsesStoreTarget target_;
  scheduler::ServiceTier tier_ = scheduler::ServiceTier::kDefault;
  std::string msg_id_;
  std::string rs_id_;   // the reasoning item's
  ReplyParser parser_;  // streamed: the reply; non-streamed: only to count reasoning tokens
  bool reasoning_open_ = false;
  std::string reasoning_text_;  // the open reasoning item's
  std::string all_reasoning_;   // of the closed ones
  // Streaming state.
  int64_t sequence_ = 0;
  bool started_ = false;
  bool message_open_ = false;
  std::string blank_;                                // blank text before the message opened
  std::string streamed_text_;                        // the open message's text so far
  nlohmann::json output_ = nlohmann::json::array();  // items done so far
  // Non-streamed.
  std::string text_;
  engine::GenerationEvent final_;
  bool done_ = false;
};

}  // namespace uf::server
