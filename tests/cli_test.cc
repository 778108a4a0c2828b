// End-to-end checks of the `ultrafast` binary (built next to this test executable): exit codes,
// error messages, and outputs checked against the reference files in ../shared.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "gguf/gguf.h"
#include "shared_data.h"
#include "tokenizer/tokenizer.h"

namespace uf {
namespace {

namespace fs = std::filesystem;

constexpr char kF32Model[] = "../shared/models/tiny-llama-f32.gguf";

struct Result {
  int code = -1;
  std::string out, err;
};

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    binary_ = fs::read_symlink("/proc/self/exe").parent_path() / "ultrafast";
    if (!fs::exists(binary_)) GTEST_SKIP() << "ultrafast binary not built at " << binary_;
    dir_ = fs::temp_directory_path() /
           ("uf_cli_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Runs `env ultrafast args` with stdin from `input`; UF_DEMO_MODEL is cleared so a developer's
  // setting cannot leak in.
  Result Run(const std::string& args, const std::string& input = "", const std::string& env = "") {
    const fs::path in = dir_ / "stdin", out = dir_ / "stdout", err = dir_ / "stderr";
    std::ofstream(in, std::ios::binary) << input;
    const std::string cmd = "env -u UF_DEMO_MODEL " + env + " " + binary_.string() + " " + args +
                            " < " + in.string() + " > " + out.string() + " 2> " + err.string();
    const int status = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = ReadFile(out);
    r.err = ReadFile(err);
    return r;
  }

  fs::path binary_, dir_;
};

TEST_F(CliTest, HelpAndUnknownCommand) {
  Result r = Run("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* cmd : {"run", "logits", "tokenize", "info"}) {
    EXPECT_NE(r.out.find(cmd), std::string::npos) << cmd;
    EXPECT_EQ(Run(std::string(cmd) + " --help").code, 0) << cmd;
  }
  EXPECT_NE(Run("frobnicate").code, 0);
  EXPECT_NE(Run("").code, 0);
}

TEST_F(CliTest, VersionNamesTheCommitAndTheCpuTier) {
  Result r = Run("--version");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(std::regex_search(
      r.out,
      std::regex(R"(^ultrafast \d+\.\d+\.\d+ \(commit ([0-9a-f]{12}(-dirty)?|unknown)\)\n)")))
      << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("CPU kernel tier: (scalar|avx2|avx512)")))
      << r.out;
  // The tier is the one the kernels will run: capped by UF_ISA as they are.
  r = Run("--version", "", "UF_ISA=scalar");
  EXPECT_NE(r.out.find("CPU kernel tier: scalar"), std::string::npos) << r.out;
}

// `cmake --install build --prefix P` gives a P/bin/ultrafast that runs the demo model from any
// working directory (the model is installed where the binary looks for it), and the docs.
TEST_F(CliTest, InstalledBinaryRunsTheDemoModel) {
  const fs::path prefix = dir_ / "prefix";
  const std::string install = "cmake --install " + binary_.parent_path().string() + " --prefix " +
                              prefix.string() + " > " + (dir_ / "install").string() + " 2>&1";
  const int status = std::system(install.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadFile(dir_ / "install");
  const fs::path bin = prefix / "bin" / "ultrafast";
  ASSERT_TRUE(fs::exists(bin));
  EXPECT_TRUE(fs::exists(prefix / "share" / "doc" / "ultrafast" / "README.md"));
  EXPECT_TRUE(fs::exists(prefix / "share" / "doc" / "ultrafast" / "serving.md"));
  // From the temp folder: no ./models/demo.gguf to fall back on.
  const std::string run = "cd " + dir_.string() + " && env -u UF_DEMO_MODEL " + bin.string() +
                          " run -n 4 -t 1 --seed 1 > out 2> err";
  const int rs = std::system(run.c_str());
  ASSERT_TRUE(WIFEXITED(rs));
  EXPECT_EQ(WEXITSTATUS(rs), 0) << ReadFile(dir_ / "err");
  EXPECT_EQ(ReadFile(dir_ / "out").rfind("ROMEO:", 0), 0u) << ReadFile(dir_ / "out");
}

TEST_F(CliTest, TokenizeMatchesReferenceTokens) {
  UF_REQUIRE_SHARED();
  // ../shared/golden/tiny-llama-f32.jsonl: "Once upon a time" -> [1, 9038, 2501, 263, 931].
  Result r = Run(std::string("tokenize -m ") + kF32Model + " --bos", "Once upon a time");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "1 9038 2501 263 931\n");
  r = Run(std::string("tokenize -m ") + kF32Model, "Once upon a time");
  EXPECT_EQ(r.out, "9038 2501 263 931\n");
}

