// Speculative decoding (src/engine/speculative.h): the drafters, the adaptive controller, and the
// property everything rests on: output with speculation is the output without it. Greedy output
// must be token-for-token identical on every model in ../shared/models and the demo model, with
// n-gram, oracle (all drafts right: the longest verify steps) and draft-model drafts, on prompts
// with and without repetition. At temperature > 0 a seeded stream must also be identical (each
// emitted token uses the same draw as plain decoding), and a two-sample chi-square test checks
// the distribution of the second token against plain sampling with other seeds.
#include "engine/speculative.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "engine/generate.h"
#include "engine/kv_cache.h"
#include "model/decoder.h"
#include "model/model.h"
#include "shared_data.h"
#include "test_models.h"
#include "tokenizer/tokenizer.h"

namespace uf::engine {
namespace {

// ---------------------------------------------------------------------------------------------
// Drafters and controller

TEST(NgramDrafter, ProposesWhatFollowedTheLastOccurrence) {
  NgramDrafter d(2, 4);
  std::vector<int32_t> out;
  // ... 5 6 7 8 9 ... 5 6 -> 7 8 9 (and what follows, up to k)
  const std::vector<int32_t> ctx = {1, 2, 5, 6, 7, 8, 9, 3, 4, 5, 6};
  ASSERT_TRUE(d.Draft(ctx, 3, &out).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{7, 8, 9}));
  ASSERT_TRUE(d.Draft(ctx, 8, &out).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{7, 8, 9, 3, 4, 5, 6, 7}));
}

TEST(NgramDrafter, PrefersTheLongestAndMostRecentMatch) {
  NgramDrafter d(2, 4);
  std::vector<int32_t> out;
  // "2 3" occurs twice (followed by 10, then 20); "1 2 3" once (followed by 10).
  const std::vector<int32_t> ctx = {1, 2, 3, 10, 9, 2, 3, 20, 8, 1, 2, 3};
  ASSERT_TRUE(d.Draft(ctx, 1, &out).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{10}));
  // Only the 2-gram matches: the most recent occurrence wins.
  const std::vector<int32_t> ctx2 = {1, 2, 3, 10, 9, 2, 3, 20, 8, 7, 2, 3};
  NgramDrafter d2(2, 4);
  ASSERT_TRUE(d2.Draft(ctx2, 1, &out).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{20}));
}

TEST(NgramDrafter, NoMatchNoDraftAndTheSuffixIsNotItsOwnMatch) {
  NgramDrafter d(2, 4);
  std::vector<int32_t> out = {99};
  ASSERT_TRUE(d.Draft(std::vector<int32_t>{1, 2, 3, 4}, 4, &out).ok());
  EXPECT_TRUE(out.empty());
  ASSERT_TRUE(d.Draft(std::vector<int32_t>{7}, 4, &out).ok());
  EXPECT_TRUE(out.empty());
}

TEST(NgramDrafter, ExtendsRepeatingPatterns) {
  NgramDrafter d(2, 4);
  std::vector<int32_t> out;
  // A loop of period 3: the continuation runs past the end of the context.
  ASSERT_TRUE(d.Draft(std::vector<int32_t>{4, 5, 6, 4, 5, 6, 4, 5}, 7, &out).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{6, 4, 5, 6, 4, 5, 6}));
}

TEST(NgramDrafter, IndexesIncrementallyAndStartsOverOnANewSequence) {
  NgramDrafter d(2, 3);
  std::vector<int32_t> ctx = {1, 2, 3};
  std::vector<int32_t> out;
  ASSERT_TRUE(d.Draft(ctx, 2, &out).ok());
  EXPECT_TRUE(out.empty());
  for (int32_t t : {9, 1, 2}) {
    ctx.push_back(t);
    ASSERT_TRUE(d.Draft(ctx, 2, &out).ok());
  }
  EXPECT_EQ(out, (std::vector<int32_t>{3, 9}));
  // A shorter context is another sequence: nothing of the old one may be proposed.
  ASSERT_TRUE(d.Draft(std::vector<int32_t>{5, 1, 2}, 2, &out).ok());
  EXPECT_TRUE(out.empty());
  // Many tokens: the table grows and still finds early n-grams.
  std::vector<int32_t> big;
  for (int i = 0; i < 5000; ++i) big.push_back(1000 + i);
  big.push_back(1010);
  big.push_back(1011);
  ASSERT_TRUE(d.Draft(big, 3, &out).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{1012, 1013, 1014}));
}

