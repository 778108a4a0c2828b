// The OpenAI Responses API and the Anthropic Messages API: their translations into the request
// core's ApiRequest (parsers), the stored responses, and both APIs end to end in-process beside
// chat completions (the same tokens for the same seeded request, their event streams, tools,
// errors, keys), plus what every API shares: legacy functions, ignored fields, cancelled streams
// in /metrics.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/anthropic_api.h"
#include "server/responses_api.h"
#include "server/responses_store.h"
#include "server_harness.h"
#include "shared_data.h"

namespace uf::server {
namespace {

using json = nlohmann::json;

ApiError ResponsesError(const std::string& body) {
  ResponsesRequest r;
  ParseOptions o;
  o.n_vocab = 1000;
  auto e = ParseResponsesRequest(body, o, &r);
  EXPECT_TRUE(e.has_value()) << body;
  return e.value_or(ApiError{});
}

ApiError MessagesError(const std::string& body) {
  ApiRequest r;
  ParseOptions o;
  o.n_vocab = 1000;
  auto e = ParseMessagesRequest(body, o, false, &r);
  EXPECT_TRUE(e.has_value()) << body;
  return e.value_or(ApiError{});
}

TEST(ResponsesRequestTest, InputItemsBecomeChatMessages) {
  ResponsesRequest r;
  ParseOptions o;
  o.n_vocab = 1000;
  auto e = ParseResponsesRequest(R"({"model": "m", "instructions": "Be brief.",
    "input": [{"role": "developer", "content": "Use tools."},
              {"type": "message", "role": "user",
               "content": [{"type": "input_text", "text": "Weather"},
                           {"type": "input_text", "text": "in Paris?"}]},
              {"type": "reasoning", "id": "rs_1", "summary": [],
               "content": [{"type": "reasoning_text", "text": "Need w."}]},
              {"type": "function_call", "call_id": "call_1", "name": "w",
               "arguments": "{\"city\": \"Paris\"}"},
              {"type": "function_call_output", "call_id": "call_1", "output": "21C"}],
    "tools": [{"type": "function", "name": "w", "parameters": {"type": "object"}}],
    "tool_choice": {"type": "function", "name": "w"}, "max_output_tokens": 7,
    "temperature": 0.5, "seed": 9, "store": false, "metadata": {"a": "b"},
    "prompt_cache_key": "k", "prompt_cache_retention": "24h", "safety_identifier": "s",
    "user": "u", "truncation": "disabled", "include": ["reasoning.encrypted_content"],
    "text": {"format": {"type": "json_object"}, "verbosity": "low"},
    "reasoning": {"effort": "none"}, "service_tier": "flex"})",
                                 o, &r);
  ASSERT_FALSE(e.has_value()) << e->param << ": " << e->message;
  const json want = json::parse(R"([{"role": "system", "content": "Use tools."},
    {"role": "user", "content": "Weather\nin Paris?"},
    {"role": "assistant", "content": "", "reasoning_content": "Need w.",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "w", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "21C", "tool_call_id": "call_1"}])");
  EXPECT_EQ(r.api.messages, want);
  EXPECT_EQ(r.api.reasoning_effort, "low");  // "none": thinking off, and the least effort
  EXPECT_EQ(r.instructions, "Be brief.");    // the handler puts it first
  EXPECT_FALSE(r.store);
  EXPECT_EQ(r.api.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.api.sampling.temperature, 0.5f);
  EXPECT_TRUE(r.api.has_seed);
  EXPECT_EQ(r.api.sampling.seed, 9u);
  EXPECT_EQ(r.api.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(r.api.tool_choice_name, "w");
  EXPECT_EQ(r.api.tools[0]["function"]["name"], "w");
  EXPECT_NE(r.api.grammar, nullptr);
  EXPECT_EQ(r.api.service_tier, scheduler::ServiceTier::kFlex);
  EXPECT_EQ(r.api.chat_template_kwargs["enable_thinking"], false);
  EXPECT_EQ(r.echo["metadata"]["a"], "b");
  EXPECT_EQ(r.echo["max_output_tokens"], 7);

  ASSERT_FALSE(ParseResponsesRequest(R"({"model": "m", "input": "Hi"})", o, &r));
  EXPECT_EQ(r.api.messages, json::parse(R"([{"role": "user", "content": "Hi"}])"));
  EXPECT_TRUE(r.store);  // OpenAI's default
}

