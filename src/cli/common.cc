#include "cli/common.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "base/clock.h"
#include "base/thread_pool.h"
#include "pull/model_cache.h"

namespace uf::cli {

void Fail(std::string_view command, const Status& status) {
  std::fprintf(stderr, "ultrafast %.*s: %s\n", static_cast<int>(command.size()), command.data(),
               status.ToString().c_str());
  throw CLI::RuntimeError(1);
}

StatusOr<std::string> FindDemoModel() {
  namespace fs = std::filesystem;
  std::string tried;
  if (const char* env = std::getenv("UF_DEMO_MODEL"); env != nullptr && *env != '\0') {
    if (fs::exists(env)) return std::string(env);
    tried += std::string(" $UF_DEMO_MODEL=") + env;
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    // build/ultrafast beside the checkout's models/, or PREFIX/bin/ultrafast after
    // `cmake --install`, which puts the model in PREFIX/share/ultrafast/models.
    for (const fs::path& p :
         {exe.parent_path() / ".." / "models" / "demo.gguf",
          exe.parent_path() / ".." / "share" / "ultrafast" / "models" / "demo.gguf"}) {
      if (fs::exists(p)) return p.lexically_normal().string();
      tried += " " + p.lexically_normal().string();
    }
  }
  const fs::path local = fs::path("models") / "demo.gguf";
  if (fs::exists(local)) return local.string();
  tried += " ./" + local.string();
  return NotFoundError("no demo model found (tried" + tried +
                       "); pass a model with -m or set UF_DEMO_MODEL");
}

StatusOr<LoadedModel> LoadModel(const std::string& name) {
  LoadedModel out;
  const double t0 = NowSeconds();
  const std::string path = pull::ResolveModelPath(name, pull::DefaultCacheDir());
  UF_ASSIGN_OR_RETURN(out.model, model::Model::Load(path));
  auto tok = Tokenizer::FromGguf(out.model->file());
  if (!tok.ok()) return tok.status().WithContext(path);
  out.tokenizer = std::move(tok).value();
  out.load_seconds = NowSeconds() - t0;
  return out;
}

int ResolveThreads(int requested) {
  return requested > 0 ? requested : ThreadPool::DefaultThreads();
}

std::vector<int32_t> BenchPrompt(int64_t n, int64_t n_vocab) {
  std::mt19937 rng(7);
  const auto hi = static_cast<int32_t>(std::min<int64_t>(1099, n_vocab - 1));
  std::uniform_int_distribution<int32_t> id(std::min(100, hi / 4), hi);
  std::vector<int32_t> prompt;
  for (int64_t i = 0; i < n; ++i) prompt.push_back(id(rng));
  return prompt;
}

engine::KvCacheOptions CacheOptionsFor(const model::ModelConfig& c, int64_t seq_len,
                                       engine::KvType type, int max_seqs) {
  engine::KvCacheOptions co;
  co.type = type;
  co.n_layer = c.n_layer;
  co.n_head_kv = c.n_head_kv;
  co.head_dim = c.head_dim;
  co.max_seqs = max_seqs;
  co.max_seq_len = seq_len;
  co.n_blocks = engine::KvCacheOptions::BlocksFor(seq_len * max_seqs, max_seqs, co.block_size);
  return co;
}

void AddKvTypeOption(CLI::App* cmd, std::string* out) {
  *out = "f16";
  cmd->add_option("--kv-type", *out,
                  "K/V cache element type: f16 (half the bytes per attended position), q8_0 "
                  "(0.53x f16; head dim a multiple of 32) or f32")
      ->capture_default_str();
}

engine::KvType KvTypeOrDie(std::string_view command, const std::string& name) {
  auto t = engine::ParseKvType(name);
  if (!t.ok()) Fail(command, t.status());
  return *t;
}

void AddDeviceOption(CLI::App* cmd, std::string* out) {
  *out = "cpu";
  cmd->add_option("--device", *out,
                  "Where to run: cpu, or vulkan[:N] for a Vulkan GPU (N from `ultrafast devices`; "
                  "see docs/gpu.md)")
      ->capture_default_str();
}

gpu::DeviceSpec DeviceOrDie(std::string_view command, const std::string& name) {
  auto d = gpu::ParseDeviceSpec(name);
  if (!d.ok()) Fail(command, d.status());
  return *d;
}

void RequireCpuDevice(std::string_view command, const std::string& name) {
  const gpu::DeviceSpec d = DeviceOrDie(command, name);
  if (!d.vulkan) return;
  auto devices = gpu::ListDevices();
  if (!devices.ok()) Fail(command, devices.status());
  Fail(command, UnimplementedError("`" + std::string(command) +
                                   " --device vulkan` is not implemented yet (the Vulkan backend "
                                   "runs `run`, `logits`, `serve` and `bench` with --batch; see "
                                   "docs/gpu.md)"));
}

}  // namespace uf::cli
