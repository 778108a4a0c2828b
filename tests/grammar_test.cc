// The grammar engine (src/grammar): JSON schemas compiled to grammars accept what validates and
// reject what does not, schema errors name their keyword, and the token mask keeps a random-weight
// model's output valid JSON of the schema (which it never is without the mask).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "engine/service.h"
#include "grammar/automaton.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"
#include "service_test_util.h"
#include "shared_data.h"
#include "test_models.h"

namespace uf::grammar {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

const ojson kPerson = ojson::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
    "nick": {"type": ["string", "null"]},
    "score": {"type": "number"},
    "ok": {"type": "boolean"}
  },
  "required": ["name", "age", "ok"],
  "additionalProperties": false
})");

std::shared_ptr<const Grammar> Compile(const ojson& schema) {
  auto g = JsonSchemaGrammar(schema);
  EXPECT_TRUE(g.ok()) << schema.dump() << ": " << g.status().ToString();
  return g.ok() ? *g : nullptr;
}

bool Accepts(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  Automaton a(g);
  const StateId s = a.Walk(a.start(), text);
  return s != kDead && a.Accepting(s);
}

// The checks of kPerson, written out: what a validator would say for this schema.
void ExpectPerson(const json& v) {
  ASSERT_TRUE(v.is_object()) << v.dump();
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& k = it.key();
    EXPECT_TRUE(k == "name" || k == "age" || k == "tags" || k == "nick" || k == "score" ||
                k == "ok")
        << "unexpected property " << k;
  }
  ASSERT_TRUE(v.contains("name") && v.contains("age") && v.contains("ok")) << v.dump();
  EXPECT_TRUE(v["name"].is_string());
  EXPECT_TRUE(v["age"].is_number_integer());
  EXPECT_TRUE(v["ok"].is_boolean());
  if (v.contains("tags")) {
    ASSERT_TRUE(v["tags"].is_array());
    EXPECT_LE(v["tags"].size(), 3u);
    for (const json& t : v["tags"]) EXPECT_TRUE(t == "a" || t == "b") << t.dump();
  }
  if (v.contains("nick")) {
    EXPECT_TRUE(v["nick"].is_string() || v["nick"].is_null());
  }
  if (v.contains("score")) {
    EXPECT_TRUE(v["score"].is_number());
  }
}

TEST(JsonSchemaGrammarTest, AcceptsValidAndRejectsInvalidDocuments) {
  auto g = Compile(kPerson);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, R"({"name":"x","age":3,"ok":true})"));
  EXPECT_TRUE(Accepts(g,
                      "{\"name\": \"\xC3\xA9\\n\\u00e9\", \"age\": -10, \"tags\": [\"a\",\"b\"],"
                      " \"nick\": null, \"score\": 1.5e-3, \"ok\": false}"));
  EXPECT_TRUE(Accepts(g, "\n{\n  \"name\": \"\",\n  \"age\": 0,\n  \"ok\": true\n}"));
  EXPECT_FALSE(Accepts(g, R"({"name":"x","ok":true})"));                // age missing
  EXPECT_FALSE(Accepts(g, R"({"name":"x","age":3.5,"ok":true})"));      // not an integer
  EXPECT_FALSE(Accepts(g, R"({"name":"x","age":3,"ok":true,"z":1})"));  // additional
  EXPECT_FALSE(Accepts(g, R"({"name":"x","age":3,"tags":["c"],"ok":true})"));
  EXPECT_FALSE(Accepts(g, R"({"name":"x","age":3,"tags":["a","a","a","a"],"ok":true})"));
  EXPECT_FALSE(Accepts(g, R"({"name":"x","age":03,"ok":true})"));             // leading zero
  EXPECT_FALSE(Accepts(g, "{\"name\":\"\\ud800\",\"age\":3,\"ok\":true}"));   // lone surrogate
  EXPECT_FALSE(Accepts(g, "{\"name\":\"\xC0\xAF\",\"age\":3,\"ok\":true}"));  // overlong UTF-8
  EXPECT_FALSE(Accepts(g, "{\"name\":\"a\nb\",\"age\":3,\"ok\":true}"));      // raw control char
}

