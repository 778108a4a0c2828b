// A chat reply split as it streams into what each API reports apart: the model's reasoning, its
// answer (content) and its tool calls. Two reasoning formats, chosen from the model's chat
// template (DetectReasoningFormat):
//   - think tags (Qwen3, QwQ, DeepSeek-R1 and the default for every other template): a reply
//     that begins with <think> reasons until </think>; when the prompt itself ends inside an
//     open <think> (DeepSeek-R1's and QwQ's generation prompts), the reply starts in it.
//     The content after the block then goes through the tool-call parser (tool_calls.h).
//   - harmony (gpt-oss): a sequence of messages, each a header then a body,
//       [<|start|>assistant][ to=RECIPIENT]<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>json]
//       <|message|>BODY<|end|>
//     (the last body ends the reply: its <|return|> or <|call|> ends generation). Channel
//     `analysis` is reasoning, `final` and `commentary` content, and a body addressed
//     `to=functions.NAME` a call of NAME with the body as its JSON arguments.
// Text that may still turn out to be a tag is held back until it is known, so the split is the
// same however the text is cut into pieces.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_calls.h"

namespace uf::server {

enum class ReasoningFormat {
  kNone,     // everything is content (completions)
  kThink,    // <think>...</think>
  kHarmony,  // gpt-oss channels
};

// kHarmony for templates that write harmony's channels, kThink for every other.
ReasoningFormat DetectReasoningFormat(std::string_view template_source);

// The rendered prompt leaves the model inside a <think> block: it ends with <think> (and white
// space), as DeepSeek-R1's and QwQ's generation prompts do.
bool PromptOpensThinking(std::string_view prompt);

struct ReplyFormat {
  ReasoningFormat reasoning = ReasoningFormat::kNone;
  bool starts_thinking = false;  // kThink: the prompt opened the block (PromptOpensThinking)
  // Tool calls are parsed out of the content (the request has tools and tool_choice is not
  // "none"); harmony's calls come from their own messages. Without it, harmony calls are dropped
  // and the content is reported whole.
  bool parse_tools = false;
  ToolCallFormat tool_format = ToolCallFormat::kHermes;
  std::set<std::string> tool_names;
};

struct ReplyPiece {
  std::string reasoning;
  std::string content;
};

struct ReplyEnd {
  std::string reasoning;  // what was still held back
  std::string content;
  std::vector<ToolCall> calls;
};

class ReplyParser {
 public:
  explicit ReplyParser(ReplyFormat format);

  // The part of `text` (appended to the reply so far, `tokens` tokens of it) that can be
  // reported now.
  ReplyPiece Push(std::string_view text, int64_t tokens = 0);
  // The reply ended (stop, length or a call): what was held back, and the calls. A reply cut off
  // inside its reasoning is reasoning to its end.
  ReplyEnd Finish();

  // Some reasoning was seen; answer text (or a call) was seen.
  bool had_reasoning() const { return had_reasoning_; }
  bool answer_started() const { return answer_started_; }
  // Tokens pushed before the answer's first text, in a reply that reasons (the tags included).
  int64_t reasoning_tokens() const { return reasoning_tokens_; }

  // A whole reply at once, as the streamed pieces add up (with calls, the content is trimmed).
  static ReplyEnd Parse(const ReplyFormat& format, std::string_view text);

 private:
  enum class Phase { kStart, kThinking, kAnswer, kHeader, kBody };
  enum class Body { kReasoning, kContent, kCall, kDrop };

  void PushThink(ReplyPiece* out);
  void PushHarmony(ReplyPiece* out);
  // Starts a harmony body from its header text.
  void OpenBody(std::string_view header);
  void EmitBody(std::string_view text, ReplyPiece* out);
  void CloseBody();
  void EmitReasoning(std::string_view text, ReplyPiece* out);
  // Answer text through the tool-call holding (tool_calls.h: StreamableContent).
  void EmitContent(std::string_view text, ReplyPiece* out);

  ReplyFormat format_;
  Phase phase_;
  std::string buf_;  // text that may still be (part of) a tag
  bool had_reasoning_ = false;
  bool answer_started_ = false;
  bool strip_reasoning_ = false;  // drop the reasoning's leading white space
  bool strip_answer_ = false;     // just after </think>: drop the answer's leading white space
  std::string reasoning_blank_;   // white space at the reasoning's end, held: </think> may follow
  int64_t reasoning_tokens_ = 0;
  int64_t undecided_tokens_ = 0;  // pushed while it was not known yet whether the reply reasons
  // Harmony.
  bool first_message_ = true;
  // A header too long to be one is text: its opening tag must not end the body it begins.
  bool plain_opener_ = false;
  Body body_ = Body::kContent;
  std::string call_name_;
  std::string call_args_;
  std::vector<ToolCall> calls_;
  // Tool-call holding of the content (think format).
  std::string held_;
  size_t sent_ = 0;
  bool in_call_ = false;
};

}  // namespace uf::server
