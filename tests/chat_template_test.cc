// Chat templates: real templates from ../shared/templates rendered against fixed conversations,
// compared with prompts worked out by hand from each template's source (transformers semantics:
// trim_blocks, lstrip_blocks, tools=None when absent); the well-known Llama 3 / Gemma / Phi-3
// templates written inline; and a smoke test over every shared template. The expression
// language itself is tested in jinja_test.cc.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "shared_data.h"

namespace uf {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

const char* const kTemplateDir = "../shared/templates";

std::string ReadTemplate(const std::string& name) {
  std::ifstream f(std::string(kTemplateDir) + "/" + name);
  EXPECT_TRUE(f.good()) << "missing template " << name;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

ChatTemplate MustParse(const std::string& source) {
  auto t = ChatTemplate::Parse(source);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return *ChatTemplate::Parse("");
  return std::move(t).value();
}

ChatTemplate FromFile(const std::string& name) { return MustParse(ReadTemplate(name)); }

// system + user + assistant + user.
json Conversation() {
  return json::parse(R"([
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hello!"},
    {"role": "assistant", "content": "Hi there."},
    {"role": "user", "content": "What is 2+2?"}
  ])");
}

json ConversationWithoutSystem() {
  json c = Conversation();
  c.erase(c.begin());
  return c;
}

std::string RenderOk(const ChatTemplate& t, const json& messages, bool add_generation_prompt,
                     const std::string& bos = "", const std::string& eos = "",
                     const json& extra = json::object()) {
  auto r = t.Render(messages, add_generation_prompt, bos, eos, extra);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : "";
}

std::string Today(const char* format) {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[64];
  return std::string(buf, std::strftime(buf, sizeof(buf), format, &tm));
}

// ---------------------------------------------------------------------------------------------
// Real templates

TEST(ChatTemplateTest, Qwen25) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = FromFile("Qwen-Qwen2.5-7B-Instruct.jinja");
  const std::string body =
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
      "<|im_start|>user\nHello!<|im_end|>\n"
      "<|im_start|>assistant\nHi there.<|im_end|>\n"
      "<|im_start|>user\nWhat is 2+2?<|im_end|>\n";
  EXPECT_EQ(RenderOk(t, Conversation(), false), body);
  EXPECT_EQ(RenderOk(t, Conversation(), true), body + "<|im_start|>assistant\n");
  // Without a system message the template supplies its own.
  EXPECT_EQ(RenderOk(t, ConversationWithoutSystem(), true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n"
            "<|im_start|>user\nHello!<|im_end|>\n"
            "<|im_start|>assistant\nHi there.<|im_end|>\n"
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, Qwen25ToolCallsAndResults) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = FromFile("Qwen-Qwen2.5-7B-Instruct.jinja");
  ojson messages = ojson::parse(R"([
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": "",
     "tool_calls": [{"type": "function", "function": {"name": "w", "arguments": {"c": "P"}}}]},
    {"role": "tool", "content": "21"},
    {"role": "tool", "content": "22"}
  ])");
  ojson extra = ojson::parse(R"({"tools": [{"type": "function", "function": {"name": "w"}}]})");
  auto r = t.Render(messages, false, "", "", extra);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r,
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.\n\n# Tools\n\nYou may call one or more functions to assist with the user "
            "query.\n\nYou are provided with function signatures within <tools></tools> XML "
            "tags:\n<tools>\n"
            "{\"type\": \"function\", \"function\": {\"name\": \"w\"}}"
            "\n</tools>\n\nFor each function call, return a json object with function name and "
            "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
            "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\nWeather?<|im_end|>\n"
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\": "
            "\"P\"}}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n21\n</tool_response>\n<tool_response>\n22\n"
            "</tool_response><|im_end|>\n");
}