TEST(ResponsesRequestTest, UnsupportedFieldsAreNamed) {
  const std::string head = R"({"model": "m", "input": "x", )";
  EXPECT_EQ(ResponsesError(head + R"("tools": [{"type": "web_search"}]})").param, "tools[0].type");
  EXPECT_EQ(ResponsesError(head + R"("truncation": "auto"})").param, "truncation");
  EXPECT_EQ(ResponsesError(head + R"("background": true})").param, "background");
  EXPECT_EQ(ResponsesError(head + R"("include": ["file_search_call.results"]})").param,
            "include[0]");
  EXPECT_EQ(ResponsesError(head + R"("frobnicate": 1})").code, "unknown_parameter");
  EXPECT_EQ(ResponsesError(head + R"("max_output_tokens": 0})").param, "max_output_tokens");
  EXPECT_EQ(ResponsesError(R"({"model": "m", "input": [{"role": "user", "content": [
      {"type": "input_image", "image_url": "x"}]}]})")
                .param,
            "input[0].content[0].type");
  EXPECT_EQ(
      ResponsesError(R"({"model": "m", "input": [{"type": "item_reference", "id": "x"}]})").param,
      "input[0].type");
  EXPECT_EQ(ResponsesError(head + R"("tools": [{"type": "function", "name": "a b"}]})").param,
            "tools[0].name");
  EXPECT_EQ(ResponsesError(head + R"("text": {"format": {"type": "json_schema", "name": "x",
      "schema": {"type": "object", "properties": {"s": {"type": "string", "pattern": "a"}}}}}})")
                .param,
            "text.format.schema.properties.s.pattern");
  EXPECT_EQ(ResponsesError(R"({"model": "m"})").param, "input");
  // Fields of unexpected JSON types are 400s too, never a server error.
  EXPECT_EQ(ResponsesError(R"({"model": "m", "input": [{"type": 5}]})").status, 400);
  EXPECT_EQ(ResponsesError(R"({"model": "m", "input": [{"role": "user", "content": 5}]})").status,
            400);
}

TEST(MessagesRequestTest, BlocksBecomeChatMessages) {
  ApiRequest r;
  ParseOptions o;
  o.n_vocab = 1000;
  auto e = ParseMessagesRequest(R"({"model": "m", "max_tokens": 5,
    "system": [{"type": "text", "text": "Be brief."}],
    "messages": [{"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
                 {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "x"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"city": "Oslo"}}]},
                 {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1",
                     "content": [{"type": "text", "text": "3C"}]},
                    {"type": "text", "text": "Thanks"}]}],
    "tools": [{"name": "w", "description": "d", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
    "stop_sequences": ["END"], "temperature": 0.7, "top_p": 0.9, "top_k": 40,
    "metadata": {"user_id": "u"}, "service_tier": "standard_only", "seed": 4,
    "thinking": {"type": "disabled"}})",
                                o, false, &r);
  ASSERT_FALSE(e.has_value()) << e->param << ": " << e->message;
  const json want = json::parse(R"([{"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": "Checking.", "reasoning_content": "hm",
     "tool_calls": [{"id": "toolu_1", "type": "function",
                     "function": {"name": "w", "arguments": {"city": "Oslo"}}}]},
    {"role": "tool", "content": "3C", "tool_call_id": "toolu_1"},
    {"role": "user", "content": "Thanks"}])");
  EXPECT_EQ(r.messages, want);
  EXPECT_EQ(r.tool_choice, ToolChoice::kRequired);
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_EQ(r.tools[0]["function"]["parameters"], json::parse(R"({"type": "object"})"));
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_EQ(r.service_tier, scheduler::ServiceTier::kDefault);
  EXPECT_EQ(r.chat_template_kwargs["enable_thinking"], false);
  EXPECT_EQ(r.max_tokens, 5);
}