TEST_F(CliTest, LogitsReproduceGoldenFile) {
  UF_REQUIRE_SHARED();
  // First and third golden prompts (the third has \n escapes to undo).
  std::ifstream golden("../shared/golden/tiny-llama-f32.jsonl");
  std::ifstream prompts_in("../shared/golden/prompts.txt");
  std::string g0, g1, g2, p0, p1, p2;
  std::getline(golden, g0), std::getline(golden, g1), std::getline(golden, g2);
  std::getline(prompts_in, p0), std::getline(prompts_in, p1), std::getline(prompts_in, p2);
  std::ofstream(dir_ / "prompts.txt") << p0 << "\n\n" << p2 << "\n";  // empty line skipped
  // F32 K/V, as the reference computed them (the default F16 cache rounds K/V; golden_test
  // states its tolerance).
  Result r = Run(std::string("logits -t 1 --kv-type f32 -m ") + kF32Model + " --prompts " +
                 (dir_ / "prompts.txt").string());
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string l0, l2, extra;
  ASSERT_TRUE(std::getline(lines, l0));
  ASSERT_TRUE(std::getline(lines, l2));
  EXPECT_FALSE(std::getline(lines, extra));
  for (const auto& [ours_line, ref_line] : {std::pair{l0, g0}, std::pair{l2, g2}}) {
    // The prompt and token fields must be byte-identical (same JSON escaping).
    const std::string head = ref_line.substr(0, ref_line.find("\"positions\""));
    EXPECT_EQ(ours_line.substr(0, head.size()), head);
    const auto ours = nlohmann::json::parse(ours_line), ref = nlohmann::json::parse(ref_line);
    ASSERT_EQ(ours["positions"].size(), ref["positions"].size());
    for (size_t i = 0; i < ref["positions"].size(); ++i) {
      const auto& a = ours["positions"][i];
      const auto& b = ref["positions"][i];
      ASSERT_EQ(a.size(), 8u);
      EXPECT_EQ(a[0][0], b[0][0]) << "position " << i;
      // F32 model: our logits equal the reference's to ~4e-6 (see golden_test.cc).
      for (size_t j = 0; j < 8; ++j)
        EXPECT_NEAR(a[j][1].get<double>(), b[j][1].get<double>(), 1e-4);
    }
  }
}

TEST_F(CliTest, GreedyRunContinuesWithTheReferenceArgmax) {
  UF_REQUIRE_SHARED();
  // The reference's best next token after "Once upon a time" (last position of the first golden
  // prompt) is 14452; greedy generation must print its text right after the prompt.
  auto file = gguf::GgufFile::Open(kF32Model);
  ASSERT_TRUE(file.ok());
  auto tok = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tok.ok());
  const std::string piece = (*tok)->TokenToPiece(14452);
  Result r = Run(std::string("run -m ") + kF32Model +
                 " -p \"Once upon a time\" -n 4 --temp 0 -t 1 --seed 3");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.substr(0, 16 + piece.size()), "Once upon a time" + piece) << r.out;
  for (const char* what :
       {"load:", "prompt: 5 tokens", "tok/s", "decode: 3 tokens", "time to first token"}) {
    EXPECT_NE(r.err.find(what), std::string::npos) << what << " in " << r.err;
  }
  // Same seed, same sampled text.
  const std::string sampled = std::string("run -m ") + kF32Model + " -p Hello -n 12 -t 1 --seed 9";
  Result a = Run(sampled), b = Run(sampled);
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
}

