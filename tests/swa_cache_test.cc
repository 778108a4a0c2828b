// The sliding-window K/V pool (KvCacheOptions::swa_*): gpt-oss's windowed layers keep only their
// window, and the logits are the full cache's bit for bit. The reference rows come from a cache
// that keeps every position, fed in chunks: a row does not depend on what else shares its
// forward (moe_test's MoeBatchTest), so any schedule through the windowed pool must reproduce
// them exactly. The model is tiny-gpt-oss (2 layers, the first with a 32-position window) written
// by synth at test time, as moe_test does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "engine/kv_cache.h"
#include "engine/service.h"
#include "model/batch.h"
#include "model/decoder.h"
#include "model/model.h"
#include "model/synth.h"
#include "service_test_util.h"
#include "tokenizer/tokenizer.h"

namespace uf {
namespace {

using Rows = std::vector<std::vector<float>>;

// Token of stream `stream` at position p.
int32_t TokenAt(int stream, int64_t p) {
  return static_cast<int32_t>((7919 * p + 11 + 613 * stream) % 3500 + 100);
}

std::vector<int32_t> Stream(int stream, int64_t n) {
  std::vector<int32_t> t(n);
  for (int64_t p = 0; p < n; ++p) t[p] = TokenAt(stream, p);
  return t;
}

class SwaCacheTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto p = model::FindSynthPreset("tiny-gpt-oss");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    auto plan = model::PlanSynth(*p, model::SynthFileType::kQ8_0);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    path_ = (std::filesystem::temp_directory_path() /
             ("uf_swa_cache_" + std::to_string(getpid()) + ".gguf"))
                .string();
    model::SynthOptions so;
    so.seed = 7;
    so.n_threads = 2;
    auto r = model::WriteSynth(*plan, so, path_);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto m = model::Model::Load(path_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = m->release();
    ASSERT_EQ(model_->config().n_swa, 32);
    ASSERT_TRUE(model_->config().IsSwaLayer(0));
    ASSERT_FALSE(model_->config().IsSwaLayer(1));
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
    std::filesystem::remove(path_);
  }

  // A cache and decoder for the model: windowed (slack positions past the window) or keeping
  // every position (slack < 0).
  struct Engine {
    std::unique_ptr<engine::KvCache> cache;
    std::unique_ptr<ThreadPool> pool;
    std::unique_ptr<model::Decoder> dec;

    Engine(int64_t slack, int max_seqs, int64_t max_batch, int64_t max_seq = 1100,
           int64_t swa_blocks = 0) {
      const model::ModelConfig& c = model_->config();
      engine::KvCacheOptions co;
      co.n_layer = c.n_layer;
      co.n_head_kv = c.n_head_kv;
      co.head_dim = c.head_dim;
      co.type = engine::KvType::kF16;
      co.max_seqs = max_seqs;
      co.max_seq_len = max_seq;
      co.n_blocks = engine::KvCacheOptions::BlocksFor(max_seq * max_seqs, max_seqs, 16);
      if (slack >= 0) {
        model::UseSlidingWindowPool(c, slack, &co);
        co.swa_blocks = swa_blocks;
      }
      auto kc = engine::KvCache::Create(co);
      EXPECT_TRUE(kc.ok()) << kc.status().ToString();
      cache = std::move(*kc);
      EXPECT_EQ(cache->windowed(), slack >= 0);
      pool = std::make_unique<ThreadPool>(2);
      model::DecoderOptions o;
      o.max_batch = max_batch;
      auto d = model::Decoder::Create(*model_, cache.get(), o, pool.get());
      EXPECT_TRUE(d.ok()) << d.status().ToString();
      dec = std::move(*d);
    }

    // Runs the batch; appends the logits of every token to rows (all want logits).
    void Run(const model::Batch& b, std::vector<Rows*> rows) {
      ASSERT_TRUE(dec->Forward(b).ok());
      const int64_t v = model_->config().n_vocab;
      for (int64_t i = 0; i < b.size(); ++i) {
        rows[i]->emplace_back(dec->logits(i), dec->logits(i) + v);
      }
    }
  };

  // Logits at every position of tokens, with a cache that keeps every position.
  static Rows Reference(const std::vector<int32_t>& tokens) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    Engine e(-1, 1, 64, n);
    Rows rows;
    for (int64_t p0 = 0; p0 < n; p0 += 64) {
      model::Batch b;
      for (int64_t p = p0; p < std::min(n, p0 + 64); ++p) b.Add(tokens[p], p, 0, true);
      std::vector<Rows*> out(b.size(), &rows);
      e.Run(b, out);
    }
    return rows;
  }

  static void ExpectSame(const std::vector<float>& got, const std::vector<float>& want,
                         const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << what;
  }

  static std::string path_;
  static model::Model* model_;
};

