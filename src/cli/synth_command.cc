// `ultrafast synth`: write a random-weight GGUF with a real model's shapes, types and tokenizer
// layout (for benchmarks at real sizes; see src/model/synth.h).
#include <unistd.h>

#include <cstdio>

#include "cli/common.h"
#include "model/synth.h"

namespace uf::cli {
namespace {

struct SynthOptions {
  std::string preset;
  std::string type;
  std::string output;
  uint64_t seed = 0;
  int threads = 0;
  bool dry_run = false;
  bool list = false;
};

void ListPresets() {
  for (const model::SynthPreset& p : model::SynthPresets()) {
    std::printf(
        "%-14s %-6s dim %5lld  layers %3lld  heads %3lld/%-2lld  ffn %6lld  vocab %6lld%s\n",
        p.name.c_str(), std::string(model::ArchitectureName(p.arch)).c_str(),
        static_cast<long long>(p.n_embd), static_cast<long long>(p.n_layer),
        static_cast<long long>(p.n_head), static_cast<long long>(p.n_head_kv),
        static_cast<long long>(p.n_ff), static_cast<long long>(p.n_vocab),
        p.tied_embeddings ? "  tied" : "");
  }
  std::printf("types: f16 bf16 q8_0 q4_0 q4_k_m q6_k\n");
}

void PrintPlan(const model::SynthPlan& plan) {
  for (const model::SynthTensor& t : plan.tensors) {
    std::string shape;
    for (int64_t d : t.ne) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    std::printf("%-28s %-5s [%s]  %llu bytes\n", t.name.c_str(),
                std::string(GgmlTypeName(t.type)).c_str(), shape.c_str(),
                static_cast<unsigned long long>(t.n_bytes));
  }
  std::printf("%zu tensors, %llu parameters, %llu bytes of tensor data (%.2f GiB)\n",
              plan.tensors.size(), static_cast<unsigned long long>(plan.n_params),
              static_cast<unsigned long long>(plan.data_bytes),
              plan.data_bytes / (1024.0 * 1024.0 * 1024.0));
}

void Synth(const SynthOptions& o) {
  if (o.list) {
    ListPresets();
    return;
  }
  if (o.preset.empty() || o.type.empty()) {
    Fail("synth", InvalidArgumentError("--preset and --type are required (--list shows them)"));
  }
  auto preset = model::FindSynthPreset(o.preset);
  if (!preset.ok()) Fail("synth", preset.status());
  const std::optional<model::SynthFileType> type = model::ParseSynthFileType(o.type);
  if (!type) {
    Fail("synth", InvalidArgumentError("unknown type '" + o.type +
                                       "' (known: f16, bf16, q8_0, q4_0, q4_k_m, q6_k)"));
  }
  auto plan = model::PlanSynth(*preset, *type);
  if (!plan.ok()) Fail("synth", plan.status());
  if (o.dry_run) {
    PrintPlan(*plan);
    return;
  }
  if (o.output.empty()) Fail("synth", InvalidArgumentError("-o FILE is required"));

  model::SynthOptions so;
  so.seed = o.seed;
  so.n_threads = ResolveThreads(o.threads);
  if (isatty(STDERR_FILENO)) {
    so.progress = [](size_t done, size_t total, uint64_t bytes) {
      std::fprintf(stderr, "\rsynth: %zu/%zu tensors, %.0f MiB", done, total,
                   bytes / (1024.0 * 1024.0));
      if (done == total) std::fputc('\n', stderr);
    };
  }
  auto result = model::WriteSynth(*plan, so, o.output);
  if (!result.ok()) Fail("synth", result.status());
  std::fprintf(
      stderr,
      "synth: wrote %s (%s %s, seed %llu): %llu bytes (%.2f GiB), %zu tensors, "
      "%.1f s (%.0f MB/s, %d threads)\n",
      o.output.c_str(), preset->name.c_str(), std::string(model::SynthFileTypeName(*type)).c_str(),
      static_cast<unsigned long long>(o.seed), static_cast<unsigned long long>(result->file_bytes),
      result->file_bytes / (1024.0 * 1024.0 * 1024.0), result->n_tensors, result->seconds,
      result->file_bytes / 1e6 / std::max(result->seconds, 1e-9), so.n_threads);
}

}  // namespace

void AddSynthCommand(CLI::App& app) {
  auto o = std::make_shared<SynthOptions>();
  CLI::App* cmd = app.add_subcommand(
      "synth", "Write a random-weight GGUF with a real model's shapes (for benchmarks)");
  cmd->add_option("--preset", o->preset, "Model shape (see --list)");
  cmd->add_option("--type", o->type, "Weight types: f16, bf16, q8_0, q4_0, q4_k_m, q6_k");
  cmd->add_option("--seed", o->seed, "PRNG seed (same seed, same bytes)");
  cmd->add_option("-o,--output", o->output, "GGUF file to write");
  cmd->add_option("-t,--threads", o->threads, "Threads (0 = physical cores)");
  cmd->add_flag("--dry-run", o->dry_run, "Print the tensor plan and sizes; write nothing");
  cmd->add_flag("--list", o->list, "List the presets");
  cmd->callback([o] { Synth(*o); });
}

}  // namespace uf::cli
