// Tool calling: the format each shared template teaches, parsing calls out of replies, the
// grammar that forces a call, the default template's tool rendering, and the streamed and
// non-streamed response shapes (OpenAI's message.tool_calls / delta.tool_calls).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "grammar/automaton.h"
#include "server/openai_response.h"
#include "server/reply_parser.h"
#include "server/tool_calls.h"
#include "shared_data.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace uf::server {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string ReadTemplate(const std::string& name) {
  std::ifstream in("../shared/templates/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
   "parameters": {"type": "object",
                  "properties": {"city": {"type": "string"},
                                 "unit": {"enum": ["c", "f"]}},
                  "required": ["city", "unit"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "now", "parameters": {"type": "object",
                                                                   "properties": {}}}}])");

TEST(ToolCallsTest, FormatFollowsTheTemplate) {
  UF_REQUIRE_SHARED();
  for (const char* name :
       {"meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja",
        "meta-llama-Llama-3.3-70B-Instruct.jinja"}) {
    EXPECT_EQ(DetectToolCallFormat(ReadTemplate(name)), ToolCallFormat::kLlama3Json) << name;
  }
  for (const char* name : {"Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen-Qwen3-0.6B.jinja",
                           "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja"}) {
    EXPECT_EQ(DetectToolCallFormat(ReadTemplate(name)), ToolCallFormat::kHermes) << name;
  }
  EXPECT_EQ(DetectToolCallFormat(DefaultChatTemplateSource()), ToolCallFormat::kHermes);
}

TEST(ToolCallsTest, ParsesHermesAndLlamaReplies) {
  const std::set<std::string> names = {"get_weather", "now"};
  ParsedReply r = ParseToolCalls(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", "
      "\"arguments\": {}}\n</tool_call>",
      ToolCallFormat::kHermes, names);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.content, "Let me check.");
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(r.calls[0].arguments), json::parse(R"({"city":"Paris","unit":"c"})"));
  EXPECT_EQ(r.calls[1].name, "now");
  EXPECT_EQ(r.calls[1].arguments, "{}");
  EXPECT_TRUE(r.calls[0].id.starts_with("call_"));
  EXPECT_NE(r.calls[0].id, r.calls[1].id);
  // Unknown function or broken JSON: plain text.
  r = ParseToolCalls("<tool_call>{\"name\": \"rm\", \"arguments\": {}}</tool_call>",
                     ToolCallFormat::kHermes, names);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "<tool_call>{\"name\": \"rm\", \"arguments\": {}}</tool_call>");
  r = ParseToolCalls("<tool_call>{\"name\": \"now\"", ToolCallFormat::kHermes, names);
  EXPECT_TRUE(r.calls.empty());

  r = ParseToolCalls(
      "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": "
      "\"Oslo\", \"unit\": \"f\"}}",
      ToolCallFormat::kLlama3Json, names);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(json::parse(r.calls[0].arguments)["city"], "Oslo");
  r = ParseToolCalls(
      "{\"name\": \"now\", \"parameters\": {}}; {\"name\": \"get_weather\", "
      "\"parameters\": {\"city\": \"a;b\", \"unit\": \"c\"}}",
      ToolCallFormat::kLlama3Json, names);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(json::parse(r.calls[1].arguments)["city"], "a;b");
  r = ParseToolCalls("The weather is nice.", ToolCallFormat::kLlama3Json, names);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "The weather is nice.");
}

bool GrammarAccepts(const std::shared_ptr<const grammar::Grammar>& g, std::string_view text) {
  grammar::Automaton a(g);
  const grammar::StateId s = a.Walk(a.start(), text);
  return s != grammar::kDead && a.Accepting(s);
}

