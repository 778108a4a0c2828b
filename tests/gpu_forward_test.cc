// The whole forward on a Vulkan device (gpu::GpuDecoder) against the reference logits in
// ../shared/golden and against the CPU path's greedy choices, plus the error a machine without a
// Vulkan driver gets. Runs on Mesa's lavapipe in CI; skips, saying why, where no device exists.
//
// Tolerances are golden_test.cc's for the device cache's K/V type: the weights' own (F32 1e-3,
// F16 5e-3, BF16 1e-2, quantized 3e-2 of max(1, |logit|)) plus 1e-2 for f16 K/V (arg-max
// agreement >= 98% for float weights, 90% quantized; 100% where the reference's top-1 leads its
// top-2 by 5%) or 3e-2 for q8_0 K/V (95% / 85%; 100% where it leads by 10%). The GPU runs the CPU
// path's arithmetic (activations rounded to F16 / BF16 or quantized to Q8_0 before each product,
// RoPE angles from the same function) in another summation order, so it sits in the same noise as
// the CPU path's own SIMD tiers; Q4_K and Q6_K take f32 activations where the CPU quantizes them to
// Q8_K.
//
// Every golden prompt also runs as one batch (the multi-token forward): each of its rows must be
// bit-identical to the same position run one token at a time.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "base/thread_pool.h"
#include "engine/kv_cache.h"
#include "gpu/backend.h"
#include "model/batch.h"
#include "model/decoder.h"
#include "model/model.h"
#include "scoped_env.h"
#include "shared_data.h"

namespace uf {
namespace {

namespace fs = std::filesystem;

// Positions compared per model: lavapipe on 2 cores runs ~50 tiny-model steps a second.
constexpr size_t kMaxPositions = 64;

struct Golden {
  std::vector<int32_t> tokens;
  std::vector<std::vector<std::pair<int32_t, float>>> top;
};

std::vector<Golden> LoadGolden(const std::string& path) {
  std::vector<Golden> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    Golden g;
    g.tokens = j["prompt_tokens"].get<std::vector<int32_t>>();
    for (const auto& pos : j["positions"]) {
      std::vector<std::pair<int32_t, float>> top;
      for (const auto& p : pos) top.emplace_back(p[0].get<int32_t>(), p[1].get<float>());
      g.top.push_back(std::move(top));
    }
    out.push_back(std::move(g));
  }
  return out;
}

// A decoder on the first Vulkan device, or a reason to skip: no backend, no device. Any other
// error (a weight type without a kernel) is returned as such.
StatusOr<std::unique_ptr<gpu::GpuDecoder>> MakeDecoder(
    const model::Model& m, int64_t ctx, std::string* skip, int64_t max_batch = 64,
    engine::KvType kv_type = engine::KvType::kF16,
    gpu::GemvVariant gemv = gpu::GemvVariant::kDefault) {
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
                                 kv_type, gemv);
}

double FamilyTolerance(const model::Model& m) {
  double tol = 1e-3;
  for (const auto& l : m.weights().layers) {
    for (const kernels::Matrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down}) {
      tol = std::max(tol, w->type() == GgmlType::kF32    ? 1e-3
                          : w->type() == GgmlType::kF16  ? 5e-3
                          : w->type() == GgmlType::kBF16 ? 1e-2
                                                         : 3e-2);
    }
  }
  return tol;
}

// Logits rows against a golden prompt's top-8 at each position: arg-max agreement (overall, and
// where the reference's top-1 leads its top-2 by clear_gap of max(1, |top-1|)) and each listed
// logit's error relative to max(1, |reference|), counted past tol.
struct GoldenScore {
  double tol = 0.0, clear_gap = 0.0;
  size_t positions = 0, agree = 0, clear = 0, clear_agree = 0, over = 0;
  double max_err = 0.0;
  void Add(const float* l, int64_t n_vocab, const std::vector<std::pair<int32_t, float>>& ref) {
    const int32_t ours = static_cast<int32_t>(std::max_element(l, l + n_vocab) - l);
    ++positions;
    agree += ours == ref[0].first;
    if (ref[0].second - ref[1].second >= clear_gap * std::max(1.0f, std::fabs(ref[0].second))) {
      ++clear;
      clear_agree += ours == ref[0].first;
    }
    for (const auto& [id, v] : ref) {
      const double err = std::fabs(l[id] - v) / std::max(1.0f, std::fabs(v));
      max_err = std::max(max_err, err);
      over += err > tol;
    }
  }
  double agreement() const { return static_cast<double>(agree) / positions; }
};

