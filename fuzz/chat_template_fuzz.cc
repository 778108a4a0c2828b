// libFuzzer target for the chat-template parser and interpreter: arbitrary template bytes,
// rendered against a fixed conversation with tools, must end in text or a Status -- never a
// crash, a hang, unbounded memory or a leak.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto* messages = new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Hi <b>&</b> é"},
    {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello",
     "tool_calls": [{"id": "call_12345", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "name": "get_weather", "tool_call_id": "call_12345", "content": "{\"t\": 21}"},
    {"role": "user", "content": [{"type": "text", "text": "Thanks"}, {"type": "image"}]}
  ])"));
  static const auto* extra = new nlohmann::ordered_json(nlohmann::ordered_json::parse(R"({
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"},
               "days": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
               "required": ["city"]}}}],
    "enable_thinking": false
  })"));
  auto tmpl = uf::ChatTemplate::Parse(std::string(reinterpret_cast<const char*>(data), size));
  if (!tmpl.ok()) return 0;
  // Smaller budgets than the defaults keep each input fast; the depth limit stays the default
  // so stack use is exercised at its real bound.
  uf::jinja::RenderLimits limits;
  limits.max_steps = 200'000;
  limits.max_output_bytes = size_t{1} << 20;
  limits.max_allocated_bytes = size_t{32} << 20;
  tmpl->set_limits(limits);
  auto out = tmpl->Render(*messages, true, "<s>", "</s>", *extra);
  (void)out;
  return 0;
}
