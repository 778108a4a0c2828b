// `ultrafast bench --device vulkan` with --spec, --serve and --grammar on a tiny shared model:
// each runs its workloads with the forward on the device (lavapipe in CI) and prints its figures
// (JSON here). No timing is asserted, only that the figures exist and that speculation kept the
// plain run's tokens. Skips, saying why, where no Vulkan device exists.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "gpu/backend.h"
#include "shared_data.h"

namespace uf {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr char kModel[] = "../shared/models/tiny-llama-256-q8_0.gguf";

class GpuBenchCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    UF_REQUIRE_SHARED();
    binary_ = fs::read_symlink("/proc/self/exe").parent_path() / "ultrafast";
    if (!fs::exists(binary_)) GTEST_SKIP() << "ultrafast binary not built at " << binary_;
    if (!gpu::VulkanCompiledIn()) GTEST_SKIP() << "built without the Vulkan backend";
    auto devices = gpu::ListDevices();
    if (!devices.ok()) GTEST_SKIP() << "no usable Vulkan device: " << devices.status().ToString();
    dir_ = fs::temp_directory_path() / ("uf_gpu_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Runs `[env] ultrafast ARGS` through the shell: whether it exited 0, its stdout and stderr.
  struct Ran {
    bool ok = false;
    std::string out, err;
  };
  Ran Ultrafast(const std::string& args, const std::string& env = "") {
    const fs::path out = dir_ / "out.txt", err = dir_ / "err.txt";
    const std::string cmd =
        env + binary_.string() + " " + args + " > " + out.string() + " 2> " + err.string();
    const int status = std::system(cmd.c_str());
    std::ifstream in(out), ein(err);
    std::stringstream ss, es;
    ss << in.rdbuf();
    es << ein.rdbuf();
    return {WIFEXITED(status) && WEXITSTATUS(status) == 0, ss.str(), es.str()};
  }

  // Runs `ultrafast bench ARGS --json`; the parsed stdout, with exit code 0 asserted.
  json Bench(const std::string& args) {
    const Ran r = Ultrafast("bench --device vulkan --json " + args);
    EXPECT_TRUE(r.ok) << args << "\n" << r.err;
    const json j = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.out << "\n" << r.err;
    return j.is_discarded() ? json::object() : j;
  }

  // `run --device vulkan -m model -p 'ROMEO:' args` with UF_GPU_CHAIN off ([0]) and on ([1]): the
  // text, the stats' "generated ..." line and the whole stderr of each.
  void RunChainedAndNot(const std::string& model, const std::string& args, std::string text[2],
                        std::string stop[2], std::string err[2]) {
    for (int chain = 0; chain < 2; ++chain) {
      const Ran r = Ultrafast("run --device vulkan -m " + model + " -p 'ROMEO:' " + args,
                              std::string("UF_GPU_CHAIN=") + (chain ? "on " : "off "));
      ASSERT_TRUE(r.ok) << args << "\n" << r.err;
      text[chain] = r.out;
      err[chain] = r.err;
      const size_t at = r.err.find("generated ");
      ASSERT_NE(at, std::string::npos) << r.err;
      stop[chain] = r.err.substr(at, r.err.find('\n', at) - at);
    }
  }

  void Write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

  fs::path binary_, dir_;
};

// Plain, n-gram and oracle decoding of three workloads through the device forward: every mode
// gives the plain run's tokens (speculation stays lossless on the device).
TEST_F(GpuBenchCliTest, SpecRunsOnTheDevice) {
  const fs::path text = dir_ / "text.txt";
  // A short held-out tail (after 90% of the text) keeps the prompts, and the test, small.
  Write(text, std::string(400, '-') + "\n\nROMEO:\nBut soft, what light.\nJULIET:\nAy me.\n");
  const json j =
      Bench("--spec -n 8 --reps 1 --spec-k 4 --spec-text " + text.string() + " -m " + kModel);
  ASSERT_TRUE(j.contains("workloads")) << j.dump();
  EXPECT_NE(j.value("device", "").find("vulkan"), std::string::npos) << j.dump();
  EXPECT_GT(j.value("bandwidth_gb_s", 0.0), 0.0);
  for (const char* w : {"edit", "extract", "open"}) {
    for (const char* mode : {"plain", "ngram", "oracle"}) {
      SCOPED_TRACE(std::string(w) + " " + mode);
      const json& m = j["workloads"][w][mode];
      ASSERT_TRUE(m.is_object()) << j.dump();
      EXPECT_TRUE(m.value("identical", false));
      EXPECT_GT(m.value("tok_s", 0.0), 0.0);
    }
  }
  EXPECT_TRUE(j["verify_step_seconds"].contains("17"));
}

// The decode figures: one stream's (logits back, the device's arg-max, chained greedy and
// sampled) and each --batch count's aggregate, plain and as a chained sampled batch
// (ForwardSampledChains, the serving engine's chained decode batch), with the device's read
// bandwidth measured in the same run. The batches run --batch-steps steps, as the CPU bench's.
TEST_F(GpuBenchCliTest, DecodeFiguresOnTheDevice) {
  const json j = Bench(std::string("-p 8 -n 4 --reps 1 --batch 1,3 --batch-steps 3 -m ") + kModel);
  EXPECT_EQ(j.value("batch_steps", 0), 3) << j.dump();
  for (const char* k : {"tg_tok_s", "tg_argmax_tok_s", "tg_chain_tok_s", "tg_sampled_tok_s",
                        "tg_penalized_tok_s", "read_bw_gb_s"}) {
    EXPECT_GT(j.value(k, 0.0), 0.0) << k << ": " << j.dump();
  }
  ASSERT_TRUE(j["batch"].is_array()) << j.dump();
  ASSERT_EQ(j["batch"].size(), 2u) << j.dump();
  for (const json& b : j["batch"]) {
    EXPECT_GT(b.value("tok_s", 0.0), 0.0) << b.dump();
    EXPECT_GT(b.value("sampled_tok_s", 0.0), 0.0) << b.dump();
  }
}

// The engine alone, the serving engine and HTTP, at temperature 0 and 1, all on the device.
TEST_F(GpuBenchCliTest, ServeRunsOnTheDevice) {
  const json j = Bench(std::string("--serve -p 8 -n 6 --reps 1 -m ") + kModel);
  EXPECT_NE(j.value("device", "").find("vulkan"), std::string::npos) << j.dump();
  for (const char* t : {"temperature_0", "temperature_1"}) {
    for (const char* mode : {"engine", "service", "http_stream", "http"}) {
      SCOPED_TRACE(std::string(t) + " " + mode);
      ASSERT_TRUE(j[t][mode].is_object()) << j.dump();
      EXPECT_GT(j[t][mode].value("total_ms", 0.0), 0.0);
    }
    EXPECT_GT(j[t]["service"].value("decode_tok_s", 0.0), 0.0);
  }
}

// Decoding with and without a JSON-mode mask through the serving engine on the device, with the
// constrained run's chain counts.
TEST_F(GpuBenchCliTest, GrammarRunsOnTheDevice) {
  const fs::path schema = dir_ / "schema.json";
  Write(schema, R"({"type": "json_object"})");
  const json j = Bench("--grammar " + schema.string() + " -n 8 --reps 1 -m " + kModel);
  EXPECT_NE(j.value("device", "").find("vulkan"), std::string::npos) << j.dump();
  EXPECT_GT(j.value("plain_tok_s", 0.0), 0.0) << j.dump();
  EXPECT_GT(j.value("grammar_tok_s", 0.0), 0.0) << j.dump();
  EXPECT_GT(j.value("grammar_mean_tokens", 0.0), 0.0) << j.dump();
  // The constrained run's chained steps (at most its tokens), overrules and whole rows.
  for (const char* k :
       {"grammar_chained_steps", "grammar_chain_overruled", "grammar_rows_fetched"}) {
    EXPECT_TRUE(j.contains(k)) << k << " " << j.dump();
  }
  EXPECT_LE(j.value("grammar_chained_steps", 1e9), j.value("grammar_mean_tokens", 0.0));
}

// `run --device vulkan` at temperature 1 without top-k samples through engine::Generate on a
// device forward: every row reduced on the device, and the same text for the same seed (the
// fallback to a whole row draws the same token as the reduced draw would).
TEST_F(GpuBenchCliTest, RunSamplesReducedRowsOnTheDevice) {
  std::string texts[2];
  for (int rep = 0; rep < 2; ++rep) {
    const Ran r = Ultrafast(std::string("run --device vulkan -m ") + kModel +
                            " -p 'ROMEO:' -n 12 --temp 1 --top-k 0 --top-p 1 --min-p 0 --seed 3");
    ASSERT_TRUE(r.ok) << r.err;
    EXPECT_NE(r.err.find("device rows: "), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("device rows: 0 reduced"), std::string::npos) << r.err;
    texts[rep] = r.out;
  }
  EXPECT_EQ(texts[0], texts[1]);
  EXPECT_GT(texts[0].size(), std::string("ROMEO:").size());
}

// `run --device vulkan --temp 0` chains its greedy steps on the device (GpuDecoder::GreedyChain):
// the same text and the same stop as one step at a time (UF_GPU_CHAIN=off), stopped by the token
// count or by a full context (the chain runs to the cache's last position), with --ignore-eos
// (its end tokens masked on the device before the arg-max), on a random-weight model and on the
// demo model (trained: text that means something).
TEST_F(GpuBenchCliTest, RunGreedyChainedGivesTheStepwiseText) {
  struct Case {
    std::string model, args;
  };
  for (const Case& c : {Case{kModel, "-n 12"}, Case{kModel, "-n -1 --ctx 24"},
                        Case{kModel, "-n 12 --ignore-eos"}, Case{"models/demo.gguf", "-n 48"}}) {
    SCOPED_TRACE(c.model + " " + c.args);
    std::string text[2], stop[2], err[2];
    RunChainedAndNot(c.model, "--temp 0 " + c.args, text, stop, err);
    if (HasFatalFailure()) return;
    EXPECT_EQ(text[1], text[0]);
    EXPECT_EQ(stop[1], stop[0]);
    EXPECT_GT(text[0].size(), std::string("ROMEO:\n").size());
    if (c.args.rfind("-n 12", 0) == 0) {
      EXPECT_NE(stop[0].find("generated 12 tokens"), std::string::npos);
    }
    if (c.args == "-n -1 --ctx 24") {
      EXPECT_NE(stop[0].find("context"), std::string::npos);
    }
  }
}

// A buffer past the device's maxStorageBufferRange (4 GiB - 1 on NVIDIA and AMD), which the
// backend binds whole, is refused with an error that names it, and the run exits 1. Lavapipe
// binds past its limit, so UF_GPU_BINDING_LIMIT sets a lower one and enforces it there.
// tiny-llama-256-q8_0: token_embd is 9,216,000 bytes, the K/V cache 512 bytes a position a layer.
TEST_F(GpuBenchCliTest, BuffersPastTheBindingLimitAreClearErrors) {
  const std::string run = std::string("run --device vulkan -m ") + kModel + " -p hi -n 2 ";
  Ran r = Ultrafast(run + "--ctx 64", "UF_GPU_BINDING_LIMIT=1048576 ");
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.err.find("token_embd.weight: vulkan: a buffer of 9216000 bytes"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("maxStorageBufferRange, 1048576 bytes"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("--ctx"), std::string::npos) << "a shorter context does not help\n" << r.err;

  // 32,768 positions: 16 MiB a layer.
  r = Ultrafast(run + "--ctx 32768", "UF_GPU_BINDING_LIMIT=9216000 ");
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.err.find("the K/V cache of one layer (16777216 bytes for 32768 positions)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("a shorter context (--ctx)"), std::string::npos) << r.err;

  // Under the same limit, a context whose buffers fit runs.
  r = Ultrafast(run + "--ctx 4096", "UF_GPU_BINDING_LIMIT=9216000 ");
  EXPECT_TRUE(r.ok) << r.err;
}

// `run --device vulkan` with a temperature chains its sampled steps (GpuDecoder::SampledChain:
// the device draws from the row's best tokens, the sampler checks each draw, a row those cannot
// decide runs as one step): the same text and stop as one step at a time with the whole row
// sampled on the host (UF_GPU_CHAIN=off), seeded, with run's default filters (top-k 40), with
// nothing filtered (the whole row at T 1), with --ignore-eos, and with penalties applied on the
// device (sampled, and greedy: drawn as top-k 1), on the demo model.
TEST_F(GpuBenchCliTest, RunSampledChainedGivesTheStepwiseText) {
  for (const std::string args :
       {"--temp 0.8 -n 40", "--temp 1 --top-k 0 --top-p 1 --min-p 0 -n 40",
        "--temp 0.7 --top-k 0 --top-p 0.9 --min-p 0 -n 24 --ignore-eos",
        "--temp 0.8 -n 40 --repeat-penalty 1.3 --presence-penalty 0.5 --frequency-penalty 0.3",
        "--temp 0 -n 40 --repeat-penalty 1.5"}) {
    SCOPED_TRACE(args);
    std::string text[2], stop[2], err[2];
    RunChainedAndNot("models/demo.gguf", "--seed 5 " + args, text, stop, err);
    if (HasFatalFailure()) return;
    EXPECT_EQ(text[1], text[0]);
    EXPECT_EQ(stop[1], stop[0]);
    EXPECT_GT(text[0].size(), std::string("ROMEO:\n").size());
    // "K of N decode steps chained on the device": none unchained, most chained.
    long long k[2] = {-1, -1}, steps[2] = {-1, -1};
    for (int chain = 0; chain < 2; ++chain) {
      const size_t at = err[chain].find("fetched whole; ");
      ASSERT_NE(at, std::string::npos) << err[chain];
      ASSERT_EQ(std::sscanf(err[chain].c_str() + at, "fetched whole; %lld of %lld", &k[chain],
                            &steps[chain]),
                2)
          << err[chain];
    }
    EXPECT_EQ(k[0], 0);
    EXPECT_GE(2 * k[1], steps[1]) << err[1];
  }
}

}  // namespace
}  // namespace uf