// One shared model's logits on the device against its goldens (GpuGoldenTest), stepped and as
// one batch (bit-identical rows).
void CheckGolden(const std::string& name, engine::KvType kv_type, gpu::GemvVariant gemv) {
  const bool q8_kv = kv_type == engine::KvType::kQ8_0;
  const std::string path = "../shared/models/" + name + ".gguf";
  const std::string golden_path = "../shared/golden/" + name + ".jsonl";
  UF_REQUIRE_SHARED();
  auto loaded = model::Model::Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const model::Model& m = **loaded;
  const auto golden = LoadGolden(golden_path);
  ASSERT_FALSE(golden.empty());
  int64_t max_len = 0;
  for (const auto& g : golden) max_len = std::max<int64_t>(max_len, g.tokens.size());
  std::string skip;
  auto dec = MakeDecoder(m, max_len, &skip, max_len, kv_type, gemv);
  if (!skip.empty()) GTEST_SKIP() << skip;
  if (q8_kv && m.config().head_dim % 32 != 0) {
    // Q8_0 rows are whole 32-value blocks: such a model is refused, as on the CPU.
    ASSERT_FALSE(dec.ok());
    EXPECT_NE(dec.status().message().find("multiple of 32"), std::string::npos);
    return;
  }
  ASSERT_TRUE(dec.ok()) << dec.status().ToString();

  // golden_test.cc's K/V terms: f16 adds 1e-2, q8_0 3e-2 (and asks clear choices to lead by 10%).
  GoldenScore score{.tol = FamilyTolerance(m) + (q8_kv ? 3e-2 : 1e-2),
                    .clear_gap = q8_kv ? 0.10 : 0.05};
  const bool quantized = FamilyTolerance(m) > 1e-2;
  const int64_t n_vocab = m.config().n_vocab;
  size_t batch_rows = 0, batch_equal = 0;
  std::vector<float> stepped;
  for (const auto& g : golden) {
    if (score.positions >= kMaxPositions) break;
    stepped.resize(g.tokens.size() * n_vocab);
    for (size_t i = 0; i < g.tokens.size(); ++i) {
      ASSERT_TRUE((*dec)->Step(g.tokens[i], static_cast<int32_t>(i)).ok());
      const float* l = (*dec)->logits();
      std::copy(l, l + n_vocab, stepped.begin() + i * n_vocab);
      score.Add(l, n_vocab, g.top[i]);
    }
    // The same prompt as one batch (the device cache rewound to position 0).
    ASSERT_TRUE((*dec)->Prefill(g.tokens, 0, /*every_logits=*/true).ok());
    for (size_t i = 0; i < g.tokens.size(); ++i) {
      ++batch_rows;
      batch_equal +=
          std::memcmp((*dec)->all_logits(i), stepped.data() + i * n_vocab, n_vocab * 4) == 0;
    }
  }
  std::printf(
      "[gpu golden] %-24s %s K/V%s on %s: positions=%zu argmax=%.2f%% clear=%zu/%zu "
      "max_err=%.2e (tol %.1e), batch rows bit-identical %zu/%zu\n",
      name.c_str(), engine::KvTypeName(kv_type),
      gemv == gpu::GemvVariant::kWide ? ", wide GEMV" : "", (*dec)->device().name.c_str(),
      score.positions, 100.0 * score.agreement(), score.clear_agree, score.clear, score.max_err,
      score.tol, batch_equal, batch_rows);
  EXPECT_EQ(batch_equal, batch_rows) << "batched rows differ from single-token steps";
  EXPECT_GE(score.agreement(), q8_kv ? (quantized ? 0.85 : 0.95) : (quantized ? 0.90 : 0.98));
  EXPECT_EQ(score.clear_agree, score.clear);
  EXPECT_EQ(score.over, 0u) << "logits past tolerance " << score.tol << ", max relative error "
                            << score.max_err;
}

class GpuGoldenTest : public ::testing::TestWithParam<std::tuple<std::string, engine::KvType>> {};

TEST_P(GpuGoldenTest, LogitsMatchReference) {
  CheckGolden(std::get<0>(GetParam()), std::get<1>(GetParam()), gpu::GemvVariant::kBasic);
}

// s with every character but letters and digits as '_' (a gtest parameter's name).
std::string TestName(std::string s) {
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}
std::string ModelName(const ::testing::TestParamInfo<std::string>& info) {
  return TestName(info.param);
}