TEST_F(CliTest, RunErrorsAreClear) {
  UF_REQUIRE_SHARED();
  Result r = Run(std::string("run -m ") + kF32Model + " -p hi -n 100 --ctx 50");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("context"), std::string::npos) << r.err;
  r = Run("run -m /nonexistent/model.gguf -p hi");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r.err;
  r = Run(std::string("run -m ") + kF32Model + " -p hi --top-p 0");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("top_p"), std::string::npos) << r.err;
  r = Run(std::string("run -m ") + kF32Model);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("-p"), std::string::npos) << r.err;
  // A file that is not GGUF.
  std::ofstream(dir_ / "junk.gguf") << "definitely not a model";
  r = Run("info -m " + (dir_ / "junk.gguf").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_FALSE(r.err.empty());
}

TEST_F(CliTest, DemoModelIsFoundThroughEnvironment) {
  UF_REQUIRE_SHARED();
  const std::string cmd = "env UF_DEMO_MODEL=" + fs::absolute(kF32Model).string() + " " +
                          binary_.string() + " run -n 2 -t 1 --seed 1 > " +
                          (dir_ / "out").string() + " 2> " + (dir_ / "err").string();
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << ReadFile(dir_ / "err");
  EXPECT_EQ(ReadFile(dir_ / "out").rfind("ROMEO:", 0), 0u);
}

TEST_F(CliTest, InfoReportsBytesPerToken) {
  UF_REQUIRE_SHARED();
  Result r = Run(std::string("info -m ") + kF32Model);
  ASSERT_EQ(r.code, 0) << r.err;
  // tiny-llama-f32 (../shared/models/README.md): dim 64, 2 layers, 4 heads, 2 kv heads (head 16),
  // ffn 172, vocab 32000, untied output, all F32. Per layer: q 64x64, k 64x32, v 64x32,
  // o 64x64, gate/up/down 3 x 64x172; plus the 32000x64 output matrix.
  const int64_t per_layer = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 172;
  const int64_t bytes = 4 * (2 * per_layer + 32000 * 64);
  EXPECT_NE(r.out.find("bytes read per token: " + std::to_string(bytes)), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("llama"), std::string::npos);
}