TEST(MessagesRequestTest, ErrorsNameTheField) {
  const std::string msgs = R"("model": "m", "messages": [{"role": "user", "content": "x"}])";
  EXPECT_EQ(MessagesError("{" + msgs + "}").param, "max_tokens");
  EXPECT_EQ(MessagesError("{" + msgs + R"(, "max_tokens": 4, "temperature": 1.5})").param,
            "temperature");
  EXPECT_EQ(MessagesError("{" + msgs + R"(, "max_tokens": 4, "mcp_servers": []})").param,
            "mcp_servers");
  EXPECT_EQ(MessagesError("{" + msgs + R"(, "max_tokens": 4, "frobnicate": 1})").param,
            "frobnicate");
  EXPECT_EQ(MessagesError(R"({"model": "m", "max_tokens": 4, "messages": [{"role": "user",
      "content": [{"type": "image", "source": {}}]}]})")
                .param,
            "messages[0].content[0].type");
  EXPECT_EQ(MessagesError("{" + msgs + R"(, "max_tokens": 4, "tools": [{"name": "a b",
      "input_schema": {"type": "object"}}]})")
                .param,
            "tools[0].name");
  EXPECT_EQ(MessagesError("{" + msgs + R"(, "max_tokens": 4, "tools": [{"type": "bash_20250124",
      "name": "bash"}]})")
                .param,
            "tools[0].type");
  EXPECT_EQ(MessagesError(R"({"model": "m", "max_tokens": 4, "messages": [{"role": "user",
      "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": "yes"}]}]})")
                .status,
            400);
  EXPECT_EQ(MessagesError("{" + msgs + R"(, "max_tokens": 4, "thinking": "on"})").status, 400);
  EXPECT_EQ(MessagesError("{" + msgs + R"(, "max_tokens": 4, "tool_choice": {"type": "tool",
      "name": "nope"}})")
                .code,
            "invalid_value");
}

TEST(ResponseStoreTest, BoundedByCountBytesAgeAndOwner) {
  FakeClock clock;
  clock.Set(100.0);
  ResponseStoreOptions o;
  o.max_responses = 2;
  o.max_bytes = 1000;
  o.ttl_s = 60;
  ResponseStore store(o, &clock);
  auto entry = [](int64_t key, std::string text) {
    StoredResponse r;
    r.key_id = key;
    r.messages = json::array({{{"role", "user"}, {"content", std::move(text)}}});
    r.response = {{"id", "x"}};
    return r;
  };
  store.Put("a", entry(1, "one"));
  store.Put("b", entry(1, "two"));
  ASSERT_TRUE(store.Get("a", 1).has_value());
  EXPECT_FALSE(store.Get("a", 2).has_value());  // another key's
  store.Put("c", entry(1, "three"));            // over the count: the oldest goes
  EXPECT_FALSE(store.Get("a", 1).has_value());
  EXPECT_EQ(store.size(), 2u);
  store.Put("big", entry(1, std::string(2000, 'x')));  // larger than the whole store
  EXPECT_FALSE(store.Get("big", 1).has_value());
  store.Put("d", entry(1, std::string(900, 'x')));  // makes room by bytes
  EXPECT_TRUE(store.Get("d", 1).has_value());
  EXPECT_LE(store.bytes(), o.max_bytes);
  EXPECT_FALSE(store.Remove("d", 2));
  EXPECT_TRUE(store.Remove("d", 1));
  store.Put("e", entry(1, "e"));
  clock.Advance(61);  // past the time to live
  EXPECT_FALSE(store.Get("e", 1).has_value());
  EXPECT_EQ(store.size(), 0u);
}

// Server events "event: T\ndata: {...}" (Responses and Anthropic), or "data: {...}" (chat).
std::vector<json> Events(const std::string& body) {
  std::vector<json> out;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    const std::string ev = body.substr(pos, end - pos);
    pos = end + 2;
    const size_t data = ev.find("data: ");
    if (data == std::string::npos || ev.compare(data + 6, 6, "[DONE]") == 0) continue;
    out.push_back(json::parse(ev.substr(data + 6)));
    if (ev.rfind("event: ", 0) == 0) {  // the event name is the data's type
      EXPECT_EQ(ev.substr(7, ev.find('\n') - 7), out.back()["type"]) << ev;
    }
  }
  return out;
}

