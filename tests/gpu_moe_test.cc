// Mixture-of-experts models (qwen3moe, Mixtral) on a Vulkan device (gpu::GpuDecoder): the
// reference engine's logits in tests/data/moe (as moe_test.cc checks the CPU path), the CPU
// path's logits for every weight type synth gives the experts, rows of a batch bit-identical to
// the same tokens stepped one at a time, and gpt-oss refused with a clear error. The models are
// written by synth at test time (seed 7, moe_test.cc's files). Runs on lavapipe in CI; skips,
// saying why, where no device exists.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "engine/kv_cache.h"
#include "engine/service.h"
#include "gguf/gguf.h"
#include "gpu/backend.h"
#include "kernels/matmul.h"
#include "model/batch.h"
#include "model/decoder.h"
#include "model/model.h"
#include "model/synth.h"
#include "service_test_util.h"
#include "tokenizer/tokenizer.h"

namespace uf {
namespace {

int32_t TokenAt(int64_t i) { return static_cast<int32_t>((7919 * i + 11) % 3500 + 100); }

// The preset written in `type` with seed 7 (moe_test.cc's bytes); removed by the destructor.
struct SynthFile {
  std::string path;
  SynthFile(const std::string& preset, model::SynthFileType type) {
    auto p = model::FindSynthPreset(preset);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    auto plan = model::PlanSynth(*p, type);
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    path = (std::filesystem::temp_directory_path() /
            ("uf_gpumoe_" + preset + "_" + std::string(model::SynthFileTypeName(type)) + "_" +
             std::to_string(getpid()) + ".gguf"))
               .string();
    model::SynthOptions so;
    so.seed = 7;
    so.n_threads = 2;
    auto r = model::WriteSynth(*plan, so, path);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
  }
  ~SynthFile() { std::filesystem::remove(path); }
};

// A decoder on the first Vulkan device, or a reason to skip.
StatusOr<std::unique_ptr<gpu::GpuDecoder>> MakeDecoder(const model::Model& m, int64_t ctx,
                                                       std::string* skip, int64_t max_batch = 64) {
  if (!gpu::VulkanCompiledIn()) {
    *skip = "built without the Vulkan backend";
    return UnavailableError(*skip);
  }
  auto devices = gpu::ListDevices();
  if (!devices.ok()) {
    *skip = "no usable Vulkan device: " + devices.status().ToString();
    return devices.status();
  }
  return gpu::GpuDecoder::Create(m, gpu::DeviceSpec{.vulkan = true, .index = -1}, ctx, max_batch,
                                 engine::KvType::kF16);
}

// Every position of tokens 0..n-1 one token per step, then as batches of `batch`: the stepped
// rows, and whether every batched row equals its stepped one bit for bit.
struct DeviceRows {
  std::vector<std::vector<float>> stepped;
  int64_t batched_equal = 0;
};
DeviceRows RunDevice(gpu::GpuDecoder* dec, int64_t n, int64_t batch) {
  DeviceRows out;
  const int64_t v = dec->n_vocab();
  for (int64_t p = 0; p < n; ++p) {
    EXPECT_TRUE(dec->Step(TokenAt(p), static_cast<int32_t>(p)).ok());
    out.stepped.emplace_back(dec->logits(), dec->logits() + v);
  }
  for (int64_t p0 = 0; p0 < n; p0 += batch) {
    std::vector<int32_t> toks;
    for (int64_t p = p0; p < std::min(n, p0 + batch); ++p) toks.push_back(TokenAt(p));
    EXPECT_TRUE(dec->Prefill(toks, static_cast<int32_t>(p0), /*every_logits=*/true).ok());
    for (size_t i = 0; i < toks.size(); ++i) {
      out.batched_equal += std::memcmp(dec->all_logits(static_cast<int64_t>(i)),
                                       out.stepped[p0 + i].data(), v * 4) == 0;
    }
  }
  return out;
}

// moe_test.cc's check against the reference engine: each of its top-8 logits within
// 0.03 x max(1, |logit|), the same arg-max where its best leads by 2%, and the mean difference
// (the check that catches a wrong routing rule) bounded. moe_test bounds the mean by 2.5e-3 with
// f32 K/V; the device keeps K/V in f16, which alone adds ~2e-3: the CPU path with f16 K/V
// measures 2.02e-3 (qwen3moe), 2.08e-3 (Mixtral), 2.37e-3 (gpt-oss Q8_0) and 2.54e-3 (gpt-oss
// MXFP4, past 2.5e-3), the device 2.09e-3, 2.15e-3, 2.37e-3 and 2.43e-3. Hence 3.5e-3 here; the
// faults moe_test measured sit above it (weights unnormalised: 4.8e-3 qwen3moe, 2.6e-2 Mixtral),
// as does the device with gpt-oss's window left out (2.4e-2, tried while writing this test).
constexpr double kMeanTolerance = 3.5e-3;

struct RefCase {
  std::string preset;
  model::SynthFileType type;
  std::string data;  // tests/data/moe/<data>.json
};
void PrintTo(const RefCase& c, std::ostream* os) { *os << c.data; }

class GpuMoeReferenceTest : public ::testing::TestWithParam<RefCase> {};

TEST_P(GpuMoeReferenceTest, LogitsMatchReference) {
  const std::string preset = GetParam().preset;
  std::ifstream in("tests/data/moe/" + GetParam().data + ".json");
  ASSERT_TRUE(in) << "missing reference data for " << GetParam().data;
  const nlohmann::json ref = nlohmann::json::parse(in);
  const int64_t n = ref.at("n_tokens").get<int64_t>();
  std::map<int64_t, std::vector<std::pair<int32_t, float>>> want;
  for (const auto& p : ref.at("positions")) {
    auto& top = want[p.at("pos").get<int64_t>()];
    for (const auto& e : p.at("top"))
      top.emplace_back(e.at(0).get<int32_t>(), e.at(1).get<float>());
  }
  SynthFile f(preset, GetParam().type);
  auto m = model::Model::Load(f.path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::string skip;
  auto dec = MakeDecoder(**m, n, &skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_TRUE(dec.ok()) << dec.status().ToString();
  const DeviceRows rows = RunDevice(dec->get(), n, 64);
  double worst = 0, sum = 0;
  int count = 0;
  for (const auto& [pos, top] : want) {
    const std::vector<float>& logits = rows.stepped[pos];
    for (const auto& [id, logit] : top) {
      worst = std::max<double>(worst, std::fabs(logits[id] - logit));
      sum += std::fabs(logits[id] - logit);
      ++count;
      EXPECT_NEAR(logits[id], logit, 0.03f * std::max(1.0f, std::fabs(logit)))
          << preset << " position " << pos << " token " << id;
    }
    if (top[0].second - top[1].second >= 0.02f * std::max(1.0f, std::fabs(top[0].second))) {
      const int64_t best = std::max_element(logits.begin(), logits.end()) - logits.begin();
      EXPECT_EQ(best, top[0].first) << preset << " position " << pos;
    }
  }
  const double mean = sum / count;
  std::printf(
      "[gpu moe] %s on %s: difference from the reference: largest %.5f, mean %.5f; batched rows "
      "bit-identical %lld/%lld\n",
      GetParam().data.c_str(), (*dec)->device().name.c_str(), worst, mean,
      static_cast<long long>(rows.batched_equal), static_cast<long long>(n));
  EXPECT_LT(mean, kMeanTolerance) << preset;
  EXPECT_EQ(rows.batched_equal, n) << preset << ": batched rows differ from single steps";
}

INSTANTIATE_TEST_SUITE_P(
    Reference, GpuMoeReferenceTest,
    ::testing::Values(RefCase{"tiny-qwen3moe", model::SynthFileType::kQ8_0, "tiny-qwen3moe"},
                      RefCase{"tiny-mixtral", model::SynthFileType::kQ8_0, "tiny-mixtral"},
                      RefCase{"tiny-gpt-oss", model::SynthFileType::kQ8_0, "tiny-gpt-oss"},
                      RefCase{"tiny-gpt-oss", model::SynthFileType::kMXFP4, "tiny-gpt-oss-mxfp4"}),
    [](const auto& info) {
      std::string s = info.param.data;
      std::replace(s.begin(), s.end(), '-', '_');
      return s;
    });

// Device against the CPU decoder (f16 K/V on both) for every weight type synth gives the
// experts: every logit of every position within the weights' tolerance (gpu_forward_test's:
// F16 5e-3, BF16 1e-2, quantized 3e-2, of max(1, |logit|)), and batched rows bit-identical
// to single steps (batches of 7: rows of one token see tokens of other experts beside them).
// Q8_0, Q4_0, F16 and BF16 run the CPU's arithmetic (Q8_0 rows agree to 2e-7). Q4_K and Q6_K
// too: Q8_K activations and the scalar kernels' integer sums (gpu_kernels_test: their GEMMs are
// the scalar tier's bits), so their rows agree to the float rounding of the other kernels
// (measured against the AVX2 tier: 2.4e-7 to 5.5e-7). They must stay within 1e-4 but for at
// most 2 of the 24 rows, and those within the quantized tolerance: an F32 router whose sum
// order differs by CPU tier can pick another expert at a near-tie (against the scalar tier,
// tiny-gpt-oss Q4_K_M: one row at 9.6e-3). With f32 activations every row moved by ~1.5e-2
// and isolated rows by up to 0.125.
struct TypeCase {
  std::string preset;
  model::SynthFileType type;
};
void PrintTo(const TypeCase& c, std::ostream* os) {
  *os << c.preset << "_" << model::SynthFileTypeName(c.type);
}

class GpuMoeTypeTest : public ::testing::TestWithParam<TypeCase> {};

TEST_P(GpuMoeTypeTest, MatchesCpuAndBatchRowsAreExact) {
  const TypeCase c = GetParam();
  constexpr int64_t kTokens = 24;
  SynthFile f(c.preset, c.type);
  auto m = model::Model::Load(f.path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::string skip;
  auto dec = MakeDecoder(**m, kTokens, &skip, 8);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_TRUE(dec.ok()) << dec.status().ToString();
  const DeviceRows rows = RunDevice(dec->get(), kTokens, 7);

  const model::ModelConfig& mc = (*m)->config();
  engine::KvCacheOptions co;
  co.n_layer = mc.n_layer;
  co.n_head_kv = mc.n_head_kv;
  co.head_dim = mc.head_dim;
  co.type = engine::KvType::kF16;
  co.max_seq_len = kTokens;
  co.n_blocks = engine::KvCacheOptions::BlocksFor(kTokens, 1, co.block_size);
  auto cache = engine::KvCache::Create(co);
  ASSERT_TRUE(cache.ok());
  ThreadPool pool(2);
  auto cpu = model::Decoder::Create(**m, cache->get(), model::DecoderOptions{}, &pool);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  double tol = 1e-3;
  switch (c.type) {
    case model::SynthFileType::kF16:
      tol = 5e-3;
      break;
    case model::SynthFileType::kBF16:
      tol = 1e-2;
      break;
    default:
      tol = 3e-2;
  }
  const bool k_quant =
      c.type == model::SynthFileType::kQ4_K_M || c.type == model::SynthFileType::kQ6_K;
  int64_t close = 0;  // rows within 1e-4
  double worst = 0;
  int64_t agree = 0, over = 0;
  const int64_t v = mc.n_vocab;
  for (int64_t p = 0; p < kTokens; ++p) {
    model::Batch b;
    b.Add(TokenAt(p), static_cast<int32_t>(p), 0, true);
    ASSERT_TRUE((*cpu)->Forward(b).ok());
    const float* want = (*cpu)->logits(0);
    const std::vector<float>& got = rows.stepped[p];
    double row = 0;
    for (int64_t i = 0; i < v; ++i) {
      row = std::max<double>(row, std::fabs(got[i] - want[i]) / std::max(1.0f, std::fabs(want[i])));
    }
    worst = std::max(worst, row);
    over += row > tol;
    close += row <= 1e-4;
    agree += std::max_element(got.begin(), got.end()) - got.begin() ==
             std::max_element(want, want + v) - want;
  }
  std::printf(
      "[gpu moe] %s %s: max error against the CPU %.2e (tol %.1e; %lld rows over), "
      "%lld rows within 1e-4, arg-max %lld/%lld, batched rows bit-identical %lld/%lld\n",
      c.preset.c_str(), std::string(model::SynthFileTypeName(c.type)).c_str(), worst, tol,
      static_cast<long long>(over), static_cast<long long>(close), static_cast<long long>(agree),
      static_cast<long long>(kTokens), static_cast<long long>(rows.batched_equal),
      static_cast<long long>(kTokens));
  EXPECT_LE(worst, tol);
  if (k_quant) {
    EXPECT_GE(close, kTokens - 2) << "K-quant rows past 1e-4 of the CPU's";
  }
  EXPECT_EQ(rows.batched_equal, kTokens) << "batched rows differ from single steps";
}

INSTANTIATE_TEST_SUITE_P(Types, GpuMoeTypeTest,
                         ::testing::Values(TypeCase{"tiny-qwen3moe", model::SynthFileType::kQ8_0},
                                           TypeCase{"tiny-qwen3moe", model::SynthFileType::kQ4_0},
                                           TypeCase{"tiny-qwen3moe", model::SynthFileType::kQ4_K_M},
                                           TypeCase{"tiny-qwen3moe", model::SynthFileType::kQ6_K},
                                           TypeCase{"tiny-qwen3moe", model::SynthFileType::kF16},
                                           TypeCase{"tiny-qwen3moe", model::SynthFileType::kBF16},
                                           TypeCase{"tiny-mixtral", model::SynthFileType::kQ4_K_M},
                                           TypeCase{"tiny-mixtral", model::SynthFileType::kF16},
                                           TypeCase{"tiny-gpt-oss", model::SynthFileType::kMXFP4},
                                           TypeCase{"tiny-gpt-oss", model::SynthFileType::kQ4_K_M},
                                           TypeCase{"tiny-gpt-oss", model::SynthFileType::kBF16}),
                         [](const auto& info) {
                           std::string s = info.param.preset + "_" +
                                           std::string(model::SynthFileTypeName(info.param.type));
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// gpt-oss's sliding-window layers and sinks with attention split over positions (chunks of 16
// positions: the 32-position window of the even layer covers 2-3 chunks and skips the earlier
// ones, the odd layer's full context up to 7), over a paged cache of 4-position blocks: decode
// steps against the CPU decoder (Q8_0 weights, which the device multiplies as the CPU does), and
// the same positions again as batches of 19 beside nothing else, every row bit-identical to its
// decode step.
TEST(GpuMoe, GptOssSplitWindowedAttention) {
  constexpr int64_t kTokens = 100;
  SynthFile f("tiny-gpt-oss", model::SynthFileType::kQ8_0);
  auto loaded = model::Model::Load(f.path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const model::Model& m = **loaded;
  std::string skip;
  if (!gpu::VulkanCompiledIn()) GTEST_SKIP() << "built without the Vulkan backend";
  if (auto d = gpu::ListDevices(); !d.ok()) GTEST_SKIP() << d.status().ToString();
  ASSERT_GT(m.config().n_swa, 0);
  engine::KvCacheOptions co;
  co.n_layer = m.config().n_layer;
  co.n_head_kv = m.config().n_head_kv;
  co.head_dim = m.config().head_dim;
  co.block_size = 4;
  co.max_seq_len = kTokens;
  co.n_blocks = engine::KvCacheOptions::BlocksFor(kTokens, 1, co.block_size);
  co.type = engine::KvType::kF16;
  co.host_storage = false;
  auto cache = engine::KvCache::Create(co);
  ASSERT_TRUE(cache.ok());
  auto fwd = gpu::GpuForward::Create(m, gpu::DeviceSpec{.vulkan = true, .index = -1}, cache->get(),
                                     {.max_batch = 32, .attention_chunk = 16});
  ASSERT_TRUE(fwd.ok()) << fwd.status().ToString();
  const int64_t v = m.config().n_vocab;
  std::vector<float> steps(kTokens * v);
  model::Batch b;
  for (int64_t p = 0; p < kTokens; ++p) {
    b.Clear();
    b.Add(TokenAt(p), static_cast<int32_t>(p), 0, true);
    ASSERT_TRUE((*fwd)->Forward(b).ok());
    std::memcpy(steps.data() + p * v, (*fwd)->logits(0), v * 4);
  }
  (*cache)->Truncate(0, 0);
  int64_t equal = 0;
  for (int64_t p0 = 0; p0 < kTokens; p0 += 19) {
    b.Clear();
    for (int64_t p = p0; p < std::min(kTokens, p0 + 19); ++p) {
      b.Add(TokenAt(p), static_cast<int32_t>(p), 0, true);
    }
    ASSERT_TRUE((*fwd)->Forward(b).ok());
    for (int64_t i = 0; i < b.size(); ++i) {
      equal += std::memcmp((*fwd)->logits(i), steps.data() + (p0 + i) * v, v * 4) == 0;
    }
  }
  EXPECT_EQ(equal, kTokens) << "batched rows differ from decode steps with split attention";

  engine::KvCacheOptions cco = co;
  cco.host_storage = true;
  auto cpu_cache = engine::KvCache::Create(cco);
  ASSERT_TRUE(cpu_cache.ok());
  // The scalar tier: its Q8_0 activations are the device's (the AVX2 tier's round differently
  // and alone move this model's rows by up to 1e-2 from pos 69 on).
  const kernels::Isa isa = kernels::ActiveIsa();
  kernels::SetIsaForTesting(kernels::Isa::kScalar);
  ThreadPool pool(2);
  auto dec = model::Decoder::Create(m, cpu_cache->get(), model::DecoderOptions{}, &pool);
  ASSERT_TRUE(dec.ok()) << dec.status().ToString();
  double worst = 0;
  int64_t off = 0;
  for (int64_t p = 0; p < kTokens; ++p) {
    b.Clear();
    b.Add(TokenAt(p), static_cast<int32_t>(p), 0, true);
    ASSERT_TRUE((*dec)->Forward(b).ok());
    double row = 0;
    for (int64_t i = 0; i < v; ++i) {
      const float want = (*dec)->logits(0)[i], got = steps[p * v + i];
      row = std::max<double>(row, std::fabs(got - want) / std::max(1.0f, std::fabs(want)));
    }
    worst = std::max(worst, row);
    off += row > 1e-4;
  }
  kernels::SetIsaForTesting(isa);
  std::printf(
      "[gpu moe] tiny-gpt-oss q8_0, attention in chunks of 16: max error against the CPU "
      "%.2e (%lld rows past 1e-4), batched rows bit-identical %lld/%lld\n",
      worst, static_cast<long long>(off), static_cast<long long>(equal),
      static_cast<long long>(kTokens));
  // Measured on lavapipe: every row equal to the CPU's bits but position 1's (1.5e-3; a
  // rounding amplified, not a rule: a wrong window or sink moves rows by ~0.1 from position 32).
  EXPECT_LT(worst, 3e-3);
  EXPECT_LE(off, 3);
}

// The serving engine on the device with a MoE model (tiny-gpt-oss in MXFP4: experts, sinks, a
// 32-position window the requests run past): 3 requests together with n-gram speculation
// (multi-token verify steps beside other sequences' decode rows) give, token for token, the
// device's own one-request-at-a-time run without speculation.
TEST(GpuMoe, ServeGreedyIsTheSameBatchedAndSpeculated) {
  if (!gpu::VulkanCompiledIn()) GTEST_SKIP() << "built without the Vulkan backend";
  if (auto d = gpu::ListDevices(); !d.ok()) GTEST_SKIP() << d.status().ToString();
  SynthFile f("tiny-gpt-oss", model::SynthFileType::kMXFP4);
  auto m = model::Model::Load(f.path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto tok = Tokenizer::FromGguf((*m)->file());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::vector<std::string> prompts = {"First Citizen: speak, speak. First Citizen: speak,",
                                            "ROMEO: what light", "to be or not to"};
  const auto run = [&](bool speculate, bool together, engine::EngineStats* stats) {
    engine::ServiceOptions o;
    o.max_seqs = 3;
    o.ctx = 96;
    o.n_threads = 2;
    o.spec_cost = engine::SpecCostModel{};  // drafts follow acceptance, not measured times
    engine::testing_service::StepGate gate;
    if (together) o.step_hook = gate.Hook();
    o.make_forward =
        [&m](engine::KvCache* cache,
             const model::DecoderOptions& d) -> StatusOr<std::unique_ptr<model::BatchForward>> {
      UF_ASSIGN_OR_RETURN(
          std::unique_ptr<gpu::GpuForward> fwd,
          gpu::GpuForward::Create(**m, gpu::DeviceSpec{.vulkan = true, .index = -1}, cache,
                                  {.max_batch = d.max_batch, .max_outputs = d.max_outputs}));
      return std::unique_ptr<model::BatchForward>(std::move(fwd));
    };
    auto s = engine::Service::Create(**m, **tok, o);
    UF_CHECK(s.ok()) << s.status().ToString();
    std::vector<std::shared_ptr<engine::RequestChannel>> chans;
    std::vector<engine::testing_service::Output> out;
    for (const std::string& p : prompts) {
      engine::GenerationRequest r;
      r.prompt = (*tok)->Encode(p, true, false);
      r.max_tokens = 48;
      r.sampling.temperature = 0.0f;
      r.ignore_eos = true;
      r.top_logprobs = 0;
      r.speculation = engine::SpeculationRequest{
          speculate ? engine::SpecMode::kNgram : engine::SpecMode::kOff, 6};
      auto ch = (*s)->Submit(std::move(r));
      UF_CHECK(ch.ok()) << ch.status().ToString();
      if (together) {
        chans.push_back(*ch);
      } else {
        out.push_back(engine::testing_service::Collect(**ch));
      }
    }
    gate.Open();
    for (auto& ch : chans) out.push_back(engine::testing_service::Collect(*ch));
    *stats = engine::testing_service::SettledStats(**s);
    return out;
  };
  engine::EngineStats plain_stats, spec_stats;
  const auto plain = run(false, false, &plain_stats);
  const auto spec = run(true, true, &spec_stats);
  ASSERT_EQ(plain.size(), spec.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(plain[i].tokens.size(), 48u) << "request " << i;
    EXPECT_EQ(spec[i].tokens, plain[i].tokens) << "request " << i;
    EXPECT_EQ(spec[i].text, plain[i].text) << "request " << i;
  }
  std::printf(
      "[gpu moe] serve tiny-gpt-oss mxfp4: %zu requests together, speculation drafted "
      "%lld accepted %lld\n",
      spec.size(), static_cast<long long>(spec_stats.spec_drafted),
      static_cast<long long>(spec_stats.spec_accepted));
  EXPECT_GT(spec_stats.spec_drafted, 0) << "no verify step ran";
  EXPECT_EQ(spec_stats.kv_blocks_used, 0);
}

// Mixtral files converted before the 3-D expert tensors hold one 2-D tensor per expert
// (blk.N.ffn_gate.E.weight): uploaded into the same stacked layout, they give the same bits.
TEST(GpuMoe, PerExpertTensorsGiveTheSameLogits) {
  SynthFile f("tiny-mixtral", model::SynthFileType::kQ4_K_M);
  const std::string split_path = f.path + ".split.gguf";
  {
    auto g = gguf::GgufFile::Open(f.path);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    gguf::GgufWriter w;
    for (const auto& [key, value] : (*g)->metadata()) w.Set(key, value);
    for (const gguf::TensorInfo& t : (*g)->tensors()) {
      const size_t pos = t.name.find("_exps.weight");
      if (pos == std::string::npos) {
        const std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
        ASSERT_TRUE(w.AddTensor(t.name, t.type, ne, t.data).ok());
        continue;
      }
      const size_t slice = t.n_bytes / t.ne[2];
      for (int64_t x = 0; x < t.ne[2]; ++x) {
        const std::string name = t.name.substr(0, pos) + "." + std::to_string(x) + ".weight";
        ASSERT_TRUE(w.AddTensor(name, t.type, {t.ne[0], t.ne[1]}, t.data + x * slice).ok());
      }
    }
    ASSERT_TRUE(w.WriteToFile(split_path).ok());
  }
  std::vector<std::vector<float>> rows[2];
  for (int i = 0; i < 2; ++i) {
    auto m = model::Model::Load(i == 0 ? f.path : split_path);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    std::string skip;
    auto dec = MakeDecoder(**m, 16, &skip);
    if (!skip.empty()) {
      std::filesystem::remove(split_path);
      GTEST_SKIP() << skip;
    }
    ASSERT_TRUE(dec.ok()) << dec.status().ToString();
    rows[i] = RunDevice(dec->get(), 16, 16).stepped;
  }
  std::filesystem::remove(split_path);
  ASSERT_EQ(rows[0].size(), rows[1].size());
  for (size_t i = 0; i < rows[0].size(); ++i) EXPECT_EQ(rows[0][i], rows[1][i]) << "position " << i;
}

}  // namespace
}  // namespace uf
