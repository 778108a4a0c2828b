#include "server/chat_prompt.h"

#include <memory>

#include "gguf/gguf.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace uf::server {

StatusOr<ChatRenderer> MakeChatRenderer(const gguf::GgufFile& file, const Tokenizer& tokenizer,
                                        std::string* description,
                                        const std::string& source_override) {
  std::string source = file.GetStringOr("tokenizer.chat_template", "");
  if (!source_override.empty()) {
    source = source_override;
    *description = "the template given with --chat-template-file";
  } else if (source.empty()) {
    source = DefaultChatTemplateSource();
    *description = "no tokenizer.chat_template in the model: using the default (ChatML)";
  } else {
    *description = "the model's tokenizer.chat_template";
  }
  const std::string tmpl_source = source;
  auto parsed = ChatTemplate::Parse(std::move(source));
  if (!parsed.ok()) return parsed.status().WithContext("tokenizer.chat_template");
  auto tmpl = std::make_shared<const ChatTemplate>(std::move(parsed).value());
  auto text = [&tokenizer](int32_t id) {
    return id >= 0 ? std::string(tokenizer.TokenText(id)) : std::string();
  };
  const std::string bos = text(tokenizer.bos_id()), eos = text(tokenizer.eos_id());
  const bool harmony = DetectReasoningFormat(tmpl_source) == ReasoningFormat::kHarmony;
  return ChatRenderer([tmpl, bos, eos, harmony](const nlohmann::json& messages,
                                                const nlohmann::ordered_json& template_kwargs) {
    // Both ordered: the template API takes one kind of JSON for both.
    return tmpl->Render(TemplateMessages(messages, harmony), /*add_generation_prompt=*/true, bos,
                        eos, TemplateKwargs(template_kwargs, harmony));
  });
}

nlohmann::ordered_json TemplateMessages(const nlohmann::json& messages, bool harmony) {
  nlohmann::ordered_json out(messages);
  if (!harmony || !out.is_array()) return out;
  for (auto& m : out) {
    if (!m.is_object() || !m.contains("reasoning_content")) continue;
    // gpt-oss's template reads an earlier reply's reasoning as `thinking`, and refuses a turn
    // with calls that has both thinking and content (its analysis message is one or the other):
    // the content goes, as llama.cpp does.
    m["thinking"] = m["reasoning_content"];
    if (m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty()) {
      m.erase("content");
    }
  }
  return out;
}

nlohmann::ordered_json TemplateKwargs(const nlohmann::ordered_json& kwargs, bool harmony) {
  nlohmann::ordered_json out =
      kwargs.is_object() ? kwargs : nlohmann::ordered_json(nlohmann::ordered_json::object());
  // Defined as llama.cpp defines it: templates that test `not enable_thinking` (QwQ's,
  // DeepSeek-R1's as llama.cpp ships them) would otherwise close the think block.
  if (!out.contains("enable_thinking")) out["enable_thinking"] = true;
  if (harmony && out.contains("tools") && out["tools"].is_array()) {
    // gpt-oss's template writes "// " + description, an error for a tool without one (OpenAI's
    // description is optional).
    for (auto& t : out["tools"]) {
      if (t.is_object() && t.contains("function") && t["function"].is_object() &&
          !t["function"].contains("description")) {
        t["function"]["description"] = "";
      }
    }
  }
  return out;
}

ReasoningFormat ReasoningFormatOf(const gguf::GgufFile& file) {
  return DetectReasoningFormat(ChatTemplateSourceOf(file));
}

std::string ChatTemplateSourceOf(const gguf::GgufFile& file) {
  const std::string source = file.GetStringOr("tokenizer.chat_template", "");
  return source.empty() ? DefaultChatTemplateSource() : source;
}

ToolCallFormat ToolCallFormatOf(const gguf::GgufFile& file) {
  return DetectToolCallFormat(ChatTemplateSourceOf(file));
}

}  // namespace uf::server