TEST(ToolCallsTest, GrammarForcesValidCalls) {
  std::string param;
  auto any = ToolCallGrammar(kTools, ToolCallFormat::kHermes, /*parallel=*/true, "", &param);
  ASSERT_TRUE(any.ok()) << any.status().ToString();
  const std::string weather =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Rome\",\"unit\":\"f\"}}"
      "\n</tool_call>";
  const std::string now = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(GrammarAccepts(*any, weather));
  EXPECT_TRUE(GrammarAccepts(*any, weather + "\n" + now));
  EXPECT_FALSE(GrammarAccepts(*any, "Sure!"));
  EXPECT_FALSE(GrammarAccepts(
      *any,
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Rome\"}}\n"
      "</tool_call>"));  // unit missing
  auto named = ToolCallGrammar(kTools, ToolCallFormat::kLlama3Json, false, "now", &param);
  ASSERT_TRUE(named.ok());
  EXPECT_TRUE(GrammarAccepts(*named, "{\"name\": \"now\", \"parameters\": {}}"));
  EXPECT_FALSE(GrammarAccepts(*named, weather));
  // gpt-oss's harmony: the name outside the JSON, one call (its <|call|> ends the reply).
  auto harmony = ToolCallGrammar(kTools, ToolCallFormat::kHarmony, true, "", &param);
  ASSERT_TRUE(harmony.ok()) << harmony.status().ToString();
  const std::string oss_call =
      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
      "{\"city\":\"Rome\",\"unit\":\"f\"}";
  EXPECT_TRUE(GrammarAccepts(*harmony, oss_call));
  EXPECT_FALSE(GrammarAccepts(*harmony, oss_call + oss_call));
  EXPECT_FALSE(GrammarAccepts(*harmony, weather));
  // A forced harmony call may reason first: one analysis message, any text without "<|" ('<'
  // alone, runs of it and one just before <|end|> included), then the call.
  const std::string analysis =
      "<|channel|>analysis<|message|>Need Rome's weather; a<b, <<x and 2 << 3 hold. <<";
  const std::string reasoned = analysis + "<|end|><|start|>assistant" + oss_call;
  EXPECT_TRUE(GrammarAccepts(*harmony, reasoned));
  EXPECT_TRUE(GrammarAccepts(*harmony,
                             "<|channel|>analysis<|message|><|end|><|start|>assistant" + oss_call));
  EXPECT_FALSE(GrammarAccepts(*harmony, analysis + "<|end|><|start|>assistant"));  // no call
  EXPECT_FALSE(GrammarAccepts(*harmony, "<|channel|>analysis<|message|>x<|return|>"));
  EXPECT_FALSE(GrammarAccepts(*harmony,
                              "<|channel|>analysis<|message|>a<|channel|>final"
                              "<|message|>b<|end|><|start|>assistant" +
                                  oss_call));  // a second header inside the text
  EXPECT_FALSE(GrammarAccepts(*harmony, "<|channel|>final<|message|>Hi<|end|><|start|>assistant" +
                                            oss_call));  // only the analysis channel
  EXPECT_FALSE(GrammarAccepts(*harmony, reasoned + "<|end|><|start|>assistant" + reasoned));
  // Its argument strings never hold "<|" (the parser would read a header there); '<' otherwise.
  const std::string call_head =
      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"";
  for (const char* city : {"a<b", "<<x", "x<", "<", "\\u003c|", "|<"}) {
    EXPECT_TRUE(GrammarAccepts(*harmony, call_head + city + "\",\"unit\":\"c\"}")) << city;
  }
  for (const char* city : {"<|channel|>", "a<|b", "<<|", "x<|end|>"}) {
    EXPECT_FALSE(GrammarAccepts(*harmony, call_head + city + "\",\"unit\":\"c\"}")) << city;
  }
  // Other formats keep every string.
  EXPECT_TRUE(
      GrammarAccepts(*any,
                     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"<|x\","
                     "\"unit\":\"f\"}}\n</tool_call>"));
  ReplyFormat f;
  f.reasoning = ReasoningFormat::kHarmony;
  f.parse_tools = true;
  f.tool_names = {"get_weather"};
  const ReplyEnd parsed = ReplyParser::Parse(f, oss_call);  // what the grammar lets out parses
  ASSERT_EQ(parsed.calls.size(), 1u);
  EXPECT_EQ(parsed.calls[0].name, "get_weather");
  const ReplyEnd parsed_reasoned = ReplyParser::Parse(f, reasoned);
  ASSERT_EQ(parsed_reasoned.calls.size(), 1u);
  EXPECT_EQ(parsed_reasoned.calls[0].name, "get_weather");
  EXPECT_EQ(parsed_reasoned.reasoning, "Need Rome's weather; a<b, <<x and 2 << 3 hold. <<");
  EXPECT_EQ(parsed_reasoned.content, "");
  ojson bad = kTools;
  bad[1]["function"]["parameters"]["properties"]["n"] = {{"type", "number"}, {"minimum", 1}};
  EXPECT_FALSE(ToolCallGrammar(bad, ToolCallFormat::kHermes, false, "", &param).ok());
  EXPECT_EQ(param, "tools[1].function.parameters.properties.n.minimum");
}

TEST(ToolCallsTest, DefaultTemplateRendersToolsCallsAndResults) {
  auto t = ChatTemplate::Parse(DefaultChatTemplateSource());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const json messages = json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
      "function": {"name": "now", "arguments": {}}}]},
    {"role": "tool", "content": "12:00", "tool_call_id": "call_1"}])");
  const json extra = {
      {"tools", json::array({{{"type", "function"}, {"function", {{"name", "now"}}}}})}};
  auto text = t->Render(messages, true, "", "", extra);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text,
            "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to "
            "assist with the user query.\n\nYou are provided with function signatures within "
            "<tools></tools> XML tags:\n<tools>\n{\"function\": {\"name\": \"now\"}, \"type\": "
            "\"function\"}\n</tools>\n\nFor each function call, return a json object with "
            "function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
            "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"
            "<|im_end|>\n"
            "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n"
            "</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n12:00\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
  // Without tools: plain ChatML, as before.
  auto plain = t->Render(json::parse(R"([{"role": "user", "content": "Hi"}])"), true, "", "");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*plain, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