TEST(ChatTemplateTest, Qwen3) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = FromFile("Qwen-Qwen3-0.6B.jinja");
  const std::string body =
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
      "<|im_start|>user\nHello!<|im_end|>\n"
      "<|im_start|>assistant\nHi there.<|im_end|>\n"
      "<|im_start|>user\nWhat is 2+2?<|im_end|>\n";
  EXPECT_EQ(RenderOk(t, Conversation(), false), body);
  EXPECT_EQ(RenderOk(t, Conversation(), true), body + "<|im_start|>assistant\n");
  EXPECT_EQ(RenderOk(t, Conversation(), true, "", "", {{"enable_thinking", false}}),
            body + "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // enable_thinking=true renders as if absent (the template tests `is false`).
  EXPECT_EQ(RenderOk(t, Conversation(), true, "", "", {{"enable_thinking", true}}),
            body + "<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, Qwen3KeepsReasoningAfterLastQuery) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = FromFile("Qwen-Qwen3-0.6B.jinja");
  json messages = json::parse(R"([
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "<think>\nponder\n</think>\n\nHello"}
  ])");
  // The assistant turn follows the last user query, so its reasoning is re-emitted, split out
  // of the content with split('</think>') / lstrip / rstrip.
  EXPECT_EQ(RenderOk(t, messages, false),
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nponder\n</think>\n\nHello<|im_end|>\n");
  // An earlier assistant turn loses its reasoning.
  messages.push_back({{"role", "user"}, {"content", "More"}});
  EXPECT_EQ(RenderOk(t, messages, false),
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello<|im_end|>\n"
            "<|im_start|>user\nMore<|im_end|>\n");
}

TEST(ChatTemplateTest, DeepSeekR1DistillLlama) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = FromFile("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja");
  const std::string bos = "<｜begin▁of▁sentence｜>";
  const std::string body =
      bos +
      "You are a helpful assistant."
      "<｜User｜>Hello!<｜Assistant｜>Hi there.<｜end▁of▁sentence｜><｜User｜>What is 2+2?";
  EXPECT_EQ(RenderOk(t, Conversation(), false, bos), body);
  EXPECT_EQ(RenderOk(t, Conversation(), true, bos), body + "<｜Assistant｜><think>\n");
  // Reasoning is cut from earlier assistant turns at </think> (the rest keeps its newlines).
  json messages = json::parse(R"([
    {"role": "user", "content": "Q"},
    {"role": "assistant", "content": "<think>\nr\n</think>\n\nA"}
  ])");
  EXPECT_EQ(RenderOk(t, messages, false, bos),
            bos + "<｜User｜>Q<｜Assistant｜>\n\nA<｜end▁of▁sentence｜>");
}

TEST(ChatTemplateTest, Llama31) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = FromFile("meta-llama-Llama-3.1-8B-Instruct.jinja");
  const std::string body =
      "<|begin_of_text|>"
      "<|start_header_id|>system<|end_header_id|>\n\n"
      "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
      "You are a helpful assistant.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nHi there.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>";
  EXPECT_EQ(RenderOk(t, Conversation(), false, "<|begin_of_text|>"), body);
  EXPECT_EQ(RenderOk(t, Conversation(), true, "<|begin_of_text|>"),
            body + "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplateTest, Llama31WithTools) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = FromFile("meta-llama-Llama-3.1-8B-Instruct.jinja");
  ojson messages = ojson::parse(R"([
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "tool_calls": [{"type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "{\"temp\": 21}"}
  ])");
  ojson extra = ojson::parse(R"({"tools": [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]})");
  auto r = t.Render(messages, true, "<|begin_of_text|>", "", extra);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Tools go into the first user message as tojson(indent=4); the tool result is a string, which
  // `is iterable`, so the template JSON-encodes it again.
  EXPECT_EQ(*r,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            "Environment: ipython\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\n"
            "Given the following functions, please respond with a JSON for a function call with "
            "its proper arguments that best answers the given prompt.\n\n"
            "Respond in the format {\"name\": function name, \"parameters\": dictionary of "
            "argument name and its value}.Do not use variables.\n\n"
            "{\n"
            "    \"type\": \"function\",\n"
            "    \"function\": {\n"
            "        \"name\": \"get_weather\",\n"
            "        \"parameters\": {\n"
            "            \"type\": \"object\",\n"
            "            \"properties\": {\n"
            "                \"city\": {\n"
            "                    \"type\": \"string\"\n"
            "                }\n"
            "            },\n"
            "            \"required\": [\n"
            "                \"city\"\n"
            "            ]\n"
            "        }\n"
            "    }\n"
            "}\n\n"
            "Weather in Paris?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n"
            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|>"
            "<|start_header_id|>ipython<|end_header_id|>\n\n\"{\\\"temp\\\": 21}\"<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplateTest, MistralSmall32) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = FromFile("Mistral-Small-3.2-24B-Instruct-2506.jinja");
  const std::string expected =
      "<s>[SYSTEM_PROMPT]You are a helpful assistant.[/SYSTEM_PROMPT]"
      "[INST]Hello![/INST]Hi there.</s>[INST]What is 2+2?[/INST]";
  // The template has no generation prompt: [/INST] already hands the turn to the model.
  EXPECT_EQ(RenderOk(t, Conversation(), false, "<s>", "</s>"), expected);
  EXPECT_EQ(RenderOk(t, Conversation(), true, "<s>", "</s>"), expected);
  // Without a system message the default one carries today's date from strftime_now.
  std::string out = RenderOk(t, ConversationWithoutSystem(), true, "<s>", "</s>");
  const std::string prefix =
      "<s>[SYSTEM_PROMPT]You are Mistral Small 3, a Large Language Model (LLM) created by "
      "Mistral AI, a French startup headquartered in Paris.\nYour knowledge base was last "
      "updated on 2023-10-01. The current date is " +
      Today("%Y-%m-%d") + ".\n\nWhen you're not sure";
  EXPECT_EQ(out.substr(0, prefix.size()), prefix);
  const std::string suffix =
      "inform the user that you cannot perform the requested action at the moment."
      "[/SYSTEM_PROMPT][INST]Hello![/INST]Hi there.</s>[INST]What is 2+2?[/INST]";
  ASSERT_GE(out.size(), suffix.size());
  EXPECT_EQ(out.substr(out.size() - suffix.size()), suffix);
}

TEST(ChatTemplateTest, MistralSmall32RejectsNonAlternatingRoles) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = FromFile("Mistral-Small-3.2-24B-Instruct-2506.jinja");
  json messages = json::parse(R"([{"role": "user", "content": "a"},
                                  {"role": "user", "content": "b"}])");
  auto r = t.Render(messages, true, "<s>", "</s>");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("conversation roles must alternate"), std::string::npos)
      << r.status().message();
}

