// Reasoning output in each API's shape: chat's message.reasoning_content / streamed
// delta.reasoning_content apart from content (with tags cut across events), a harmony call as
// tool_calls, the Responses API's reasoning item, the Messages API's thinking block; and through
// the server with the tiny model behind a template whose prompt opens <think> (the reply is
// then all reasoning until max_tokens), reasoning_effort reaching the template.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "server/anthropic_api.h"
#include "server/chat_prompt.h"
#include "server/openai_response.h"
#include "server/responses_api.h"
#include "server_harness.h"
#include "shared_data.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace uf::server {
namespace {

using json = nlohmann::json;

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

// One event per piece (one token each), the last one final.
std::vector<engine::GenerationEvent> EventsOf(const std::vector<std::string>& pieces) {
  std::vector<engine::GenerationEvent> out;
  for (const std::string& p : pieces) {
    engine::GenerationEvent ev;
    ev.text = p;
    ev.n_tokens = 1;
    out.push_back(ev);
  }
  out.back().finish = engine::FinishReason::kStop;
  out.back().prompt_tokens = 5;
  out.back().completion_tokens = static_cast<int64_t>(pieces.size());
  return out;
}

// The JSON data of each SSE event ([DONE] left out).
std::vector<json> SseEvents(const std::string& body) {
  std::vector<json> out;
  for (size_t pos = 0; pos < body.size();) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    const std::string ev = body.substr(pos, end - pos);
    pos = end + 2;
    const size_t data = ev.find("data: ");
    if (data == std::string::npos || ev.compare(data + 6, 6, "[DONE]") == 0) continue;
    out.push_back(json::parse(ev.substr(data + 6)));
  }
  return out;
}

ResponseOptions ChatOptions(ReasoningFormat format) {
  ResponseOptions o;
  o.endpoint = Endpoint::kChat;
  o.id = "chatcmpl-1";
  o.model = "m";
  o.include_usage = true;
  o.reasoning = format;
  return o;
}

struct ChatStream {
  std::string reasoning, content, finish, call_name, call_args;
  json usage;
};

ChatStream ReadChatStream(const std::string& sse) {
  ChatStream s;
  for (const json& c : SseEvents(sse)) {
    if (!c["usage"].is_null()) s.usage = c["usage"];
    if (c["choices"].empty()) continue;
    const json& ch = c["choices"][0];
    const json& d = ch["delta"];
    s.reasoning += d.value("reasoning_content", "");
    s.content += d.value("content", "");
    if (!ch["finish_reason"].is_null()) s.finish = ch["finish_reason"];
    if (d.contains("tool_calls")) {
      const json& f = d["tool_calls"][0]["function"];
      if (f.contains("name")) s.call_name = f["name"];
      s.call_args += f["arguments"].get<std::string>();
    }
  }
  return s;
}