std::unique_ptr<Tokenizer> ByteTokenizer() {
  TokenizerConfig c;
  c.model = TokenizerConfig::Model::kSpm;
  c.tokens = {"<unk>", "<s>", "</s>", "a"};
  c.token_types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl,
                   TokenType::kNormal};
  c.bos_id = 1;
  c.eos_id = 2;
  c.unk_id = 0;
  auto t = Tokenizer::FromConfig(c);
  UF_CHECK(t.ok());
  return std::move(t).value();
}

TEST(ToolCallsTest, ResponsesCarryToolCalls) {
  auto tok = ByteTokenizer();
  ResponseOptions o;
  o.endpoint = Endpoint::kChat;
  o.id = "chatcmpl-1";
  o.model = "m";
  o.parse_tools = true;
  o.tool_names = {"get_weather", "now"};
  const std::string reply =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
      "\"c\"}}\n</tool_call>";
  engine::GenerationEvent part, last;
  part.text = reply.substr(0, 20);
  part.n_tokens = 1;
  last.text = reply.substr(20);
  last.n_tokens = 1;
  last.finish = engine::FinishReason::kStop;
  last.prompt_tokens = 3;
  last.completion_tokens = 2;

  ResponseBuilder body(o, *tok);
  body.Add(part);
  body.Add(last);
  const json b = json::parse(body.Body());
  const json& choice = b["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()),
            json::parse(R"({"city": "Paris", "unit": "c"})"));

  ResponseBuilder stream(o, *tok);
  std::string sse = stream.Stream(part);
  sse += stream.Stream(last);
  std::string args, name, id, finish, content;
  for (size_t pos = 0; pos < sse.size();) {
    const size_t end = sse.find("\n\n", pos);
    ASSERT_NE(end, std::string::npos);
    const std::string data = sse.substr(pos + 6, end - pos - 6);
    pos = end + 2;
    if (data == "[DONE]") continue;
    const json c = json::parse(data);
    const json& d = c["choices"][0]["delta"];
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
    if (!d.contains("tool_calls")) continue;
    const json& tc = d["tool_calls"][0];
    EXPECT_EQ(tc["index"], 0);
    if (tc.contains("id")) id = tc["id"];
    if (tc["function"].contains("name")) name = tc["function"]["name"];
    args += tc["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(content, "");  // the call's text is not sent as content
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(name, "get_weather");
  EXPECT_TRUE(id.starts_with("call_"));
  EXPECT_EQ(json::parse(args), json::parse(R"({"city": "Paris", "unit": "c"})"));
}

// Text streams as it comes until a call may begin; the call itself is sent once complete.
TEST(ToolCallsTest, StreamsTextBeforeACall) {
  bool call = false;
  EXPECT_EQ(StreamableContent("Hello <tool", ToolCallFormat::kHermes, true, &call), 6u);
  EXPECT_FALSE(call);
  EXPECT_EQ(StreamableContent("Hi <tool_call>{", ToolCallFormat::kHermes, true, &call), 3u);
  EXPECT_TRUE(call);
  EXPECT_EQ(StreamableContent(" {\"name\"", ToolCallFormat::kLlama3Json, true, &call), 0u);
  EXPECT_TRUE(call);
  EXPECT_EQ(StreamableContent(" Sunny.", ToolCallFormat::kLlama3Json, true, &call), 7u);
  EXPECT_FALSE(call);

  auto tok = ByteTokenizer();
  ResponseOptions o;
  o.endpoint = Endpoint::kChat;
  o.parse_tools = true;
  o.tool_names = {"now"};
  ResponseBuilder b(o, *tok);
  auto event = [](std::string text, bool last) {
    engine::GenerationEvent e;
    e.text = std::move(text);
    e.n_tokens = 1;
    if (last) e.finish = engine::FinishReason::kStop;
    return e;
  };
  auto contents = [](const std::string& sse) {
    std::vector<std::string> out;
    for (size_t pos = 0; (pos = sse.find("data: {", pos)) != std::string::npos; ++pos) {
      const json c = json::parse(sse.substr(pos + 6, sse.find("\n\n", pos) - pos - 6));
      if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content")) {
        out.push_back(c["choices"][0]["delta"]["content"]);
      }
    }
    return out;
  };
  // The first chunk carries the role (content ""), then the text before the tag.
  EXPECT_EQ(contents(b.Stream(event("Let me check. <to", false))),
            (std::vector<std::string>{"", "Let me check. "}));
  EXPECT_TRUE(contents(b.Stream(event("ol_call>\n{\"name\": \"now\", ", false))).empty());
  const std::string end = b.Stream(event("\"arguments\": {}}\n</tool_call>", true));
  EXPECT_TRUE(contents(end).empty());
  EXPECT_NE(end.find("\"tool_calls\""), std::string::npos);
  EXPECT_NE(end.find("\"finish_reason\":\"tool_calls\""), std::string::npos);
}

}  // namespace
}  // namespace uf::server
