// ResponsesWriter (responses_api.h): the `response` object and its typed event stream.
#include "server/responses_api.h"

namespace uf::server {

using json = nlohmann::json;

namespace {

json UsageOf(const engine::GenerationEvent& e, int64_t reasoning_tokens) {
  return {{"input_tokens", e.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", e.cached_tokens}}},
          {"output_tokens", e.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
          {"total_tokens", e.prompt_tokens + e.completion_tokens}};
}

json ReasoningItem(const std::string& id, const std::string& text, bool done) {
  json content = json::array();
  if (done) content.push_back({{"type", "reasoning_text"}, {"text", text}});
  return {{"type", "reasoning"},
          {"id", id},
          {"summary", json::array()},
          {"content", std::move(content)},
          {"status", done ? "completed" : "in_progress"}};
}

json TextPart(const std::string& text) {
  return {{"type", "output_text"},
          {"text", text},
          {"annotations", json::array()},
          {"logprobs", json::array()}};
}

json MessageItem(const std::string& id, const std::string& status, json content) {
  return {{"type", "message"},
          {"id", id},
          {"status", status},
          {"role", "assistant"},
          {"content", std::move(content)}};
}

json CallItem(const ToolCall& call, const std::string& status, const std::string& arguments) {
  return {{"type", "function_call"}, {"id", "fc_" + call.id.substr(5)},  // call_X -> fc_X
          {"call_id", call.id},      {"name", call.name},
          {"arguments", arguments},  {"status", status}};
}

}  // namespace

ResponsesWriter::ResponsesWriter(ResponseOptions options, json echo, ResponsesStoreTarget target)
    : options_(std::move(options)),
      echo_(std::move(echo)),
      target_(std::move(target)),
      msg_id_(RandomId("msg_")),
      rs_id_(RandomId("rs_")),
      parser_(ReplyFormatOf(options_)) {}

void ResponsesWriter::StreamReasoning(std::string_view text, std::string* out) {
  if (!reasoning_open_) {
    CloseMessage(out);  // reasoning after text (harmony: analysis after a preamble)
    reasoning_open_ = true;
    *out += Event({{"type", "response.output_item.added"},
                   {"output_index", output_.size()},
                   {"item", ReasoningItem(rs_id_, "", false)}});
    *out += Event({{"type", "response.content_part.added"},
                   {"item_id", rs_id_},
                   {"output_index", output_.size()},
                   {"content_index", 0},
                   {"part", {{"type", "reasoning_text"}, {"text", ""}}}});
  }
  if (text.empty()) return;
  reasoning_text_ += text;
  *out += Event({{"type", "response.reasoning_text.delta"},
                 {"item_id", rs_id_},
                 {"output_index", output_.size()},
                 {"content_index", 0},
                 {"delta", text}});
}

void ResponsesWriter::CloseReasoning(std::string* out) {
  if (!reasoning_open_) return;
  reasoning_open_ = false;
  const size_t index = output_.size();
  *out += Event({{"type", "response.reasoning_text.done"},
                 {"item_id", rs_id_},
                 {"output_index", index},
                 {"content_index", 0},
                 {"text", reasoning_text_}});
  *out += Event({{"type", "response.content_part.done"},
                 {"item_id", rs_id_},
                 {"output_index", index},
                 {"content_index", 0},
                 {"part", {{"type", "reasoning_text"}, {"text", reasoning_text_}}}});
  json item = ReasoningItem(rs_id_, reasoning_text_, true);
  *out += Event({{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
  output_.push_back(std::move(item));
  // Reasoning after the answer began (harmony: analysis after a preamble) is an item of its own.
  all_reasoning_ += reasoning_text_;
  reasoning_text_.clear();
  rs_id_ = RandomId("rs_");
}

json ResponsesWriter::ResponseJson(const std::string& status, const json& output,
                                   const engine::GenerationEvent* final_event) const {
  json r = echo_;
  r["id"] = options_.id;
  r["object"] = "response";
  r["created_at"] = options_.created;
  r["status"] = status;
  r["background"] = false;
  r["error"] = nullptr;
  r["incomplete_details"] = nullptr;
  r["model"] = options_.model;
  r["output"] = output;
  r["service_tier"] = scheduler::ServiceTierName(tier_);
  r["usage"] =
      final_event != nullptr ? UsageOf(*final_event, parser_.reasoning_tokens()) : json(nullptr);
  if (status == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  return r;
}

std::string ResponsesWriter::Event(json event) {
  event["sequence_number"] = sequence_++;
  const std::string type = event["type"].get<std::string>();
  return "event: " + type + "\ndata: " + Dump(event) + "\n\n";
}

static bool Blank(std::string_view s) {
  return s.find_first_not_of(" \t\r\n") == std::string::npos;
}

void ResponsesWriter::StreamText(std::string_view text, std::string* out, bool flush) {
  std::string held;
  if (!message_open_) {
    // White space alone opens no message: it may be all that comes before a tool call.
    blank_ += text;
    if (!flush && Blank(blank_)) return;
    held = std::move(blank_);
    blank_.clear();
    text = held;
  }
  if (!message_open_) {
    message_open_ = true;
    const int index = static_cast<int>(output_.size());
    *out += Event({{"type", "response.output_item.added"},
                   {"output_index", index},
                   {"item", MessageItem(msg_id_, "in_progress", json::array())}});
    *out += Event({{"type", "response.content_part.added"},
                   {"item_id", msg_id_},
                   {"output_index", index},
                   {"content_index", 0},
                   {"part", TextPart("")}});
  }
  if (text.empty()) return;
  streamed_text_ += text;
  *out += Event({{"type", "response.output_text.delta"},
                 {"item_id", msg_id_},
                 {"output_index", output_.size()},
                 {"content_index", 0},
                 {"delta", text},
                 {"logprobs", json::array()}});
}

void ResponsesWriter::CloseMessage(std::string* out) {
  if (!message_open_) return;
  message_open_ = false;
  const size_t index = output_.size();
  *out += Event({{"type", "response.output_text.done"},
                 {"item_id", msg_id_},
                 {"output_index", index},
                 {"content_index", 0},
                 {"text", streamed_text_},
                 {"logprobs", json::array()}});
  *out += Event({{"type", "response.content_part.done"},
                 {"item_id", msg_id_},
                 {"output_index", index},
                 {"content_index", 0},
                 {"part", TextPart(streamed_text_)}});
  json item = MessageItem(msg_id_, "completed", json::array({TextPart(streamed_text_)}));
  *out += Event({{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
  output_.push_back(std::move(item));
  msg_id_ = RandomId("msg_");  // text after more reasoning is a message of its own
  streamed_text_.clear();
}

std::string ResponsesWriter::Stream(int, const engine::GenerationEvent& event) {
  tier_ = event.service_tier;
  std::string out;
  if (!started_) {
    started_ = true;
    const json r = ResponseJson("in_progress", json::array(), nullptr);
    out += Event({{"type", "response.created"}, {"response", r}});
    out += Event({{"type", "response.in_progress"}, {"response", r}});
  }
  if (Failed(event)) return out + StreamError(FailureOf(event));
  const bool last = event.finish != engine::FinishReason::kNone && !done_;
  std::vector<ToolCall> calls;
  const ReplyPiece piece = PushEvent(parser_, event, last, &calls);
  const bool thinking = parser_.had_reasoning() && !parser_.answer_started() && !last;
  if (!piece.reasoning.empty() || thinking) StreamReasoning(piece.reasoning, &out);
  if (!thinking) CloseReasoning(&out);
  if (!piece.content.empty()) StreamText(piece.content, &out);
  if (!last) return out;
  done_ = true;
  // A reply without calls is a message, even an empty or blank one.
  if (calls.empty() && !message_open_) StreamText("", &out, /*flush=*/true);
  const bool incomplete = event.finish == engine::FinishReason::kLength && calls.empty();
  CloseMessage(&out);
  if (incomplete && !output_.empty()) output_.back()["status"] = "incomplete";
  for (const ToolCall& call : calls) {
    const size_t index = output_.size();
    json item = CallItem(call, "in_progress", "");
    const std::string item_id = item["id"];
    out += Event({{"type", "response.output_item.added"}, {"output_index", index}, {"item", item}});
    out += Event({{"type", "response.function_call_arguments.delta"},
                  {"item_id", item_id},
                  {"output_index", index},
                  {"delta", call.arguments}});
    out += Event({{"type", "response.function_call_arguments.done"},
                  {"item_id", item_id},
                  {"output_index", index},
                  {"name", call.name},
                  {"arguments", call.arguments}});
    item = CallItem(call, "completed", call.arguments);
    out += Event({{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
    output_.push_back(std::move(item));
  }
  // The text outside calls, as the stored conversation holds it.
  std::string text;
  for (const json& item : output_) {
    if (item["type"] == "message") text += item["content"][0]["text"].get<std::string>();
  }
  const json r = Finish(text, all_reasoning_, output_, calls, event);
  out +=
      Event({{"type", incomplete ? "response.incomplete" : "response.completed"}, {"response", r}});
  return out;
}

std::string ResponsesWriter::StreamError(const ApiError& error) {
  std::string out = Event({{"type", "error"},
                           {"code", error.code.empty() ? json(nullptr) : json(error.code)},
                           {"message", error.message},
                           {"param", error.param.empty() ? json(nullptr) : json(error.param)}});
  json r = ResponseJson("failed", output_, nullptr);
  r["error"] = {{"code", error.code.empty() ? "server_error" : error.code},
                {"message", error.message}};
  out += Event({{"type", "response.failed"}, {"response", r}});
  return out;
}

void ResponsesWriter::Add(int, const engine::GenerationEvent& event) {
  tier_ = event.service_tier;
  parser_.Push(event.text, event.n_tokens);  // only to count the reasoning's tokens
  if (event.finish != engine::FinishReason::kNone) parser_.Finish();
  text_ += event.text;
  if (event.finish != engine::FinishReason::kNone) final_ = event;
}

std::string ResponsesWriter::Body() const {
  const ReplyEnd reply = ReplyParser::Parse(ReplyFormatOf(options_), text_);
  const std::string& content = reply.content;
  const std::vector<ToolCall>& calls = reply.calls;
  const bool incomplete = final_.finish == engine::FinishReason::kLength && calls.empty();
  json output = json::array();
  if (parser_.had_reasoning() || !reply.reasoning.empty()) {
    output.push_back(ReasoningItem(rs_id_, reply.reasoning, true));
  }
  if (!content.empty() || calls.empty()) {
    output.push_back(MessageItem(msg_id_, incomplete ? "incomplete" : "completed",
                                 json::array({TextPart(content)})));
  }
  for (const ToolCall& call : calls) output.push_back(CallItem(call, "completed", call.arguments));
  return Dump(Finish(content, reply.reasoning, output, calls, final_));
}

json ResponsesWriter::Finish(const std::string& text, const std::string& reasoning,
                             const json& output, const std::vector<ToolCall>& calls,
                             const engine::GenerationEvent& final_event) const {
  const bool incomplete = final_event.finish == engine::FinishReason::kLength && calls.empty();
  json r = ResponseJson(incomplete ? "incomplete" : "completed", output, &final_event);
  if (target_.store != nullptr) {
    json turn = {{"role", "assistant"}, {"content", text}};
    // Templates re-read the reasoning of the turns since the last user message (a tool loop).
    if (!reasoning.empty()) turn["reasoning_content"] = reasoning;
    if (!calls.empty()) {
      json chat_calls = json::array();
      for (const ToolCall& c : calls) {
        json args = json::parse(c.arguments, nullptr, false);
        chat_calls.push_back({{"id", c.id},
                              {"type", "function"},
                              {"function", {{"name", c.name}, {"arguments", args}}}});
      }
      turn["tool_calls"] = std::move(chat_calls);
    }
    StoredResponse stored;
    stored.key_id = target_.key_id;
    stored.messages = target_.conversation;
    stored.messages.push_back(std::move(turn));
    stored.response = r;
    target_.store->Put(options_.id, std::move(stored));
  }
  return r;
}

}  // namespace uf::server
