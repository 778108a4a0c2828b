// Chained greedy decoding on a Vulkan device (GpuForward::ForwardGreedyChain): each step's
// arg-max fed to the next step on the device while the host queues the next step. The chained
// tokens must be those of one ForwardGreedy step at a time, bit for bit (the same recorded step
// plus the feed), wherever the chain stops, on any sequence, across K/V block boundaries and
// through the tuners' trials; bad arguments are refused with the cache unchanged. Runs on Mesa's
// lavapipe in CI; skips, saying why, where no Vulkan device exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/status.h"
#include "engine/kv_cache.h"
#include "gpu/backend.h"
#include "gpu_service_util.h"
#include "model/batch.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "shared_data.h"

namespace uf {
namespace {

constexpr gpu::DeviceSpec kVulkan{.vulkan = true, .index = -1};
const std::vector<int32_t> kPrompt = {1, 9038, 2501, 263, 931, 727, 3300};
const auto kP0 = static_cast<int32_t>(kPrompt.size());  // the first position after the prompt

engine::KvCacheOptions CacheFor(const model::Model& m, int max_seqs, int64_t ctx) {
  engine::KvCacheOptions co;
  co.n_layer = m.config().n_layer;
  co.n_head_kv = m.config().n_head_kv;
  co.head_dim = m.config().head_dim;
  co.block_size = 4;  // small blocks: a chain's steps cross block boundaries (and its feed)
  co.max_seqs = max_seqs;
  co.max_seq_len = ctx;
  co.n_blocks = engine::KvCacheOptions::BlocksFor(ctx * max_seqs, max_seqs, co.block_size);
  co.type = engine::KvType::kF16;
  co.host_storage = false;
  return co;
}

struct Device {
  std::unique_ptr<engine::KvCache> cache;
  std::unique_ptr<gpu::GpuForward> fwd;
};

Device Make(const model::Model& m, int max_seqs, int64_t ctx, gpu::GpuForwardOptions o = {}) {
  Device d;
  auto cache = engine::KvCache::Create(CacheFor(m, max_seqs, ctx));
  UF_CHECK(cache.ok()) << cache.status().ToString();
  d.cache = std::move(cache).value();
  o.max_batch = 16;
  auto fwd = gpu::GpuForward::Create(m, kVulkan, d.cache.get(), o);
  UF_CHECK(fwd.ok()) << fwd.status().ToString();
  d.fwd = std::move(fwd).value();
  return d;
}

// The prompt into sequence seq; returns its greedy next token.
int32_t Prefill(gpu::GpuForward& f, int seq) {
  model::Batch b;
  for (size_t i = 0; i < kPrompt.size(); ++i) {
    b.Add(kPrompt[i], static_cast<int32_t>(i), seq, i + 1 == kPrompt.size());
  }
  int32_t next = -1;
  UF_CHECK(f.ForwardGreedy(b, &next).ok());
  return next;
}

// n greedy steps of seq from (token, pos), one ForwardGreedy a step: the n tokens after them.
std::vector<int32_t> OneAtATime(gpu::GpuForward& f, int seq, int32_t token, int32_t pos,
                                int64_t n) {
  std::vector<int32_t> out;
  model::Batch b;
  for (int64_t i = 0; i < n; ++i) {
    b.Clear();
    b.Add(token, pos + static_cast<int32_t>(i), seq, true);
    EXPECT_TRUE(f.ForwardGreedy(b, &token).ok());
    out.push_back(token);
  }
  return out;
}

// A chain taking at most `take` tokens (then stopping it): the tokens it gave.
std::vector<int32_t> Chain(gpu::GpuForward& f, int seq, int32_t token, int32_t pos, int64_t n,
                           int64_t take, int64_t* steps) {
  std::vector<int32_t> out;
  auto r = f.ForwardGreedyChain(seq, token, pos, n, [&](int32_t t) {
    out.push_back(t);
    return static_cast<int64_t>(out.size()) < take;
  });
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  *steps = r.ok() ? *r : -1;
  return out;
}

class GpuChainTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::string skip = testing_gpu::SkipReason();
    if (!skip.empty()) GTEST_SKIP() << skip;
    UF_REQUIRE_SHARED();
    auto m = model::Model::Load(std::string("../shared/models/") + GetParam() + ".gguf");
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value();
  }
  std::unique_ptr<model::Model> model_;
};

