// AnthropicWriter (anthropic_api.h): the `message` object and its event stream.
#include "server/anthropic_api.h"

namespace uf::server {

using json = nlohmann::json;

namespace {

// Anthropic's tool_use ids look like toolu_...; the parsed call's id is call_...
std::string ToolUseId(const ToolCall& call) { return "toolu_" + call.id.substr(5); }

json ToolUseBlock(const ToolCall& call, bool with_input) {
  json input = json::object();
  if (with_input) {
    input = json::parse(call.arguments, nullptr, false);
    if (!input.is_object()) input = json::object();
  }
  return {{"type", "tool_use"}, {"id", ToolUseId(call)}, {"name", call.name}, {"input", input}};
}

// Anthropic's names for the serving tier: priority (ultrafast), standard (default), batch (flex).
const char* AnthropicTier(scheduler::ServiceTier tier) {
  switch (tier) {
    case scheduler::ServiceTier::kUltrafast:
      return "priority";
    case scheduler::ServiceTier::kFlex:
      return "batch";
    default:
      return "standard";
  }
}

}  // namespace

AnthropicWriter::AnthropicWriter(ResponseOptions options)
    : options_(std::move(options)), parser_(ReplyFormatOf(options_)) {}

std::string AnthropicWriter::Event(const std::string& type, json data) {
  data["type"] = type;
  return "event: " + type + "\ndata: " + Dump(data) + "\n\n";
}

std::string AnthropicWriter::StopReason(const engine::GenerationEvent& e, bool calls) const {
  if (calls) return "tool_use";
  if (e.finish == engine::FinishReason::kLength) return "max_tokens";
  if (!e.stop_sequence.empty()) return "stop_sequence";
  return "end_turn";
}

// Anthropic counts input_tokens without the prompt tokens read from the cache.
json AnthropicWriter::Usage(const engine::GenerationEvent& e) const {
  return {{"input_tokens", e.prompt_tokens - e.cached_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", e.cached_tokens},
          {"output_tokens", e.completion_tokens},
          {"service_tier", AnthropicTier(e.service_tier)}};
}

void AnthropicWriter::StreamText(std::string_view text, std::string* out, bool flush) {
  if (!text_open_ && blocks_ == 0) {
    // White space alone opens no text block: it may be all that comes before a tool call.
    blank_ += text;
    if (!flush && blank_.find_first_not_of(" \t\r\n") == std::string::npos) return;
    text = blank_;
  }
  if (text.empty()) return;
  if (!text_open_) {
    text_open_ = true;
    *out += Event("content_block_start",
                  {{"index", blocks_}, {"content_block", {{"type", "text"}, {"text", ""}}}});
    ++blocks_;
  }
  *out += Event("content_block_delta",
                {{"index", blocks_ - 1}, {"delta", {{"type", "text_delta"}, {"text", text}}}});
  blank_.clear();
}

void AnthropicWriter::StreamThinking(std::string_view text, std::string* out) {
  if (text.empty()) return;
  if (!thinking_open_) {
    CloseBlock(out);  // reasoning after text (harmony: analysis after a preamble): a new block
    thinking_open_ = true;
    *out += Event("content_block_start",
                  {{"index", blocks_},
                   {"content_block", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}}});
    ++blocks_;
  }
  *out +=
      Event("content_block_delta",
            {{"index", blocks_ - 1}, {"delta", {{"type", "thinking_delta"}, {"thinking", text}}}});
}

void AnthropicWriter::CloseThinking(std::string* out) {
  if (!thinking_open_) return;
  thinking_open_ = false;
  *out += Event("content_block_stop", {{"index", blocks_ - 1}});
}

void AnthropicWriter::CloseBlock(std::string* out) {
  if (!text_open_) return;
  text_open_ = false;
  *out += Event("content_block_stop", {{"index", blocks_ - 1}});
}

std::string AnthropicWriter::Stream(int, const engine::GenerationEvent& event) {
  std::string out;
  if (!started_) {
    started_ = true;
    // The prompt's size is known; how much of it the prefix cache served is known at the end
    // (message_delta's usage then gives the final counts, which the SDKs take over).
    out += Event("message_start", {{"message",
                                    {{"id", options_.id},
                                     {"type", "message"},
                                     {"role", "assistant"},
                                     {"content", json::array()},
                                     {"model", options_.model},
                                     {"stop_reason", nullptr},
                                     {"stop_sequence", nullptr},
                                     {"usage",
                                      {{"input_tokens", options_.prompt_tokens},
                                       {"cache_creation_input_tokens", 0},
                                       {"cache_read_input_tokens", 0},
                                       {"output_tokens", 0}}}}}});
  }
  if (Failed(event)) return out + StreamError(FailureOf(event));
  const bool last = event.finish != engine::FinishReason::kNone && !done_;
  std::vector<ToolCall> calls;
  const ReplyPiece piece = PushEvent(parser_, event, last, &calls);
  StreamThinking(piece.reasoning, &out);
  if (!piece.content.empty()) {
    CloseThinking(&out);
    StreamText(piece.content, &out);
  }
  if (!last) return out;
  done_ = true;
  CloseThinking(&out);
  if (calls.empty()) StreamText("", &out, /*flush=*/true);  // a blank reply is still its text
  CloseBlock(&out);
  for (const ToolCall& call : calls) {
    const int index = blocks_++;
    out += Event("content_block_start",
                 {{"index", index}, {"content_block", ToolUseBlock(call, /*with_input=*/false)}});
    out += Event("content_block_delta",
                 {{"index", index},
                  {"delta", {{"type", "input_json_delta"}, {"partial_json", call.arguments}}}});
    out += Event("content_block_stop", {{"index", index}});
  }
  const std::string stop_reason = StopReason(event, !calls.empty());
  out += Event("message_delta",
               {{"delta",
                 {{"stop_reason", stop_reason},
                  {"stop_sequence",
                   stop_reason == "stop_sequence" ? json(event.stop_sequence) : json(nullptr)}}},
                {"usage", Usage(event)}});
  out += Event("message_stop", json::object());
  return out;
}

std::string AnthropicWriter::StreamError(const ApiError& error) {
  return "event: error\ndata: " + ErrorBodyFor(ErrorStyle::kAnthropic, error) + "\n\n";
}

void AnthropicWriter::Add(int, const engine::GenerationEvent& event) {
  text_ += event.text;
  if (event.finish != engine::FinishReason::kNone) final_ = event;
}

std::string AnthropicWriter::Body() const {
  const ReplyEnd reply = ReplyParser::Parse(ReplyFormatOf(options_), text_);
  const std::string& text = reply.content;
  const std::vector<ToolCall>& calls = reply.calls;
  json content = json::array();
  if (!reply.reasoning.empty()) {
    content.push_back({{"type", "thinking"}, {"thinking", reply.reasoning}, {"signature", ""}});
  }
  if (!text.empty()) content.push_back({{"type", "text"}, {"text", text}});
  for (const ToolCall& call : calls) content.push_back(ToolUseBlock(call, /*with_input=*/true));
  const std::string stop_reason = StopReason(final_, !calls.empty());
  return Dump({{"id", options_.id},
               {"type", "message"},
               {"role", "assistant"},
               {"model", options_.model},
               {"content", std::move(content)},
               {"stop_reason", stop_reason},
               {"stop_sequence",
                stop_reason == "stop_sequence" ? json(final_.stop_sequence) : json(nullptr)},
               {"usage", Usage(final_)}});
}

}  // namespace uf::server
