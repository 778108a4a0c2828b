#include "tokenizer/chat_template.h"

#include <utility>

#include "tokenizer/jinja_parser.h"

namespace uf {

nlohmann::json ChatMessagesToJson(const std::vector<ChatMessage>& messages) {
  nlohmann::json out = nlohmann::json::array();
  for (const ChatMessage& m : messages) {
    nlohmann::json j = {{"role", m.role}, {"content", m.content}};
    if (!m.tool_calls.is_null()) j["tool_calls"] = m.tool_calls;
    if (!m.name.empty()) j["name"] = m.name;
    if (!m.reasoning_content.is_null()) j["reasoning_content"] = m.reasoning_content;
    out.push_back(std::move(j));
  }
  return out;
}

StatusOr<ChatTemplate> ChatTemplate::Parse(std::string source) {
  auto program = jinja::ParseTemplate(std::move(source));
  if (!program.ok()) return program.status().WithContext("chat template");
  return ChatTemplate(std::move(program).value());
}

namespace {

template <typename Json>
StatusOr<std::string> RenderImpl(const jinja::Program& program, const jinja::RenderLimits& limits,
                                 const Json& messages, bool add_generation_prompt,
                                 const std::string& bos_token, const std::string& eos_token,
                                 const Json& extra_context) {
  if (!messages.is_array()) {
    return InvalidArgumentError("chat template: messages must be a JSON array");
  }
  if (!extra_context.is_null() && !extra_context.is_object()) {
    return InvalidArgumentError("chat template: extra context must be a JSON object");
  }
  std::vector<std::pair<std::string, jinja::Value>> globals;
  auto set = [&](const std::string& key, jinja::Value value) {
    for (auto& [k, v] : globals) {
      if (k == key) {
        v = std::move(value);
        return;
      }
    }
    globals.emplace_back(key, std::move(value));
  };
  set("tools", jinja::Value::None());
  set("documents", jinja::Value::None());
  set("bos_token", jinja::Value(bos_token));
  set("eos_token", jinja::Value(eos_token));
  if (extra_context.is_object()) {
    for (auto it = extra_context.begin(); it != extra_context.end(); ++it) {
      auto value = jinja::FromJson(it.value());
      if (!value.ok()) return value.status().WithContext("chat template: " + it.key());
      set(it.key(), std::move(value).value());
    }
  }
  auto msgs = jinja::FromJson(messages);
  if (!msgs.ok()) return msgs.status().WithContext("chat template: messages");
  set("messages", std::move(msgs).value());
  set("add_generation_prompt", jinja::Value(add_generation_prompt));
  jinja::Interpreter interpreter(program, limits);
  auto out = interpreter.Render(std::move(globals));
  if (!out.ok()) return out.status().WithContext("chat template");
  return out;
}

}  // namespace

StatusOr<std::string> ChatTemplate::Render(const nlohmann::json& messages,
                                           bool add_generation_prompt, const std::string& bos_token,
                                           const std::string& eos_token,
                                           const nlohmann::json& extra_context) const {
  return RenderImpl(*program_, limits_, messages, add_generation_prompt, bos_token, eos_token,
                    extra_context);
}

StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& messages,
                                           bool add_generation_prompt, const std::string& bos_token,
                                           const std::string& eos_token,
                                           const nlohmann::ordered_json& extra_context) const {
  return RenderImpl(*program_, limits_, messages, add_generation_prompt, bos_token, eos_token,
                    extra_context);
}

std::string DefaultChatTemplateSource() {
  // ChatML; with tools, Hermes-style tool use (as Qwen2.5 renders it): the signatures in a system
  // turn, calls as <tool_call> JSON, results as <tool_response> in a user turn.
  return "{%- if tools -%}\n"
         "{{- '<|im_start|>system\\n' -}}\n"
         "{%- if messages[0]['role'] == 'system' -%}"
         "{{- messages[0]['content'] + '\\n\\n' -}}{%- endif -%}\n"
         "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query."
         "\\n\\nYou are provided with function signatures within <tools></tools> XML tags:"
         "\\n<tools>' -}}\n"
         "{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}\n"
         "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function "
         "name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
         "{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call>"
         "<|im_end|>\\n' -}}\n"
         "{%- endif -%}\n"
         "{%- for message in messages -%}\n"
         "{%- if tools and loop.first and message['role'] == 'system' -%}\n"
         "{%- elif message['role'] == 'tool' -%}\n"
         "{{- '<|im_start|>user\\n<tool_response>\\n' + message['content'] + "
         "'\\n</tool_response><|im_end|>\\n' -}}\n"
         "{%- else -%}\n"
         "{{- '<|im_start|>' + message['role'] + '\\n' + "
         "(message['content'] if message['content'] is string else '') -}}\n"
         "{%- if message['tool_calls'] -%}{%- for call in message['tool_calls'] -%}\n"
         "{{- '<tool_call>\\n' + ({'name': call['function']['name'], "
         "'arguments': call['function']['arguments']} | tojson) + '\\n</tool_call>' -}}\n"
         "{%- endfor -%}{%- endif -%}\n"
         "{{- '<|im_end|>\\n' -}}\n"
         "{%- endif -%}\n"
         "{%- endfor -%}\n"
         "{%- if add_generation_prompt -%}\n"
         "{{- '<|im_start|>assistant\\n' -}}\n"
         "{%- endif -%}\n";
}

}  // namespace uf