// A reasoning model's reply: a reasoning item before the message, streamed and not alike.
TEST(ResponsesWriterTest, ReasoningItemThenMessage) {
  ResponseOptions ro;
  ro.id = "resp_x";
  ro.model = "m";
  std::vector<engine::GenerationEvent> events;
  for (const char* text : {"<think>", "Hm", "m.", "</think>", "\n\n", "Yes", "."}) {
    engine::GenerationEvent ev;
    ev.text = text;
    ev.n_tokens = 1;
    events.push_back(ev);
  }
  events.back().finish = engine::FinishReason::kStop;
  events.back().prompt_tokens = 3;
  events.back().completion_tokens = 7;
  ResponsesWriter whole(ro, json::object(), {});
  ResponsesWriter streamed(ro, json::object(), {});
  std::string sse;
  for (const auto& ev : events) {
    whole.Add(0, ev);
    sse += streamed.Stream(0, ev);
  }
  const json body = json::parse(whole.Body());
  ASSERT_EQ(body["output"].size(), 2u) << body.dump();
  EXPECT_EQ(body["output"][0]["type"], "reasoning");
  EXPECT_EQ(body["output"][0]["content"][0]["text"], "Hmm.");
  EXPECT_EQ(body["output"][1]["content"][0]["text"], "Yes.");
  EXPECT_EQ(body["usage"]["output_tokens_details"]["reasoning_tokens"], 5);
  std::string reasoning, text;
  json final;
  for (const json& e : Events(sse)) {
    if (e["type"] == "response.reasoning_text.delta") reasoning += e["delta"];
    if (e["type"] == "response.output_text.delta") text += e["delta"];
    if (e["type"] == "response.completed") final = e["response"];
  }
  EXPECT_EQ(reasoning, "Hmm.");
  EXPECT_EQ(text, "Yes.");
  json a = final["output"], b = body["output"];
  for (json* items : {&a, &b}) {
    for (json& item : *items) item.erase("id");  // each writer has its own
  }
  EXPECT_EQ(a, b);
  EXPECT_EQ(final["usage"], body["usage"]);
}

json PostJson(ServerHarness& h, const std::string& path, const json& body, int want = 200) {
  auto res = h.Post(path, body.dump());
  EXPECT_TRUE(res);
  if (!res) return json();
  EXPECT_EQ(res->status, want) << res->body;
  return json::parse(res->body);
}

// The three APIs' text and output token count for one request, streamed or not.
struct Reply {
  std::string text;
  int64_t tokens = 0;
};

Reply ViaChat(ServerHarness& h, const json& sampling, bool stream) {
  json body = {{"model", "tiny"},
               {"messages",
                {{{"role", "system"}, {"content", "Be brief."}},
                 {{"role", "user"}, {"content", "Say something"}}}},
               {"max_tokens", 16}};
  body.update(sampling);
  Reply r;
  if (!stream) {
    const json j = PostJson(h, "/v1/chat/completions", body);
    return {j["choices"][0]["message"]["content"], j["usage"]["completion_tokens"]};
  }
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  for (const json& c : Events(h.Post("/v1/chat/completions", body.dump())->body)) {
    if (!c["choices"].empty()) r.text += c["choices"][0]["delta"].value("content", "");
    if (c.contains("usage") && !c["usage"].is_null()) r.tokens = c["usage"]["completion_tokens"];
  }
  return r;
}

Reply ViaResponses(ServerHarness& h, const json& sampling, bool stream) {
  json body = {{"model", "tiny"},
               {"instructions", "Be brief."},
               {"input", "Say something"},
               {"max_output_tokens", 16}};
  body.update(sampling);
  if (!stream) {
    const json j = PostJson(h, "/v1/responses", body);
    return {j["output"][0]["content"][0]["text"], j["usage"]["output_tokens"]};
  }
  body["stream"] = true;
  Reply r;
  for (const json& e : Events(h.Post("/v1/responses", body.dump())->body)) {
    if (e["type"] == "response.output_text.delta") r.text += e["delta"].get<std::string>();
    if (e["type"] == "response.completed" || e["type"] == "response.incomplete") {
      r.tokens = e["response"]["usage"]["output_tokens"];
    }
  }
  return r;
}

Reply ViaMessages(ServerHarness& h, const json& sampling, bool stream) {
  json body = {{"model", "tiny"},
               {"system", "Be brief."},
               {"messages", {{{"role", "user"}, {"content", "Say something"}}}},
               {"max_tokens", 16}};
  body.update(sampling);
  if (!stream) {
    const json j = PostJson(h, "/v1/messages", body);
    return {j["content"][0]["text"], j["usage"]["output_tokens"]};
  }
  body["stream"] = true;
  Reply r;
  for (const json& e : Events(h.Post("/v1/messages", body.dump())->body)) {
    if (e["type"] == "content_block_delta") r.text += e["delta"]["text"].get<std::string>();
    if (e["type"] == "message_delta") r.tokens = e["usage"]["output_tokens"];
  }
  return r;
}

