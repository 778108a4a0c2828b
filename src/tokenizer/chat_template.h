// Chat templates: turns a conversation into the prompt text a model was trained on, using the
// Jinja template stored in its GGUF metadata (`tokenizer.chat_template`), rendered the way
// transformers' apply_chat_template renders it (trim_blocks + lstrip_blocks, tojson without
// ASCII escaping, raise_exception, strftime_now, `tools`/`documents` defined as None when absent).
//
// The interpreter (jinja_*.h) supports the Jinja2 subset real chat templates use; everything a
// template can do is bounded (steps, output size, allocation, recursion), so a hostile template
// or request ends in a Status, never a crash or hang.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "tokenizer/jinja_interp.h"

namespace uf {

namespace jinja {
struct Program;
}

struct ChatMessage {
  std::string role;
  std::string content;
  nlohmann::json tool_calls;  // array of {"type", "function": {"name", "arguments"}}; null if none
  std::string name;           // tool name on role "tool" messages; empty if none
  nlohmann::json reasoning_content;  // string, or null if none
};

// The JSON the templates iterate over: [{"role": ..., "content": ..., optional fields}, ...].
nlohmann::json ChatMessagesToJson(const std::vector<ChatMessage>& messages);

class ChatTemplate {
 public:
  // Parses the Jinja source once; InvalidArgument with line/column on syntax errors.
  static StatusOr<ChatTemplate> Parse(std::string source);

  // Renders with the variables messages, add_generation_prompt, bos_token, eos_token, tools and
  // documents (None unless given), plus every key of `extra_context` (a JSON object: tools,
  // enable_thinking, ...; its bos_token/eos_token override the arguments, as transformers lets
  // template kwargs override special tokens). Template errors (undefined function,
  // raise_exception, limits) come back as a Status carrying the template line.
  StatusOr<std::string> Render(const nlohmann::json& messages, bool add_generation_prompt,
                               const std::string& bos_token, const std::string& eos_token,
                               const nlohmann::json& extra_context = {}) const;
  // Same with object key order preserved: tool schemas print in the order the client sent them
  // (nlohmann::json sorts keys, which changes what `tools | tojson` prints).
  StatusOr<std::string> Render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                               const std::string& bos_token, const std::string& eos_token,
                               const nlohmann::ordered_json& extra_context = {}) const;

  void set_limits(const jinja::RenderLimits& limits) { limits_ = limits; }

 private:
  explicit ChatTemplate(std::shared_ptr<const jinja::Program> program)
      : program_(std::move(program)) {}

  std::shared_ptr<const jinja::Program> program_;
  jinja::RenderLimits limits_;
};

// The template used when a model has none: ChatML (<|im_start|>role\ncontent<|im_end|>\n per
// message, then <|im_start|>assistant\n when add_generation_prompt), as transformers' former
// default. A message whose content is null renders with empty content.
std::string DefaultChatTemplateSource();

}  // namespace uf