TEST(ChatTemplateTest, SmolLM3) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = FromFile("HuggingFaceTB-SmolLM3-3B.jinja");
  auto header = [](const std::string& mode) {
    return "<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\nReasoning "
           "Mode: " +
           mode +
           "\n\n## Custom Instructions\n\nYou are a helpful assistant.\n\n<|im_end|>\n"
           "<|im_start|>user\nHello!<|im_end|>\n";
  };
  const std::string think = header("/think") +
                            "<|im_start|>assistant\nHi there.<|im_end|>\n"
                            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n";
  EXPECT_EQ(RenderOk(t, Conversation(), false), think);
  EXPECT_EQ(RenderOk(t, Conversation(), true), think + "<|im_start|>assistant\n");
  const std::string no_think = header("/no_think") +
                               "<|im_start|>assistant\n<think>\n\n</think>\nHi there.<|im_end|>\n"
                               "<|im_start|>user\nWhat is 2+2?<|im_end|>\n";
  EXPECT_EQ(RenderOk(t, Conversation(), true, "", "", {{"enable_thinking", false}}),
            no_think + "<|im_start|>assistant\n<think>\n\n</think>\n");
  // "/no_think" in the system prompt switches the mode and is removed from it.
  json messages = Conversation();
  messages[0]["content"] = "You are a helpful assistant. /no_think";
  EXPECT_EQ(RenderOk(t, messages, false), no_think);
}

