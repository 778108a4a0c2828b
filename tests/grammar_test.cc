// The grammar engine (src/grammar): JSON schemas compiled to grammars accept what validates and
// reject what does not, schema errors name their keyword, and the token mask keeps a random-weight
// model's output valid JSON of the schema (which it never is without the mask).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
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
  // Whitespace: a space or a newline and an indentation, where JSON writers put it.
  EXPECT_TRUE(Accepts(g, "{\n\t\t\"name\": \"\",\n\t\t\"age\": 0, \"ok\": true\n}"));
  EXPECT_TRUE(Accepts(g, "{\"name\":\"\",\"age\":0,\"tags\":[\n   \"a\"\n ],\"ok\":true}"));
  EXPECT_TRUE(Accepts(g, "{\"name\":\"\",\"age\":0,\n" + std::string(16, ' ') + "\"ok\":true}"));
  EXPECT_FALSE(Accepts(g, "{\"name\":\"\",\"age\":0,\n" + std::string(17, ' ') + "\"ok\":true}"));
  EXPECT_FALSE(Accepts(g, R"({"name":"",  "age":0,"ok":true})"));         // two spaces
  EXPECT_FALSE(Accepts(g, R"({"name" :"","age":0,"ok":true})"));          // before a colon
  EXPECT_FALSE(Accepts(g, R"({"name":"" ,"age":0,"ok":true})"));          // before a comma
  EXPECT_FALSE(Accepts(g, "{\"name\":\"\",\n\n\"age\":0,\"ok\":true}"));  // two newlines
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

// A validator for the keywords the schemas below use, written from the JSON Schema spec rather
// than from the compiler, so that it can disagree with it.
bool Validates(const ojson& schema, const json& v, std::string* why) {
  auto fail = [&](const std::string& m) {
    *why = m + " at " + v.dump();
    return false;
  };
  if (schema.contains("anyOf")) {
    for (const ojson& s : schema["anyOf"]) {
      if (Validates(s, v, why)) return true;
    }
    return fail("no anyOf branch");
  }
  if (schema.contains("enum")) {
    for (const ojson& e : schema["enum"]) {
      if (json::parse(e.dump()) == v) return true;
    }
    return fail("not in enum");
  }
  if (schema.contains("const")) return json::parse(schema["const"].dump()) == v || fail("const");
  if (!schema.contains("type")) return true;
  std::vector<std::string> types;
  if (schema["type"].is_string()) {
    types.push_back(schema["type"]);
  } else {
    for (const ojson& t : schema["type"]) types.push_back(t);
  }
  for (const std::string& t : types) {
    if (t == "null" && v.is_null()) return true;
    if (t == "boolean" && v.is_boolean()) return true;
    if (t == "number" && v.is_number()) return true;
    if (t == "integer" && v.is_number_integer()) {
      const int64_t x = v.get<int64_t>();
      if (schema.contains("minimum") && x < schema["minimum"].get<int64_t>()) return fail("min");
      if (schema.contains("maximum") && x > schema["maximum"].get<int64_t>()) return fail("max");
      return true;
    }
    if (t == "string" && v.is_string()) {
      int64_t chars = 0;  // code points
      for (unsigned char c : v.get<std::string>()) chars += (c & 0xC0) != 0x80;
      if (chars < schema.value("minLength", int64_t{0})) return fail("minLength");
      if (chars > schema.value("maxLength", INT64_MAX)) return fail("maxLength");
      return true;
    }
    if (t == "array" && v.is_array()) {
      const int64_t n = static_cast<int64_t>(v.size());
      if (n < schema.value("minItems", int64_t{0})) return fail("minItems");
      if (n > schema.value("maxItems", INT64_MAX)) return fail("maxItems");
      for (const json& item : v) {
        if (schema.contains("items") && !Validates(schema["items"], item, why)) return false;
      }
      return true;
    }
    if (t == "object" && v.is_object()) {
      const ojson props = schema.value("properties", ojson::object());
      for (const ojson& r : schema.value("required", ojson::array())) {
        if (!v.contains(r.get<std::string>())) return fail("missing " + r.get<std::string>());
      }
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!props.contains(it.key())) {
          if (schema.value("additionalProperties", ojson(true)) == ojson(false)) {
            return fail("additional " + it.key());
          }
          continue;
        }
        if (!Validates(props[it.key()], it.value(), why)) return false;
      }
      return true;
    }
  }
  return fail("type");
}

