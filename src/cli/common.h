// Helpers shared by the `ultrafast` subcommands.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "base/stats.h"  // Median, for the benchmarks
#include "base/status.h"
#include "engine/kv_cache.h"
#include "gpu/backend.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace uf::cli {

// Subcommand registration (one file each).
void AddRunCommand(CLI::App& app);
void AddLogitsCommand(CLI::App& app);
void AddTokenizeCommand(CLI::App& app);
void AddInfoCommand(CLI::App& app);
void AddSynthCommand(CLI::App& app);
void AddBenchCommand(CLI::App& app);
void AddHistoryCommand(CLI::App& app);
void AddPullCommand(CLI::App& app);
void AddDevicesCommand(CLI::App& app);

// Prints "ultrafast <command>: <status>" to stderr and ends the command with exit code 1.
[[noreturn]] void Fail(std::string_view command, const Status& status);

// The demo model: $UF_DEMO_MODEL, else <dir of the executable>/../models/demo.gguf, else
// <dir of the executable>/../share/ultrafast/models/demo.gguf (installed), else
// ./models/demo.gguf. NotFound naming every place tried.
StatusOr<std::string> FindDemoModel();

struct LoadedModel {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  double load_seconds = 0.0;
};
// path may also name a model pulled into the cache (`ultrafast pull`): NAME or NAME.gguf there.
StatusOr<LoadedModel> LoadModel(const std::string& path);

// A KV cache of `type` for max_seqs sequences of up to seq_len positions each of model config c.
engine::KvCacheOptions CacheOptionsFor(const model::ModelConfig& c, int64_t seq_len,
                                       engine::KvType type, int max_seqs = 1);

// Registers --kv-type (f16, q8_0 or f32; default f16) storing the choice in *out.
void AddKvTypeOption(CLI::App* cmd, std::string* out);
// The parsed --kv-type; fails the command on a bad value.
engine::KvType KvTypeOrDie(std::string_view command, const std::string& name);

// Registers --device (cpu, vulkan or vulkan:N; default cpu) storing the choice in *out.
void AddDeviceOption(CLI::App* cmd, std::string* out);
// The parsed --device; fails the command on a bad value. A Vulkan device is not opened here.
gpu::DeviceSpec DeviceOrDie(std::string_view command, const std::string& name);
// For commands whose Vulkan path does not exist yet: fails with Unimplemented naming them when
// --device asks for Vulkan (after checking that a device exists, so a machine without one hears
// that first).
void RequireCpuDevice(std::string_view command, const std::string& name);

// Threads for -t: 0 or negative means ThreadPool::DefaultThreads().
int ResolveThreads(int requested);

// A benchmark's prompt: n token ids drawn with a fixed seed from 100..1099 (ordinary tokens of
// a real vocabulary, no special ones), clipped to a smaller vocabulary (from its first quarter's
// end where that lies below 100).
std::vector<int32_t> BenchPrompt(int64_t n, int64_t n_vocab);

}  // namespace uf::cli