// One request core: the same seeded request gives the same tokens through every API, streamed
// or not, greedy and at temperature 1 (random weights: the text is gibberish, which makes a
// divergence in sampling show at once).
TEST(ApisServerTest, SameTokensThroughEveryApi) {
  UF_REQUIRE_SHARED();
  ServerHarness h;
  for (const json& sampling : {json{{"temperature", 0}, {"ignore_eos", true}},
                               json{{"temperature", 1}, {"seed", 11}, {"ignore_eos", true}},
                               json{{"temperature", 1}, {"seed", 12}, {"top_p", 0.9}}}) {
    const Reply chat = ViaChat(h, sampling, false);
    EXPECT_GT(chat.tokens, 0);
    EXPECT_FALSE(chat.text.empty());
    for (bool stream : {false, true}) {
      SCOPED_TRACE(sampling.dump() + (stream ? " streamed" : ""));
      const Reply c = ViaChat(h, sampling, stream);
      const Reply r = ViaResponses(h, sampling, stream);
      const Reply m = ViaMessages(h, sampling, stream);
      EXPECT_EQ(c.text, chat.text);
      EXPECT_EQ(r.text, chat.text);
      EXPECT_EQ(m.text, chat.text);
      EXPECT_EQ(c.tokens, chat.tokens);
      EXPECT_EQ(r.tokens, chat.tokens);
      EXPECT_EQ(m.tokens, chat.tokens);
    }
  }
  // A different seed gives different tokens (the seed reaches the sampler through each API).
  const json other = {{"temperature", 1}, {"seed", 99}, {"ignore_eos", true}};
  EXPECT_NE(ViaResponses(h, other, false).text,
            ViaResponses(h, {{"temperature", 1}, {"seed", 11}, {"ignore_eos", true}}, false).text);
}

TEST(ApisServerTest, ResponsesEventStreamAndObject) {
  UF_REQUIRE_SHARED();
  ServerHarness h;
  const json body = {{"model", "tiny"},  {"input", "Hello"},   {"max_output_tokens", 6},
                     {"temperature", 0}, {"ignore_eos", true}, {"metadata", {{"k", "v"}}}};
  const json whole = PostJson(h, "/v1/responses", body);
  EXPECT_EQ(whole["object"], "response");
  EXPECT_TRUE(whole["id"].get<std::string>().starts_with("resp_"));
  EXPECT_EQ(whole["status"], "incomplete");
  EXPECT_EQ(whole["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(whole["metadata"]["k"], "v");
  EXPECT_EQ(whole["service_tier"], "default");
  EXPECT_EQ(whole["usage"]["output_tokens"], 6);
  EXPECT_EQ(whole["usage"]["total_tokens"], whole["usage"]["input_tokens"].get<int>() + 6);
  ASSERT_EQ(whole["output"].size(), 1u);
  EXPECT_EQ(whole["output"][0]["type"], "message");
  EXPECT_EQ(whole["output"][0]["role"], "assistant");

  json sbody = body;
  sbody["stream"] = true;
  auto res = h.Post("/v1/responses", sbody.dump());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<json> events = Events(res->body);
  std::vector<std::string> types;
  std::string text;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i]["sequence_number"], i);
    const std::string t = events[i]["type"];
    if (t == "response.output_text.delta") {
      text += events[i]["delta"].get<std::string>();
      if (types.back() == t) continue;  // one entry per run of deltas
    }
    types.push_back(t);
  }
  const std::vector<std::string> want = {
      "response.created",           "response.in_progress",
      "response.output_item.added", "response.content_part.added",
      "response.output_text.delta", "response.output_text.done",
      "response.content_part.done", "response.output_item.done",
      "response.incomplete"};
  EXPECT_EQ(types, want);
  EXPECT_EQ(text, whole["output"][0]["content"][0]["text"]);
  EXPECT_EQ(events.back()["response"]["output"][0]["content"][0]["text"], text);
  EXPECT_EQ(events.back()["response"]["usage"]["output_tokens"], 6);
}