// Schemas with short completions of many shapes. The first is the issue's: three required
// strings, whose shortest reply is ~3x longer in bytes than in tokens.
const char* const kBudgetSchemas[] = {
    R"({"type":"object","properties":{"city":{"type":"string"},"country":{"type":"string"},
        "summary":{"type":"string"}},"required":["city","country","summary"]})",
    R"({"type":"object","additionalProperties":false,"properties":{
        "name":{"type":"string"},"email":{"type":"string"},"age":{"type":"integer","minimum":0},
        "height":{"type":"number"},"active":{"type":"boolean"},
        "role":{"enum":["admin","user","guest"]},"tags":{"type":"array","items":{"type":"string"}},
        "address":{"type":"object","properties":{"street":{"type":"string"},
          "zip":{"type":"string","minLength":5,"maxLength":5}},"required":["street","zip"]},
        "nickname":{"type":["string","null"]},"score":{"type":"integer","minimum":1,"maximum":10},
        "notes":{"type":"array","items":{"type":"string","maxLength":8},"minItems":2,
          "maxItems":4}},
        "required":["name","email","age","height","active","role","tags","address","nickname",
          "score","notes"]})",
    R"({"type":"array","items":{"anyOf":[{"type":"integer","minimum":-5,"maximum":500},
        {"type":"string","minLength":3,"maxLength":6},{"type":"null"}]},"minItems":3})",
    R"({"type":"object","properties":{"v":{"type":"object","properties":{"w":{"type":"object",
        "properties":{"x":{"type":"array","items":{"type":"boolean"},"minItems":1}},
        "required":["x"]}},"required":["w"]}},"required":["v"]})",
};

struct Walked {
  std::string text;
  int64_t tokens = 0;
  bool ended = false;  // complete, or the end of generation was picked in an accepting state
};

// Decodes with the masks as the engine does, picking uniformly among the allowed tokens: a
// harsher model than a random-weight one (a string's closing quote is 1 token in 50k).
Walked RandomTokenWalk(TokenConstraint& c, int64_t budget, std::mt19937& rng) {
  const TokenTrie& trie = c.trie();
  Walked w;
  std::vector<uint64_t> mask;
  std::vector<int32_t> allowed;
  StateId s = c.start();
  for (; w.tokens < budget && !c.Complete(s); ++w.tokens) {
    c.Mask(s, budget - w.tokens, &mask);
    allowed.clear();
    for (int32_t id = 0; id < trie.n_vocab(); ++id) {
      if ((mask[id >> 6] >> (id & 63)) & 1) allowed.push_back(id);
    }
    if (allowed.empty()) break;
    const int32_t token = allowed[rng() % allowed.size()];
    if (trie.end_of_generation(token)) {
      w.ended = c.Accepting(s);
      ++w.tokens;
      return w;
    }
    s = c.Advance(s, token);
    if (s == kDead) break;
    w.text += trie.piece(token);
  }
  w.ended = c.Complete(s);
  return w;
}

// The fewest tokens from state to a valid end, by brute force: every token of the vocabulary
// walked byte by byte, breadth first (0 when complete, 1 when accepting: the end of generation).
int64_t BruteForceDistance(TokenConstraint& c, StateId start, int64_t max_layers) {
  const TokenTrie& trie = c.trie();
  Automaton& a = c.automaton();
  std::set<StateId> seen = {start};
  std::vector<StateId> layer = {start};
  int64_t best = INT64_MAX;
  for (int64_t k = 0; k <= max_layers && !layer.empty() && k < best; ++k) {
    std::vector<StateId> next;
    for (StateId s : layer) {
      if (a.Complete(s)) best = std::min(best, k);
      if (a.Accepting(s)) best = std::min(best, k + 1);
      for (int32_t id = 0; id < trie.n_vocab(); ++id) {
        if (trie.piece(id).empty()) continue;
        const StateId t = a.Walk(s, trie.piece(id));
        if (t != kDead && seen.insert(t).second) next.push_back(t);
      }
    }
    layer = std::move(next);
  }
  return best;
}

