// Reasoning output: the reply parser (reply_parser.h) on Qwen3 / DeepSeek-R1 think blocks and
// gpt-oss's harmony channels, streamed in every split of the text into two and three chunks and
// byte by byte (the result must not depend on where the text is cut); the format each shared
// template teaches; and the prompts of the real templates with reasoning_effort,
// enable_thinking and an earlier reply's reasoning sent back.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "server/chat_prompt.h"
#include "server/reply_parser.h"
#include "shared_data.h"
#include "tokenizer/chat_template.h"

namespace uf::server {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

struct Want {
  std::string reasoning;
  std::string content;
  std::vector<std::pair<std::string, json>> calls;  // name, arguments
};

// The reply fed in `chunks`, as a streaming writer sees it.
ReplyEnd Streamed(const ReplyFormat& format, const std::vector<std::string_view>& chunks) {
  ReplyParser p(format);
  ReplyEnd all;
  for (std::string_view c : chunks) {
    ReplyPiece piece = p.Push(c);
    all.reasoning += piece.reasoning;
    all.content += piece.content;
  }
  ReplyEnd end = p.Finish();
  all.reasoning += end.reasoning;
  all.content += end.content;
  all.calls = std::move(end.calls);
  return all;
}

void ExpectReply(const ReplyEnd& got, const Want& want, const std::string& where) {
  EXPECT_EQ(got.reasoning, want.reasoning) << where;
  EXPECT_EQ(got.content, want.content) << where;
  ASSERT_EQ(got.calls.size(), want.calls.size()) << where;
  for (size_t i = 0; i < got.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].name, want.calls[i].first) << where;
    EXPECT_EQ(json::parse(got.calls[i].arguments), want.calls[i].second) << where;
    EXPECT_TRUE(got.calls[i].id.starts_with("call_")) << where;
  }
}

// Every split of text into 2 and 3 chunks, byte by byte, and whole.
void ExpectEverySplit(const ReplyFormat& format, std::string_view text, const Want& want) {
  ExpectReply(Streamed(format, {text}), want, "whole");
  for (size_t i = 0; i <= text.size(); ++i) {
    ExpectReply(Streamed(format, {text.substr(0, i), text.substr(i)}), want,
                "split at " + std::to_string(i));
    if (::testing::Test::HasFailure()) return;
    for (size_t j = i; j <= text.size(); ++j) {
      ExpectReply(Streamed(format, {text.substr(0, i), text.substr(i, j - i), text.substr(j)}),
                  want, "split at " + std::to_string(i) + ", " + std::to_string(j));
      if (::testing::Test::HasFailure()) return;
    }
  }
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
  ExpectReply(Streamed(format, bytes), want, "byte by byte");
}

ReplyFormat Think(bool starts_thinking = false) {
  ReplyFormat f;
  f.reasoning = ReasoningFormat::kThink;
  f.starts_thinking = starts_thinking;
  return f;
}

ReplyFormat Harmony(bool tools) {
  ReplyFormat f;
  f.reasoning = ReasoningFormat::kHarmony;
  f.tool_format = ToolCallFormat::kHarmony;
  f.parse_tools = tools;
  if (tools) f.tool_names = {"get_weather"};
  return f;
}

TEST(ReplyParserTest, Qwen3ThinkBlock) {
  ExpectEverySplit(Think(), "<think>\nThe user adds.\n2+2=4.\n</think>\n\nIt is 4.",
                   {"The user adds.\n2+2=4.", "It is 4.", {}});
  // White space before the block, none inside it.
  ExpectEverySplit(Think(), "\n<think>Hm</think>Yes", {"Hm", "Yes", {}});
  // An empty block (Qwen3 with thinking off writes none; some models write an empty one).
  ExpectEverySplit(Think(), "<think>\n\n</think>\n\nHi", {"", "Hi", {}});
}

TEST(ReplyParserTest, ReplyWithoutThinkIsContentAsItCame) {
  ExpectEverySplit(Think(), " <this> is not a tag", {"", " <this> is not a tag", {}});
  ExpectEverySplit(Think(), "<thin", {"", "<thin", {}});
  ExpectEverySplit(Think(), "Text with </think> inside.", {"", "Text with </think> inside.", {}});
  ReplyFormat none;
  none.reasoning = ReasoningFormat::kNone;
  ExpectEverySplit(none, "<think>a</think>b", {"", "<think>a</think>b", {}});
}

