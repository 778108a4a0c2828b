// The HTTP server end to end in-process: a real engine on a tiny model behind HttpServer on a
// free loopback port, driven with cpp-httplib's client and raw sockets (for disconnects).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <thread>

#include "server/http_server.h"
#include "server_harness.h"
#include "shared_data.h"
#include "test_models.h"

namespace uf::server {
namespace {

using json = nlohmann::json;

using Harness = ServerHarness;

std::string Chat(const std::string& extra = "") {
  return R"({"model":"tiny","messages":[{"role":"user","content":"Hello there"}],)"
         R"("temperature":0,"max_tokens":12,"ignore_eos":true)" +
         extra + "}";
}

std::vector<json> SseChunks(const std::string& body, bool* done) {
  std::vector<json> out;
  *done = false;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    std::string ev = body.substr(pos, end - pos);
    pos = end + 2;
    if (ev.rfind(":", 0) == 0) continue;  // comment (keep-alive)
    EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    std::string data = ev.substr(6);
    if (data == "[DONE]") {
      *done = true;
      continue;
    }
    out.push_back(json::parse(data));
  }
  return out;
}

// The playground: GET / and /assets/NAME from the files built into the binary, without a key
// even when /v1/* needs one; /health carries what its status panel and cost figures read.
TEST(HttpServerTest, PlaygroundPageAndHealthFigures) {
  UF_REQUIRE_SHARED();
  Harness h({}, KeyStore::WithKey("sekret"));
  auto index = h.Get("/");
  ASSERT_TRUE(index);
  EXPECT_EQ(index->status, 200);
  EXPECT_EQ(index->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(index->body.find("<title>ultrafast playground</title>"), std::string::npos);
  EXPECT_NE(index->body.find("/assets/app.js"), std::string::npos);
  for (const auto& [name, type] :
       std::map<std::string, std::string>{{"app.js", "text/javascript; charset=utf-8"},
                                          {"api.js", "text/javascript; charset=utf-8"},
                                          {"meter.js", "text/javascript; charset=utf-8"},
                                          {"style.css", "text/css; charset=utf-8"},
                                          {"favicon.svg", "image/svg+xml"}}) {
    auto r = h.Get("/assets/" + name);
    ASSERT_TRUE(r) << name;
    EXPECT_EQ(r->status, 200) << name;
    EXPECT_EQ(r->get_header_value("Content-Type"), type) << name;
    EXPECT_GT(r->body.size(), 100u) << name;
  }
  EXPECT_EQ(h.Get("/assets/nope.js")->status, 404);
  EXPECT_EQ(h.Get("/assets/../CMakeLists.txt")->status, 404);
  EXPECT_EQ(h.Get("/v1/models")->status, 401);  // the API itself still needs the key

  auto health = h.Get("/health");
  ASSERT_TRUE(health);
  const json body = json::parse(health->body);
  EXPECT_EQ(body["threads"], 2);
  EXPECT_EQ(body["ctx"], 256);
  EXPECT_EQ(body["metered"], false);
  // The built-in prices (metering.h): $0.40 per million output tokens at default, 6x ultrafast,
  // 0.5x flex.
  EXPECT_DOUBLE_EQ(body["prices"]["default"]["output"].get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(body["prices"]["ultrafast"]["output"].get<double>(), 2.4);
  EXPECT_DOUBLE_EQ(body["prices"]["flex"]["output"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(body["prices"]["default"]["input"].get<double>(), 0.1);
}

TEST(HttpServerTest, HealthModelsMetrics) {
  UF_REQUIRE_SHARED();
  Harness h;
  auto health = h.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["status"], "ok");
  auto models = h.Get("/v1/models");
  ASSERT_TRUE(models);
  const json m = json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  EXPECT_EQ(h.Get("/v1/models/tiny")->status, 200);
  EXPECT_EQ(h.Get("/v1/models/other")->status, 404);
  auto metrics = h.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("ultrafast_kv_blocks_free"), std::string::npos);
  auto missing = h.Get("/v2/nothing");
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(json::parse(missing->body)["error"]["type"], "invalid_request_error");
}

TEST(HttpServerTest, StreamMatchesNonStream) {
  UF_REQUIRE_SHARED();
  Harness h;
  auto plain = h.Post("/v1/chat/completions", Chat());
  ASSERT_TRUE(plain);
  ASSERT_EQ(plain->status, 200) << plain->body;
  const json body = json::parse(plain->body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["model"], "tiny");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 12);
  const std::string text = body["choices"][0]["message"]["content"];

  auto streamed = h.Post("/v1/chat/completions",
                         Chat(R"(,"stream":true,"stream_options":{"include_usage":true})"));
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200);
  EXPECT_EQ(streamed->get_header_value("Content-Type"), "text/event-stream");
  bool done = false;
  const std::vector<json> chunks = SseChunks(streamed->body, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(chunks.size(), 3u);
  std::string joined;
  std::string finish;
  for (const json& c : chunks) {
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    if (c["choices"].empty()) continue;
    const json& d = c["choices"][0]["delta"];
    if (d.contains("content")) joined += d["content"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(joined, text);
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], 12);
  EXPECT_EQ(h.Settled().kv_blocks_used, 0);
}

TEST(HttpServerTest, CompletionsStopAndLogprobs) {
  UF_REQUIRE_SHARED();
  Harness h;
  const std::string base = R"({"model":"tiny","prompt":"The meaning of life is",)"
                           R"("temperature":0,"max_tokens":16,"ignore_eos":true)";
  auto first = h.Post("/v1/completions", base + "}");
  ASSERT_EQ(first->status, 200) << first->body;
  const std::string text = json::parse(first->body)["choices"][0]["text"];
  ASSERT_GE(text.size(), 8u);
  // Stop at a piece of the known output: the text must end right before its first occurrence.
  const std::string stop = text.substr(text.size() / 2, 3);
  auto stopped =
      h.Post("/v1/completions", base + R"(,"logprobs":2,"stop":)" + json(stop).dump() + "}");
  ASSERT_EQ(stopped->status, 200) << stopped->body;
  const json c = json::parse(stopped->body)["choices"][0];
  EXPECT_EQ(c["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(c["finish_reason"], "stop");
  ASSERT_TRUE(c["logprobs"].is_object());
  EXPECT_EQ(c["logprobs"]["tokens"].size(), c["logprobs"]["token_logprobs"].size());
  EXPECT_EQ(c["logprobs"]["top_logprobs"][0].size(), 2u);
}

TEST(HttpServerTest, BadRequests) {
  UF_REQUIRE_SHARED();
  ServerOptions ho;
  ho.max_body_bytes = 4096;
  ho.max_tokens_limit = 100;
  Harness h({}, nullptr, ho);
  struct Case {
    std::string path, body;
    int status;
    std::string code;
  };
  const std::vector<Case> cases = {
      {"/v1/chat/completions", "{not json", 400, ""},
      {"/v1/chat/completions", Chat(R"(,"bogus":1)"), 400, "unknown_parameter"},
      {"/v1/chat/completions", Chat(R"(,"temperature":9)"), 400, "invalid_value"},
      {"/v1/chat/completions", R"({"model":"gpt-4","messages":[{"role":"user","content":"x"}]})",
       404, "model_not_found"},
      {"/v1/chat/completions",
       R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"max_tokens":101})", 400,
       "invalid_value"},
      {"/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":100})", 200, ""},
      {"/v1/completions", R"({"model":"tiny","prompt":"x x x x x x x x x x","max_tokens":250})",
       400, "invalid_value"},
      {"/v1/chat/completions", std::string(5000, ' '), 413, "request_too_large"},
  };
  for (const Case& c : cases) {
    auto r = h.Post(c.path, c.body);
    ASSERT_TRUE(r) << c.body;
    EXPECT_EQ(r->status, c.status) << c.body.substr(0, 100) << " -> " << r->body;
    if (c.status == 200) continue;
    const json e = json::parse(r->body);
    ASSERT_TRUE(e.contains("error")) << r->body;
    EXPECT_TRUE(e["error"]["message"].is_string());
    if (!c.code.empty()) {
      EXPECT_EQ(e["error"]["code"], c.code) << r->body;
    }
  }
  // Context overflow: ctx is 256 here.
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += " word";
  auto r = h.Post("/v1/completions", json{{"model", "tiny"}, {"prompt", long_prompt}}.dump());
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "context_length_exceeded");
  EXPECT_NE(json::parse(r->body)["error"]["message"].get<std::string>().find("256"),
            std::string::npos);
}