TEST(ChatTemplateTest, Hermes3ToolUse) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = FromFile("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja");
  ojson messages = ojson::parse(R"([{"role": "user", "content": "Hi"}])");
  ojson extra = ojson::parse(R"({"tools": [{"type": "function", "function": {
    "name": "add", "description": "Adds.",
    "parameters": {"type": "object", "properties": {
      "a": {"type": "integer", "description": "first "},
      "b": {"type": ["number", "string"]}}}}}]})");
  auto r = t.Render(messages, true, "<s>", "", extra);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // The json_to_python_type macro maps integer -> int and a type list -> Union[float,str];
  // a missing description trims to "".
  EXPECT_EQ(*r,
            "<s><|im_start|>system\nYou are a function calling AI model. You are provided with "
            "function signatures within <tools></tools> XML tags. You may call one or more "
            "functions to assist with the user query. Don't make assumptions about what values "
            "to plug into functions. Here are the available tools: <tools> "
            "{\"type\": \"function\", \"function\": {\"name\": \"add\", \"description\": "
            "\"add(a: int, b: Union[float,str]) - Adds.\n\n"
            "    Args:\n        a(int): first        b(Union[float,str]): \", \"parameters\": "
            "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\", "
            "\"description\": \"first \"}, \"b\": {\"type\": [\"number\", \"string\"]}}}} "
            "</tools>Use the following pydantic model json schema for each tool call you will "
            "make: {\"properties\": {\"name\": {\"title\": \"Name\", \"type\": \"string\"}, "
            "\"arguments\": {\"title\": \"Arguments\", \"type\": \"object\"}}, \"required\": "
            "[\"name\", \"arguments\"], \"title\": \"FunctionCall\", \"type\": \"object\"}}\n"
            "For each function call return a json object with function name and arguments "
            "within <tool_call></tool_call> XML tags as follows:\n<tool_call>\n{\"name\": "
            "<function-name>, \"arguments\": <args-dict>}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

// Llama 3.2 takes today's date from strftime_now (3.1 hard-codes 26 Jul 2024); date_string from
// the caller overrides both. The system message is trimmed into the header after the date lines.
TEST(ChatTemplateTest, Llama32) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = FromFile("meta-llama-Llama-3.2-3B-Instruct.jinja");
  const std::string bos = "<|begin_of_text|>";
  auto header = [](const std::string& date, const std::string& system) {
    return "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December "
           "2023\nToday Date: " +
           date + "\n\n" + system + "<|eot_id|>";
  };
  const std::string turns =
      "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nHi there.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>";
  const std::string gen = "<|start_header_id|>assistant<|end_header_id|>\n\n";
  const json date = {{"date_string", "02 Dec 2026"}};
  EXPECT_EQ(RenderOk(t, Conversation(), false, bos, "", date),
            bos + header("02 Dec 2026", "You are a helpful assistant.") + turns);
  EXPECT_EQ(RenderOk(t, Conversation(), true, bos, "", date),
            bos + header("02 Dec 2026", "You are a helpful assistant.") + turns + gen);
  // No date_string: strftime_now("%d %b %Y"). No system message: the header stays, empty.
  EXPECT_EQ(RenderOk(t, ConversationWithoutSystem(), true, bos),
            bos + header(Today("%d %b %Y"), "") + turns + gen);
}

TEST(ChatTemplateTest, Llama32ToolsInSystemMessage) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = FromFile("meta-llama-Llama-3.2-3B-Instruct.jinja");
  ojson extra = ojson::parse(R"({"date_string": "02 Dec 2026", "tools_in_user_message": false,
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]})");
  auto r = t.Render(ojson::parse(R"([{"role": "system", "content": " Sys "},
                                     {"role": "user", "content": "Q"}])"),
                    true, "", "", extra);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // tools_in_user_message=false: the instructions and tojson(indent=4) of each tool go in the
  // system header (after "Environment: ipython" and the dates), then the trimmed system prompt.
  EXPECT_EQ(*r,
            "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 02 Dec 2026\n\n"
            "You have access to the following functions. To call a function, please respond with "
            "JSON for a function call.Respond in the format {\"name\": function name, "
            "\"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n"
            "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"f\",\n"
            "        \"parameters\": {}\n    }\n}\n\n"
            "Sys<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // Tools in the user message need a user message to put them in.
  extra["tools_in_user_message"] = true;
  auto e = t.Render(ojson::parse(R"([{"role": "system", "content": "S"}])"), true, "", "", extra);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("no first user message"), std::string::npos);
}

TEST(ChatTemplateTest, Llama31WithoutSystemAndBuiltinTools) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = FromFile("meta-llama-Llama-3.1-8B-Instruct.jinja");
  // 3.3 ships the same template.
  EXPECT_EQ(ReadTemplate("meta-llama-Llama-3.1-8B-Instruct.jinja"),
            ReadTemplate("meta-llama-Llama-3.3-70B-Instruct.jinja"));
  EXPECT_EQ(RenderOk(t, json::parse(R"([{"role": "user", "content": " Hi "}])"), true),
            "<|start_header_id|>system<|end_header_id|>\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // builtin_tools: listed without code_interpreter; calls to them use <|python_tag|> and end
  // in <|eom_id|>.
  json messages = json::parse(R"([
    {"role": "user", "content": "Search x"},
    {"role": "assistant", "tool_calls": [{"type": "function",
      "function": {"name": "brave_search", "arguments": {"query": "x"}}}]}
  ])");
  json extra = {{"builtin_tools", {"brave_search", "code_interpreter", "wolfram_alpha"}}};
  EXPECT_EQ(RenderOk(t, messages, false, "", "", extra),
            "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
            "Tools: brave_search, wolfram_alpha\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nSearch x<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n"
            "<|python_tag|>brave_search.call(query=\"x\")<|eom_id|>");
}