// The wide GEMV (gpu::GemvVariant::kWide) on the models with F16, Q8_0 and Q4_0 weights (the
// types it has kernels for), with the same tolerances and batch rows bit-identical to steps.
class GpuGoldenWideTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuGoldenWideTest, LogitsMatchReference) {
  CheckGolden(GetParam(), engine::KvType::kF16, gpu::GemvVariant::kWide);
}
INSTANTIATE_TEST_SUITE_P(WideGemv, GpuGoldenWideTest,
                         ::testing::Values("tiny-llama-256-f16", "tiny-llama-256-q8_0",
                                           "tiny-llama-256-q4_0", "tiny-qwen3-256-q8_0"),
                         ModelName);

std::vector<std::string> Models() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("../shared/models", ec)) {
    if (e.path().extension() == ".gguf") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string GoldenName(const ::testing::TestParamInfo<GpuGoldenTest::ParamType>& info) {
  return TestName(std::get<0>(info.param) + "_kv_" + engine::KvTypeName(std::get<1>(info.param)));
}

// Every shared model with the f16 device cache.
INSTANTIATE_TEST_SUITE_P(SharedModels, GpuGoldenTest,
                         ::testing::Combine(::testing::ValuesIn(Models()),
                                            ::testing::Values(engine::KvType::kF16)),
                         GoldenName);
// The q8_0 device cache on one model of each architecture and weight family (lavapipe is slow),
// and the refusal of a head dimension that is not a multiple of 32 (tiny-llama-f32: 16).
INSTANTIATE_TEST_SUITE_P(
    Q8Cache, GpuGoldenTest,
    ::testing::Combine(::testing::Values("tiny-llama-f32", "tiny-llama-256-f16",
                                         "tiny-llama-256-q4_k_m", "tiny-qwen2-256-q4_k_m",
                                         "tiny-qwen3-256-q8_0"),
                       ::testing::Values(engine::KvType::kQ8_0)),
    GoldenName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GpuGoldenTest);

// Attention tiled in every step (UF_GPU_ATTENTION=tiled; by default decode steps keep the token
// kernel): each decode step through attention_tiled.comp's one-token tiles, each prompt as one
// batch through its widest tiles, against the goldens, the batch rows bit-identical to the steps
// (CheckGolden). tiny-llama-f32 has head_dim 16 and 2 query heads a KV head; the q8_0 cache on
// one model.
class GpuTiledAttention : public ::testing::TestWithParam<std::tuple<std::string, engine::KvType>> {
};

TEST_P(GpuTiledAttention, EveryStepMatchesReference) {
  ScopedEnv env("UF_GPU_ATTENTION", "tiled");
  CheckGolden(std::get<0>(GetParam()), std::get<1>(GetParam()), gpu::GemvVariant::kBasic);
}
INSTANTIATE_TEST_SUITE_P(
    Models, GpuTiledAttention,
    ::testing::Values(std::make_tuple("tiny-llama-256-f16", engine::KvType::kF16),
                      std::make_tuple("tiny-llama-256-f16", engine::KvType::kQ8_0),
                      std::make_tuple("tiny-llama-f32", engine::KvType::kF16),
                      std::make_tuple("tiny-qwen3-256-q8_0", engine::KvType::kF16)),
    GoldenName);

// The tiled GEMM (gpu::MatMul, UF_GPU_MATMUL) on the F16, BF16, Q8_0, Q4_0, Q4_K_M and Q6_K models
// (and qwen2's, whose q/k/v biases the tiled GEMM adds): every golden
// prompt as one batch, each row against the goldens with CheckGolden's tolerances. Batches of 16
// tokens or more (four of the six prompts, 56-546 tokens) take the products through it, the
// lm_head's included where it has its type; 5 and 13 tokens keep the token-tiled kernels. Its
// rows are not the steps' bits (the sums' order differs, and quantized operands go through f16),
// so that is not compared. On lavapipe the plain kernels run; where the device has the matrix
// units the coopmat ones run as well.
class GpuTiledGemm : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuTiledGemm, BatchRowsMatchReference) {
  const std::string name = GetParam();
  UF_REQUIRE_SHARED();
  auto loaded = model::Model::Load("../shared/models/" + name + ".gguf");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const model::Model& m = **loaded;
  const auto golden = LoadGolden("../shared/golden/" + name + ".jsonl");
  ASSERT_FALSE(golden.empty());
  int64_t max_len = 0;
  for (const auto& g : golden) max_len = std::max<int64_t>(max_len, g.tokens.size());
  std::vector<const char*> modes = {"tiled"};
  if (gpu::VulkanCompiledIn()) {
    auto devices = gpu::ListDevices();
    if (devices.ok() && !devices->empty() && (*devices)[0].coopmat) modes.push_back("coopmat");
  }
  for (const char* mode : modes) {
    SCOPED_TRACE(mode);
    std::string skip;
    auto dec = [&] {
      ScopedEnv env("UF_GPU_MATMUL", mode);  // read by the forward the decoder makes
      return MakeDecoder(m, max_len, &skip, max_len);
    }();
    if (!skip.empty()) GTEST_SKIP() << skip;
    ASSERT_TRUE(dec.ok()) << dec.status().ToString();
    GoldenScore score{.tol = FamilyTolerance(m) + 1e-2, .clear_gap = 0.05};
    for (const auto& g : golden) {
      ASSERT_TRUE((*dec)->Prefill(g.tokens, 0, /*every_logits=*/true).ok());
      for (size_t i = 0; i < g.tokens.size(); ++i) {
        score.Add((*dec)->all_logits(static_cast<int64_t>(i)), m.config().n_vocab, g.top[i]);
      }
    }
    std::printf(
        "[gpu golden] %s, tiled GEMM %s, prompts as batches: positions=%zu argmax=%.2f%% "
        "clear=%zu/%zu max_err=%.2e (tol %.1e)\n",
        name.c_str(), mode, score.positions, 100.0 * score.agreement(), score.clear_agree,
        score.clear, score.max_err, score.tol);
    EXPECT_GE(score.agreement(), FamilyTolerance(m) > 1e-2 ? 0.90 : 0.98);
    EXPECT_EQ(score.clear_agree, score.clear);
    EXPECT_EQ(score.over, 0u) << "logits past tolerance " << score.tol << ", max relative error "
                              << score.max_err;
  }
}
INSTANTIATE_TEST_SUITE_P(Types, GpuTiledGemm,
                         ::testing::Values("tiny-llama-256-f16", "tiny-llama-256-bf16",
                                           "tiny-llama-256-q8_0", "tiny-llama-256-q4_0",
                                           "tiny-llama-256-q4_k_m", "tiny-llama-256-q6_k",
                                           "tiny-qwen2-256-q4_k_m"),
                         ModelName);

