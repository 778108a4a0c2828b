// OpenAI request validation and response/SSE formatting. Expected shapes follow the OpenAI API
// reference (chat.completion, chat.completion.chunk, text_completion, error objects).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/openai_request.h"
#include "server/openai_response.h"
#include "tokenizer/tokenizer.h"

namespace uf::server {
namespace {

using json = nlohmann::json;

std::optional<ApiError> Parse(Endpoint ep, const std::string& body, ApiRequest* r) {
  ParseOptions o;
  o.n_vocab = 1000;
  return ParseRequest(ep, body, o, r);
}

ApiError ParseError(Endpoint ep, const std::string& body) {
  ApiRequest r;
  auto e = Parse(ep, body, &r);
  EXPECT_TRUE(e.has_value()) << body;
  return e.value_or(ApiError{});
}

TEST(OpenAiRequestTest, ParsesAChatRequest) {
  ApiRequest r;
  auto e = Parse(Endpoint::kChat, R"({
    "model": "m", "stream": true, "stream_options": {"include_usage": true},
    "messages": [{"role": "developer", "content": "Be brief."},
                 {"role": "user", "content": [{"type": "text", "text": "Hi"},
                                              {"type": "text", "text": "there"}]},
                 {"role": "assistant", "content": null},
                 {"role": "user", "content": "again", "name": "bob"}],
    "max_tokens": 10, "max_completion_tokens": 20, "temperature": 0.5, "top_p": 0.9,
    "seed": -3, "stop": ["a", "b"], "logprobs": true, "top_logprobs": 2,
    "presence_penalty": 1, "frequency_penalty": -1, "logit_bias": {"7": -100},
    "user": "u", "n": 1, "response_format": {"type": "text"}, "tools": [],
    "tool_choice": "none", "metadata": {"k": "v"}, "store": false})",
                 &r);
  ASSERT_FALSE(e.has_value()) << e->message;
  EXPECT_EQ(r.model, "m");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.max_tokens, 20);  // max_completion_tokens wins
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_TRUE(r.has_seed);
  EXPECT_EQ(r.sampling.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 2);
  ASSERT_EQ(r.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(r.sampling.logit_bias[0].first, 7);
  const json want = json::parse(R"([{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "Hi\nthere"},
                                    {"role": "assistant", "content": ""},
                                    {"role": "user", "content": "again"}])");
  EXPECT_EQ(r.messages, want);
}

TEST(OpenAiRequestTest, ResponseFormatCompilesAGrammar) {
  ApiRequest r;
  const std::string chat = R"("model":"m","messages":[{"role":"user","content":"x"}])";
  ASSERT_FALSE(Parse(Endpoint::kChat, "{" + chat + R"(,"response_format":{"type":"text"}})", &r));
  EXPECT_EQ(r.grammar, nullptr);
  ASSERT_FALSE(
      Parse(Endpoint::kChat, "{" + chat + R"(,"response_format":{"type":"json_object"}})", &r));
  ASSERT_NE(r.grammar, nullptr);
  ASSERT_FALSE(Parse(Endpoint::kChat, "{" + chat + R"(,"response_format":{"type":"json_schema",
      "json_schema":{"name":"p","strict":true,"schema":{"type":"object",
      "properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}}}})",
                     &r));
  ASSERT_NE(r.grammar, nullptr);
  const std::string schema_fingerprint = r.grammar->fingerprint();
  ASSERT_FALSE(Parse(Endpoint::kChat, "{" + chat + R"(,"response_format":{"type":"json_schema",
      "json_schema":{"name":"p","schema":{"type":"object",
      "properties":{"a":{"type":"integer"}},"required":["a"]}}}})",
                     &r));
  EXPECT_NE(r.grammar->fingerprint(), schema_fingerprint);
}