TEST(ChatTemplateTest, Qwen3WithoutSystemReasoningAndTools) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = FromFile("Qwen-Qwen3-0.6B.jinja");
  EXPECT_EQ(RenderOk(t, ConversationWithoutSystem(), true),
            "<|im_start|>user\nHello!<|im_end|>\n"
            "<|im_start|>assistant\nHi there.<|im_end|>\n"
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
  // reasoning_content given separately; the assistant turn is after the last user query and is
  // not the last message, but has reasoning, so <think> is kept. The tool result becomes a user
  // turn of <tool_response> blocks.
  ojson messages = ojson::parse(R"([
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": "", "reasoning_content": "\nneed tool\n",
     "tool_calls": [{"type": "function",
                     "function": {"name": "w", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "21"}
  ])");
  ojson extra = ojson::parse(R"({"tools": [{"type": "function", "function": {"name": "w"}}]})");
  auto r = t.Render(messages, true, "", "", extra);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r,
            "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the "
            "user query.\n\nYou are provided with function signatures within <tools></tools> XML "
            "tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"w\"}}\n</tools>"
            "\n\nFor each function call, return a json object with function name and arguments "
            "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
            "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\nWeather?<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nneed tool\n</think>\n\n"
            "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
            "<|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n21\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, Gemma2) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = FromFile("google-gemma-2-2b-it.jinja");
  // Assistant is spelled "model"; content is trimmed; no generation prompt -> nothing after the
  // last <end_of_turn>\n.
  const std::string body =
      "<bos><start_of_turn>user\nHello!<end_of_turn>\n"
      "<start_of_turn>model\nHi there.<end_of_turn>\n"
      "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n";
  EXPECT_EQ(RenderOk(t, ConversationWithoutSystem(), false, "<bos>"), body);
  EXPECT_EQ(RenderOk(t, ConversationWithoutSystem(), true, "<bos>"),
            body + "<start_of_turn>model\n");
  auto r = t.Render(Conversation(), true, "<bos>", "");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("System role not supported"), std::string::npos);
}

TEST(ChatTemplateTest, Gemma4) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = FromFile("google-gemma-4-31B-it.jinja");
  const std::string turns =
      "<|turn>user\nHello!<turn|>\n"
      "<|turn>model\nHi there.<turn|>\n"
      "<|turn>user\nWhat is 2+2?<turn|>\n";
  const std::string system = "<|turn>system\nYou are a helpful assistant.<turn|>\n";
  // Without enable_thinking the generation prompt closes an empty thought channel.
  const std::string gen = "<|turn>model\n<|channel>thought\n<channel|>";
  EXPECT_EQ(RenderOk(t, Conversation(), false, "<bos>"), "<bos>" + system + turns);
  EXPECT_EQ(RenderOk(t, Conversation(), true, "<bos>"), "<bos>" + system + turns + gen);
  EXPECT_EQ(RenderOk(t, ConversationWithoutSystem(), true, "<bos>"), "<bos>" + turns + gen);
  // enable_thinking opens a system turn with <|think|> and leaves the channel to the model.
  EXPECT_EQ(
      RenderOk(t, ConversationWithoutSystem(), true, "<bos>", "", {{"enable_thinking", true}}),
      "<bos><|turn>system\n<|think|>\n<turn|>\n" + turns + "<|turn>model\n");
  // Thought channels in earlier model turns are stripped.
  json messages = json::parse(R"([{"role": "user", "content": "Q"},
    {"role": "assistant", "content": "<|channel>thought\nhm<channel|>A "}])");
  EXPECT_EQ(RenderOk(t, messages, false, "<bos>"),
            "<bos><|turn>user\nQ<turn|>\n<|turn>model\nA<turn|>\n");
}

TEST(ChatTemplateTest, Phi35) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = FromFile("microsoft-Phi-3.5-mini-instruct.jinja");
  const std::string body =
      "<|system|>\nYou are a helpful assistant.<|end|>\n<|user|>\nHello!<|end|>\n"
      "<|assistant|>\nHi there.<|end|>\n<|user|>\nWhat is 2+2?<|end|>\n";
  EXPECT_EQ(RenderOk(t, Conversation(), true, "<s>", "<|endoftext|>"), body + "<|assistant|>\n");
  // Without a generation prompt the template ends in eos_token.
  EXPECT_EQ(RenderOk(t, Conversation(), false, "<s>", "<|endoftext|>"), body + "<|endoftext|>");
  // An empty system message is skipped, as is a missing one.
  json messages = Conversation();
  messages[0]["content"] = "";
  const std::string no_system = body.substr(body.find("<|user|>"));
  EXPECT_EQ(RenderOk(t, messages, true, "<s>", "<|endoftext|>"), no_system + "<|assistant|>\n");
  EXPECT_EQ(RenderOk(t, ConversationWithoutSystem(), true, "<s>", "<|endoftext|>"),
            no_system + "<|assistant|>\n");
}

