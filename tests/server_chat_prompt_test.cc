// The server's chat renderer: the model's tokenizer.chat_template when present (with the
// tokenizer's BOS/EOS texts and the assistant generation prompt), ChatML otherwise. Expected
// strings are worked out by hand from each template's source.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "gguf/gguf.h"
#include "model/model.h"
#include "server/chat_prompt.h"
#include "shared_data.h"
#include "tokenizer/tokenizer.h"

namespace uf::server {
namespace {

using json = nlohmann::json;

std::unique_ptr<Tokenizer> TokenizerOf(const std::string& model_path) {
  auto file = gguf::GgufFile::Open(model_path);
  UF_CHECK(file.ok()) << file.status().ToString();
  auto tok = Tokenizer::FromGguf(**file);
  UF_CHECK(tok.ok()) << tok.status().ToString();
  return std::move(tok).value();
}

// A tensor-less GGUF whose only metadata is the chat template.
std::unique_ptr<gguf::GgufFile> FileWithTemplate(const std::string& source) {
  gguf::GgufWriter w;
  if (!source.empty()) w.Set("tokenizer.chat_template", gguf::Value::String(source));
  auto bytes = w.WriteToBuffer();
  UF_CHECK(bytes.ok());
  auto file = gguf::GgufFile::FromBuffer(bytes->data(), bytes->size());
  UF_CHECK(file.ok()) << file.status().ToString();
  return std::move(file).value();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const json kConversation = json::parse(R"([{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "Hi"}])");

TEST(ChatPromptTest, ModelsWithoutATemplateGetChatMl) {
  UF_REQUIRE_SHARED();
  auto tok = TokenizerOf("../shared/models/tiny-qwen2-256-q8_0.gguf");
  std::string note;
  auto render = MakeChatRenderer(*FileWithTemplate(""), *tok, &note);
  ASSERT_TRUE(render.ok()) << render.status().ToString();
  EXPECT_NE(note.find("default"), std::string::npos);
  auto text = (*render)(kConversation, json());
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatPromptTest, UsesTheModelsTemplate) {
  UF_REQUIRE_SHARED();
  // Qwen2.5's template adds its own system prompt when the conversation has none.
  auto tok = TokenizerOf("../shared/models/tiny-qwen2-256-q8_0.gguf");
  std::string note;
  auto render = MakeChatRenderer(
      *FileWithTemplate(ReadFile("../shared/templates/Qwen-Qwen2.5-7B-Instruct.jinja")), *tok,
      &note);
  ASSERT_TRUE(render.ok()) << render.status().ToString();
  auto text = (*render)(json::parse(R"([{"role": "user", "content": "Hi"}])"), json());
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text,
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatPromptTest, PassesBosAndEosTexts) {
  UF_REQUIRE_SHARED();
  auto tok = TokenizerOf("../shared/models/tiny-llama-256-q8_0.gguf");  // SPM: <s>, </s>
  std::string note;
  auto render = MakeChatRenderer(
      *FileWithTemplate("{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}"
                        "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}[assistant]"
                        "{% endif %}"),
      *tok, &note);
  ASSERT_TRUE(render.ok()) << render.status().ToString();
  auto text = (*render)(kConversation, json());
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "<s>[system]Be brief.</s>[user]Hi</s>[assistant]");
}

TEST(ChatPromptTest, TemplateErrorsAreReported) {
  UF_REQUIRE_SHARED();
  auto tok = TokenizerOf("../shared/models/tiny-qwen2-256-q8_0.gguf");
  std::string note;
  EXPECT_FALSE(MakeChatRenderer(*FileWithTemplate("{% for %}"), *tok, &note).ok());
  auto render = MakeChatRenderer(
      *FileWithTemplate("{% if messages[0].role != 'user' %}{{ raise_exception('user first') }}"
                        "{% endif %}ok"),
      *tok, &note);
  ASSERT_TRUE(render.ok());
  auto text = (*render)(kConversation, json());
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("user first"), std::string::npos);
}

// chat_template_kwargs reach the template: Qwen3's template closes an empty think block when the
// request says enable_thinking false, and leaves it to the model otherwise.
TEST(ChatPromptTest, TemplateKwargsReachTheTemplate) {
  UF_REQUIRE_SHARED();
  auto tok = TokenizerOf("../shared/models/tiny-qwen3-256-q8_0.gguf");
  std::string note;
  auto render = MakeChatRenderer(
      *FileWithTemplate(ReadFile("../shared/templates/Qwen-Qwen3-0.6B.jinja")), *tok, &note);
  ASSERT_TRUE(render.ok()) << render.status().ToString();
  const json hi = json::parse(R"([{"role": "user", "content": "Hi"}])");
  const std::string base = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
  auto thinking = (*render)(hi, json());
  ASSERT_TRUE(thinking.ok()) << thinking.status().ToString();
  EXPECT_EQ(*thinking, base);
  auto plain = (*render)(hi, json{{"enable_thinking", false}});
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(*plain, base + "<think>\n\n</think>\n\n");
}

// Tools reach the template as the client wrote them: Qwen2.5 prints each with tojson, and the
// model should see "type" before "function", as every client sends it.
TEST(ChatPromptTest, ToolsKeepTheirKeyOrder) {
  UF_REQUIRE_SHARED();
  auto tok = TokenizerOf("../shared/models/tiny-qwen2-256-q8_0.gguf");
  std::string note;
  auto render = MakeChatRenderer(
      *FileWithTemplate(ReadFile("../shared/templates/Qwen-Qwen2.5-7B-Instruct.jinja")), *tok,
      &note);
  ASSERT_TRUE(render.ok()) << render.status().ToString();
  const nlohmann::ordered_json kwargs = nlohmann::ordered_json::parse(R"({"tools": [
      {"type": "function", "function": {"name": "w", "parameters": {"type": "object",
       "properties": {"city": {"type": "string"}}}}}]})");
  auto text = (*render)(json::parse(R"([{"role": "user", "content": "Hi"}])"), kwargs);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_NE(text->find("{\"type\": \"function\", \"function\": {\"name\": \"w\", "
                       "\"parameters\": {\"type\": \"object\""),
            std::string::npos)
      << *text;
}

}  // namespace
}  // namespace uf::server