// Greedy decoding on the CPU path (f16 K/V), then the same tokens through the GPU: at every
// generated position where the CPU's choice is clear (its top-1 leads by 2% of max(1, |top-1|)),
// the GPU's arg-max is the same token. Near-ties may flip under any change of summation order
// (the random-weight models have many: ../shared/golden/README.md), so free-running text is not
// compared past the first flip; clear choices cover the rest.
TEST(GpuGreedy, SameTokensAsCpuWhereTheChoiceIsClear) {
  for (const char* name : {"tiny-llama-256-q8_0", "tiny-llama-256-q4_0", "tiny-qwen3-256-q8_0"}) {
    SCOPED_TRACE(name);
    const std::string path = std::string("../shared/models/") + name + ".gguf";
    UF_REQUIRE_SHARED();
    auto loaded = model::Model::Load(path);
    ASSERT_TRUE(loaded.ok());
    const model::Model& m = **loaded;
    const int64_t n_gen = 32, n_vocab = m.config().n_vocab;
    const std::vector<int32_t> prompt = {1, 9038, 2501, 263, 931};
    const int64_t ctx = static_cast<int64_t>(prompt.size()) + n_gen;

    engine::KvCacheOptions co;
    co.n_layer = m.config().n_layer;
    co.n_head_kv = m.config().n_head_kv;
    co.head_dim = m.config().head_dim;
    co.max_seq_len = ctx;
    co.n_blocks = engine::KvCacheOptions::BlocksFor(ctx, 1, co.block_size);
    co.type = engine::KvType::kF16;
    auto cache = engine::KvCache::Create(co);
    ASSERT_TRUE(cache.ok());
    ThreadPool pool(1);
    auto cpu = model::Decoder::Create(m, cache->get(), {.max_batch = 1}, &pool);
    ASSERT_TRUE(cpu.ok());
    std::string skip;
    auto gpu = MakeDecoder(m, ctx, &skip);
    if (!skip.empty()) GTEST_SKIP() << skip;
    ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();

    std::vector<int32_t> seq = prompt;
    int64_t clear = 0, clear_agree = 0, agree = 0, generated = 0;
    model::Batch batch;
    for (size_t i = 0; i + 1 < static_cast<size_t>(ctx); ++i) {
      batch.Clear();
      batch.Add(seq[i], static_cast<int32_t>(i), 0, true);
      ASSERT_TRUE((*cpu)->Forward(batch).ok());
      ASSERT_TRUE((*gpu)->Step(seq[i], static_cast<int32_t>(i)).ok());
      if (i + 1 < prompt.size()) continue;
      const float* lc = (*cpu)->logits(0);
      const float* lg = (*gpu)->logits();
      std::vector<int32_t> ids(n_vocab);
      for (int32_t t = 0; t < n_vocab; ++t) ids[t] = t;
      std::partial_sort(ids.begin(), ids.begin() + 2, ids.end(),
                        [lc](int32_t a, int32_t b) { return lc[a] > lc[b]; });
      const int32_t gpu_top = static_cast<int32_t>(std::max_element(lg, lg + n_vocab) - lg);
      ++generated;
      agree += gpu_top == ids[0];
      if (lc[ids[0]] - lc[ids[1]] >= 0.02 * std::max(1.0f, std::fabs(lc[ids[0]]))) {
        ++clear;
        clear_agree += gpu_top == ids[0];
      }
      seq.push_back(ids[0]);  // the CPU's greedy token, fed to both
    }
    std::printf(
        "[gpu greedy] %-22s %lld tokens: GPU arg-max = CPU greedy at %lld, at %lld of "
        "%lld clear choices\n",
        name, static_cast<long long>(generated), static_cast<long long>(agree),
        static_cast<long long>(clear_agree), static_cast<long long>(clear));
    EXPECT_GE(clear, generated / 4) << "too few clear choices to mean anything";
    EXPECT_EQ(clear_agree, clear);
    EXPECT_GE(agree, generated * 9 / 10);
  }
}