TEST(ChatTemplateTest, MistralNemo) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = FromFile("mistralai-Mistral-Nemo-Instruct-2407.jinja");
  // The system message is prepended to the LAST user message; no generation prompt exists.
  const std::string with_system =
      "<s>[INST]Hello![/INST]Hi there.</s>"
      "[INST]You are a helpful assistant.\n\nWhat is 2+2?[/INST]";
  EXPECT_EQ(RenderOk(t, Conversation(), false, "<s>", "</s>"), with_system);
  EXPECT_EQ(RenderOk(t, Conversation(), true, "<s>", "</s>"), with_system);
  EXPECT_EQ(RenderOk(t, ConversationWithoutSystem(), true, "<s>", "</s>"),
            "<s>[INST]Hello![/INST]Hi there.</s>[INST]What is 2+2?[/INST]");
  // Tools go before the last user message (found by dict equality with user_messages[-1]);
  // string fields are quoted by hand, the rest through tojson. Tool call ids must be 9 chars.
  ojson messages = ojson::parse(R"([
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "tool_calls": [{"id": "abcdefghi", "type": "function",
      "function": {"name": "w", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "abcdefghi", "content": "21"},
    {"role": "assistant", "content": "21 C."},
    {"role": "user", "content": "Thanks"}
  ])");
  ojson extra = ojson::parse(R"({"tools": [{"type": "function", "function": {"name": "w",
    "description": "Weather", "parameters": {"type": "object", "required": ["city"]}}}]})");
  auto r = t.Render(messages, true, "<s>", "</s>", extra);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r,
            "<s>[INST]Weather?[/INST]"
            "[TOOL_CALLS][{\"name\": \"w\", \"arguments\": {\"city\": \"Paris\"}, \"id\": "
            "\"abcdefghi\"}]</s>"
            "[TOOL_RESULTS]{\"content\": 21, \"call_id\": \"abcdefghi\"}[/TOOL_RESULTS]"
            "21 C.</s>"
            "[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": {\"name\": \"w\", "
            "\"description\": \"Weather\", \"parameters\": {\"type\": \"object\", \"required\": "
            "[\"city\"]}}}][/AVAILABLE_TOOLS]"
            "[INST]Thanks[/INST]");
  messages[1]["tool_calls"][0]["id"] = "short";
  auto e = t.Render(messages, true, "<s>", "</s>", extra);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("length 9"), std::string::npos);
}

TEST(ChatTemplateTest, Ministral3Reasoning) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = FromFile("mistralai-Ministral-3-14B-Reasoning-2512.jinja");
  const std::string turns = "[INST]Hello![/INST]Hi there.</s>[INST]What is 2+2?[/INST]";
  EXPECT_EQ(RenderOk(t, Conversation(), true, "<s>", "</s>"),
            "<s>[SYSTEM_PROMPT]You are a helpful assistant.[/SYSTEM_PROMPT]" + turns);
  // Without a system message the template's default (the thinking instructions) is used.
  EXPECT_EQ(RenderOk(t, ConversationWithoutSystem(), false, "<s>", "</s>"),
            "<s>[SYSTEM_PROMPT]# HOW YOU SHOULD THINK AND ANSWER\n\nFirst draft your thinking "
            "process (inner monologue) until you arrive at a response. Format your response "
            "using Markdown, and use LaTeX for any mathematical equations. Write both your "
            "thoughts and the response in the same language as the input.\n\nYour thinking "
            "process must follow the template below:[THINK]Your thoughts or/and draft, like "
            "working through an exercise on scratch paper. Be as casual and as long as you want "
            "until you are confident to generate the response to the user.[/THINK]Here, provide "
            "a self-contained response.[/SYSTEM_PROMPT]" +
                turns);
  // Tool calls: name[ARGS] + arguments|tojson|safe; thinking chunks in assistant content.
  ojson messages = ojson::parse(R"([
    {"role": "system", "content": "S"},
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}],
     "tool_calls": [{"type": "function", "function": {"name": "w", "arguments": {"c": "P"}}}]},
    {"role": "tool", "content": "21"}
  ])");
  ojson extra = ojson::parse(R"({"tools": [{"type": "function", "function": {"name": "w"}}]})");
  auto r = t.Render(messages, true, "<s>", "</s>", extra);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r,
            "<s>[SYSTEM_PROMPT]S[/SYSTEM_PROMPT]"
            "[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": {\"name\": \"w\"}}]"
            "[/AVAILABLE_TOOLS]"
            "[INST]Weather?[/INST][THINK]hm[/THINK][TOOL_CALLS]w[ARGS]{\"c\": \"P\"}</s>"
            "[TOOL_RESULTS]21[/TOOL_RESULTS]");
}