// DeepSeek-R1 and QwQ: the generation prompt opens the block, the reply starts inside it.
TEST(ReplyParserTest, PromptOpenedThinkBlock) {
  ExpectEverySplit(Think(true), "Okay, 2+2.\nSo 4.\n</think>\n\nThe answer is 4.",
                   {"Okay, 2+2.\nSo 4.", "The answer is 4.", {}});
  // A model that opens it again anyway.
  ExpectEverySplit(Think(true), "<think>\nx\n</think>y", {"x", "y", {}});
}

// Cut off by max_tokens inside the block: all of it is reasoning, the content empty.
TEST(ReplyParserTest, UnterminatedThinkAtMaxTokens) {
  ExpectEverySplit(Think(), "<think>\nStill thinking about", {"Still thinking about", "", {}});
  ExpectEverySplit(Think(), "<think>abc</thi", {"abc</thi", "", {}});
  ExpectEverySplit(Think(true), "Still going\n", {"Still going", "", {}});
  ExpectEverySplit(Think(true), "", {"", "", {}});
}

TEST(ReplyParserTest, HermesCallAfterThinkBlock) {
  ReplyFormat f = Think();
  f.parse_tools = true;
  f.tool_names = {"get_weather"};
  ExpectEverySplit(f,
                   "<think>\nNeed the weather.\n</think>\n\n<tool_call>\n{\"name\": "
                   "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                   {"Need the weather.", "", {{"get_weather", {{"city", "Paris"}}}}});
  // Text before the call streams as content; an unknown function stays text.
  const Want text_then_call = {"", "Let me check.\n", {{"get_weather", {{"city", "Oslo"}}}}};
  ExpectEverySplit(f,
                   "Let me check.\n<tool_call>{\"name\": \"get_weather\", \"arguments\": "
                   "{\"city\": \"Oslo\"}}</tool_call>",
                   text_then_call);
  EXPECT_EQ(ReplyParser::Parse(f,
                               "Let me check.\n<tool_call>{\"name\": \"get_weather\", "
                               "\"arguments\": {\"city\": \"Oslo\"}}</tool_call>")
                .content,
            "Let me check.");  // whole replies with calls are trimmed
  ExpectEverySplit(f, "<think>a</think><tool_call>{\"name\": \"rm\"}</tool_call>",
                   {"a", "<tool_call>{\"name\": \"rm\"}</tool_call>", {}});
}

TEST(ReplyParserTest, HarmonyAnalysisThenFinal) {
  const std::string reply =
      "<|channel|>analysis<|message|>User asks 2+2. Simple.<|end|>"
      "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.";
  ExpectEverySplit(Harmony(false), reply, {"User asks 2+2. Simple.", "2 + 2 = 4.", {}});
  ExpectEverySplit(Harmony(true), reply, {"User asks 2+2. Simple.", "2 + 2 = 4.", {}});
  // <|return|> in the text (ignore_eos) ends the final message as <|end|> does.
  ExpectEverySplit(Harmony(false), "<|channel|>final<|message|>Hi<|return|>", {"", "Hi", {}});
}

TEST(ReplyParserTest, HarmonyToolCall) {
  const std::string reply =
      "<|channel|>analysis<|message|>Need weather for Paris.<|end|>"
      "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
      "<|message|>{\"city\":\"Paris\"}";
  ExpectEverySplit(Harmony(true), reply,
                   {"Need weather for Paris.", "", {{"get_weather", {{"city", "Paris"}}}}});
  // Without tools in the request the call is not reported (and is not content either).
  ExpectEverySplit(Harmony(false), reply, {"Need weather for Paris.", "", {}});
  // The recipient in the role header, right after the prompt's <|start|>assistant.
  ExpectEverySplit(Harmony(true),
                   " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": "
                   "\"Rome\"}",
                   {"", "", {{"get_weather", {{"city", "Rome"}}}}});
  // A commentary preamble is content; a built-in tool's call is dropped; broken arguments too.
  ExpectEverySplit(Harmony(true),
                   "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant"
                   "<|channel|>commentary to=browser.search<|message|>{\"q\": 1}<|end|>"
                   "<|start|>assistant<|channel|>commentary to=functions.get_weather"
                   "<|message|>{\"city\":",
                   {"", "Checking.", {}});
}

TEST(ReplyParserTest, HarmonyPlainTextAndCutOff) {
  ExpectEverySplit(Harmony(false), "Hello there", {"", "Hello there", {}});
  ExpectEverySplit(Harmony(false), "<|channel|>analysis<|message|>Thinking hard",
                   {"Thinking hard", "", {}});
  // A "header" too long to be one is text, its tag included (this once looped forever).
  const std::string long_header = "<|start|>" + std::string(300, 'x') + "<|end|>after";
  ExpectReply(ReplyParser::Parse(Harmony(false), long_header),
              {"", "<|start|>" + std::string(300, 'x') + "after", {}}, "whole");
  ExpectReply(Streamed(Harmony(false), {long_header.substr(0, 100), long_header.substr(100)}),
              {"", "<|start|>" + std::string(300, 'x') + "after", {}}, "streamed");
  // Cut off inside a header: nothing to report yet.
  ExpectEverySplit(Harmony(false), "<|channel|>analysis<|message|>A<|end|><|start|>assis",
                   {"A", "", {}});
}

// Replies made of tag fragments, words and white space, cut into random chunks: the streamed
// pieces add up to what the whole reply parses to, in every format (a property of the holding
// back, which the hand-written cases above cannot cover exhaustively). Deterministic seed.
TEST(ReplyParserTest, RandomRepliesStreamAsTheyParseWhole) {
  const std::vector<std::string> atoms = {
      "<think>",
      "</think>",
      "<th",
      "ink>",
      "</",
      "<|channel|>",
      "analysis",
      "final",
      "commentary",
      " to=functions.get_weather",
      " to=browser.open",
      "<|message|>",
      "<|end|>",
      "<|start|>",
      "assistant",
      "<|constrain|>json",
      "<|return|>",
      "<tool_call>",
      "</tool_call>",
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}",
      "{\"city\":1}",
      " ",
      "\n",
      "\n\n",
      "word",
      "<",
      "|",
      ">",
      "{"};
  std::mt19937 rng(29);
  std::vector<ReplyFormat> formats = {Think(false), Think(true), Harmony(false), Harmony(true)};
  for (ToolCallFormat tf : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json}) {
    ReplyFormat f = Think();
    f.parse_tools = true;
    f.tool_format = tf;
    f.tool_names = {"get_weather"};
    formats.push_back(f);
  }
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    const int n = static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) text += atoms[rng() % atoms.size()];
    if (rng() % 8 == 0) text += std::string(300, 'x');  // past harmony's longest header
    const ReplyFormat& f = formats[round % formats.size()];
    const ReplyEnd whole = ReplyParser::Parse(f, text);
    std::vector<std::string_view> chunks;
    for (size_t pos = 0; pos < text.size();) {
      const size_t len = 1 + rng() % 9;
      chunks.push_back(std::string_view(text).substr(pos, len));
      pos += len;
    }
    ReplyEnd streamed = Streamed(f, chunks);
    if (!streamed.calls.empty()) {  // Parse trims the content of a reply with calls
      const size_t a = streamed.content.find_first_not_of(" \t\r\n");
      streamed.content =
          a == std::string::npos
              ? ""
              : streamed.content.substr(a, streamed.content.find_last_not_of(" \t\r\n") - a + 1);
    }
    const std::string where = "format " + std::to_string(round % formats.size()) + ": " + text;
    ASSERT_EQ(streamed.reasoning, whole.reasoning) << where;
    ASSERT_EQ(streamed.content, whole.content) << where;
    ASSERT_EQ(streamed.calls.size(), whole.calls.size()) << where;
    for (size_t i = 0; i < whole.calls.size(); ++i) {
      ASSERT_EQ(streamed.calls[i].name, whole.calls[i].name) << where;
      ASSERT_EQ(streamed.calls[i].arguments, whole.calls[i].arguments) << where;
    }
  }
}

