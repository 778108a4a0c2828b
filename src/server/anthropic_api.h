// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens): the request translated
// into the request core's ApiRequest (a chat request), and the engine's events translated into a
// `message` object or its event stream (message_start, content_block_start / _delta / _stop,
// message_delta with the stop_reason, message_stop). A reasoning model's reasoning comes first, as
// a thinking block (its signature empty: nothing here is signed). Errors come in Anthropic's
// shape (ErrorStyle::kAnthropic).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/api_format.h"
#include "server/openai_request.h"
#include "server/openai_response.h"

namespace uf::server {

// count_tokens: max_tokens is not required, and sampling fields are refused (as Anthropic does).
std::optional<ApiError> ParseMessagesRequest(std::string_view body, const ParseOptions& options,
                                             bool count_tokens, ApiRequest* out);

class AnthropicWriter : public ResponseWriter {
 public:
  explicit AnthropicWriter(ResponseOptions options);

  std::string Stream(int index, const engine::GenerationEvent& event) override;
  std::string StreamError(const ApiError& error) override;
  void Add(int index, const engine::GenerationEvent& event) override;
  std::string Body() const override;

 private:
  static std::string Event(const std::string& type, nlohmann::json data);
  // Text to the open text block (opening it first, unless the text so far is blank and flush is
  // false).
  void StreamText(std::string_view text, std::string* out, bool flush = false);
  void CloseBlock(std::string* out);
  // Reasoning to the open thinking block (opening it first), and closing it.
  void StreamThinking(std::string_view text, std::string* out);
  void CloseThinking(std::string* out);
  std::string StopReason(const engine::GenerationEvent& final_event, bool calls) const;
  nlohmann::json Usage(const engine::GenerationEvent& final_event) const;

  ResponseOptions options_;
  // Streaming state.
  ReplyParser parser_;  // the reply's thinking, text and calls
  bool started_ = false;
  bool done_ = false;
  int blocks_ = 0;              // content blocks started so far
  bool text_open_ = false;      // a text block is open (index blocks_ - 1)
  bool thinking_open_ = false;  // a thinking block is open (index blocks_ - 1)
  std::string blank_;           // blank text before the first block
  // Non-streamed.
  std::string text_;
  engine::GenerationEvent final_;
};

}  // namespace uf::server