TEST(JsonSchemaGrammarTest, AnyOfRefsAndJsonMode) {
  auto list = Compile(ojson::parse(R"({
    "$defs": {"node": {"type": "object",
      "properties": {"v": {"type": "integer"},
                     "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
      "required": ["v", "next"]}},
    "$ref": "#/$defs/node"})"));
  ASSERT_NE(list, nullptr);
  EXPECT_TRUE(Accepts(list, R"({"v":1,"next":{"v":2,"next":null}})"));
  EXPECT_FALSE(Accepts(list, R"({"v":1,"next":{"v":2}})"));
  auto json_mode = JsonObjectGrammar();
  EXPECT_TRUE(Accepts(json_mode, R"({"a":[1,2,{"b":null}],"c":"d","e":{}})"));
  EXPECT_TRUE(Accepts(json_mode, "{}"));
  EXPECT_FALSE(Accepts(json_mode, "[1]"));
  EXPECT_FALSE(Accepts(json_mode, R"({"a":1,})"));
  EXPECT_FALSE(Accepts(json_mode, R"({"a":tru})"));
  auto constant = Compile(ojson::parse(R"({"const": {"k": [1, "x"]}})"));
  EXPECT_TRUE(Accepts(constant, R"({"k":[1,"x"]})"));
  EXPECT_FALSE(Accepts(constant, R"({"k":[1,"y"]})"));
}

TEST(JsonSchemaGrammarTest, IntegerBounds) {
  // zod's .int(): +-(2^53 - 1), which the 15-digit limit already keeps.
  auto safe = Compile(
      ojson::parse(R"({"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991})"));
  EXPECT_TRUE(Accepts(safe, "-999999999999999"));
  EXPECT_FALSE(Accepts(safe, "9999999999999999"));
  auto natural = Compile(ojson::parse(R"({"type":"integer","minimum":0})"));
  EXPECT_TRUE(Accepts(natural, "0"));
  EXPECT_FALSE(Accepts(natural, "-1"));
  auto positive = Compile(ojson::parse(R"({"type":"integer","exclusiveMinimum":0})"));
  EXPECT_FALSE(Accepts(positive, "0"));
  EXPECT_TRUE(Accepts(positive, "7"));
  auto range = Compile(ojson::parse(R"({"type":"integer","minimum":-3,"exclusiveMaximum":12})"));
  EXPECT_TRUE(Accepts(range, "-3"));
  EXPECT_TRUE(Accepts(range, "11"));
  EXPECT_FALSE(Accepts(range, "12"));
  EXPECT_FALSE(Accepts(range, "-4"));
}

TEST(JsonSchemaGrammarTest, ErrorsNameTheKeyword) {
  struct Case {
    const char* schema;
    const char* path;
  };
  const Case cases[] = {
      {R"({"type":"object","properties":{"age":{"type":"number","minimum":0}}})",
       "properties.age.minimum"},
      {R"({"type":"integer","minimum":-5,"maximum":5000})", "maximum"},
      {R"({"type":"integer","minimum":5,"maximum":4})", "maximum"},
      {R"({"type":"strnig"})", "type"},
      {R"({"type":"object","properties":{"a":{"type":"string"}},"required":["b"]})", "required"},
      {R"({"$ref":"#/$defs/missing"})", "$ref"},
      {R"({"type":"array","items":{"type":"string","pattern":"^a"}})", "items.pattern"},
      {R"({"anyOf":[]})", "anyOf"},
      {R"({"type":"object","properties":{"x":false}})", "properties.x"},
  };
  for (const Case& c : cases) {
    std::string path = "unset";
    auto g = JsonSchemaGrammar(ojson::parse(c.schema), &path);
    ASSERT_FALSE(g.ok()) << c.schema;
    EXPECT_EQ(path, c.path) << c.schema << ": " << g.status().message();
    EXPECT_TRUE(g.status().message().starts_with(c.path)) << g.status().message();
  }
}

// Random bytes among those the automaton allows, forced to close once the budget is tight: the
// budget logic alone must bring every walk to a parsing document.
TEST(JsonSchemaGrammarTest, RandomWalksWithinBudgetEndValid) {
  auto g = Compile(kPerson);
  ASSERT_NE(g, nullptr);
  Automaton a(g);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t budget = 30 + trial;
    StateId s = a.start();
    std::string text;
    ASSERT_LE(a.MinBytesToAccept(s), budget);
    for (int64_t left = budget; !a.Complete(s); --left) {
      if (a.Accepting(s) && rng() % 8 == 0) break;
      std::vector<std::pair<uint8_t, StateId>> options;
      for (int b = 0; b < 256; ++b) {
        const StateId t = a.Next(s, static_cast<uint8_t>(b));
        if (t != kDead && a.MinBytesToAccept(t) <= left - 1) options.emplace_back(b, t);
      }
      ASSERT_FALSE(options.empty()) << text;
      const auto& [b, t] = options[rng() % options.size()];
      text.push_back(static_cast<char>(b));
      s = t;
    }
    ASSERT_TRUE(a.Accepting(s)) << text;
    json v;
    ASSERT_NO_THROW(v = json::parse(text)) << text;
    ExpectPerson(v);
  }
}

TEST(TokenMaskTest, MaskAllowsExactlyTheTokensTheGrammarAccepts) {
  UF_REQUIRE_SHARED();
  const Tokenizer& tok = *testing_models::TinyQwen2().tokenizer;
  const int32_t n_vocab = static_cast<int32_t>(testing_models::TinyQwen2().model->config().n_vocab);
  auto trie = TokenTrie::Build(tok, n_vocab);
  TokenConstraint c(Compile(kPerson), trie);
  std::vector<uint64_t> mask;
  StateId s = c.start();
  for (std::string_view prefix : {"", "{\"na", "{\"name\":\"abc", "{\"name\":\"x\",\"age\":12"}) {
    const StateId state = c.automaton().Walk(s, prefix);
    ASSERT_NE(state, kDead) << prefix;
    c.Mask(state, -1, &mask);
    int64_t allowed = 0;
    for (int32_t id = 0; id < n_vocab; ++id) {
      const bool bit = (mask[id >> 6] >> (id & 63)) & 1;
      allowed += bit;
      // Brute force: the token's bytes, one by one.
      const std::string& piece = trie->piece(id);
      const bool accepted = !piece.empty() && c.automaton().Walk(state, piece) != kDead;
      ASSERT_EQ(bit, accepted) << "prefix " << prefix << " token " << id << " '" << piece << "'";
    }
    EXPECT_GT(allowed, 0) << prefix;
  }
  // Same state again: served from the cache, no new walk.
  const int64_t walks = c.stats().walks;
  c.Mask(s, -1, &mask);
  EXPECT_EQ(c.stats().walks, walks);
}

engine::GenerationRequest Request(const Tokenizer& tok, const std::string& prompt, uint64_t seed,
                                  std::shared_ptr<const Grammar> g) {
  engine::GenerationRequest r;
  r.prompt = tok.Encode(prompt, true, false);
  r.max_tokens = 160;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = seed;
  r.grammar = std::move(g);
  return r;
}

// Random-weight models produce gibberish: only the mask can make their output valid.
void ExpectConstrainedOutputsValid(const testing_models::Loaded& m) {
  engine::ServiceOptions o;
  o.n_threads = 2;
  o.ctx = 512;
  auto service = engine::Service::Create(*m.model, *m.tokenizer, o);
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  auto schema = Compile(kPerson);
  auto object = JsonObjectGrammar();
  std::mt19937 rng(11);
  int unconstrained_valid = 0;
  for (int i = 0; i < 6; ++i) {
    std::string prompt = "Person " + std::to_string(rng() % 1000) + ":";
    const bool use_schema = i % 2 == 0;
    auto ch =
        (*service)->Submit(Request(*m.tokenizer, prompt, rng(), use_schema ? schema : object));
    ASSERT_TRUE(ch.ok()) << ch.status().ToString();
    engine::testing_service::Output out = engine::testing_service::Collect(**ch);
    EXPECT_EQ(out.finish, engine::FinishReason::kStop) << out.text;
    json v;
    ASSERT_NO_THROW(v = json::parse(out.text)) << out.text;
    if (use_schema) {
      ExpectPerson(v);
    } else {
      EXPECT_TRUE(v.is_object()) << out.text;
    }
    auto free = (*service)->Submit(Request(*m.tokenizer, prompt, rng(), nullptr));
    ASSERT_TRUE(free.ok());
    const std::string text = engine::testing_service::Collect(**free).text;
    unconstrained_valid += json::accept(text) ? 1 : 0;
  }
  EXPECT_EQ(unconstrained_valid, 0);
}

TEST(ConstrainedDecodingTest, ByteLevelBpeModelOutputsValidate) {
  UF_REQUIRE_SHARED();
  ExpectConstrainedOutputsValid(testing_models::TinyQwen2());
}

TEST(ConstrainedDecodingTest, SentencePieceModelOutputsValidate) {
  UF_REQUIRE_SHARED();
  static testing_models::Loaded* llama =
      testing_models::LoadOrDie("../shared/models/tiny-llama-256-q8_0.gguf");
  ExpectConstrainedOutputsValid(*llama);
}

// A budget too small for free text still ends in a closed document.
TEST(ConstrainedDecodingTest, ClosesTheDocumentWithinMaxTokens) {
  UF_REQUIRE_SHARED();
  const auto& m = testing_models::TinyQwen2();
  engine::ServiceOptions o;
  o.n_threads = 2;
  o.ctx = 256;
  auto service = engine::Service::Create(*m.model, *m.tokenizer, o);
  ASSERT_TRUE(service.ok());
  for (int64_t max_tokens : {30, 40, 60}) {
    auto r = Request(*m.tokenizer, "Fill in:", 1000 + max_tokens, Compile(kPerson));
    r.max_tokens = max_tokens;
    auto ch = (*service)->Submit(std::move(r));
    ASSERT_TRUE(ch.ok());
    engine::testing_service::Output out = engine::testing_service::Collect(**ch);
    EXPECT_LE(out.completion_tokens, max_tokens);
    json v;
    ASSERT_NO_THROW(v = json::parse(out.text)) << out.text;
    ExpectPerson(v);
  }
}

}  // namespace
}  // namespace uf::grammar