TEST(NgramDrafter, ReferenceTextIsSearchedFirst) {
  NgramDrafter d(2, 4);
  d.SetReference({7, 8, 40, 41, 42});
  std::vector<int32_t> out;
  // The context has "7 8" followed by 50, the reference by 40: the reference wins.
  ASSERT_TRUE(d.Draft(std::vector<int32_t>{7, 8, 50, 1, 7, 8}, 3, &out).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{40, 41, 42}));
}

TEST(OracleDrafter, ProposesTheKnownContinuation) {
  OracleDrafter d({1, 2, 3, 4, 5, 6});
  std::vector<int32_t> out;
  ASSERT_TRUE(d.Draft(std::vector<int32_t>{1, 2}, 3, &out).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{3, 4, 5}));
  ASSERT_TRUE(d.Draft(std::vector<int32_t>{1, 9}, 3, &out).ok());
  EXPECT_TRUE(out.empty());
  ASSERT_TRUE(d.Draft(std::vector<int32_t>{1, 2, 3, 4, 5}, 3, &out).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{6}));
}

TEST(SpecController, GoodDraftsGetLongStepsBadOnesNone) {
  SpecController c(8, /*adaptive=*/true, /*costly_drafter=*/false);
  // A verify step of n positions costs 1 + 0.1 (n - 1) ms.
  auto t = [](int n) { return 1e-3 * (1.0 + 0.1 * (n - 1)); };
  for (int i = 0; i < 50; ++i) c.ObserveStep(8, 8, t(9));
  EXPECT_EQ(c.Choose(8), 8);
  EXPECT_EQ(c.Choose(3), 3);
  for (int i = 0; i < 100; ++i) c.ObserveStep(4, 0, t(5));
  EXPECT_LT(c.acceptance(), 0.1);
  EXPECT_EQ(c.Choose(8), 0);
  // Backed off: unverified proposals that would have been right bring it back.
  for (int i = 0; i < 100; ++i) c.ObserveShadow(1, 1);
  EXPECT_GT(c.Choose(8), 0);
}

TEST(SpecController, ExpensiveVerifyStepsNeedBetterDrafts) {
  // Acceptance 0.5: worth 1 extra position when it costs 10% more, not when it costs 80% more.
  SpecController cheap(8, true, false), dear(8, true, false);
  for (int i = 0; i < 64; ++i) {
    cheap.ObserveStep(1, i % 2, 1e-3 * 1.1);
    cheap.ObserveStep(0, 0, 1e-3);
    dear.ObserveStep(1, i % 2, 1e-3 * 1.8);
    dear.ObserveStep(0, 0, 1e-3);
  }
  EXPECT_GE(cheap.Choose(1), 1);
  EXPECT_EQ(dear.Choose(1), 0);
}

TEST(SpecController, NonAdaptiveVerifiesEverything) {
  SpecController c(4, /*adaptive=*/false, false);
  for (int i = 0; i < 50; ++i) c.ObserveStep(4, 0, 1e-3);
  EXPECT_EQ(c.Choose(6), 4);
  EXPECT_EQ(c.DraftsWanted(), 4);
}

TEST(SpecController, CostlyDrafterProbesWhileBackedOff) {
  SpecController c(8, true, /*costly_drafter=*/true);
  for (int i = 0; i < 100; ++i) c.ObserveStep(4, 0, 1e-3);
  int probes = 0;
  for (int i = 0; i < 64; ++i) probes += c.DraftsWanted();
  EXPECT_EQ(probes, 4);  // one draft every 16 steps
}