std::string SwaCacheTest::path_;
model::Model* SwaCacheTest::model_ = nullptr;

// Windowed blocks held after a step, at most: the window and slack with both ends rounded out.
int64_t HeldBound(int64_t window, int64_t slack) { return (window - 1 + slack + 15) / 16 + 2; }

// Prefill in chunks (24 tokens: the layer-by-layer forward; then 16: single dispatch), then
// one-token decode steps to 1100 positions (34 windows; past 512 the 2-thread decode splits the
// keys into flash-decoding chunks, the first wholly given back): every row bit-identical to the
// full cache's, and the windowed pool's use bounded while the length grows.
TEST_F(SwaCacheTest, LongDecodeEqualsTheFullCacheAndStaysBounded) {
  const int64_t n = 1100, slack = 24;
  const std::vector<int32_t> tokens = Stream(0, n);
  const Rows want = Reference(tokens);
  Engine e(slack, 1, 24);
  EXPECT_EQ(e.cache->swa_n_blocks(), engine::KvCacheOptions::SwaBlocksFor(32, slack, 1, 16));
  Rows got;
  int64_t p = 0;
  for (int64_t chunk : {24, 24, 16, 3}) {
    model::Batch b;
    for (int64_t i = 0; i < chunk; ++i, ++p) b.Add(tokens[p], p, 0, true);
    e.Run(b, std::vector<Rows*>(b.size(), &got));
  }
  int64_t max_used = 0;
  for (; p < n; ++p) {
    model::Batch b;
    b.Add(tokens[p], p, 0, true);
    e.Run(b, {&got});
    max_used = std::max(max_used, e.cache->swa_used_blocks());
    ASSERT_LE(e.cache->SwaHeld(0), HeldBound(32, slack)) << "at length " << p + 1;
  }
  ASSERT_EQ(static_cast<int64_t>(got.size()), n);
  for (int64_t i = 0; i < n; ++i) ExpectSame(got[i], want[i], "position " + std::to_string(i));
  EXPECT_LE(max_used, HeldBound(32, slack));
  EXPECT_GT(e.cache->ResumeFloor(0), 0);
  EXPECT_LE(e.cache->ResumeFloor(0), n - slack);
  // The windowed layer's K/V is ~1/20 of what the full cache keeps for it.
  Engine full(-1, 1, 24);
  EXPECT_EQ(e.cache->bytes_per_token() * 2, full.cache->bytes_per_token());
  EXPECT_LT(e.cache->bytes(), full.cache->bytes() * 6 / 10);
  // Going back before the window's floor is refused, not computed from missing K/V.
  model::Batch b;
  b.Add(tokens[0], 0, 0, true);
  const Status s = e.dec->Forward(b);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  e.cache->Remove(0);
  EXPECT_EQ(e.cache->swa_used_blocks(), 0);
  EXPECT_EQ(e.cache->ResumeFloor(0), 0);
}

// Three sequences in each forward: one decoding, one taking 5-token chunks, one decoding from a
// later start; rows bit-identical to each stream's reference.
TEST_F(SwaCacheTest, BatchedSequencesEqualTheFullCache) {
  const int64_t n = 300, slack = 8;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<Rows> want, got(3);
  for (int s = 0; s < 3; ++s) {
    tokens.push_back(Stream(s, n));
    want.push_back(Reference(tokens.back()));
  }
  Engine e(slack, 3, 16);
  std::vector<int64_t> len = {0, 0, 0};
  int64_t max_used = 0;
  while (len[0] < n || len[1] < n || len[2] < n) {
    model::Batch b;
    std::vector<Rows*> out;
    const int64_t step[3] = {1, 5, len[2] < 40 ? 8 : 1};
    for (int s = 0; s < 3; ++s) {
      for (int64_t i = 0; i < step[s] && len[s] < n; ++i, ++len[s]) {
        b.Add(tokens[s][len[s]], len[s], s, true);
        out.push_back(&got[s]);
      }
    }
    e.Run(b, out);
    max_used = std::max(max_used, e.cache->swa_used_blocks());
  }
  for (int s = 0; s < 3; ++s) {
    for (int64_t i = 0; i < n; ++i) {
      ExpectSame(got[s][i], want[s][i],
                 "sequence " + std::to_string(s) + " position " + std::to_string(i));
    }
  }
  EXPECT_LE(max_used, 3 * HeldBound(32, slack) + 3);
}