TEST(ChatTemplateTest, Devstral) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = FromFile("unsloth-mistral-Devstral-Small-2507.jinja");
  const std::string turns = "[INST]Hello![/INST]Hi there.</s>[INST]What is 2+2?[/INST]";
  EXPECT_EQ(RenderOk(t, Conversation(), true, "<s>", "</s>"),
            "<s>[SYSTEM_PROMPT]You are a helpful assistant.[/SYSTEM_PROMPT]" + turns);
  // The default system prompt is a long single-quoted literal with \" and \' escapes.
  std::string out = RenderOk(t, ConversationWithoutSystem(), false, "<s>", "</s>");
  const std::string prefix =
      "<s>[SYSTEM_PROMPT]You are Devstral, a helpful agentic model trained by Mistral AI and "
      "using the OpenHands scaffold. You can interact with a computer to solve tasks.\n\n<ROLE>\n";
  EXPECT_EQ(out.substr(0, prefix.size()), prefix);
  EXPECT_NE(out.find("like \"why is X happening\", don't try to fix"), std::string::npos) << out;
  const std::string suffix = "[/SYSTEM_PROMPT]" + turns;
  ASSERT_GE(out.size(), suffix.size());
  EXPECT_EQ(out.substr(out.size() - suffix.size()), suffix);
  // Tools once after the system prompt; calls as name[ARGS]json; results in [TOOL_RESULTS].
  ojson messages = ojson::parse(R"([
    {"role": "system", "content": [{"type": "text", "text": "S"}]},
    {"role": "user", "content": [{"type": "text", "text": "Q"}, {"type": "image"}]},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
      "function": {"name": "w", "arguments": {"c": "P"}}}]},
    {"role": "tool", "content": "21"}
  ])");
  ojson extra = ojson::parse(R"({"tools": [{"type": "function", "function": {"name": "w"}}]})");
  auto r = t.Render(messages, true, "<s>", "</s>", extra);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r,
            "<s>[SYSTEM_PROMPT]S[/SYSTEM_PROMPT]"
            "[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": {\"name\": \"w\"}}]"
            "[/AVAILABLE_TOOLS][INST]Q[IMG][/INST][TOOL_CALLS]w[ARGS]{\"c\": \"P\"}</s>"
            "[TOOL_RESULTS]21[/TOOL_RESULTS]");
}