TEST(ChatReasoningTest, StreamedApartFromContentAsTheBodySaysIt) {
  auto tok = ByteTokenizer();
  // Both tags cut across events.
  const auto events = EventsOf({"<th", "ink>\nLet", " me see.\n</thi", "nk>\n\nIt", " is 4."});
  ResponseBuilder body(ChatOptions(ReasoningFormat::kThink), *tok);
  ResponseBuilder stream(ChatOptions(ReasoningFormat::kThink), *tok);
  std::string sse;
  for (const auto& ev : events) {
    body.Add(ev);
    sse += stream.Stream(ev);
  }
  const json b = json::parse(body.Body());
  const json& message = b["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "Let me see.");
  EXPECT_EQ(message["content"], "It is 4.");
  EXPECT_EQ(b["choices"][0]["finish_reason"], "stop");
  // Until the answer's first text: the three events that carried only reasoning and tags (the
  // first, "<th", counted once "ink>" said it began the block).
  EXPECT_EQ(b["usage"]["completion_tokens_details"]["reasoning_tokens"], 3);
  const ChatStream s = ReadChatStream(sse);
  EXPECT_EQ(s.reasoning, "Let me see.");
  EXPECT_EQ(s.content, "It is 4.");
  EXPECT_EQ(s.usage, b["usage"]);
  // No chunk carries reasoning and content mixed up: every reasoning delta precedes content.
  bool content_seen = false;
  for (const json& c : SseEvents(sse)) {
    if (c["choices"].empty()) continue;
    const json& d = c["choices"][0]["delta"];
    if (d.value("content", "") != "") content_seen = true;
    if (d.contains("reasoning_content")) {
      EXPECT_FALSE(content_seen) << c.dump();
    }
  }
  // Without reasoning there is no reasoning_content field at all.
  ResponseBuilder plain(ChatOptions(ReasoningFormat::kThink), *tok);
  for (const auto& ev : EventsOf({"Just ", "text."})) plain.Add(ev);
  const json p = json::parse(plain.Body());
  EXPECT_FALSE(p["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_FALSE(p["usage"].contains("completion_tokens_details"));
}

TEST(ChatReasoningTest, HarmonyCallComesBackAsToolCalls) {
  auto tok = ByteTokenizer();
  ResponseOptions o = ChatOptions(ReasoningFormat::kHarmony);
  o.parse_tools = true;
  o.tool_format = ToolCallFormat::kHarmony;
  o.tool_names = {"get_weather"};
  const auto events = EventsOf({"<|channel|>analysis<|message|>Need", " weather.<|e", "nd|>",
                                "<|start|>assistant<|channel|>commentary to=functions.get_",
                                "weather <|constrain|>json<|message|>{\"city\"", ":\"Paris\"}"});
  ResponseBuilder body(o, *tok);
  ResponseBuilder stream(o, *tok);
  std::string sse;
  for (const auto& ev : events) {
    body.Add(ev);
    sse += stream.Stream(ev);
  }
  const json b = json::parse(body.Body());
  const json& message = b["choices"][0]["message"];
  EXPECT_EQ(b["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(message["reasoning_content"], "Need weather.");
  EXPECT_TRUE(message["content"].is_null());
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(message["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json::parse(R"({"city": "Paris"})"));
  const ChatStream s = ReadChatStream(sse);
  EXPECT_EQ(s.reasoning, "Need weather.");
  EXPECT_EQ(s.content, "");
  EXPECT_EQ(s.finish, "tool_calls");
  EXPECT_EQ(s.call_name, "get_weather");
  EXPECT_EQ(json::parse(s.call_args), json::parse(R"({"city": "Paris"})"));
}

// The Responses API: a reasoning item, then the call (harmony) or the message.
TEST(ResponsesReasoningTest, HarmonyReasoningItemAndCall) {
  ResponseOptions o = ChatOptions(ReasoningFormat::kHarmony);
  o.id = "resp_1";
  o.parse_tools = true;
  o.tool_format = ToolCallFormat::kHarmony;
  o.tool_names = {"get_weather"};
  const auto events = EventsOf({"<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant",
                                "<|channel|>commentary to=functions.get_weather<|message|>",
                                "{\"city\":\"Oslo\"}"});
  ResponsesWriter whole(o, json::object(), {});
  ResponsesWriter streamed(o, json::object(), {});
  std::string sse;
  for (const auto& ev : events) {
    whole.Add(0, ev);
    sse += streamed.Stream(0, ev);
  }
  const json body = json::parse(whole.Body());
  ASSERT_EQ(body["output"].size(), 2u) << body.dump();
  EXPECT_EQ(body["output"][0]["type"], "reasoning");
  EXPECT_EQ(body["output"][0]["content"][0]["text"], "Hm.");
  EXPECT_EQ(body["output"][1]["type"], "function_call");
  EXPECT_EQ(body["output"][1]["name"], "get_weather");
  EXPECT_EQ(body["usage"]["output_tokens_details"]["reasoning_tokens"], 1);
  json final;
  std::string reasoning;
  for (const json& e : SseEvents(sse)) {
    if (e["type"] == "response.reasoning_text.delta") reasoning += e["delta"];
    if (e["type"] == "response.completed") final = e["response"];
  }
  EXPECT_EQ(reasoning, "Hm.");
  json a = final["output"], b = body["output"];
  for (json* items : {&a, &b}) {
    for (json& item : *items) {
      item.erase("id");
      item.erase("call_id");
    }
  }
  EXPECT_EQ(a, b);
}

// The Messages API: a thinking block before the text.
TEST(MessagesReasoningTest, ThinkingBlockThenText) {
  ResponseOptions o = ChatOptions(ReasoningFormat::kThink);
  o.id = "msg_1";
  const auto events = EventsOf({"<think>Sum", " it.</think>", "\n\n4."});
  AnthropicWriter whole(o);
  AnthropicWriter streamed(o);
  std::string sse;
  for (const auto& ev : events) {
    whole.Add(0, ev);
    sse += streamed.Stream(0, ev);
  }
  const json body = json::parse(whole.Body());
  ASSERT_EQ(body["content"].size(), 2u) << body.dump();
  EXPECT_EQ(body["content"][0]["type"], "thinking");
  EXPECT_EQ(body["content"][0]["thinking"], "Sum it.");
  EXPECT_EQ(body["content"][1], json::parse(R"({"type": "text", "text": "4."})"));
  std::string thinking, text;
  std::vector<std::string> starts;
  for (const json& e : SseEvents(sse)) {
    if (e["type"] == "content_block_start") starts.push_back(e["content_block"]["type"]);
    if (e["type"] != "content_block_delta") continue;
    if (e["delta"]["type"] == "thinking_delta") {
      EXPECT_EQ(e["index"], 0);
      thinking += e["delta"]["thinking"];
    } else {
      EXPECT_EQ(e["index"], 1);
      text += e["delta"]["text"];
    }
  }
  EXPECT_EQ(starts, (std::vector<std::string>{"thinking", "text"}));
  EXPECT_EQ(thinking, "Sum it.");
  EXPECT_EQ(text, "4.");
}

// Harmony's analysis after a commentary preamble: streamed, each run of reasoning and of text is
// an item (a block) of its own, in order, none left open.
TEST(HarmonyInterleavedTest, ReasoningAfterTextOpensNewItems) {
  const auto events = EventsOf({"<|channel|>analysis<|message|>A<|end|>",
                                "<|start|>assistant<|channel|>commentary<|message|>P<|end|>",
                                "<|start|>assistant<|channel|>analysis<|message|>B<|end|>",
                                "<|start|>assistant<|channel|>final<|message|>F"});
  ResponseOptions o = ChatOptions(ReasoningFormat::kHarmony);
  ResponsesWriter responses(o, json::object(), {});
  AnthropicWriter messages(o);
  std::string rs, ms;
  for (const auto& ev : events) {
    rs += responses.Stream(0, ev);
    ms += messages.Stream(0, ev);
  }
  std::vector<std::string> items, ids;
  for (const json& e : SseEvents(rs)) {
    if (e["type"] != "response.output_item.done") continue;
    items.push_back(e["item"]["type"].get<std::string>() + ":" +
                    e["item"]["content"][0]["text"].get<std::string>());
    ids.push_back(e["item"]["id"]);
  }
  EXPECT_EQ(items,
            (std::vector<std::string>{"reasoning:A", "message:P", "reasoning:B", "message:F"}));
  EXPECT_NE(ids[0], ids[2]);
  EXPECT_NE(ids[1], ids[3]);
  std::vector<std::string> blocks;
  int open = 0;
  for (const json& e : SseEvents(ms)) {
    if (e["type"] == "content_block_start") {
      EXPECT_EQ(open, 0) << "two blocks open at once";
      ++open;
      EXPECT_EQ(e["index"], blocks.size());
      blocks.push_back(e["content_block"]["type"]);
    }
    if (e["type"] == "content_block_stop") --open;
  }
  EXPECT_EQ(open, 0);
  EXPECT_EQ(blocks, (std::vector<std::string>{"thinking", "text", "thinking", "text"}));
}

// ---------------------------------------------------------------------------------------------
// Through the server

// A template whose generation prompt opens <think> (as DeepSeek-R1's does), recording the
// variables each render was given.
struct OpenThinkTemplate {
  std::mutex mu;
  std::vector<nlohmann::ordered_json> kwargs;
  ChatRenderer Renderer() {
    return [this](const json& messages, const nlohmann::ordered_json& k) -> StatusOr<std::string> {
      {
        std::lock_guard<std::mutex> lock(mu);
        kwargs.push_back(k);
      }
      auto text = ServerHarness::PlainRender(messages, k);
      if (!text.ok()) return text;
      return *text + " <think>\n";
    };
  }
};

json PostOk(ServerHarness& h, const std::string& path, const json& body) {
  auto res = h.Post(path, body.dump());
  EXPECT_TRUE(res);
  if (!res) return json();
  EXPECT_EQ(res->status, 200) << res->body;
  return res->status == 200 ? json::parse(res->body) : json();
}

TEST(ReasoningServerTest, PromptOpenedThinkingIsReasoningInEveryApi) {
  UF_REQUIRE_SHARED();
  OpenThinkTemplate tmpl;
  ServerHarness h({}, nullptr, {}, tmpl.Renderer());
  const json messages = {{{"role", "user"}, {"content", "Say something"}}};
  json chat = {{"model", "tiny"}, {"messages", messages},
               {"max_tokens", 8}, {"temperature", 0},
               {"seed", 1},       {"reasoning_effort", "high"}};
  const json a = PostOk(h, "/v1/chat/completions", chat);
  const json& message = a["choices"][0]["message"];
  const std::string reasoning = message.value("reasoning_content", "");
  // Random weights never close the block: every token is reasoning, cut by max_tokens.
  EXPECT_FALSE(reasoning.empty()) << a.dump();
  EXPECT_EQ(message["content"], "");
  EXPECT_EQ(a["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(a["usage"]["completion_tokens_details"]["reasoning_tokens"], 8);
  {
    std::lock_guard<std::mutex> lock(tmpl.mu);
    ASSERT_FALSE(tmpl.kwargs.empty());
    EXPECT_EQ(tmpl.kwargs.back()["reasoning_effort"], "high");
  }

  chat["stream"] = true;
  chat["stream_options"] = {{"include_usage", true}};
  auto res = h.Post("/v1/chat/completions", chat.dump());
  ASSERT_TRUE(res);
  const ChatStream s = ReadChatStream(res->body);
  EXPECT_EQ(s.reasoning, reasoning);
  EXPECT_EQ(s.content, "");
  EXPECT_EQ(s.usage["completion_tokens_details"]["reasoning_tokens"], 8);

  // The same tokens through the Responses and Messages APIs: the same reasoning.
  const json r = PostOk(h, "/v1/responses",
                        {{"model", "tiny"},
                         {"input", "Say something"},
                         {"max_output_tokens", 8},
                         {"temperature", 0},
                         {"seed", 1},
                         {"reasoning", {{"effort", "low"}}}});
  ASSERT_GE(r["output"].size(), 1u) << r.dump();
  EXPECT_EQ(r["output"][0]["type"], "reasoning");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], reasoning);
  {
    std::lock_guard<std::mutex> lock(tmpl.mu);
    EXPECT_EQ(tmpl.kwargs.back()["reasoning_effort"], "low");
  }
  const json m = PostOk(h, "/v1/messages",
                        {{"model", "tiny"},
                         {"messages", messages},
                         {"max_tokens", 8},
                         {"temperature", 0},
                         {"seed", 1}});
  ASSERT_GE(m["content"].size(), 1u) << m.dump();
  EXPECT_EQ(m["content"][0]["type"], "thinking");
  EXPECT_EQ(m["content"][0]["thinking"], reasoning);

  // A grammar shapes the reply from its first token: it is the answer, not reasoning.
  const json j = PostOk(h, "/v1/chat/completions",
                        {{"model", "tiny"},
                         {"messages", messages},
                         {"max_tokens", 8},
                         {"response_format", {{"type", "json_object"}}}});
  EXPECT_FALSE(j["choices"][0]["message"].contains("reasoning_content")) << j.dump();
  const std::string json_text = j["choices"][0]["message"]["content"];
  EXPECT_EQ(json_text.substr(json_text.find_first_not_of(" \t\r\n"), 1), "{") << json_text;

  // An earlier reply's reasoning sent back is accepted and reaches the template.
  const json back =
      PostOk(h, "/v1/chat/completions",
             {{"model", "tiny"},
              {"messages",
               {{{"role", "user"}, {"content", "Hi"}},
                {{"role", "assistant"}, {"content", "Hello"}, {"reasoning_content", "Greet."}},
                {{"role", "user"}, {"content", "Again"}}}},
              {"max_tokens", 1}});
  EXPECT_EQ(back["object"], "chat.completion");
  auto bad = h.Post(
      "/v1/chat/completions",
      json({{"model", "tiny"}, {"messages", messages}, {"reasoning_effort", "extreme"}}).dump());
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(json::parse(bad->body)["error"]["param"], "reasoning_effort");
}

// gpt-oss's template and harmony replies through the server: a required call is constrained to
// harmony's call message (its tags spelled by the tiny vocabulary, which lacks them) and comes
// back as tool_calls in every API; reasoning_effort reaches the template.
TEST(ReasoningServerTest, HarmonyRequiredCallThroughEveryApi) {
  UF_REQUIRE_SHARED();
  std::ifstream in("../shared/templates/openai-gpt-oss-120b.jinja");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  auto parsed = ChatTemplate::Parse(ss.str());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  auto tmpl = std::make_shared<const ChatTemplate>(std::move(parsed).value());
  auto prompts = std::make_shared<std::vector<std::string>>();
  auto mu = std::make_shared<std::mutex>();
  ChatRenderer render = [tmpl, prompts, mu](
                            const json& messages,
                            const nlohmann::ordered_json& kwargs) -> StatusOr<std::string> {
    auto text =
        tmpl->Render(TemplateMessages(messages, true), true, "", "", TemplateKwargs(kwargs, true));
    if (text.ok()) {
      std::lock_guard<std::mutex> lock(*mu);
      prompts->push_back(*text);
    }
    return text;
  };
  ServerOptions ho;
  ho.tool_format = ToolCallFormat::kHarmony;
  ho.reasoning_format = ReasoningFormat::kHarmony;
  engine::ServiceOptions so;
  so.ctx = 1024;
  ServerHarness h(so, nullptr, ho, render);
  const json params = json::parse(R"({"type": "object", "properties": {"city": {"type": "string",
    "maxLength": 8}}, "required": ["city"], "additionalProperties": false})");
  const json chat = PostOk(
      h, "/v1/chat/completions",
      {{"model", "tiny"},
       {"max_tokens", 80},
       {"reasoning_effort", "high"},
       {"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
       {"tools",
        {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", params}}}}}},
       {"tool_choice", "required"}});
  const json& message = chat["choices"][0]["message"];
  EXPECT_EQ(chat["choices"][0]["finish_reason"], "tool_calls") << chat.dump();
  ASSERT_EQ(message["tool_calls"].size(), 1u) << chat.dump();
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_TRUE(json::parse(message["tool_calls"][0]["function"]["arguments"].get<std::string>())
                  .contains("city"));
  {
    std::lock_guard<std::mutex> lock(*mu);
    ASSERT_FALSE(prompts->empty());
    EXPECT_NE(prompts->back().find("Reasoning: high\n"), std::string::npos) << prompts->back();
    // The tool has no description: rendered with an empty one.
    EXPECT_NE(prompts->back().find("// \ntype get_weather"), std::string::npos);
  }
  const json r =
      PostOk(h, "/v1/responses",
             {{"model", "tiny"},
              {"input", "Weather in Paris?"},
              {"max_output_tokens", 80},
              {"tools", {{{"type", "function"}, {"name", "get_weather"}, {"parameters", params}}}},
              {"tool_choice", "required"}});
  // A forced call may reason first (the grammar allows one analysis message): the call is the
  // last item, and anything before it is reasoning. The sampling is unseeded, so both happen.
  ASSERT_GE(r["output"].size(), 1u) << r.dump();
  EXPECT_EQ(r["output"].back()["type"], "function_call") << r.dump();
  EXPECT_EQ(r["output"].back()["name"], "get_weather");
  for (size_t i = 0; i + 1 < r["output"].size(); ++i) {
    EXPECT_EQ(r["output"][i]["type"], "reasoning") << r.dump();
  }
  const json m = PostOk(h, "/v1/messages",
                        {{"model", "tiny"},
                         {"max_tokens", 80},
                         {"messages", {{{"role", "user"}, {"content", "Weather?"}}}},
                         {"tools", {{{"name", "get_weather"}, {"input_schema", params}}}},
                         {"tool_choice", {{"type", "any"}}}});
  EXPECT_EQ(m["stop_reason"], "tool_use") << m.dump();
  ASSERT_GE(m["content"].size(), 1u);
  EXPECT_EQ(m["content"].back()["type"], "tool_use");
}

}  // namespace
}  // namespace uf::server