// Speculative verify: every step appends the next token and 3 drafts (4 rows with logits), then
// rolls back to keep 0-3 of the drafts. Rejected drafts hold other tokens than the stream, so the
// positions they wrote are rewritten; kept rows must equal the reference.
TEST_F(SwaCacheTest, SpeculativeVerifyAndRollbackEqualTheFullCache) {
  const int64_t n = 260, k = 3, slack = (k + 1) + (k + 1);
  const std::vector<int32_t> tokens = Stream(1, n + k + 1);
  const Rows want = Reference(tokens);
  Engine e(slack, 1, 8);
  int64_t len = 0, step = 0;
  Rows rows;
  while (len < n) {
    const int64_t accept = step++ % (k + 1);  // drafts that match the stream
    model::Batch b;
    for (int64_t i = 0; i <= k; ++i) {
      const int32_t t = i <= accept ? tokens[len + i] : static_cast<int32_t>(200 + step % 50);
      b.Add(t, len + i, 0, true);
    }
    rows.clear();
    e.Run(b, std::vector<Rows*>(b.size(), &rows));
    for (int64_t i = 0; i <= accept; ++i) {
      ExpectSame(rows[i], want[len + i], "position " + std::to_string(len + i));
    }
    ASSERT_LE(e.cache->ResumeFloor(0), len + 1) << "a rollback would need given-back K/V";
    len += accept + 1;
    e.cache->Truncate(0, len);
    ASSERT_LE(e.cache->SwaHeld(0), HeldBound(32, slack));
  }
}

// Prefix reuse: a sequence attaches the published prefix of another and goes on from there; the
// windowed blocks of the prefix's last window come with it.
TEST_F(SwaCacheTest, PrefixReuseEqualsTheFullCache) {
  const int64_t n = 200, shared = 150, slack = 32;
  const std::vector<int32_t> a = Stream(2, n);
  std::vector<int32_t> bt = a;
  for (int64_t p = shared; p < n; ++p) bt[p] = TokenAt(3, p);  // diverges at 150
  const Rows want = Reference(bt);
  Engine e(slack, 2, 32);
  Rows scratch;
  for (int64_t p0 = 0; p0 < n; p0 += 32) {
    model::Batch b;
    for (int64_t p = p0; p < std::min(n, p0 + 32); ++p) b.Add(a[p], p, 0, true);
    e.Run(b, std::vector<Rows*>(b.size(), &scratch));
    e.cache->PublishPrefix(0, a.data(), e.cache->Length(0));
  }
  // Block 9 (positions 144-159) is the last whole shared one.
  const int64_t got = e.cache->AttachPrefix(1, bt.data(), n - 1);
  ASSERT_EQ(got, 144);
  EXPECT_EQ(e.cache->SwaHeld(1), 144 / 16 - (144 - 31) / 16);
  Rows rows;
  for (int64_t p = got; p < n; ++p) {
    model::Batch b;
    b.Add(bt[p], p, 1, true);
    e.Run(b, {&rows});
  }
  for (int64_t p = got; p < n; ++p)
    ExpectSame(rows[p - got], want[p], "position " + std::to_string(p));
}

// A published prefix whose windowed blocks were given back and taken by other work is not
// attached up to its end: the run stops where its last window is still held, and the rest is
// recomputed, with the reference's logits.
TEST_F(SwaCacheTest, ReuseWhoseWindowIsGoneRecomputes) {
  const int64_t n = 200, slack = 16;
  const std::vector<int32_t> a = Stream(4, n);
  const Rows want = Reference(a);
  Engine e(slack, 1, 16);
  Rows scratch;
  for (int64_t p0 = 0; p0 < n; p0 += 16) {
    model::Batch b;
    for (int64_t p = p0; p < std::min(n, p0 + 16); ++p) b.Add(a[p], p, 0, true);
    e.Run(b, std::vector<Rows*>(b.size(), &scratch));
    e.cache->PublishPrefix(0, a.data(), e.cache->Length(0));
  }
  e.cache->Remove(0);
  // Everything published stays cached; with the window held, the whole prefix attaches.
  EXPECT_EQ(e.cache->AttachPrefix(0, a.data(), n - 1), 192);
  e.cache->Remove(0);
  EXPECT_GT(e.cache->swa_cached_blocks(), 0);
  // Another stream through the same (one-sequence) pool, then a reservation of the whole
  // windowed pool, take every cached windowed block.
  const std::vector<int32_t> other = Stream(5, n);
  for (int64_t p0 = 0; p0 < n; p0 += 16) {
    model::Batch b;
    for (int64_t p = p0; p < std::min(n, p0 + 16); ++p) b.Add(other[p], p, 0, true);
    e.Run(b, std::vector<Rows*>(b.size(), &scratch));
  }
  e.cache->Remove(0);
  ASSERT_TRUE(e.cache->Reserve(0, e.cache->swa_n_blocks() * 16).ok());
  e.cache->Remove(0);
  EXPECT_EQ(e.cache->swa_cached_blocks(), 0);
  EXPECT_GE(e.cache->cached_blocks(), 12);  // the main pool's prefix blocks are all still there
  const int64_t got = e.cache->AttachPrefix(0, a.data(), n - 1);
  EXPECT_EQ(got, 0) << "attached a prefix whose windowed K/V is gone";
  Rows rows;
  for (int64_t p = got; p < n; ++p) {
    model::Batch b;
    b.Add(a[p], p, 0, true);
    e.Run(b, {&rows});
  }
  for (int64_t p = got; p < n; ++p)
    ExpectSame(rows[p - got], want[p], "position " + std::to_string(p));
}