TEST(OpenAiRequestTest, ParsesCompletionPrompts) {
  ApiRequest r;
  ASSERT_FALSE(Parse(Endpoint::kCompletion, R"({"model":"m","prompt":"Hello","stop":"x",
                     "logprobs":3,"echo":false,"best_of":1,"suffix":null})",
                     &r));
  EXPECT_EQ(r.prompt, "Hello");
  EXPECT_FALSE(r.prompt_is_tokens);
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  ASSERT_FALSE(Parse(Endpoint::kCompletion, R"({"model":"m","prompt":[1,2,3]})", &r));
  EXPECT_TRUE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  ASSERT_FALSE(Parse(Endpoint::kCompletion, R"({"model":"m","prompt":[[4,5]]})", &r));
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{4, 5}));
  ASSERT_FALSE(Parse(Endpoint::kCompletion, R"({"model":"m","prompt":["only"]})", &r));
  EXPECT_EQ(r.prompt, "only");
}

TEST(OpenAiRequestTest, RejectsInvalidValues) {
  struct Case {
    Endpoint ep;
    const char* body;
    const char* param;
  };
  const Case cases[] = {
      {Endpoint::kChat, R"({"model":"m"})", "messages"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"x"}]})", "model"},
      {Endpoint::kChat, R"({"model":"m","messages":[]})", "messages"},
      {Endpoint::kChat, R"({"model":"m","messages":[{"role":"king","content":"x"}]})",
       "messages[0].role"},
      {Endpoint::kChat, R"({"model":"m","messages":[{"role":"user"}]})", "messages[0].content"},
      {Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":"x","foo":1}]})",
       "messages[0].foo"},
      {Endpoint::kChat,
       R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
       "messages[0].content"},
      {Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"foo":1})",
       "foo"},
      {Endpoint::kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"temperature":3})",
       "temperature"},
      {Endpoint::kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"temperature":"hot"})",
       "temperature"},
      {Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_p":-1})",
       "top_p"},
      {Endpoint::kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0})", "max_tokens"},
      {Endpoint::kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1.5})",
       "max_tokens"},
      {Endpoint::kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"n":17})", "n"},
      {Endpoint::kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"stop":["a","b","c","d","e"]})",
       "stop"},
      {Endpoint::kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}})",
       "stream_options"},
      {Endpoint::kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":3})",
       "top_logprobs"},
      {Endpoint::kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"logit_bias":{"1000":1}})",
       "logit_bias"},
      {Endpoint::kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]})",
       "tools[0].function"},
      {Endpoint::kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"required"})",
       "tool_choice"},
      {Endpoint::kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"a b"}}]})",
       "tools[0].function.name"},
      {Endpoint::kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}})",
       "tool_choice.function.name"},
      {Endpoint::kChat, R"({"model":"m","messages":[{"role":"tool","content":"x"}]})",
       "messages[0].tool_call_id"},
      {Endpoint::kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json"}})",
       "response_format.type"},
      {Endpoint::kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema"}})",
       "response_format.json_schema"},
      {Endpoint::kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"schema":{}}}})",
       "response_format.json_schema.name"},
      {Endpoint::kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":{"type":"object","properties":{"age":{"type":"number","minimum":0}}}}}})",
       "response_format.json_schema.schema.properties.age.minimum"},
      {Endpoint::kChat,
       R"({"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object","properties":{"a":{"type":"string"}},"required":["b"]}}}})",
       "response_format.json_schema.schema.required"},
      {Endpoint::kCompletion, R"({"model":"m"})", "prompt"},
      {Endpoint::kCompletion, R"({"model":"m","prompt":[1,1000]})", "prompt"},
      {Endpoint::kCompletion, R"({"model":"m","prompt":["a","b"]})", "prompt"},
      {Endpoint::kCompletion, R"({"model":"m","prompt":"x","logprobs":6})", "logprobs"},
      {Endpoint::kCompletion, R"({"model":"m","prompt":"x","messages":[]})", "messages"},
  };
  for (const Case& c : cases) {
    const ApiError e = ParseError(c.ep, c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
    EXPECT_FALSE(e.message.empty());
  }
}

TEST(OpenAiRequestTest, RejectsMalformedBodies) {
  for (const char* body : {"", "{", "[]", "null", "\"x\"", "{\"model\":}", "{\"a\":1}}"}) {
    const ApiError e = ParseError(Endpoint::kChat, body);
    EXPECT_EQ(e.status, 400) << body;
  }
  std::string deep(100000, '[');
  const ApiError e = ParseError(Endpoint::kChat, "{\"model\":" + deep);
  EXPECT_NE(e.message.find("deeper"), std::string::npos) << e.message;
}