// Without a driver: a clear error naming Vulkan and where the loader looked, exit code 1 (not a
// crash), from `devices` and from `run --device vulkan`.
TEST(GpuNoDevice, ClearErrorAndExitCode) {
  const fs::path binary = fs::read_symlink("/proc/self/exe").parent_path() / "ultrafast";
  if (!fs::exists(binary)) GTEST_SKIP() << "ultrafast binary not built at " << binary;
  const fs::path err =
      fs::temp_directory_path() / ("uf_gpu_nodev_" + std::to_string(::getpid()) + ".txt");
  const std::string model = "../shared/models/tiny-llama-256-q8_0.gguf";
  for (const std::string& args :
       {std::string("devices"), "run --device vulkan -n 2 -p hi -m " + model,
        "logits --device vulkan:3 --prompts ../shared/golden/prompts.txt -m " + model}) {
    SCOPED_TRACE(args);
    if (args.find(".gguf") != std::string::npos && !testing_shared::Present()) continue;
    const std::string cmd =
        "env VK_ICD_FILENAMES=/nonexistent/icd.json "
        "VK_DRIVER_FILES=/nonexistent/icd.json " +
        binary.string() + " " + args + " > /dev/null 2> " + err.string();
    const int status = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(status)) << "killed by a signal";
    EXPECT_EQ(WEXITSTATUS(status), 1);
    std::ifstream in(err);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string msg = ss.str();
    EXPECT_NE(msg.find("Vulkan"), std::string::npos) << msg;
    if (gpu::VulkanCompiledIn()) {
      // The loader exists here (the test links nothing of it; the binary opens it at run time)
      // or it does not: either way the message says what was searched or what to install.
      EXPECT_TRUE(msg.find("/nonexistent/icd.json") != std::string::npos ||
                  msg.find("libvulkan") != std::string::npos)
          << msg;
    }
  }
  fs::remove(err);
}

TEST(GpuDeviceSpec, Parses) {
  EXPECT_FALSE(gpu::ParseDeviceSpec("cpu")->vulkan);
  EXPECT_TRUE(gpu::ParseDeviceSpec("vulkan")->vulkan);
  EXPECT_EQ(gpu::ParseDeviceSpec("vulkan")->index, -1);
  EXPECT_EQ(gpu::ParseDeviceSpec("vulkan:2")->index, 2);
  for (const char* bad : {"gpu", "vulkan:", "vulkan:x", "vulkan:-1", "cuda", "vulkan2"}) {
    EXPECT_FALSE(gpu::ParseDeviceSpec(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace uf
