// Tool (function) calling: how a model writes its calls, parsing them out of its output, and the
// grammar that forces them when tool_choice is "required" or names a function.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"

namespace uf::server {

enum class ToolCallFormat {
  // Hermes / Qwen2.5 / Qwen3 (and the default ChatML template):
  //   <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, one block per call.
  kHermes,
  // Llama 3.1 / 3.2 / 3.3 JSON tool calling: {"name": ..., "parameters": {...}} as the whole
  // reply (optionally after <|python_tag|>).
  kLlama3Json,
  // gpt-oss's harmony: a message <|channel|>commentary to=functions.NAME <|constrain|>json
  // <|message|>{...} ended by <|call|>. Parsed with the reply's channels (reply_parser.h), not
  // here: ParseToolCalls finds no calls in harmony text and StreamableContent holds nothing.
  kHarmony,
};

// The format a chat template teaches: harmony templates (<|channel|>, <|message|>) use kHarmony,
// Llama 3.x templates (their "ipython" role, or <|python_tag|>) kLlama3Json, every other
// kHermes.
ToolCallFormat DetectToolCallFormat(std::string_view template_source);

struct ToolCall {
  std::string id;  // "call_..."
  std::string name;
  std::string arguments;  // JSON text of an object
};

struct ParsedReply {
  std::string content;  // the text outside the calls (trimmed)
  std::vector<ToolCall> calls;
};

// Splits a reply into text and calls to functions among `names`. A block that does not parse,
// or names an unknown function, stays in the content.
ParsedReply ParseToolCalls(std::string_view text, ToolCallFormat format,
                           const std::set<std::string>& names);

// Streaming a reply that may hold calls: how many bytes of `pending` (the text not sent yet;
// at_start: nothing was sent before it) can go out as content now. *call_starts is set when a
// call (possibly) begins right after them: the rest of the reply is then held and parsed when it
// ends. Hermes: text up to a "<tool_call>" tag, holding back a partial tag at the end; Llama 3:
// a reply starting with '{' or '<' (<|python_tag|>) is held whole, any other streams freely.
size_t StreamableContent(std::string_view pending, ToolCallFormat format, bool at_start,
                         bool* call_starts);

// The grammar of one call (several when parallel) of the functions in tools (the request's
// `tools` array, ordered as sent); only those whose name is in `only` when it is not empty. On a
// parameters schema the grammar compiler refuses: InvalidArgument and *param naming it
// ("tools[2].function.parameters.properties.x.pattern").
StatusOr<std::shared_ptr<const grammar::Grammar>> ToolCallGrammar(
    const nlohmann::ordered_json& tools, ToolCallFormat format, bool parallel,
    const std::string& only, std::string* param);

}  // namespace uf::server