// 30 chained steps of sequence 1 (its block table, not sequence 0's, feeds the cache rows) give
// the 30 tokens of one step at a time on sequence 0, and leave the cache at the chain's end.
TEST_P(GpuChainTest, SameTokensAsOneStepAtATime) {
  const int64_t n = 30, ctx = 48;
  Device d = Make(*model_, 2, ctx);
  const int32_t first = Prefill(*d.fwd, 0);
  const std::vector<int32_t> want = OneAtATime(*d.fwd, 0, first, kP0, n);
  ASSERT_EQ(Prefill(*d.fwd, 1), first);
  int64_t steps = 0;
  EXPECT_EQ(Chain(*d.fwd, 1, first, kP0, n, n, &steps), want);
  EXPECT_EQ(steps, n);
  EXPECT_EQ(d.cache->Length(1), kP0 + n);
  // Rewound on sequence 0 too: the same again (the recordings are replayed).
  EXPECT_EQ(Chain(*d.fwd, 0, first, kP0, n, n, &steps), want);
  EXPECT_EQ(d.cache->Length(0), kP0 + n);
}

// Stopped by the caller after k tokens (k = 1, 2, 5: with one and two steps queued past it), the
// chain returns k and the sequence ends after the k-th step; what the dropped steps wrote past
// its end changes nothing: decoding on from there, chained or not, gives the same tokens.
TEST_P(GpuChainTest, StopsWhereTheCallerSays) {
  const int64_t n = 20, ctx = 40;
  Device d = Make(*model_, 1, ctx);
  const int32_t first = Prefill(*d.fwd, 0);
  const std::vector<int32_t> want = OneAtATime(*d.fwd, 0, first, kP0, n);
  for (int64_t k : {1, 2, 5}) {
    SCOPED_TRACE("stopped after " + std::to_string(k));
    int64_t steps = 0;
    const std::vector<int32_t> got = Chain(*d.fwd, 0, first, kP0, n, k, &steps);
    EXPECT_EQ(steps, k);
    ASSERT_EQ(got, std::vector<int32_t>(want.begin(), want.begin() + k));
    EXPECT_EQ(d.cache->Length(0), kP0 + k);
    const auto pk = static_cast<int32_t>(kP0 + k);
    EXPECT_EQ(OneAtATime(*d.fwd, 0, got.back(), pk, 3),
              std::vector<int32_t>(want.begin() + k, want.begin() + k + 3));
    EXPECT_EQ(Chain(*d.fwd, 0, got.back(), pk, n - k, n, &steps),
              std::vector<int32_t>(want.begin() + k, want.end()));
    EXPECT_EQ(steps, n - k);
  }
}

// A fresh forward's tuners time their first one-token steps (the norm tail, the Q8_0 / Q4_0
// GEMV, attention per power of two of depth) inside the chain, each trial alone: the tokens are
// those of a forward whose choices are fixed, and the choices settle.
TEST_P(GpuChainTest, TunerTrialsInsideTheChainKeepTheTokens) {
  const int64_t n = 40, ctx = 48;
  Device fixed = Make(*model_, 1, ctx,
                      {.gemv = gpu::GemvVariant::kBasic,
                       .norm_tail = gpu::NormTail::kOff,
                       .attention_tiles = gpu::AttentionTiles::kToken});
  const int32_t first = Prefill(*fixed.fwd, 0);
  const std::vector<int32_t> want = OneAtATime(*fixed.fwd, 0, first, kP0, n);
  Device tuned = Make(*model_, 1, ctx,
                      {.gemv = gpu::GemvVariant::kTune,
                       .norm_tail = gpu::NormTail::kTune,
                       .attention_tiles = gpu::AttentionTiles::kTune});
  ASSERT_EQ(Prefill(*tuned.fwd, 0), first);
  int64_t steps = 0;
  EXPECT_EQ(Chain(*tuned.fwd, 0, first, kP0, n, n, &steps), want);
  EXPECT_EQ(steps, n);
  EXPECT_TRUE(tuned.fwd->last_step_trial());
  int settled = 0;
  for (const std::string& line : tuned.fwd->step_tuning()) {
    SCOPED_TRACE(line);
    if (line.find("single tokens") != std::string::npos &&
        line.find("trying") == std::string::npos) {
      ++settled;
    }
  }
  EXPECT_GE(settled, 2);  // the norm tail and at least one depth of attention
}