TEST(ChatTemplateTest, DefaultTemplateIsChatML) {
  ChatTemplate t = MustParse(DefaultChatTemplateSource());
  const std::string body =
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
      "<|im_start|>user\nHello!<|im_end|>\n"
      "<|im_start|>assistant\nHi there.<|im_end|>\n"
      "<|im_start|>user\nWhat is 2+2?<|im_end|>\n";
  EXPECT_EQ(RenderOk(t, Conversation(), false), body);
  EXPECT_EQ(RenderOk(t, Conversation(), true), body + "<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, ChatMessagesToJson) {
  ChatMessage user;
  user.role = "user";
  user.content = "hi";
  ChatMessage tool;
  tool.role = "tool";
  tool.content = "21";
  tool.name = "w";
  json j = ChatMessagesToJson({user, tool});
  EXPECT_EQ(j, json::parse(R"([{"role": "user", "content": "hi"},
                               {"role": "tool", "content": "21", "name": "w"}])"));
}

// ---------------------------------------------------------------------------------------------
// Well-known templates, written from memory

// meta-llama/Meta-Llama-3-8B-Instruct.
constexpr const char* kLlama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

TEST(ChatTemplateTest, InlineLlama3) {
  ChatTemplate t = MustParse(kLlama3);
  json messages = Conversation();
  messages[1]["content"] = "  Hello!\n";  // trimmed by the template
  const std::string body =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
      "You are a helpful assistant.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nHi there.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>";
  EXPECT_EQ(RenderOk(t, messages, false, "<|begin_of_text|>"), body);
  EXPECT_EQ(RenderOk(t, messages, true, "<|begin_of_text|>"),
            body + "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// Gemma: no system role (merged into the first user turn), assistant spelled "model".
constexpr const char* kGemma = R"({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {{- message['content'] | trim }}
    {{- '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
)";

TEST(ChatTemplateTest, InlineGemma) {
  ChatTemplate t = MustParse(kGemma);
  const std::string body =
      "<bos><start_of_turn>user\nYou are a helpful assistant.\n\nHello!<end_of_turn>\n"
      "<start_of_turn>model\nHi there.<end_of_turn>\n"
      "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n";
  EXPECT_EQ(RenderOk(t, Conversation(), false, "<bos>"), body);
  EXPECT_EQ(RenderOk(t, Conversation(), true, "<bos>"), body + "<start_of_turn>model\n");
  auto r = t.Render(json::parse(R"([{"role": "assistant", "content": "x"}])"), true, "", "");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Conversation roles must alternate"), std::string::npos);
}

// microsoft/Phi-3-mini-4k-instruct.
constexpr const char* kPhi3 =
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + "
    "message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\\n' + "
    "message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'assistant' %}"
    "{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}";

TEST(ChatTemplateTest, InlinePhi3) {
  ChatTemplate t = MustParse(kPhi3);
  const std::string body =
      "<|system|>\nYou are a helpful assistant.<|end|>\n<|user|>\nHello!<|end|>\n"
      "<|assistant|>\nHi there.<|end|>\n<|user|>\nWhat is 2+2?<|end|>\n";
  EXPECT_EQ(RenderOk(t, Conversation(), true, "", "<|endoftext|>"), body + "<|assistant|>\n");
  EXPECT_EQ(RenderOk(t, Conversation(), false, "", "<|endoftext|>"), body + "<|endoftext|>");
}

// ---------------------------------------------------------------------------------------------
// Every shared template

struct SmokeCase {
  json messages;
  json extra;
};

TEST(ChatTemplateTest, EveryTemplateRenders) {
  UF_REQUIRE_SHARED();
  const json tools = json::parse(R"([{"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string",
    "description": "City"}}, "required": ["city"]}}}])");
  // Templates that cannot render the plain conversation, and why (each fails the same way under
  // transformers): they get the variant named here instead.
  const std::map<std::string, std::string> needs = {
      // raise_exception("System role not supported").
      {"google-gemma-2-2b-it.jinja", "no_system"},
      // tool_use variants iterate `tools` unconditionally; transformers picks them only when
      // tools are given.
      {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", "tools"},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "tools"},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "tools"},
      {"meetkai-functionary-medium-v3.1.jinja", "tools"},
      // Needs the caller to pass `functions` and `datetime`.
      {"fireworks-ai-llama-3-firefunction-v2.jinja", "firefunction"},
  };
  int rendered = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kTemplateDir)) {
    if (entry.path().extension() != ".jinja") continue;
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    auto t = ChatTemplate::Parse(ReadTemplate(name));
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    json messages = Conversation();
    json extra = json::object();
    auto it = needs.find(name);
    const std::string need = it == needs.end() ? "" : it->second;
    if (need == "no_system") messages = ConversationWithoutSystem();
    if (need == "tools") extra["tools"] = tools;
    if (need == "firefunction") {
      extra["functions"] = tools.dump();
      extra["datetime"] = "2024-07-26";
    }
    for (bool gen : {false, true}) {
      auto r = t->Render(messages, gen, "<s>", "</s>", extra);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      // Every template shows the last user message somewhere.
      EXPECT_NE(r->find("What is 2+2?"), std::string::npos) << *r;
    }
    // Without a system message, and with message text that looks like template syntax: content
    // is data, never evaluated, so it comes out verbatim.
    json plain = ConversationWithoutSystem();
    plain.back()["content"] = "What is {{ 7*7 }} {% if %}?";
    auto p = t->Render(plain, true, "<s>", "</s>", extra);
    ASSERT_TRUE(p.ok()) << "without system: " << p.status().ToString();
    EXPECT_NE(p->find("What is {{ 7*7 }} {% if %}?"), std::string::npos) << *p;
    // And every one of them renders tool definitions too.
    extra["tools"] = tools;
    auto r = t->Render(messages, true, "<s>", "</s>", extra);
    ASSERT_TRUE(r.ok()) << "with tools: " << r.status().ToString();
    ++rendered;
  }
  EXPECT_GE(rendered, 60);
}

}  // namespace
}  // namespace uf
