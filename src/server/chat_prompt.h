// Chat prompts for the server: the model's own template (tokenizer.chat_template, rendered by the
// Jinja interpreter in tokenizer/chat_template.h) or, for models without one, the documented
// default (ChatML).
#pragma once

#include <string>

#include "base/status.h"
#include "server/http_server.h"
#include "server/reply_parser.h"
#include "server/tool_calls.h"

namespace uf {
class Tokenizer;
namespace gguf {
class GgufFile;
}
}  // namespace uf

namespace uf::server {

// A renderer for the model in file. *description says which template was chosen and why. A
// template that does not parse is an error (serving a model with the wrong prompt format would
// silently degrade every answer). A non-empty source_override is used instead of the model's
// (serve --chat-template-file).
StatusOr<ChatRenderer> MakeChatRenderer(const gguf::GgufFile& file, const Tokenizer& tokenizer,
                                        std::string* description,
                                        const std::string& source_override = "");

// The model's tokenizer.chat_template, or the default when it has none.
std::string ChatTemplateSourceOf(const gguf::GgufFile& file);

// How the model's template (or the default) has it write tool calls.
ToolCallFormat ToolCallFormatOf(const gguf::GgufFile& file);
// How its replies carry reasoning (think tags, or harmony's channels).
ReasoningFormat ReasoningFormatOf(const gguf::GgufFile& file);

// The request's messages as the template reads them: for a harmony template (gpt-oss), an
// earlier reply's reasoning_content also as `thinking` (and a turn with calls and reasoning
// without its content, which the template refuses).
nlohmann::ordered_json TemplateMessages(const nlohmann::json& messages, bool harmony);
// The template's extra variables: the request's chat_template_kwargs, with enable_thinking true
// unless the request says otherwise (as llama.cpp renders); for a harmony template, tools
// without a description get an empty one (gpt-oss's template cannot print them otherwise).
nlohmann::ordered_json TemplateKwargs(const nlohmann::ordered_json& kwargs, bool harmony = false);

}  // namespace uf::server