TEST(OpenAiRequestTest, JsonDepthSkipsStrings) {
  EXPECT_EQ(JsonDepth(R"({"a":[1,{"b":"[[[["}]})", 10), 3u);
  EXPECT_EQ(JsonDepth(R"("\"[[[")", 10), 0u);
  EXPECT_EQ(JsonDepth("[[[[", 3), SIZE_MAX);
}

TEST(OpenAiRequestTest, ErrorBodyHasOpenAiShape) {
  ApiError e = InvalidRequest("bad", "temperature", "invalid_value");
  const json j = json::parse(ErrorBody(e));
  EXPECT_EQ(j, json::parse(R"({"error":{"message":"bad","type":"invalid_request_error",
                                        "param":"temperature","code":"invalid_value"}})"));
  const json k = json::parse(ErrorBody(InvalidRequest("x")));
  EXPECT_TRUE(k["error"]["param"].is_null());
  EXPECT_TRUE(k["error"]["code"].is_null());
}

std::unique_ptr<Tokenizer> TinyTokenizer() {
  TokenizerConfig c;
  c.model = TokenizerConfig::Model::kSpm;
  c.tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81Hello", "\xE2\x96\x81world", "!", "<0xE2>"};
  c.token_types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl,
                   TokenType::kNormal,  TokenType::kNormal,  TokenType::kNormal,
                   TokenType::kByte};
  c.bos_id = 1;
  c.eos_id = 2;
  c.unk_id = 0;
  auto t = Tokenizer::FromConfig(c);
  UF_CHECK(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

engine::GenerationEvent Event(std::string text, int32_t token, float lp = -0.5f) {
  engine::GenerationEvent e;
  e.text = std::move(text);
  e.n_tokens = 1;
  e.logprobs.push_back({token, lp, {{token, lp}, {5, -2.0f}}});
  return e;
}

engine::GenerationEvent Final(engine::FinishReason reason) {
  engine::GenerationEvent e;
  e.finish = reason;
  e.prompt_tokens = 5;
  e.completion_tokens = 2;
  e.cached_tokens = 1;
  return e;
}

// Splits an SSE stream into its data payloads, checking the framing.
std::vector<std::string> SseData(const std::string& stream) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < stream.size()) {
    const size_t end = stream.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "event not terminated by a blank line";
    if (end == std::string::npos) break;
    const std::string event = stream.substr(pos, end - pos);
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    out.push_back(event.substr(6));
    pos = end + 2;
  }
  return out;
}

TEST(OpenAiResponseTest, ChatStreamChunks) {
  auto tok = TinyTokenizer();
  ResponseOptions o;
  o.endpoint = Endpoint::kChat;
  o.id = "chatcmpl-1";
  o.model = "m";
  o.created = 42;
  o.include_usage = true;
  o.logprobs = true;
  ResponseBuilder b(o, *tok);
  std::string sse = b.Stream(Event(" Hello", 3));
  sse += b.Stream(Event(" world", 4));
  sse += b.Stream(Final(engine::FinishReason::kStop));
  const std::vector<std::string> data = SseData(sse);
  ASSERT_EQ(data.size(), 6u);
  const json role = json::parse(data[0]);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["id"], "chatcmpl-1");
  EXPECT_EQ(role["created"], 42);
  EXPECT_EQ(role["choices"][0]["delta"], json::parse(R"({"role":"assistant","content":""})"));
  EXPECT_TRUE(role["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(role.contains("usage") && role["usage"].is_null());
  const json c1 = json::parse(data[1]);
  EXPECT_EQ(c1["choices"][0]["delta"]["content"], " Hello");
  const json lp = c1["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(lp["token"], " Hello");
  EXPECT_FLOAT_EQ(lp["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(lp["bytes"], json::parse("[32,72,101,108,108,111]"));
  EXPECT_EQ(lp["top_logprobs"].size(), 2u);
  EXPECT_EQ(lp["top_logprobs"][1]["token"], "!");
  const json fin = json::parse(data[3]);
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(fin["choices"][0]["delta"], json::object());
  const json usage = json::parse(data[4]);
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
  EXPECT_EQ(data[5], "[DONE]");
}

TEST(OpenAiResponseTest, ChatNonStreamBody) {
  auto tok = TinyTokenizer();
  ResponseOptions o;
  o.endpoint = Endpoint::kChat;
  o.id = "chatcmpl-2";
  o.model = "m";
  ResponseBuilder b(o, *tok);
  b.Add(Event(" Hello", 3));
  b.Add(Event("!", 5));
  b.Add(Final(engine::FinishReason::kLength));
  const json j = json::parse(b.Body());
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], " Hello!");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["usage"]["total_tokens"], 7);
}

TEST(OpenAiResponseTest, CompletionLogprobsAndEcho) {
  auto tok = TinyTokenizer();
  ResponseOptions o;
  o.endpoint = Endpoint::kCompletion;
  o.id = "cmpl-3";
  o.model = "m";
  o.logprobs = true;
  o.echo = "Hi";
  ResponseBuilder b(o, *tok);
  b.Add(Event(" Hello", 3, -1.0f));
  b.Add(Event(" world", 4, -2.0f));
  b.Add(Final(engine::FinishReason::kStop));
  const json j = json::parse(b.Body());
  EXPECT_EQ(j["object"], "text_completion");
  const json& c = j["choices"][0];
  EXPECT_EQ(c["text"], "Hi Hello world");
  EXPECT_EQ(c["logprobs"]["tokens"], json::parse(R"([" Hello"," world"])"));
  EXPECT_EQ(c["logprobs"]["token_logprobs"], json::parse("[-1.0,-2.0]"));
  EXPECT_EQ(c["logprobs"]["text_offset"], json::parse("[2,8]"));
  EXPECT_EQ(c["logprobs"]["top_logprobs"][0]["!"], -2.0);
}

TEST(OpenAiResponseTest, CompletionStreamAndErrors) {
  auto tok = TinyTokenizer();
  ResponseOptions o;
  o.endpoint = Endpoint::kCompletion;
  o.id = "cmpl-4";
  o.model = "m";
  ResponseBuilder b(o, *tok);
  std::string sse = b.Stream(Event("a", 5));
  engine::GenerationEvent err;
  err.finish = engine::FinishReason::kError;
  err.error = UnavailableError("going down");
  sse += b.Stream(err);
  const std::vector<std::string> data = SseData(sse);
  ASSERT_EQ(data.size(), 3u);
  const json c = json::parse(data[0]);
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "a");
  EXPECT_FALSE(c.contains("usage"));  // only with stream_options.include_usage
  const json e = json::parse(data[1]);
  EXPECT_EQ(e["error"]["message"], "going down");
  EXPECT_EQ(data[2], "[DONE]");
}

// chat_template_kwargs (a vLLM/SGLang extension): an object passed to the chat template; the
// prompt's own variables cannot be overridden, other types are refused, and the completions
// endpoint (no template) does not take it.
TEST(OpenAiRequestTest, ParsesChatTemplateKwargs) {
  const std::string head = R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}], )";
  ApiRequest r;
  auto e = Parse(Endpoint::kChat, head + R"("chat_template_kwargs": {"enable_thinking": false}})",
                 &r);
  ASSERT_FALSE(e.has_value()) << e->message;
  EXPECT_EQ(r.chat_template_kwargs, json::parse(R"({"enable_thinking": false})"));
  ApiRequest absent;
  ASSERT_FALSE(Parse(Endpoint::kChat, head + R"("chat_template_kwargs": null})", &absent));
  EXPECT_TRUE(absent.chat_template_kwargs.is_null());

  ApiError bad = ParseError(Endpoint::kChat, head + R"("chat_template_kwargs": [1]})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.param, "chat_template_kwargs");
  bad = ParseError(Endpoint::kChat, head + R"("chat_template_kwargs": {"messages": []}})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.param, "chat_template_kwargs.messages");
  bad = ParseError(Endpoint::kCompletion,
                   R"({"model": "m", "prompt": "x", "chat_template_kwargs": {}})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.param, "chat_template_kwargs");
}

TEST(OpenAiRequestTest, ParsesServiceTier) {
  const std::string head = R"({"model": "m", "messages": [{"role": "user", "content": "x"}], )";
  auto tier = [&](const std::string& v) {
    ApiRequest r;
    auto e = Parse(Endpoint::kChat, head + R"("service_tier": )" + v + "}", &r);
    EXPECT_FALSE(e.has_value()) << v << ": " << e->message;
    return r.service_tier;
  };
  using scheduler::ServiceTier;
  EXPECT_EQ(tier(R"("ultrafast")"), ServiceTier::kUltrafast);
  EXPECT_EQ(tier(R"("priority")"), ServiceTier::kUltrafast);  // OpenAI's name
  EXPECT_EQ(tier(R"("default")"), ServiceTier::kDefault);
  EXPECT_EQ(tier(R"("standard")"), ServiceTier::kDefault);
  EXPECT_EQ(tier(R"("flex")"), ServiceTier::kFlex);
  EXPECT_EQ(tier(R"("auto")"), std::nullopt);  // the server's configured auto tier decides
  EXPECT_EQ(tier("null"), std::nullopt);
  ApiRequest r;
  ASSERT_FALSE(
      Parse(Endpoint::kCompletion, R"({"model": "m", "prompt": "x", "service_tier": "flex"})", &r)
          .has_value());
  EXPECT_EQ(r.service_tier, ServiceTier::kFlex);
  ASSERT_FALSE(Parse(Endpoint::kChat, head + R"("user": "u"})", &r).has_value());
  EXPECT_EQ(r.service_tier, std::nullopt);  // absent = auto

  for (const char* bad : {R"("turbo")", R"("")", R"("Ultrafast")", "1", R"(["flex"])"}) {
    const ApiError e = ParseError(Endpoint::kChat, head + R"("service_tier": )" + bad + "}");
    EXPECT_EQ(e.status, 400) << bad;
    EXPECT_EQ(e.param, "service_tier") << bad;
  }
}

TEST(OpenAiResponseTest, EveryChunkAndBodyReportsTheServingTier) {
  auto tok = TinyTokenizer();
  ResponseOptions o;
  o.endpoint = Endpoint::kChat;
  o.id = "chatcmpl-5";
  o.model = "m";
  o.include_usage = true;
  ResponseBuilder stream(o, *tok);
  std::string sse;
  for (engine::GenerationEvent e : {Event(" Hello", 3), Final(engine::FinishReason::kStop)}) {
    e.service_tier = scheduler::ServiceTier::kUltrafast;
    sse += stream.Stream(e);
  }
  const std::vector<std::string> data = SseData(sse);
  ASSERT_EQ(data.size(), 5u);  // role, text, finish, usage, [DONE]
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    EXPECT_EQ(json::parse(data[i])["service_tier"], "ultrafast") << data[i];
  }
  ResponseBuilder body(o, *tok);
  for (engine::GenerationEvent e : {Event(" Hello", 3), Final(engine::FinishReason::kLength)}) {
    e.service_tier = scheduler::ServiceTier::kFlex;
    body.Add(e);
  }
  EXPECT_EQ(json::parse(body.Body())["service_tier"], "flex");
}

TEST(OpenAiResponseTest, InvalidUtf8IsReplaced) {
  EXPECT_EQ(ValidUtf8("a\xE2"), "a\xEF\xBF\xBD");
  EXPECT_EQ(ValidUtf8("\xE2\x96\x81x"), "\xE2\x96\x81x");
  EXPECT_EQ(Dump(json("\xff")), "\"\xEF\xBF\xBD\"");
}

TEST(OpenAiRequestTest, ParsesSpeculationAndPrediction) {
  const std::string head = R"({"model":"m","messages":[{"role":"user","content":"x"}],)";
  ApiRequest r;
  ASSERT_FALSE(Parse(Endpoint::kChat, head + R"("speculation":"ngram"})", &r));
  ASSERT_TRUE(r.speculation.has_value());
  EXPECT_EQ(r.speculation->mode, engine::SpecMode::kNgram);
  EXPECT_EQ(r.speculation->k, 8);
  ASSERT_FALSE(Parse(Endpoint::kChat, head + R"("speculation":{"mode":"ngram","k":4}})", &r));
  EXPECT_EQ(r.speculation->k, 4);
  ASSERT_FALSE(Parse(Endpoint::kChat, head + R"("speculation":{"mode":"off"}})", &r));
  EXPECT_EQ(r.speculation->mode, engine::SpecMode::kOff);
  ASSERT_FALSE(Parse(Endpoint::kChat, head + R"("speculation":{"k":12}})", &r));
  EXPECT_EQ(r.speculation->mode, engine::SpecMode::kNgram);
  EXPECT_EQ(r.speculation->k, 12);
  ASSERT_FALSE(Parse(Endpoint::kChat, head + R"("speculation":null})", &r));
  EXPECT_FALSE(r.speculation.has_value());
  ASSERT_FALSE(
      Parse(Endpoint::kCompletion, R"({"model":"m","prompt":"x","speculation":"off"})", &r));
  EXPECT_EQ(r.speculation->mode, engine::SpecMode::kOff);

  ASSERT_FALSE(
      Parse(Endpoint::kChat, head + R"("prediction":{"type":"content","content":"Hello there"}})",
            &r));
  EXPECT_TRUE(r.has_prediction);
  EXPECT_EQ(r.prediction, "Hello there");
  ASSERT_FALSE(Parse(Endpoint::kChat, head + R"("prediction":{"type":"content","content":[)"
                                   R"({"type":"text","text":"a"},{"type":"text","text":"b"}]}})", &r));
  EXPECT_EQ(r.prediction, "ab");
}

TEST(OpenAiRequestTest, BadSpeculationNamesTheField) {
  const std::string head = R"({"model":"m","messages":[{"role":"user","content":"x"}],)";
  const std::pair<const char*, const char*> cases[] = {
      {R"("speculation":"fast"})", "speculation"},
      {R"("speculation":3})", "speculation"},
      {R"("speculation":{"mode":"turbo"}})", "speculation.mode"},
      {R"("speculation":{"mode":"draft"}})", "speculation.mode"},
      {R"("speculation":{"mode":1}})", "speculation.mode"},
      {R"("speculation":{"k":0}})", "speculation.k"},
      {R"("speculation":{"k":17}})", "speculation.k"},
      {R"("speculation":{"k":2.5}})", "speculation.k"},
      {R"("speculation":{"mode":"ngram","depth":2}})", "speculation.depth"},
      {R"("prediction":"text"})", "prediction"},
      {R"("prediction":{"content":"x"}})", "prediction.type"},
      {R"("prediction":{"type":"image","content":"x"}})", "prediction.type"},
      {R"("prediction":{"type":"content"}})", "prediction.content"},
      {R"("prediction":{"type":"content","content":5}})", "prediction.content"},
      {R"("prediction":{"type":"content","content":[{"type":"image"}]}})",
       "prediction.content[0]"},
      {R"("prediction":{"type":"content","content":"x","extra":1}})", "prediction.extra"},
  };
  for (const auto& [tail, param] : cases) {
    ApiRequest r;
    const auto e = Parse(Endpoint::kChat, head + tail, &r);
    ASSERT_TRUE(e.has_value()) << tail;
    EXPECT_EQ(e->status, 400) << tail;
    EXPECT_EQ(e->param, param) << tail << " -> " << e->message;
  }
}

TEST(OpenAiResponseTest, UsageReportsSpeculation) {
  engine::GenerationEvent e;
  e.prompt_tokens = 10;
  e.completion_tokens = 20;
  nlohmann::json u = UsageJson(e);
  EXPECT_FALSE(u.contains("completion_tokens_details"));
  EXPECT_FALSE(u.contains("speculation"));
  e.speculation = engine::SpecMode::kNgram;
  e.drafted_tokens = 15;
  e.accepted_tokens = 11;
  u = UsageJson(e);
  EXPECT_EQ(u["completion_tokens"], 20);
  EXPECT_EQ(u["completion_tokens_details"]["accepted_prediction_tokens"], 11);
  EXPECT_EQ(u["completion_tokens_details"]["rejected_prediction_tokens"], 4);
  EXPECT_EQ(u["speculation"]["mode"], "ngram");
  EXPECT_EQ(u["speculation"]["drafted_tokens"], 15);
}

}  // namespace
}  // namespace uf::server
