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
  // Shape overrides on top of the preset (0 = the preset's), e.g. a 2-layer model with a real
  // vocabulary and a long context for RoPE-scaling checks.
  int64_t layers = 0, embd = 0, heads = 0, kv_heads = 0, ff = 0, ctx = 0;
  std::string rope_scaling;  // none|linear|yarn|llama3:FACTOR
  double rope_factor = 0.0;
  int64_t rope_orig_ctx = 0;
};

// Applies the overrides; the preset's own checks (PlanSynth) validate the result.
void Override(const SynthOptions& o, model::SynthPreset* p) {
  if (o.embd > 0 || o.heads > 0) {
    p->n_embd = o.embd > 0 ? o.embd : p->n_embd;
    p->n_head = o.heads > 0 ? o.heads : p->n_head;
    p->head_dim = p->n_embd / p->n_head;
  }
  if (o.layers > 0) p->n_layer = o.layers;
  if (o.kv_heads > 0) p->n_head_kv = o.kv_heads;
  if (o.ff > 0) {
    p->n_ff = o.ff;
    // A mixture of experts: the experts' width, which a llama-family MoE (Mixtral) stores as its
    // one feed-forward length (and which `--list` shows as the preset's ffn).
    if (p->n_expert > 0) p->n_ff_exp = o.ff;
  }
  if (o.ctx > 0) p->n_ctx_train = o.ctx;
  if (o.rope_scaling.empty()) return;
  p->llama3_rope.factor = 0.0;
  p->rope_scaling.clear();
  if (o.rope_scaling == "none") return;
  const double factor = o.rope_factor > 0.0 ? o.rope_factor : 8.0;
  const int64_t orig = o.rope_orig_ctx > 0 ? o.rope_orig_ctx : 8192;
  if (o.rope_scaling == "llama3") {
    p->llama3_rope = {factor, 1.0, 4.0, orig};
  } else {
    p->rope_scaling = o.rope_scaling;  // linear or yarn; anything else fails the preset check
    p->rope_scaling_factor = factor;
    p->rope_scaling_orig_ctx = orig;
  }
}

void ListPresets() {
  for (const model::SynthPreset& p : model::SynthPresets()) {
    std::printf(
        "%-14s %-8s dim %5lld  layers %3lld  heads %3lld/%-2lld  ffn %6lld  vocab %6lld%s%s\n",
        p.name.c_str(), std::string(model::ArchitectureName(p.arch)).c_str(),
        static_cast<long long>(p.n_embd), static_cast<long long>(p.n_layer),
        static_cast<long long>(p.n_head), static_cast<long long>(p.n_head_kv),
        static_cast<long long>(p.n_expert > 0 ? p.n_ff_exp : p.n_ff),
        static_cast<long long>(p.n_vocab), p.tied_embeddings ? "  tied" : "",
        p.n_expert > 0
            ? ("  experts " + std::to_string(p.n_expert_used) + " of " + std::to_string(p.n_expert))
                  .c_str()
            : "");
  }
  std::printf("types: f16 bf16 q8_0 q4_0 q4_k_m q6_k mxfp4\n");
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
                                       "' (known: f16, bf16, q8_0, q4_0, q4_k_m, q6_k, mxfp4)"));
  }
  Override(o, &*preset);
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
  cmd->add_option("--type", o->type, "Weight types: f16, bf16, q8_0, q4_0, q4_k_m, q6_k, mxfp4");
  cmd->add_option("--seed", o->seed, "PRNG seed (same seed, same bytes)");
  cmd->add_option("-o,--output", o->output, "GGUF file to write");
  cmd->add_option("-t,--threads", o->threads, "Threads (0 = physical cores)");
  cmd->add_flag("--dry-run", o->dry_run, "Print the tensor plan and sizes; write nothing");
  cmd->add_flag("--list", o->list, "List the presets");
  cmd->add_option("--layers", o->layers, "Override: block count");
  cmd->add_option("--embd", o->embd, "Override: embedding width (head dim = embd / heads)");
  cmd->add_option("--heads", o->heads, "Override: attention heads");
  cmd->add_option("--kv-heads", o->kv_heads, "Override: K/V heads");
  cmd->add_option("--ff", o->ff,
                  "Override: feed-forward width (the experts' in a mixture of experts)");
  cmd->add_option("--ctx", o->ctx, "Override: training context length");
  cmd->add_option("--rope-scaling", o->rope_scaling,
                  "Override RoPE scaling: none, linear, yarn (rope.scaling.* keys) or llama3 "
                  "(rope_freqs.weight)");
  cmd->add_option("--rope-factor", o->rope_factor, "Scaling factor (default 8)");
  cmd->add_option("--rope-orig-ctx", o->rope_orig_ctx,
                  "Original (pre-scaling) context length (default 8192)");
  cmd->callback([o] { Synth(*o); });
}

}  // namespace uf::cli