TEST(HttpServerTest, ApiKeys) {
  UF_REQUIRE_SHARED();
  Harness h({}, KeyStore::WithKey("sk-test"));
  auto none = h.Post("/v1/chat/completions", Chat());
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(json::parse(none->body)["error"]["code"], "invalid_api_key");
  auto wrong = h.Post("/v1/chat/completions", Chat(), {{"Authorization", "Bearer sk-nope"}});
  EXPECT_EQ(wrong->status, 401);
  EXPECT_EQ(h.Get("/v1/models")->status, 401);
  auto right = h.Post("/v1/chat/completions", Chat(), {{"Authorization", "Bearer sk-test"}});
  EXPECT_EQ(right->status, 200);
  EXPECT_EQ(h.Get("/health")->status, 200);
}

// Opens a connection, sends a request, reads the first bytes and closes (a client going away).
void PostAndHangUp(int port, const std::string& body, size_t read_bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string req =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  std::string got;
  char buf[1024];
  while (got.size() < read_bytes) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  close(fd);
}

TEST(HttpServerTest, DisconnectCancelsAndFreesKv) {
  UF_REQUIRE_SHARED();
  engine::ServiceOptions so;
  so.ctx = 4000;
  so.step_hook = [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };
  Harness h(so);
  const std::string req = R"({"model":"tiny","messages":[{"role":"user","content":"x"}],)"
                          R"("max_tokens":3900,"ignore_eos":true)";
  // Streamed: hang up after the first chunks.
  PostAndHangUp(h.port(), req + R"(,"stream":true})", 400);
  engine::EngineStats st = h.Settled();
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
  // Not streamed: hang up while it generates (nothing comes back before it ends).
  std::thread t([&] { PostAndHangUp(h.port(), req + "}", 0); });
  for (int i = 0; i < 2000 && h.service().Stats().running == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  t.join();
  st = h.Settled();
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
}

TEST(HttpServerTest, FullQueueGets429WithRetryAfter) {
  UF_REQUIRE_SHARED();
  engine::ServiceOptions so;
  so.max_seqs = 1;
  so.max_queue = 0;
  so.ctx = 4000;
  so.step_hook = [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };
  Harness h(so);
  std::thread busy([&] {
    PostAndHangUp(h.port(),
                  R"({"model":"tiny","messages":[{"role":"user","content":"x"}],)"
                  R"("max_tokens":3000,"ignore_eos":true,"stream":true})",
                  40000);
  });
  for (int i = 0; i < 60000 && h.service().Stats().running == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  auto r = h.Post("/v1/chat/completions", Chat());
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "queue_full");
  busy.join();
}

}  // namespace
}  // namespace uf::server

