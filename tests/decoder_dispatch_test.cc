// The single-dispatch forward (Decoder::RunSingleDispatch: batches of up to 16 tokens in one
// pool dispatch, SwiGLU fused into the gate/up product, the threads sharing rows between
// barriers) must give the same logits, bit for bit, as the dispatch-per-step forward
// (RunLayers): the speculative verifier compares a verify row with a decode step, and the golden
// tests cover RunLayers' numerics. Checked on every shared model (every weight type, Qwen2
// biases, Qwen3 q/k norms, a tied F32 model), every ISA tier, 2 and 3 threads, and batches that
// take each branch: a decode step, two sequences at once, a chunk that wants no logits (the last
// layer skips its FFN), a chunk with logits on some rows (compacted), and a step past 512
// cached positions that splits attention into chunk partials (flash-decoding).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "alloc_counter.h"
#include "base/thread_pool.h"
#include "engine/kv_cache.h"
#include "kernels/matmul.h"
#include "model/batch.h"
#include "model/decoder.h"
#include "model/model.h"
#include "model/synth.h"
#include "shared_data.h"

namespace uf {
namespace {

using kernels::Isa;

struct Step {
  int32_t seq;
  int n;              // tokens
  std::string wants;  // per token: '1' wants logits
};

// Runs the steps on a fresh cache and decoder; returns every logits row produced, in order.
std::vector<float> Logits(const model::Model& m, bool single, int threads,
                          const std::vector<Step>& steps, int64_t max_seq_len) {
  const model::ModelConfig& c = m.config();
  engine::KvCacheOptions co;
  co.n_layer = c.n_layer;
  co.n_head_kv = c.n_head_kv;
  co.head_dim = c.head_dim;
  co.type = engine::KvType::kF16;
  co.max_seq_len = max_seq_len;
  co.max_seqs = 2;
  co.n_blocks = engine::KvCacheOptions::BlocksFor(co.max_seq_len, 2, co.block_size);
  auto cache = engine::KvCache::Create(co);
  UF_CHECK(cache.ok()) << cache.status().ToString();
  ThreadPool pool(threads);
  model::DecoderOptions dopt;
  dopt.max_batch = 256;
  dopt.single_dispatch = single;
  auto dec = model::Decoder::Create(m, cache->get(), dopt, &pool);
  UF_CHECK(dec.ok()) << dec.status().ToString();
  std::vector<int32_t> pos(2, 0);
  std::vector<float> out;
  model::Batch b;
  for (const Step& s : steps) {
    b.Clear();
    for (int i = 0; i < s.n; ++i) {
      const int32_t p = pos[s.seq]++;
      b.Add(static_cast<int32_t>((p * 7919 + 11 + 101 * s.seq) % c.n_vocab), p, s.seq,
            s.wants[i] == '1');
    }
    const Status st = (*dec)->Forward(b);
    UF_CHECK(st.ok()) << st.ToString();
    for (int64_t j = 0; j < (*dec)->n_outputs(); ++j) {
      out.insert(out.end(), (*dec)->logits(j), (*dec)->logits(j) + c.n_vocab);
    }
  }
  return out;
}

std::vector<Step> MixedSteps() {
  std::vector<Step> steps = {
      {0, 40, std::string(39, '0') + "1"},  // prefill: the per-step path in both decoders
      {0, 6, "000000"},                     // no logits: the last layer stops after attention
      {0, 5, "01001"},                      // logits on two rows: compacted to the front
      {1, 30, std::string(29, '0') + "1"},
  };
  for (int i = 0; i < 6; ++i) {
    steps.push_back({0, 1, "1"});
    steps.push_back({1, 1, "1"});
  }
  steps.push_back({0, 9, "111111111"});  // a speculative verify
  return steps;
}

std::vector<Isa> Tiers() {
  std::vector<Isa> v;
  for (int i = 0; i <= static_cast<int>(kernels::ActiveIsa()); ++i)
    v.push_back(static_cast<Isa>(i));
  return v;
}

class SingleDispatch : public ::testing::TestWithParam<const char*> {};

TEST_P(SingleDispatch, LogitsAreBitIdenticalToTheDispatchPerStepForward) {
  UF_REQUIRE_SHARED();
  const std::string path = std::string("../shared/models/") + GetParam();
  auto m = model::Model::Load(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const Isa best = kernels::ActiveIsa();
  const std::vector<Step> steps = MixedSteps();
  for (Isa isa : Tiers()) {
    kernels::SetIsaForTesting(isa);
    for (int threads : {2, 3}) {
      const std::vector<float> want = Logits(**m, false, threads, steps, 128);
      const std::vector<float> got = Logits(**m, true, threads, steps, 128);
      ASSERT_EQ(got.size(), want.size());
      // Bitwise, so that -0.0 vs 0.0 or a NaN would also count.
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
          << kernels::IsaName(isa) << ", " << threads << " threads";
    }
  }
  kernels::SetIsaForTesting(best);
}

INSTANTIATE_TEST_SUITE_P(SharedModels, SingleDispatch,
                         ::testing::Values("tiny-llama-256-q8_0.gguf", "tiny-llama-256-q4_0.gguf",
                                           "tiny-llama-256-q4_k_m.gguf", "tiny-llama-256-q6_k.gguf",
                                           "tiny-llama-256-f16.gguf", "tiny-llama-256-bf16.gguf",
                                           "tiny-llama-f32.gguf", "tiny-qwen2-256-q8_0.gguf",
                                           "tiny-qwen2-256-q4_k_m.gguf",
                                           "tiny-qwen3-256-q8_0.gguf"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           name = name.substr(0, name.find(".gguf"));
                           for (char& ch : name) {
                             if (ch == '-' || ch == '.') ch = '_';
                           }
                           return name;
                         });

// A mixture of experts whose attention is wider than its embedding (n_head x head_dim > n_embd,
// as in Qwen3-30B-A3B and gpt-oss): the attention output's activations are the widest rows a
// single dispatch converts, for batches up to its 16 tokens (a 12-16 token prefill chunk
// overran the activation buffer, which was sized from the dense layers' products only).
TEST(SingleDispatchMoe, WideAttentionBatchesMatch) {
  auto p = model::FindSynthPreset("tiny-qwen3moe");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  p->n_head = 2 * p->n_embd / p->head_dim;  // q_dim = 2 x n_embd
  auto plan = model::PlanSynth(*p, model::SynthFileType::kQ4_K_M);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("uf_wide_moe_" + std::to_string(getpid()) + ".gguf"))
                               .string();
  model::SynthOptions so;
  so.seed = 3;
  ASSERT_TRUE(model::WriteSynth(*plan, so, path).ok());
  auto m = model::Model::Load(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_GT((*m)->config().q_dim(), (*m)->config().n_embd);
  std::vector<Step> steps = {{0, 16, std::string(15, '0') + "1"},
                             {0, 12, std::string(12, '1')},
                             {0, 1, "1"},
                             {1, 14, std::string(14, '1')},
                             {0, 9, "111111111"}};
  for (int threads : {2, 3}) {
    EXPECT_EQ(Logits(**m, true, threads, steps, 128), Logits(**m, false, threads, steps, 128))
        << threads << " threads";
  }
  std::filesystem::remove(path);
}

// Past 512 cached positions a decode step's attention is split into (KV head, chunk) partials
// that are merged in the completion of a barrier.
TEST(SingleDispatchLong, SplitAttentionStepsMatch) {
  UF_REQUIRE_SHARED();
  auto m = model::Model::Load("../shared/models/tiny-qwen2-256-q8_0.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_LT((*m)->config().n_head_kv, 6) << "3 threads must split the attention";
  std::vector<Step> steps;
  for (int i = 0; i < 4; ++i) steps.push_back({0, 160, std::string(160, '0')});
  for (int i = 0; i < 3; ++i) steps.push_back({0, 1, "1"});
  steps.push_back({0, 4, "1111"});
  for (int threads : {2, 3}) {
    EXPECT_EQ(Logits(**m, true, threads, steps, 700), Logits(**m, false, threads, steps, 700))
        << threads << " threads";
  }
}

// A decode step allocates nothing, in either forward: every buffer is sized at Create (the
// matmul's activation scratch on its first use), and the pool's job captures fit in
// std::function's inline storage.
TEST(DecodeLoop, DecodeStepsDoNotAllocate) {
  UF_REQUIRE_SHARED();
  if (!kCountsAllocations) GTEST_SKIP() << "allocations are not counted under AddressSanitizer";
  auto m = model::Model::Load("../shared/models/tiny-qwen2-256-q8_0.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const model::ModelConfig& c = (*m)->config();
  for (bool single : {true, false}) {
    engine::KvCacheOptions co;
    co.n_layer = c.n_layer;
    co.n_head_kv = c.n_head_kv;
    co.head_dim = c.head_dim;
    co.max_seq_len = 1024;
    co.n_blocks = engine::KvCacheOptions::BlocksFor(co.max_seq_len, 1, co.block_size);
    auto cache = engine::KvCache::Create(co);
    ASSERT_TRUE(cache.ok());
    ThreadPool pool(2);
    model::DecoderOptions dopt;
    dopt.max_batch = 64;
    dopt.single_dispatch = single;
    auto dec = model::Decoder::Create(**m, cache->get(), dopt, &pool);
    ASSERT_TRUE(dec.ok());
    model::Batch b;
    b.tokens.reserve(64);
    b.positions.reserve(64);
    b.seq_ids.reserve(64);
    b.want_logits.reserve(64);
    int32_t pos = 0;
    auto step = [&](int n) {
      b.Clear();
      for (int i = 0; i < n; ++i, ++pos) b.Add((pos * 31 + 7) % c.n_vocab, pos, 0, i == n - 1);
      ASSERT_TRUE((*dec)->Forward(b).ok());
    };
    step(40);
    step(1);  // warm-up: the first use of each path's scratch
    const int64_t before = testing_alloc::allocations.load();
    // Past 512 positions too, where the step splits its attention (flash-decoding).
    for (int i = 0; i < 600; ++i) step(1);
    EXPECT_EQ(testing_alloc::allocations.load() - before, 0)
        << (single ? "single dispatch" : "dispatch per step");
  }
}

}  // namespace
}  // namespace uf