TEST(ApisServerTest, ResponsesToolCallsAndStoredConversations) {
  UF_REQUIRE_SHARED();
  ServerHarness h;
  const json tools = json::parse(R"([{"type": "function", "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
                   "required": ["city"], "additionalProperties": false}}])");
  json body = {{"model", "tiny"},
               {"input", "Weather in Paris?"},
               {"tools", tools},
               {"tool_choice", "required"},
               {"max_output_tokens", 80},
               {"seed", 4},
               {"parallel_tool_calls", false}};
  const json first = PostJson(h, "/v1/responses", body);
  EXPECT_EQ(first["status"], "completed");
  ASSERT_EQ(first["output"].size(), 1u) << first.dump();
  const json call = first["output"][0];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_TRUE(call["call_id"].get<std::string>().starts_with("call_"));
  EXPECT_TRUE(json::parse(call["arguments"].get<std::string>()).contains("city"));

  // Streamed: the call as an output item with its arguments.
  body["stream"] = true;
  std::string args;
  bool done = false;
  for (const json& e : Events(h.Post("/v1/responses", body.dump())->body)) {
    if (e["type"] == "response.function_call_arguments.delta") args += e["delta"];
    if (e["type"] == "response.output_item.added") {
      EXPECT_NE(e["item"]["type"], "message");
    }
    if (e["type"] == "response.completed") {
      done = true;
      EXPECT_EQ(e["response"]["output"][0]["arguments"], args);
    }
  }
  EXPECT_TRUE(done);
  EXPECT_TRUE(json::parse(args).contains("city"));

  // The result, continuing the stored conversation: its prompt holds the first exchange.
  const json next = PostJson(h, "/v1/responses",
                             {{"model", "tiny"},
                              {"previous_response_id", first["id"]},
                              {"input",
                               {{{"type", "function_call_output"},
                                 {"call_id", call["call_id"]},
                                 {"output", "{\"temp\": 21}"}}}},
                              {"tools", tools},
                              {"tool_choice", "none"},
                              {"max_output_tokens", 4}});
  EXPECT_EQ(next["previous_response_id"], first["id"]);
  EXPECT_GT(next["usage"]["input_tokens"].get<int>(),
            first["usage"]["input_tokens"].get<int>() + 5);
  auto got = h.Get("/v1/responses/" + next["id"].get<std::string>());
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(json::parse(got->body)["id"], next["id"]);
  auto del = h.client().Delete(("/v1/responses/" + next["id"].get<std::string>()).c_str());
  ASSERT_TRUE(del);
  EXPECT_EQ(json::parse(del->body)["deleted"], true);
  EXPECT_EQ(h.Get("/v1/responses/" + next["id"].get<std::string>())->status, 404);

  const json unstored =
      PostJson(h, "/v1/responses",
               {{"model", "tiny"}, {"input", "x"}, {"store", false}, {"max_output_tokens", 2}});
  EXPECT_EQ(unstored["store"], false);
  EXPECT_EQ(h.Get("/v1/responses/" + unstored["id"].get<std::string>())->status, 404);
  const json missing =
      PostJson(h, "/v1/responses",
               {{"model", "tiny"}, {"input", "x"}, {"previous_response_id", unstored["id"]}}, 400);
  EXPECT_EQ(missing["error"]["param"], "previous_response_id");
  const json bad = PostJson(h, "/v1/responses",
                            {{"model", "tiny"}, {"input", "x"}, {"truncation", "auto"}}, 400);
  EXPECT_EQ(bad["error"]["param"], "truncation");
  const json model = PostJson(h, "/v1/responses", {{"model", "gpt-5"}, {"input", "x"}}, 404);
  EXPECT_EQ(model["error"]["code"], "model_not_found");
}