// With banned tokens (the end tokens of ignore_eos) masked before each arg-max: the tokens of
// one step at a time whose logits row the host sampler (greedy, SetBanned) picks from. Banned:
// the first three tokens the unbanned chain gives, so the bans change the output.
TEST_P(GpuChainTest, BannedTokensAreNeverChosen) {
  const int64_t n = 16, ctx = 32;
  Device d = Make(*model_, 1, ctx);
  const int32_t first = Prefill(*d.fwd, 0);
  int64_t steps = 0;
  const std::vector<int32_t> free = Chain(*d.fwd, 0, first, kP0, n, n, &steps);
  std::vector<int32_t> banned;
  for (int32_t t : free) {
    if (banned.size() < 3 && std::find(banned.begin(), banned.end(), t) == banned.end()) {
      banned.push_back(t);
    }
  }
  ASSERT_FALSE(banned.empty());
  const auto n_vocab = static_cast<int32_t>(model_->config().n_vocab);
  sampling::SamplingParams sp;
  sp.temperature = 0.0f;
  sampling::Sampler sampler(sp, n_vocab);
  sampler.SetBanned(banned);
  ASSERT_TRUE(sampler.ArgMaxAfterBans());
  std::vector<int32_t> want;
  model::Batch b;
  int32_t token = first;
  for (int64_t i = 0; i < n; ++i) {
    b.Clear();
    b.Add(token, kP0 + static_cast<int32_t>(i), 0, true);
    ASSERT_TRUE(d.fwd->Forward(b).ok());
    token = sampler.Sample(d.fwd->logits(0));
    want.push_back(token);
  }
  std::vector<int32_t> got;
  auto r = d.fwd->ForwardGreedyChain(
      0, first, kP0, n,
      [&](int32_t t) {
        got.push_back(t);
        return true;
      },
      banned);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(got, want);
  for (int32_t t : got) EXPECT_EQ(std::find(banned.begin(), banned.end(), t), banned.end());
  EXPECT_NE(got, free) << "the bans changed nothing: the test tests nothing";
  // More bans than the forward masks, or one outside the vocabulary: refused.
  const std::vector<int32_t> too_many(d.fwd->top_known_capacity() + 1, 1);
  EXPECT_EQ(d.fwd
                ->ForwardGreedyChain(
                    0, first, kP0, 2, [](int32_t) { return true; }, too_many)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  const std::vector<int32_t> outside = {n_vocab};
  EXPECT_EQ(d.fwd
                ->ForwardGreedyChain(
                    0, first, kP0, 2, [](int32_t) { return true; }, outside)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(d.cache->Length(0), kP0 + n);
}

// Refused, with the sequence's cache as it was and the forward still usable: no steps, a
// position past the sequence's end, a chain past the cache's positions, a token outside the
// vocabulary, a sequence outside the cache.
TEST_P(GpuChainTest, RefusesBadArgumentsAndKeepsTheCache) {
  const int64_t ctx = 24;
  Device d = Make(*model_, 1, ctx);
  const int32_t first = Prefill(*d.fwd, 0);
  const std::vector<int32_t> want = OneAtATime(*d.fwd, 0, first, kP0, 2);
  const auto none = [](int32_t) { return true; };
  const auto n_vocab = static_cast<int32_t>(model_->config().n_vocab);
  struct Case {
    int32_t seq, token, pos;
    int64_t n;
    StatusCode code;
  };
  for (const Case& c : {Case{0, first, kP0, 0, StatusCode::kInvalidArgument},
                        Case{0, first, kP0 + 3, 2, StatusCode::kInvalidArgument},
                        Case{0, first, kP0, ctx - kP0 + 1, StatusCode::kOutOfRange},
                        Case{0, n_vocab, kP0, 2, StatusCode::kInvalidArgument},
                        Case{0, -1, kP0, 2, StatusCode::kInvalidArgument},
                        Case{1, first, 0, 2, StatusCode::kInvalidArgument}}) {
    SCOPED_TRACE("seq " + std::to_string(c.seq) + " token " + std::to_string(c.token) + " pos " +
                 std::to_string(c.pos) + " n " + std::to_string(c.n));
    auto r = d.fwd->ForwardGreedyChain(c.seq, c.token, c.pos, c.n, none);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), c.code) << r.status().ToString();
    EXPECT_EQ(d.cache->Length(0), kP0 + 2);
  }
  int64_t steps = 0;
  EXPECT_EQ(Chain(*d.fwd, 0, first, kP0, 2, 2, &steps), want);
  // A chain to the cache's last position is allowed.
  Chain(*d.fwd, 0, first, kP0, ctx - kP0, ctx, &steps);
  EXPECT_EQ(steps, ctx - kP0);
  EXPECT_EQ(d.cache->Length(0), ctx);
}

// Llama (Q8_0 weights: the tuned GEMV; F16: the one-dispatch Q/K/V) and qwen3 (NEOX RoPE, q/k
// norms: the general Q/K/V stage).
INSTANTIATE_TEST_SUITE_P(Models, GpuChainTest,
                         ::testing::Values("tiny-llama-256-q8_0", "tiny-llama-256-f16",
                                           "tiny-qwen3-256-q8_0"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s) ch = ch == '-' ? '_' : ch;
                           return s;
                         });

}  // namespace
}  // namespace uf