const testing_models::Loaded* SharedModel(const char* path) {
  if (!std::filesystem::exists(path)) return nullptr;
  static std::map<std::string, testing_models::Loaded*> loaded;
  auto& m = loaded[path];
  if (m == nullptr) m = testing_models::LoadOrDie(path);
  return m;
}

std::shared_ptr<const TokenTrie> TrieOf(const testing_models::Loaded& m) {
  return TokenTrie::Build(*m.tokenizer, static_cast<int32_t>(m.model->config().n_vocab));
}

TEST(TokenDistanceTest, VocabulariesSpellEveryByte) {
  for (const char* path : {"../shared/models/tiny-qwen2-256-q8_0.gguf",
                           "../shared/models/tiny-llama-256-q8_0.gguf", "models/demo.gguf"}) {
    const testing_models::Loaded* m = SharedModel(path);
    if (m == nullptr) GTEST_SKIP() << path << " missing (../shared)";
    EXPECT_TRUE(TrieOf(*m)->spells_every_byte()) << path;
  }
}

// The search's distances equal a brute-force search's, from the start and from states along
// random prefixes.
TEST(TokenDistanceTest, DistancesAreTheFewestTokens) {
  const char* path = "../shared/models/tiny-qwen2-256-q8_0.gguf";
  const testing_models::Loaded* m = SharedModel(path);
  if (m == nullptr) GTEST_SKIP() << path << " missing (../shared)";
  auto trie = TrieOf(*m);
  std::mt19937 rng(5);
  for (const char* text : {kBudgetSchemas[0], kBudgetSchemas[2], kBudgetSchemas[3]}) {
    TokenConstraint c(Compile(ojson::parse(text)), trie);
    const int64_t d = c.Distance(c.start());
    EXPECT_EQ(d, BruteForceDistance(c, c.start(), d)) << text;
    EXPECT_LE(d, c.automaton().MinBytesToAccept(c.start()) + 1) << text;
    // States part way: the text of a random walk, cut at random points.
    for (int trial = 0; trial < 4; ++trial) {
      const Walked w = RandomTokenWalk(c, d + 6, rng);
      const StateId s =
          c.automaton().Walk(c.start(), w.text.substr(0, rng() % (w.text.size() + 1)));
      ASSERT_NE(s, kDead);
      const int64_t ds = c.Distance(s);
      EXPECT_EQ(ds, BruteForceDistance(c, s, ds)) << text << " after " << w.text;
    }
    EXPECT_EQ(c.stats().inexact_searches, 0);
  }
}