// The serving engine (its own slack: prefill chunks, drafts, rollback) with prefix reuse and
// n-gram speculation gives the tokens it gives with every position kept (UF_SWA_CACHE=0), one
// request at a time (each prompt's second request attaches the first's prefix) and all at once.
TEST_F(SwaCacheTest, ServiceOutputIsTheFullCacheOutput) {
  auto tok = Tokenizer::FromGguf(model_->file());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto run = [&](bool windowed, bool together, engine::EngineStats* stats) {
    if (!windowed) setenv("UF_SWA_CACHE", "0", 1);
    engine::ServiceOptions o;
    o.max_seqs = 3;
    o.ctx = 320;
    o.prefill_chunk = 24;
    o.n_threads = 2;
    o.spec_cost = engine::SpecCostModel{};
    auto s = engine::Service::Create(*model_, **tok, o);
    unsetenv("UF_SWA_CACHE");
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ((*s)->Stats().kv_window_bytes > 0, windowed);
    std::vector<std::vector<int32_t>> out;
    std::vector<std::shared_ptr<engine::RequestChannel>> chans;
    for (int p = 0; p < 3; ++p) {
      // A 20-token phrase twice: n-gram drafts find something to propose.
      std::vector<int32_t> prompt = Stream(10 + p, 20);
      prompt.insert(prompt.end(), prompt.begin(), prompt.end());
      for (int rep = 0; rep < 2; ++rep) {
        engine::GenerationRequest r;
        r.prompt = prompt;
        r.max_tokens = 200;
        r.sampling.temperature = 0.0f;
        r.ignore_eos = true;
        r.top_logprobs = 0;
        r.speculation = engine::SpeculationRequest{engine::SpecMode::kNgram, 8};
        r.service_tier = scheduler::ServiceTier::kDefault;
        auto ch = (*s)->Submit(std::move(r));
        EXPECT_TRUE(ch.ok()) << ch.status().ToString();
        if (!ch.ok()) continue;
        if (together) {
          chans.push_back(*ch);
        } else {
          out.push_back(engine::testing_service::Collect(**ch).tokens);
        }
      }
    }
    for (auto& ch : chans) out.push_back(engine::testing_service::Collect(*ch).tokens);
    *stats = engine::testing_service::SettledStats(**s);
    return out;
  };
  for (bool together : {false, true}) {
    engine::EngineStats full_stats, win_stats;
    const auto full = run(false, together, &full_stats);
    const auto win = run(true, together, &win_stats);
    ASSERT_EQ(full.size(), 6u);
    ASSERT_EQ(win.size(), 6u);
    for (size_t i = 0; i < full.size(); ++i) {
      EXPECT_EQ(full[i].size(), 200u);
      EXPECT_EQ(win[i], full[i]) << "request " << i << (together ? " (together)" : " (alone)");
    }
    EXPECT_GT(win_stats.spec_drafted, 0);
    if (!together) {
      EXPECT_GT(win_stats.prefix_hit_tokens, 0);
    }
  }
}

// Without host storage (a device's cache) the windowed options change nothing.
TEST(SwaCacheOptions, DeviceCacheKeepsOneTable) {
  engine::KvCacheOptions co;
  co.n_layer = 4;
  co.n_head_kv = 2;
  co.head_dim = 64;
  co.max_seq_len = 512;
  co.n_blocks = engine::KvCacheOptions::BlocksFor(512, 1, 16);
  co.host_storage = false;
  co.swa_layers = {1, 0, 1, 0};
  co.swa_window = 32;
  auto c = engine::KvCache::Create(co);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE((*c)->windowed());
  EXPECT_EQ((*c)->LayerBlockTable(0, 0), (*c)->BlockTable(0));
  co.host_storage = true;
  auto h = engine::KvCache::Create(co);
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE((*h)->windowed());
  EXPECT_EQ((*h)->bytes_per_token() * 2, (*c)->bytes_per_token());  // 2 of 4 layers
  EXPECT_EQ((*h)->swa_bytes_per_token(), (*h)->bytes_per_token());
  EXPECT_EQ((*c)->bytes(), (*h)->bytes() - (*h)->swa_bytes() + (*c)->bytes() / 2);
  co.swa_layers = {1, 0};
  EXPECT_EQ(engine::KvCache::Create(co).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace uf