TEST(ApisServerTest, MessagesShapesStopsToolsAndCounts) {
  UF_REQUIRE_SHARED();
  ServerHarness h;
  json body = {{"model", "tiny"},
               {"messages", {{{"role", "user"}, {"content", "Hello"}}}},
               {"max_tokens", 12},
               {"temperature", 0},
               {"ignore_eos", true}};
  const json whole = PostJson(h, "/v1/messages", body);
  EXPECT_EQ(whole["type"], "message");
  EXPECT_EQ(whole["usage"]["service_tier"], "standard");
  EXPECT_TRUE(whole["id"].get<std::string>().starts_with("msg_"));
  EXPECT_EQ(whole["role"], "assistant");
  EXPECT_EQ(whole["stop_reason"], "max_tokens");
  EXPECT_EQ(whole["usage"]["output_tokens"], 12);
  const std::string text = whole["content"][0]["text"];
  const json count =
      PostJson(h, "/v1/messages/count_tokens", {{"model", "tiny"}, {"messages", body["messages"]}});
  EXPECT_EQ(count["input_tokens"], whole["usage"]["input_tokens"].get<int>() +
                                       whole["usage"]["cache_read_input_tokens"].get<int>());

  // A stop sequence from the middle of the text: cut there, named in the reply.
  const std::string stop = text.substr(text.size() / 2, 3);
  json stopped = body;
  stopped["stop_sequences"] = {stop};
  const json s = PostJson(h, "/v1/messages", stopped);
  EXPECT_EQ(s["stop_reason"], "stop_sequence");
  EXPECT_EQ(s["stop_sequence"], stop);
  EXPECT_EQ(s["content"][0]["text"], text.substr(0, text.find(stop)));

  // Streamed: the event sequence, and the same text.
  body["stream"] = true;
  std::vector<std::string> types;
  std::string streamed;
  for (const json& e : Events(h.Post("/v1/messages", body.dump())->body)) {
    const std::string t = e["type"];
    if (t == "content_block_delta") {
      streamed += e["delta"]["text"].get<std::string>();
      if (types.back() == t) continue;
    }
    if (t == "message_delta") {
      EXPECT_EQ(e["delta"]["stop_reason"], "max_tokens");
    }
    types.push_back(t);
  }
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(types,
            (std::vector<std::string>{"message_start", "content_block_start", "content_block_delta",
                                      "content_block_stop", "message_delta", "message_stop"}));

  // A forced tool call: a tool_use block with its input object.
  const json tools = json::parse(R"([{"name": "get_weather", "input_schema": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}}])");
  json call = {{"model", "tiny"},  {"messages", {{{"role", "user"}, {"content", "Weather?"}}}},
               {"max_tokens", 80}, {"seed", 3},
               {"tools", tools},   {"tool_choice", {{"type", "tool"}, {"name", "get_weather"}}}};
  const json used = PostJson(h, "/v1/messages", call);
  EXPECT_EQ(used["stop_reason"], "tool_use");
  const json block = used["content"].back();
  EXPECT_EQ(block["type"], "tool_use");
  EXPECT_TRUE(block["id"].get<std::string>().starts_with("toolu_"));
  EXPECT_TRUE(block["input"].contains("city"));
  call["stream"] = true;
  std::string partial;
  for (const json& e : Events(h.Post("/v1/messages", call.dump())->body)) {
    if (e["type"] == "content_block_delta") {
      EXPECT_EQ(e["delta"]["type"], "input_json_delta");
      partial += e["delta"]["partial_json"];
    }
  }
  EXPECT_TRUE(json::parse(partial).contains("city"));

  // A schema the grammar cannot enforce, named by this API's path.
  call.erase("stream");
  call["tools"][0]["input_schema"]["properties"]["n"] = {{"type", "number"}, {"multipleOf", 2}};
  EXPECT_EQ(PostJson(h, "/v1/messages", call, 400)["error"]["param"],
            "tools[0].input_schema.properties.n.multipleOf");

  // Errors in Anthropic's shape.
  const json err =
      PostJson(h, "/v1/messages", {{"model", "tiny"}, {"messages", body["messages"]}}, 400);
  EXPECT_EQ(err["type"], "error");
  EXPECT_EQ(err["error"]["type"], "invalid_request_error");
  EXPECT_NE(err["error"]["message"].get<std::string>().find("max_tokens"), std::string::npos);
  const json nf =
      PostJson(h, "/v1/messages",
               {{"model", "claude"}, {"max_tokens", 2}, {"messages", body["messages"]}}, 404);
  EXPECT_EQ(nf["error"]["type"], "not_found_error");
}

TEST(ApisServerTest, KeysByBearerOrXApiKey) {
  UF_REQUIRE_SHARED();
  ServerHarness h({}, KeyStore::WithKey("sk-test"));
  const std::string body =
      R"({"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"x"}]})";
  auto none = h.Post("/v1/messages", body);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(json::parse(none->body)["error"]["type"], "authentication_error");
  EXPECT_EQ(h.Post("/v1/messages", body, {{"x-api-key", "sk-wrong"}})->status, 401);
  EXPECT_EQ(h.Post("/v1/messages", body, {{"x-api-key", "sk-test"}})->status, 200);
  EXPECT_EQ(h.Post("/v1/messages", body, {{"Authorization", "Bearer sk-test"}})->status, 200);
  const std::string resp = R"({"model":"tiny","input":"x","max_output_tokens":2})";
  EXPECT_EQ(h.Post("/v1/responses", resp)->status, 401);
  EXPECT_EQ(h.Post("/v1/responses", resp, {{"Authorization", "Bearer sk-test"}})->status, 200);
}