// The target: at every budget from the shortest completion up, every reply ends complete,
// parses and validates, whichever allowed tokens are picked.
TEST(TokenDistanceTest, EveryBudgetFromTheShortestCloses) {
  for (const char* path : {"../shared/models/tiny-qwen2-256-q8_0.gguf",
                           "../shared/models/tiny-llama-256-q8_0.gguf", "models/demo.gguf"}) {
    const testing_models::Loaded* m = SharedModel(path);
    if (m == nullptr) GTEST_SKIP() << path << " missing (../shared)";
    auto trie = TrieOf(*m);
    for (const char* text : kBudgetSchemas) {
      const ojson schema = ojson::parse(text);
      // The distance from a constraint of its own: the walks' constraint finds what it needs
      // as the engine's does, from the masks alone.
      TokenConstraint probe(Compile(schema), trie);
      const int64_t d = probe.Distance(probe.start());
      ASSERT_LT(d, TokenConstraint::kUnreachable);
      TokenConstraint c(Compile(schema), trie);
      for (int64_t extra : {0, 1, 2, 3, 5, 8, 13, 30}) {
        for (uint64_t seed = 0; seed < 4; ++seed) {
          std::mt19937 rng(static_cast<uint32_t>(seed * 1000 + extra));
          const Walked w = RandomTokenWalk(c, d + extra, rng);
          ASSERT_TRUE(w.ended) << path << " budget " << d + extra << ": " << w.text;
          EXPECT_LE(w.tokens, d + extra);
          json v;
          ASSERT_NO_THROW(v = json::parse(w.text)) << w.text;
          std::string why;
          EXPECT_TRUE(Validates(schema, v, &why)) << why << "\n" << w.text;
        }
      }
      // One token short of the shortest completion cannot end complete.
      std::mt19937 rng(1);
      EXPECT_FALSE(RandomTokenWalk(c, d - 1, rng).ended) << path << " " << text;
    }
  }
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

// The issue's failures through the engine, on random-weight models where nothing but the
// constraint closes a reply: a three-string schema and a forced Hermes tool call, at every budget
// from the shortest completion in tokens, and at 48.
TEST(ConstrainedDecodingTest, ClosesAtEveryBudgetFromTheShortest) {
  ToolSchema weather{"get_weather", ojson::parse(R"({"type":"object","properties":{
      "city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city","unit"]})")};
  const ToolCallSyntax hermes = {"<tool_call>\n{\"name\": ", "arguments", "}\n</tool_call>", "\n"};
  auto tool = ToolCallsGrammar({weather}, hermes, /*parallel=*/false, nullptr, nullptr);
  ASSERT_TRUE(tool.ok()) << tool.status().ToString();
  const ojson three = ojson::parse(kBudgetSchemas[0]);
  for (const char* path :
       {"../shared/models/tiny-qwen2-256-q8_0.gguf", "../shared/models/tiny-llama-256-q8_0.gguf"}) {
    const testing_models::Loaded* m = SharedModel(path);
    if (m == nullptr) GTEST_SKIP() << path << " missing (../shared)";
    engine::ServiceOptions o;
    o.n_threads = 2;
    o.ctx = 256;
    auto service = engine::Service::Create(*m->model, *m->tokenizer, o);
    ASSERT_TRUE(service.ok());
    for (bool use_tool : {false, true}) {
      auto g = use_tool ? *tool : Compile(three);
      TokenConstraint c(g, TrieOf(*m));
      const int64_t d = c.Distance(c.start());
      for (int64_t max_tokens : {d, d + 1, d + 4, int64_t{48}}) {
        for (uint64_t seed = 1; seed <= 3; ++seed) {
          auto r = Request(*m->tokenizer, "Weather in", seed * 77 + max_tokens, g);
          r.max_tokens = max_tokens;
          auto ch = (*service)->Submit(std::move(r));
          ASSERT_TRUE(ch.ok());
          engine::testing_service::Output out = engine::testing_service::Collect(**ch);
          EXPECT_EQ(out.finish, engine::FinishReason::kStop) << path << " " << out.text;
          EXPECT_LE(out.completion_tokens, max_tokens);
          std::string body = out.text;
          // SentencePiece models drop the first token's leading space; the grammar allows it.
          while (!body.empty() && (body[0] == ' ' || body[0] == '\n')) body.erase(0, 1);
          if (use_tool) {
            ASSERT_TRUE(body.starts_with(hermes.prefix.substr(0, 12)) &&
                        body.ends_with(hermes.suffix))
                << body;
            body = body.substr(12, body.size() - 12 - std::string("\n</tool_call>").size());
          }
          json v;
          ASSERT_NO_THROW(v = json::parse(body))
              << path << " budget " << max_tokens << ": " << body;
          std::string why;
          if (use_tool) {
            EXPECT_EQ(v["name"], "get_weather");
            EXPECT_TRUE(Validates(weather.parameters, v["arguments"], &why)) << why;
          } else {
            EXPECT_TRUE(Validates(three, v, &why)) << why;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace uf::grammar