TEST(ReplyParserTest, PromptOpensThinking) {
  EXPECT_TRUE(PromptOpensThinking("<｜User｜>Q<｜Assistant｜><think>\n"));
  EXPECT_TRUE(PromptOpensThinking("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(PromptOpensThinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(PromptOpensThinking("<|im_start|>assistant\n"));
  // A <think> in the user's text is not the template's.
  EXPECT_FALSE(
      PromptOpensThinking("<|im_start|>user\nWhat is <think>?<|im_end|>\n<|im_start|>assistant\n"));
}

// ---------------------------------------------------------------------------------------------
// Templates

std::string ReadTemplate(const std::string& name) {
  std::ifstream in("../shared/templates/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ChatTemplate Parse(const std::string& name) {
  auto t = ChatTemplate::Parse(ReadTemplate(name));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

TEST(ReasoningTemplateTest, FormatFollowsTheTemplate) {
  UF_REQUIRE_SHARED();
  const std::string oss = ReadTemplate("openai-gpt-oss-120b.jinja");
  EXPECT_EQ(DetectReasoningFormat(oss), ReasoningFormat::kHarmony);
  EXPECT_EQ(DetectToolCallFormat(oss), ToolCallFormat::kHarmony);
  for (const char* name : {"Qwen-Qwen3-0.6B.jinja", "Qwen-QwQ-32B.jinja",
                           "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
                           "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"}) {
    EXPECT_EQ(DetectReasoningFormat(ReadTemplate(name)), ReasoningFormat::kThink) << name;
  }
  EXPECT_EQ(DetectToolCallFormat(ReadTemplate("Qwen-Qwen3-0.6B.jinja")), ToolCallFormat::kHermes);
}

std::string Render(const ChatTemplate& t, const json& messages, const ojson& kwargs,
                   bool harmony = false) {
  auto r =
      t.Render(TemplateMessages(messages, harmony), true, "", "", TemplateKwargs(kwargs, harmony));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : "";
}

const json kQuestion = json::parse(R"([{"role": "user", "content": "What is 2+2?"}])");

TEST(ReasoningTemplateTest, GptOssReasoningEffortAndToolLoop) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = Parse("openai-gpt-oss-120b.jinja");
  const std::string plain = Render(t, kQuestion, nullptr, true);
  EXPECT_NE(plain.find("Reasoning: medium\n"), std::string::npos) << plain;
  EXPECT_TRUE(plain.ends_with("<|start|>user<|message|>What is 2+2?<|end|><|start|>assistant"))
      << plain;
  EXPECT_FALSE(PromptOpensThinking(plain));
  for (const char* effort : {"low", "high"}) {
    const std::string p = Render(t, kQuestion, {{"reasoning_effort", effort}}, true);
    EXPECT_NE(p.find(std::string("Reasoning: ") + effort + "\n"), std::string::npos) << p;
  }
  // A tool loop: the call turn came back with its reasoning (and content beside the call, which
  // the template would refuse), then the result.
  const json loop = json::parse(R"([
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "Let me look.", "reasoning_content": "Need the weather.",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"}
  ])");
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Weather of a city", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  const std::string p = Render(t, loop, {{"tools", tools}}, true);
  EXPECT_NE(p.find("<|start|>assistant<|channel|>analysis<|message|>Need the weather.<|end|>"),
            std::string::npos)
      << p;
  EXPECT_NE(p.find("to=functions.get_weather<|channel|>commentary json<|message|>"
                   "{\"city\": \"Paris\"}<|call|>"),
            std::string::npos)
      << p;
  EXPECT_NE(p.find("<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"),
            std::string::npos)
      << p;
  EXPECT_NE(p.find("type get_weather = (_: {"), std::string::npos) << p;
  EXPECT_TRUE(p.ends_with("<|start|>assistant")) << p;
  // A tool without a description (optional in OpenAI's API) still renders.
  ojson bare = tools;
  bare[0]["function"].erase("description");
  const std::string b = Render(t, kQuestion, {{"tools", bare}}, true);
  EXPECT_NE(b.find("// \ntype get_weather = (_: {"), std::string::npos) << b;
}

TEST(ReasoningTemplateTest, Qwen3EnableThinkingAndReasoningSentBack) {
  UF_REQUIRE_SHARED();
  ChatTemplate t = Parse("Qwen-Qwen3-0.6B.jinja");
  const std::string on = Render(t, kQuestion, nullptr);
  EXPECT_TRUE(on.ends_with("<|im_start|>assistant\n")) << on;
  const std::string off = Render(t, kQuestion, {{"enable_thinking", false}});
  EXPECT_TRUE(off.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n")) << off;
  EXPECT_FALSE(PromptOpensThinking(off));
  // The turn since the last user message keeps the reasoning_content sent back.
  const json messages = json::parse(R"([
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello", "reasoning_content": "Greet back."}
  ])");
  auto r = t.Render(TemplateMessages(messages, false), false, "", "", TemplateKwargs(nullptr));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r,
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nGreet back.\n</think>\n\nHello<|im_end|>\n");
}

// QwQ's and DeepSeek-R1's generation prompts (as llama.cpp ships them) open the block unless
// thinking is turned off.
TEST(ReasoningTemplateTest, TemplatesThatOpenTheThinkBlock) {
  UF_REQUIRE_SHARED();
  for (const char* name :
       {"Qwen-QwQ-32B.jinja", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"}) {
    SCOPED_TRACE(name);
    ChatTemplate t = Parse(name);
    const std::string on = Render(t, kQuestion, nullptr);
    EXPECT_TRUE(on.ends_with("<think>\n")) << on;
    EXPECT_TRUE(PromptOpensThinking(on));
    const std::string off = Render(t, kQuestion, {{"enable_thinking", false}});
    EXPECT_TRUE(off.ends_with("<think>\n</think>")) << off;
    EXPECT_FALSE(PromptOpensThinking(off));
  }
}

}  // namespace
}  // namespace uf::server
