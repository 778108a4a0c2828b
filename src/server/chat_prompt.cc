#include "server/chat_prompt.h"

#include <memory>

#include "gguf/gguf.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace uf::server {

StatusOr<ChatRenderer> MakeChatRenderer(const gguf::GgufFile& file, const Tokenizer& tokenizer,
                                        std::string* description) {
  std::string source = file.GetStringOr("tokenizer.chat_template", "");
  if (source.empty()) {
    source = DefaultChatTemplateSource();
    *description = "no tokenizer.chat_template in the model: using the default (ChatML)";
  } else {
    *description = "the model's tokenizer.chat_template";
  }
  auto parsed = ChatTemplate::Parse(std::move(source));
  if (!parsed.ok()) return parsed.status().WithContext("tokenizer.chat_template");
  auto tmpl = std::make_shared<const ChatTemplate>(std::move(parsed).value());
  auto text = [&tokenizer](int32_t id) {
    return id >= 0 ? std::string(tokenizer.TokenText(id)) : std::string();
  };
  const std::string bos = text(tokenizer.bos_id()), eos = text(tokenizer.eos_id());
  return ChatRenderer([tmpl, bos, eos](const nlohmann::json& messages,
                                       const nlohmann::ordered_json& template_kwargs) {
    // Both ordered: the template API takes one kind of JSON for both.
    return tmpl->Render(nlohmann::ordered_json(messages), /*add_generation_prompt=*/true, bos, eos,
                        template_kwargs);
  });
}

ToolCallFormat ToolCallFormatOf(const gguf::GgufFile& file) {
  const std::string source = file.GetStringOr("tokenizer.chat_template", "");
  return DetectToolCallFormat(source.empty() ? DefaultChatTemplateSource() : source);
}

}  // namespace uf::server