TEST(DraftModel, VocabularyMismatchIsRefusedNamingBothSizes) {
  const Status s = CheckDraftVocabulary(50257, 32000);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("50257"), std::string::npos);
  EXPECT_NE(s.message().find("32000"), std::string::npos);
  UF_REQUIRE_SHARED();
  auto qwen = model::Model::Load("../shared/models/tiny-qwen2-256-q8_0.gguf");
  ASSERT_TRUE(qwen.ok()) << qwen.status().ToString();
  ThreadPool pool(1);
  auto d = DraftModelDrafter::Create(**qwen, 32000, 64, &pool);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("50257"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Lossless generation

using testing_models::Loaded;

// A fresh copy per test (the draft-model cases load two at once); aborts on failure.
Loaded Load(const std::string& path) {
  std::unique_ptr<Loaded> l(testing_models::LoadOrDie(path.c_str()));
  return std::move(*l);
}

// One sequence of up to max_seq_len positions, with logits rows for verify steps of up to
// kMaxSpecK + 1 positions.
struct Engine {
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<KvCache> cache;
  std::unique_ptr<model::Decoder> decoder;
};

Engine MakeEngine(const model::Model& m, int64_t max_seq_len, int threads) {
  const model::ModelConfig& c = m.config();
  KvCacheOptions co;
  co.n_layer = c.n_layer;
  co.n_head_kv = c.n_head_kv;
  co.head_dim = c.head_dim;
  co.max_seq_len = max_seq_len;
  co.n_blocks = KvCacheOptions::BlocksFor(co.max_seq_len, 1, co.block_size);
  Engine e;
  e.pool = std::make_unique<ThreadPool>(threads);
  auto cache = KvCache::Create(co);
  UF_CHECK(cache.ok()) << cache.status().ToString();
  e.cache = std::move(*cache);
  model::DecoderOptions dopt;
  dopt.max_batch = 64;
  dopt.max_outputs = kMaxSpecK + 1;
  auto dec = model::Decoder::Create(m, e.cache.get(), dopt, e.pool.get());
  UF_CHECK(dec.ok()) << dec.status().ToString();
  e.decoder = std::move(*dec);
  return e;
}

struct Output {
  std::string text;
  std::vector<int32_t> tokens;
  GenerateStats stats;
};

// Generates with a fresh cache and decoder (max_outputs room for k + 1 rows).
// With draft_model, g.drafter is replaced by a DraftModelDrafter of that model.
Output Generated(const Loaded& l, const std::vector<int32_t>& prompt, GenerateOptions g,
                 const model::Model* draft_model = nullptr, int threads = 2) {
  Engine e = MakeEngine(*l.model, 512, threads);
  std::unique_ptr<DraftModelDrafter> draft;
  if (draft_model != nullptr) {
    auto d = DraftModelDrafter::Create(*draft_model, l.model->config().n_vocab, 512, e.pool.get(),
                                       /*p_min=*/0.0f);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    draft = std::move(*d);
    g.drafter = draft.get();
  }
  Output out;
  const Status s = Generate(
      *e.decoder, *l.tokenizer, prompt, g,
      [&](std::string_view t) {
        out.text += t;
        return true;
      },
      &out.stats, [&](int32_t t) { out.tokens.push_back(t); });
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

std::vector<std::string> SharedModels() {
  std::vector<std::string> paths;
  // Runs while ctest lists the tests: a missing ../shared leaves only the demo model.
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("../shared/models", ec)) {
    if (e.path().extension() == ".gguf") paths.push_back(e.path().string());
  }
  std::sort(paths.begin(), paths.end());
  paths.push_back("models/demo.gguf");
  return paths;
}

class GreedyIdentity : public ::testing::TestWithParam<std::string> {};

TEST_P(GreedyIdentity, SameTokensWithEveryDrafter) {
  const Loaded l = Load(GetParam());
  ASSERT_TRUE(l.model && l.tokenizer);
  const bool demo = GetParam().find("demo") != std::string::npos;
  // Without and with repetition in the prompt.
  const std::vector<std::string> prompts = {
      demo ? "ROMEO:" : "The quick brown fox",
      "First Citizen: speak, speak. First Citizen: speak, speak. First Citizen: speak,"};
  for (const std::string& text : prompts) {
    const std::vector<int32_t> prompt = l.tokenizer->Encode(text, true, false);
    GenerateOptions g;
    g.max_tokens = 96;
    g.sampling.temperature = 0.0f;
    g.ignore_eos = true;
    const Output plain = Generated(l, prompt, g);
    ASSERT_EQ(plain.stats.n_generated, 96);

    // Every proposal verified (not adaptive): the longest and most numerous verify steps.
    NgramDrafter ngram;
    g.drafter = &ngram;
    g.spec_k = 8;
    g.spec_adaptive = false;
    const Output spec = Generated(l, prompt, g);
    EXPECT_EQ(spec.tokens, plain.tokens) << GetParam() << " ngram, prompt: " << text;
    EXPECT_EQ(spec.text, plain.text);
    EXPECT_EQ(spec.stats.n_generated, 96);

    // Oracle: the plain run's own tokens, k = 16: every step verifies 16 drafts.
    std::vector<int32_t> sequence = prompt;
    sequence.insert(sequence.end(), plain.tokens.begin(), plain.tokens.end());
    OracleDrafter oracle(sequence);
    g.drafter = &oracle;
    g.spec_k = kMaxSpecK;
    const Output orc = Generated(l, prompt, g);
    EXPECT_EQ(orc.tokens, plain.tokens) << GetParam() << " oracle, prompt: " << text;
    // All drafts right: the stream needs ceil(95 / 17) verify steps after the first token.
    EXPECT_EQ(orc.stats.spec.accepted, orc.stats.spec.drafted) << GetParam();
    EXPECT_LE(orc.stats.n_decode_steps, 6) << GetParam();

    // Draft model: the model itself, so drafts are right and steps long; and for the tiny
    // llama files, another quantization of the same weights (drafts right most of the time).
    g.spec_k = 8;
    const Output self = Generated(l, prompt, g, l.model.get());
    EXPECT_EQ(self.tokens, plain.tokens) << GetParam() << " draft model (itself)";
    EXPECT_GT(self.stats.spec.accepted, 0) << GetParam();
    if (GetParam().find("tiny-llama-256") != std::string::npos) {
      UF_REQUIRE_SHARED();
      const Loaded q4 = Load("../shared/models/tiny-llama-256-q4_0.gguf");
      ASSERT_TRUE(q4.model);
      const Output other = Generated(l, prompt, g, q4.model.get());
      EXPECT_EQ(other.tokens, plain.tokens) << GetParam() << " draft model q4_0";
    }
  }
}

// The property greedy identity rests on: a verify step's rows are bit-identical to the logits of
// single-token decode steps (batch-invariant kernels), for every batch size a step can have.
TEST_P(GreedyIdentity, VerifyRowsAreBitIdenticalToDecodeSteps) {
  const Loaded l = Load(GetParam());
  ASSERT_TRUE(l.model && l.tokenizer);
  const model::ModelConfig& c = l.model->config();
  const std::vector<int32_t> prompt = l.tokenizer->Encode("Once upon a time there", true, false);
  std::vector<int32_t> tail;
  for (int i = 0; i < kMaxSpecK + 1; ++i) tail.push_back((i * 7919 + 13) % c.n_vocab);
  Engine e = MakeEngine(*l.model, 128, 2);
  model::Batch b;
  auto prefill = [&] {
    e.cache->Remove(0);
    b.Clear();
    for (size_t i = 0; i < prompt.size(); ++i) b.Add(prompt[i], static_cast<int32_t>(i), 0, false);
    ASSERT_TRUE(e.decoder->Forward(b).ok());
  };
  // One token per step.
  prefill();
  std::vector<std::vector<float>> single;
  const int32_t p0 = static_cast<int32_t>(prompt.size());
  for (size_t i = 0; i < tail.size(); ++i) {
    b.Clear();
    b.Add(tail[i], p0 + static_cast<int32_t>(i), 0, true);
    ASSERT_TRUE(e.decoder->Forward(b).ok());
    single.emplace_back(e.decoder->logits(0), e.decoder->logits(0) + c.n_vocab);
  }
  for (int n : {2, 3, 5, 8, 9, 12, 17}) {
    prefill();
    b.Clear();
    for (int i = 0; i < n; ++i) b.Add(tail[i], p0 + i, 0, true);
    ASSERT_TRUE(e.decoder->Forward(b).ok());
    for (int i = 0; i < n; ++i) {
      const float* row = e.decoder->logits(i);
      int differ = 0;
      for (int64_t v = 0; v < c.n_vocab; ++v) differ += row[v] != single[i][v];
      EXPECT_EQ(differ, 0) << GetParam() << ": batch of " << n << ", row " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllModels, GreedyIdentity, ::testing::ValuesIn(SharedModels()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = std::filesystem::path(info.param).stem().string();
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

// At temperature > 0 each emitted token uses the same draw of the seeded generator as plain
// decoding, so a seeded stream is the same with speculation on, with any drafter.
TEST(Speculative, SeededSamplingIsIdenticalWithAndWithoutSpeculation) {
  const Loaded l = Load("models/demo.gguf");
  ASSERT_TRUE(l.model && l.tokenizer);
  const std::vector<int32_t> prompt = l.tokenizer->Encode(
      "KING RICHARD II:\nWhat says my lord? KING RICHARD II:\nWhat says", true, false);
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    GenerateOptions g;
    g.max_tokens = 80;
    g.ignore_eos = true;
    g.sampling.temperature = 0.7f;
    g.sampling.top_k = 0;
    g.sampling.top_p = 0.95f;
    g.sampling.min_p = 0.0f;
    g.sampling.repeat_penalty = 1.1f;
    g.sampling.seed = seed;
    const Output plain = Generated(l, prompt, g);
    NgramDrafter ngram(1, 4);
    g.drafter = &ngram;
    g.spec_adaptive = false;
    const Output spec = Generated(l, prompt, g);
    EXPECT_EQ(spec.tokens, plain.tokens) << "seed " << seed;
    EXPECT_GT(spec.stats.spec.drafted, 0);
    const Output self = Generated(l, prompt, g, l.model.get());
    EXPECT_EQ(self.tokens, plain.tokens) << "seed " << seed << " (draft model)";
    EXPECT_GT(self.stats.spec.accepted, 0);
  }
}

// Quantile of the chi-square distribution (Wilson-Hilferty; within 1% for df >= 3).
double ChiSquareQuantile(double df, double z) {
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

// Two-sample chi-square statistic of homogeneity over cells (count in sample a, in sample b);
// cells with fewer than 20 in both together are pooled into one.
double ChiSquare(const std::map<std::pair<int32_t, int32_t>, std::pair<int, int>>& counts,
                 int* n_cells) {
  std::vector<std::pair<double, double>> cells;
  double pool_a = 0, pool_b = 0, na = 0, nb = 0;
  for (const auto& [key, ab] : counts) {
    na += ab.first;
    nb += ab.second;
    if (ab.first + ab.second >= 20) {
      cells.emplace_back(ab.first, ab.second);
    } else {
      pool_a += ab.first;
      pool_b += ab.second;
    }
  }
  if (pool_a + pool_b > 0) cells.emplace_back(pool_a, pool_b);
  double stat = 0;
  for (const auto& [a, b] : cells) {
    const double ea = (a + b) * na / (na + nb), eb = (a + b) * nb / (na + nb);
    stat += (a - ea) * (a - ea) / ea + (b - eb) * (b - eb) / eb;
  }
  *n_cells = static_cast<int>(cells.size());
  return stat;
}

// The statistical check the speculative-sampling rule is usually given: the tokens a speculating
// stream emits follow plain sampling's distribution. Plain runs use seeds [0, N) and speculative
// runs seeds [N, 2N), so the two samples are independent. The oracle drafts the greedy
// continuation g1 g2 g3; in runs whose first token (from the prompt's logits) is g1, the next
// verify step checks the drafts g2 g3, so the second token comes from row 0 and the third from
// row 1 after an accepted draft, or from the next step after a rejection. A two-sample
// chi-square test of homogeneity over the (second, third) token pairs of those runs must not
// reject at p = 0.001. Control: the same test applied to a wrong rule (keep the draft g3
// whenever g2 was accepted) must reject, so the test has the power to catch one.
TEST(Speculative, SamplingDistributionMatchesPlainSampling) {
  const Loaded l = Load("models/demo.gguf");
  ASSERT_TRUE(l.model && l.tokenizer);
  const std::vector<int32_t> prompt = l.tokenizer->Encode("ROMEO:\nI", true, false);
  GenerateOptions greedy;
  greedy.sampling.temperature = 0.0f;
  greedy.ignore_eos = true;
  greedy.max_tokens = 3;
  const Output best = Generated(l, prompt, greedy);
  ASSERT_EQ(best.tokens.size(), 3u);
  std::vector<int32_t> expected = prompt;
  expected.insert(expected.end(), best.tokens.begin(), best.tokens.end());

  constexpr int kN = 4000;
  GenerateOptions g;
  g.max_tokens = 4;
  g.ignore_eos = true;
  g.sampling.temperature = 1.0f;
  g.sampling.top_k = 0;
  g.sampling.top_p = 1.0f;
  g.sampling.min_p = 0.0f;
  g.spec_k = 2;
  g.spec_adaptive = false;
  std::map<std::pair<int32_t, int32_t>, std::pair<int, int>> counts, wrong;
  int64_t verify_steps = 0, accepted = 0;
  for (int i = 0; i < kN; ++i) {
    g.drafter = nullptr;
    g.sampling.seed = static_cast<uint64_t>(i);
    const Output plain = Generated(l, prompt, g, nullptr, 1);
    ASSERT_EQ(plain.tokens.size(), 4u);
    if (plain.tokens[0] == best.tokens[0]) {
      ++counts[{plain.tokens[1], plain.tokens[2]}].first;
      ++wrong[{plain.tokens[1], plain.tokens[2]}].first;
    }
    OracleDrafter oracle(expected);
    g.drafter = &oracle;
    g.sampling.seed = static_cast<uint64_t>(kN + i);
    const Output spec = Generated(l, prompt, g, nullptr, 1);
    ASSERT_EQ(spec.tokens.size(), 4u);
    if (spec.tokens[0] != best.tokens[0]) continue;
    verify_steps += spec.stats.spec.verify_steps;
    accepted += spec.stats.spec.accepted;
    ++counts[{spec.tokens[1], spec.tokens[2]}].second;
    const bool kept = spec.tokens[1] == best.tokens[1];
    ++wrong[{spec.tokens[1], kept ? best.tokens[2] : spec.tokens[2]}].second;
  }
  EXPECT_GT(verify_steps, kN / 10) << "the verify path must be exercised";
  EXPECT_GT(accepted, kN / 10);
  int cells = 0;
  const double stat = ChiSquare(counts, &cells);
  ASSERT_GE(cells, 4);
  EXPECT_LT(stat, ChiSquareQuantile(cells - 1, 3.09)) << cells << " cells";  // p = 0.001
  int wrong_cells = 0;
  const double wrong_stat = ChiSquare(wrong, &wrong_cells);
  EXPECT_GT(wrong_stat, ChiSquareQuantile(wrong_cells - 1, 3.09)) << "control";
  std::printf(
      "chi-square %.1f over %d cells (p=0.001 critical %.1f); wrong rule %.1f; %lld "
      "verify steps, %lld drafts accepted\n",
      stat, cells, ChiSquareQuantile(cells - 1, 3.09), wrong_stat,
      static_cast<long long>(verify_steps), static_cast<long long>(accepted));
}

}  // namespace
}  // namespace uf::engine