TEST_F(CliTest, BenchPrintsJsonWithBandwidthFigures) {
  UF_REQUIRE_SHARED();
  Result r = Run(std::string("bench -m ") + kF32Model +
                 " -p 16 -n 8 -t 1 --reps 1 --depth 4 --batch 1,2 --batch-steps 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j.value("n_prompt", -1), 16);
  EXPECT_EQ(j.value("n_gen", -1), 8);
  EXPECT_GT(j.value("pp_tok_s", 0.0), 0.0);
  EXPECT_GT(j.value("tg_tok_s", 0.0), 0.0);
  // The matrices `info` counts (see InfoReportsBytesPerToken), plus what decode also reads: one
  // F32 embedding row (64 floats) and the K/V rows attention reads, averaged over the 8 decode
  // steps after a depth of 4: 2 (K and V) x 2 layers x kv_dim 32 x 2 bytes (the default F16
  // cache) per position, 4 + (8 + 1) / 2 positions.
  const int64_t per_layer = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 172;
  const int64_t matrices = 4 * (2 * per_layer + 32000 * 64);
  const int64_t kv = 2 * 2 * 32 * 2 * (4 * 2 + 9) / 2;
  EXPECT_EQ(j.value("depth", -1), 4);
  EXPECT_EQ(j.value("kv_type", ""), "f16");
  EXPECT_EQ(j.value("kv_bytes_per_token", int64_t{0}), kv);
  EXPECT_EQ(j.value("bytes_per_token", int64_t{0}), matrices + 64 * 4 + kv);
  EXPECT_GT(j.value("bandwidth_gb_s", 0.0), 0.0);
  EXPECT_GT(j.value("roofline_fraction", 0.0), 0.0);
  // The second estimate: the 8 decode steps in 2 segments of 4, each between probe passes.
  EXPECT_EQ(j.value("interleaved_segments", -1), 2);
  EXPECT_GT(j.value("roofline_fraction_interleaved", 0.0), 0.0);
  // A batched step of 2 sequences: the matrices once (a dense model), and each sequence's
  // embedding row and K/V rows at the mean of the 2 timed positions after the depth, 4 + 3 / 2
  // (256 bytes of K/V a position: 2 x 2 layers x 32 x 2 bytes).
  ASSERT_TRUE(j["batch_step_bytes"].is_object()) << r.out;
  EXPECT_DOUBLE_EQ(j["batch_step_bytes"].value("2", 0.0),
                   static_cast<double>(matrices) + 2 * (64 * 4 + 256 * 5.5));
  EXPECT_DOUBLE_EQ(j["batch_step_bytes"].value("1", 0.0),
                   static_cast<double>(matrices) + 64 * 4 + 256 * 5.5);
  for (const char* b : {"1", "2"}) {
    EXPECT_GT(j["batch_roofline"].value(b, 0.0), 0.0) << b;
    EXPECT_GT(j["batch_tok_s"].value(b, 0.0), 0.0) << b;
  }
  // Prefill against the arithmetic peak: 2 ops per weight of every layer matrix per prompt
  // token, and of the output matrix once (logits of the last token only); for this all-F32
  // model the f32 FMA peak is the only ceiling.
  const double pp_tok_s = j.value("pp_tok_s", 0.0);
  const double peak = j.value("peak_f32_gflops", 0.0);
  EXPECT_GT(peak, 0.0);
  EXPECT_GT(j.value("peak_int8_gops", 0.0), 0.0);
  const double prefill_ops = 2.0 * (16.0 * 2 * per_layer + 32000 * 64);  // 2 layers, 16 tokens
  EXPECT_NEAR(j.value("pp_gops", 0.0), pp_tok_s / 16 * prefill_ops / 1e9, 1e-9 * pp_tok_s);
  EXPECT_NEAR(j.value("pp_peak_fraction", 0.0), j.value("pp_gops", 0.0) / peak, 1e-9);
  // A bad model path is a clear error, not a crash.
  r = Run("bench -m " + (dir_ / "missing.gguf").string() + " --json");
  EXPECT_EQ(r.code, 1);
  EXPECT_FALSE(r.err.empty());
}

// `synth --ff` on a mixture of experts sets the experts' width, and the file loads: a llama-family
// MoE (Mixtral) stores only one feed-forward length, so overriding the dense width alone wrote
// experts of the preset's 14,336 rows under a header saying 512, which no loader accepts.
TEST_F(CliTest, SynthFeedForwardOverrideShapesTheExperts) {
  const std::string file = (dir_ / "mixtral.gguf").string();
  Result r =
      Run("synth --preset mixtral-8x7b --layers 1 --embd 256 --heads 4 --kv-heads 2 --ff 512 "
          "--type q8_0 -t 1 -o " +
          file);
  ASSERT_EQ(r.code, 0) << r.err;
  r = Run("info -m " + file);
  EXPECT_EQ(r.code, 0) << r.err;
  r =
      Run("synth --preset qwen3-30b-a3b --layers 1 --embd 256 --heads 4 --kv-heads 2 --ff 192 "
          "--type q8_0 --dry-run");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("[256, 192, 128]"), std::string::npos) << r.out;  // ffn_gate_exps
}

}  // namespace
}  // namespace uf
