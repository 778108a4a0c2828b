// Chat prompts for the server: the model's own template (tokenizer.chat_template, rendered by the
// Jinja interpreter in tokenizer/chat_template.h) or, for models without one, the documented
// default (ChatML).
#pragma once

#include <string>

#include "base/status.h"
#include "server/http_server.h"
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
// silently degrade every answer).
StatusOr<ChatRenderer> MakeChatRenderer(const gguf::GgufFile& file, const Tokenizer& tokenizer,
                                        std::string* description);

// How the model's template (or the default) has it write tool calls.
ToolCallFormat ToolCallFormatOf(const gguf::GgufFile& file);

}  // namespace uf::server