namespace uf::server {
namespace {

// Per-choice texts of a stream, reassembled by index; *usage = the usage chunk's.
std::vector<std::string> StreamTexts(const std::string& body, int n, json* usage,
                                     int* done_events) {
  std::vector<std::string> texts(n);
  *done_events = 0;
  for (size_t pos = 0; (pos = body.find("data: [DONE]", pos)) != std::string::npos; ++pos) {
    ++*done_events;
  }
  bool done = false;
  for (const json& c : SseChunks(body, &done)) {
    if (c.contains("usage") && c["usage"].is_object()) *usage = c["usage"];
    for (const json& choice : c["choices"]) {
      const int i = choice["index"];
      EXPECT_TRUE(i >= 0 && i < n) << c.dump();
      if (choice["delta"].contains("content")) texts[i] += choice["delta"]["content"];
    }
  }
  return texts;
}

TEST(HttpServerTest, NChoicesAreSeededSequencesWithMergedUsage) {
  UF_REQUIRE_SHARED();
  Harness h;
  // A prompt of several KV blocks no earlier request computed.
  std::string words;
  for (int i = 0; i < 40; ++i) words += " word" + std::to_string(i);
  const std::string messages = R"("messages":[{"role":"user","content":")" + words + R"("}])";
  const std::string req = R"({"model":"tiny",)" + messages +
                          R"(,"temperature":1,"seed":5,"max_tokens":8,"ignore_eos":true,"n":3)";
  const int64_t hits_before = h.service().Stats().prefix_hit_tokens;
  auto a = h.Post("/v1/chat/completions", req + "}");
  ASSERT_TRUE(a);
  ASSERT_EQ(a->status, 200) << a->body;
  const json body = json::parse(a->body);
  ASSERT_EQ(body["choices"].size(), 3u);
  std::vector<std::string> texts;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(body["choices"][i]["index"], i);
    EXPECT_EQ(body["choices"][i]["finish_reason"], "length");
    texts.push_back(body["choices"][i]["message"]["content"]);
  }
  EXPECT_FALSE(texts[0] == texts[1] && texts[1] == texts[2]) << "choices should differ";
  EXPECT_EQ(body["usage"]["completion_tokens"], 24);
  // Choices 1 and 2 mapped the prompt's full blocks computed by choice 0.
  const int64_t prompt_tokens = body["usage"]["prompt_tokens"];
  const int64_t block = h.service().options().block_size;
  ASSERT_GE(prompt_tokens, 3 * block);
  EXPECT_GE(h.service().Stats().prefix_hit_tokens - hits_before,
            2 * ((prompt_tokens - 1) / block) * block);
  // The prompt counts once.
  auto one =
      h.Post("/v1/chat/completions", R"({"model":"tiny",)" + messages + R"(,"max_tokens":2})");
  ASSERT_TRUE(one);
  EXPECT_EQ(json::parse(one->body)["usage"]["prompt_tokens"], prompt_tokens);
  // The same seed gives the same choices, streamed or not.
  auto b = h.Post("/v1/chat/completions",
                  req + R"(,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_TRUE(b);
  json usage;
  int dones = 0;
  EXPECT_EQ(StreamTexts(b->body, 3, &usage, &dones), texts);
  EXPECT_EQ(dones, 1);
  EXPECT_EQ(usage["completion_tokens"], 24);
  EXPECT_EQ(h.Settled().kv_blocks_used, 0);
}

TEST(HttpServerTest, JsonSchemaResponseFormatParsesAndValidates) {
  UF_REQUIRE_SHARED();
  Harness h;
  const json schema = json::parse(R"({"type":"object",
      "properties":{"city":{"type":"string","maxLength":12},"n":{"type":"integer"},
                    "kind":{"enum":["a","b"]}},
      "required":["city","n","kind"],"additionalProperties":false})");
  for (bool stream : {false, true}) {
    json req = {{"model", "tiny"},
                {"messages", {{{"role", "user"}, {"content", "Give me JSON"}}}},
                {"max_tokens", 64},
                {"seed", 3},
                {"stream", stream},
                {"logprobs", true},
                {"top_logprobs", 2},
                {"response_format",
                 {{"type", "json_schema"},
                  {"json_schema", {{"name", "place"}, {"strict", true}, {"schema", schema}}}}}};
    auto r = h.Post("/v1/chat/completions", req.dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    std::string content;
    if (stream) {
      json usage;
      int dones = 0;
      content = StreamTexts(r->body, 1, &usage, &dones)[0];
    } else {
      const json body = json::parse(r->body);
      content = body["choices"][0]["message"]["content"];
      EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
      EXPECT_FALSE(body["choices"][0]["logprobs"]["content"].empty());
    }
    json v;
    ASSERT_NO_THROW(v = json::parse(content)) << content;
    ASSERT_TRUE(v.is_object()) << content;
    EXPECT_EQ(v.size(), 3u) << content;
    EXPECT_TRUE(v["city"].is_string() && v["city"].get<std::string>().size() <= 12 * 4);
    EXPECT_TRUE(v["n"].is_number_integer()) << content;
    EXPECT_TRUE(v["kind"] == "a" || v["kind"] == "b") << content;
  }
  auto bad = h.Post("/v1/chat/completions",
                    R"({"model":"tiny","messages":[{"role":"user","content":"x"}],)"
                    R"("response_format":{"type":"json_schema","json_schema":{"name":"x",)"
                    R"("schema":{"type":"object","properties":{"a":{"type":"string",)"
                    R"("pattern":"^x"}}}}}})");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(json::parse(bad->body)["error"]["param"],
            "response_format.json_schema.schema.properties.a.pattern");
}

}  // namespace
}  // namespace uf::server