TEST(ApisServerTest, LegacyFunctionsAndIgnoredFields) {
  UF_REQUIRE_SHARED();
  ServerHarness h;
  json body = json::parse(R"({"model": "tiny", "max_tokens": 80, "seed": 2,
    "messages": [{"role": "user", "content": "Weather?"}],
    "functions": [{"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}}],
    "function_call": {"name": "get_weather"},
    "prompt_cache_key": "k", "prompt_cache_retention": "24h", "safety_identifier": "s",
    "store": true, "metadata": {"a": "b"}, "user": "u", "verbosity": "low"})");
  const json r = PostJson(h, "/v1/chat/completions", body);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "function_call");
  const json fc = r["choices"][0]["message"]["function_call"];
  EXPECT_EQ(fc["name"], "get_weather");
  EXPECT_TRUE(json::parse(fc["arguments"].get<std::string>()).contains("city"));
  EXPECT_FALSE(r["choices"][0]["message"].contains("tool_calls"));
  // Streamed as delta.function_call.
  body["stream"] = true;
  std::string args;
  for (const json& c : Events(h.Post("/v1/chat/completions", body.dump())->body)) {
    if (c["choices"].empty()) continue;
    const json& d = c["choices"][0]["delta"];
    if (d.contains("function_call")) args += d["function_call"].value("arguments", "");
  }
  EXPECT_EQ(json::parse(args), json::parse(fc["arguments"].get<std::string>()));
  // "auto" and the legacy history (an assistant function_call, a function message).
  json history = json::parse(R"({"model": "tiny", "max_tokens": 3, "function_call": "auto",
    "functions": [{"name": "get_weather", "parameters": {"type": "object"}}],
    "messages": [{"role": "user", "content": "Weather?"},
                 {"role": "assistant", "content": null,
                  "function_call": {"name": "get_weather", "arguments": "{}"}},
                 {"role": "function", "name": "get_weather", "content": "21C"}]})");
  PostJson(h, "/v1/chat/completions", history);
  history["tools"] = json::array();
  EXPECT_EQ(PostJson(h, "/v1/chat/completions", history, 400)["error"]["param"], "functions");
  history.erase("tools");
  history["function_call"] = {{"name", "nope"}};
  EXPECT_EQ(PostJson(h, "/v1/chat/completions", history, 400)["error"]["param"],
            "function_call.name");
}

// A stream the client leaves: its tokens count in ultrafast_generation_tokens_total as a
// finished request's do (they were computed).
TEST(ApisServerTest, CancelledStreamsCountInMetrics) {
  UF_REQUIRE_SHARED();
  engine::ServiceOptions so;
  so.ctx = 4000;
  so.step_hook = [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };
  ServerHarness h(so);
  auto generated = [&h] {
    const std::string m = h.Get("/metrics")->body;
    const std::string name = "\nultrafast_generation_tokens_total ";
    const size_t at = m.find(name);
    return at == std::string::npos ? -1.0 : std::stod(m.substr(at + name.size()));
  };
  ASSERT_EQ(generated(), 0.0);
  const std::string body = R"({"model":"tiny","input":"x","max_output_tokens":3900,)"
                           R"("ignore_eos":true,"stream":true})";
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(h.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string req =
      "POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: "
      "application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  std::string got;
  char buf[1024];
  // Until a few text deltas came.
  const std::string delta = "event: response.output_text.delta";
  while (got.find(delta, got.find(delta) + 1) == std::string::npos) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    ASSERT_GT(n, 0);
    got.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  const engine::EngineStats st = h.Settled();
  EXPECT_EQ(st.kv_blocks_used, 0);
  // The server notices the hang-up at its next write or poll.
  double n = generated();
  for (int i = 0; i < 10000 && n <= 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    n = generated();
  }
  EXPECT_GE(n, 2.0);     // at least the deltas read
  EXPECT_LT(n, 3900.0);  // and not the whole budget: it was cancelled
}

}  // namespace
}  // namespace uf::server