namespace uf::server {
namespace {

const char* kWeatherTool = R"([{"type":"function","function":{"name":"get_weather",
  "parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":10},
  "unit":{"enum":["c","f"]}},"required":["city","unit"],"additionalProperties":false}}}])";

void ExpectWeatherArgs(const json& call) {
  EXPECT_EQ(call["type"], "function");
  EXPECT_TRUE(call["id"].get<std::string>().starts_with("call_"));
  EXPECT_EQ(call["function"]["name"], "get_weather");
  json args;
  ASSERT_NO_THROW(args = json::parse(call["function"]["arguments"].get<std::string>()))
      << call.dump();
  EXPECT_EQ(args.size(), 2u) << args.dump();
  EXPECT_TRUE(args["city"].is_string()) << args.dump();
  EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f") << args.dump();
}

// A random-weight model never writes a call by itself: "required" and a named function must
// make it, streamed or not, and a tool result in the history must be accepted.
TEST(HttpServerTest, ToolChoiceRequiredMakesValidCalls) {
  UF_REQUIRE_SHARED();
  Harness h;
  for (const char* choice :
       {R"("required")", R"({"type":"function","function":{"name":"get_weather"}})"}) {
    const std::string req = R"({"model":"tiny","messages":[{"role":"user","content":"Weather?"}],)"
                            R"("max_tokens":80,"seed":9,"tools":)" +
                            std::string(kWeatherTool) + R"(,"tool_choice":)" + choice;
    auto r = h.Post("/v1/chat/completions", req + "}");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json body = json::parse(r->body);
    EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls") << r->body;
    const json& calls = body["choices"][0]["message"]["tool_calls"];
    ASSERT_GE(calls.size(), 1u) << r->body;
    for (const json& c : calls) ExpectWeatherArgs(c);

    auto s = h.Post("/v1/chat/completions", req + R"(,"stream":true})");
    ASSERT_TRUE(s);
    bool done = false;
    std::map<int, json> streamed;  // index -> reassembled call
    std::string finish;
    for (const json& c : SseChunks(s->body, &done)) {
      for (const json& ch : c["choices"]) {
        if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
        if (!ch["delta"].contains("tool_calls")) continue;
        for (const json& d : ch["delta"]["tool_calls"]) {
          json& call = streamed[d["index"].get<int>()];
          if (d.contains("id")) call["id"] = d["id"];
          if (d.contains("type")) call["type"] = d["type"];
          if (d["function"].contains("name")) call["function"]["name"] = d["function"]["name"];
          call["function"]["arguments"] = call["function"].value("arguments", "") +
                                          d["function"]["arguments"].get<std::string>();
        }
      }
    }
    EXPECT_TRUE(done);
    EXPECT_EQ(finish, "tool_calls");
    ASSERT_FALSE(streamed.empty()) << s->body;
    for (const auto& [i, call] : streamed) ExpectWeatherArgs(call);

    // The round trip: the call and its result go back in the history.
    json follow = json::parse(req + "}");
    follow["tool_choice"] = "auto";
    follow["messages"].push_back(body["choices"][0]["message"]);
    follow["messages"].push_back(
        {{"role", "tool"}, {"tool_call_id", calls[0]["id"]}, {"content", "{\"temp\": 21}"}});
    auto f = h.Post("/v1/chat/completions", follow.dump());
    ASSERT_TRUE(f);
    EXPECT_EQ(f->status, 200) << f->body;
  }
  EXPECT_EQ(h.Settled().kv_blocks_used, 0);
}

// A second server on a port already served is refused with a clear error. httplib's default
// socket options (SO_REUSEPORT) let it bind and silently take a share of the first server's
// connections instead.
TEST(HttpServerTest, SecondServerOnTheSamePortIsRefused) {
  UF_REQUIRE_SHARED();
  Harness h;
  ServerOptions ho;
  ho.host = "127.0.0.1";
  ho.port = h.port();
  Metrics metrics;
  KeyStore keys;
  HttpServer second(ho, &h.service(), Harness::PlainRender, &keys, &metrics);
  const Status st = second.Bind();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(std::to_string(h.port()) + " (in use?)"), std::string::npos)
      << st.ToString();
  EXPECT_EQ(h.Get("/health")->status, 200);  // the first one still serves
}

}  // namespace
}  // namespace uf::server
