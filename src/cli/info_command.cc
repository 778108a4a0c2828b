// `ultrafast info`: GGUF metadata and tensors, then what the engine makes of the model.
#include <cstdio>
#include <map>

#include "cli/common.h"
#include "gguf/gguf.h"
#include "gguf/gguf_dump.h"
#include "model/config.h"
#include "model/weights.h"
#include "pull/model_cache.h"

namespace uf::cli {
namespace {

struct InfoOptions {
  std::string model;
  bool full = false;
};

void Info(const InfoOptions& o) {
  auto file = gguf::GgufFile::Open(pull::ResolveModelPath(o.model, pull::DefaultCacheDir()));
  if (!file.ok()) Fail("info", file.status());
  std::fputs(gguf::DescribeGguf(**file, o.full).c_str(), stdout);

  std::printf("\n== model\n");
  auto config = model::ModelConfig::FromGguf(**file);
  if (!config.ok()) {
    std::printf("not runnable: %s\n", config.status().ToString().c_str());
    return;
  }
  std::printf("%s\n", config->DebugString().c_str());
  auto weights = model::BindWeights(**file, *config);
  if (!weights.ok()) {
    std::printf("not runnable: %s\n", weights.status().ToString().c_str());
    return;
  }
  // Matrix bytes by type: what a decode step streams.
  std::map<std::string, std::pair<int, size_t>> by_type;
  auto add = [&](const kernels::Matrix& m) {
    auto& e = by_type[std::string(GgmlTypeName(m.type()))];
    ++e.first;
    e.second += m.bytes();
  };
  for (const auto& l : weights->layers) {
    for (const kernels::Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo}) add(*m);
    if (l.exp_gate.empty()) {
      for (const kernels::Matrix* m : {&l.gate, &l.up, &l.down}) add(*m);
      continue;
    }
    add(l.router);
    for (const auto* v : {&l.exp_gate, &l.exp_up, &l.exp_down}) {
      for (const kernels::Matrix& m : *v) add(m);
    }
  }
  add(weights->output);
  for (const auto& [type, e] : by_type) {
    std::printf("matrices %-6s %4d  %12zu bytes\n", type.c_str(), e.first, e.second);
  }
  const size_t per_token = model::BytesPerToken(*weights, *config);
  if (config->is_moe()) {
    const int64_t active = model::ActiveParams(*weights, *config);
    const int64_t all = model::AllParams(*weights);
    std::printf("experts: %lld per MoE layer, %lld used per token (%lld rows each)\n",
                static_cast<long long>(config->n_expert),
                static_cast<long long>(config->n_expert_used),
                static_cast<long long>(config->n_ff_exp));
    std::printf("matrix parameters: %lld active per token of %lld (%.1f%%)\n",
                static_cast<long long>(active), static_cast<long long>(all),
                100.0 * static_cast<double>(active) / static_cast<double>(all));
    std::printf("matrix bytes: %zu (%.2f GiB) in all\n", model::AllMatrixBytes(*weights),
                model::AllMatrixBytes(*weights) / (1024.0 * 1024.0 * 1024.0));
  }
  std::printf("bytes read per token: %zu (%.2f MiB; layers%s + output matrix)\n", per_token,
              per_token / (1024.0 * 1024.0),
              config->is_moe() ? " with the router and the selected experts only" : "");
  // Sliding-window layers keep only their window (KvCacheOptions::swa_*): a fixed amount per
  // sequence instead of one more row per position.
  int64_t n_windowed = 0;
  for (int64_t il = 0; il < config->n_layer; ++il) n_windowed += config->IsSwaLayer(il);
  const double row = 2.0 * config->kv_dim() * sizeof(float);
  std::printf("kv cache per token: %.0f bytes (F32)", row * (config->n_layer - n_windowed));
  if (n_windowed > 0) {
    std::printf(
        " in %lld full-context layers; the %lld sliding-window layers hold their last %lld "
        "positions (%.0f bytes per sequence)",
        static_cast<long long>(config->n_layer - n_windowed), static_cast<long long>(n_windowed),
        static_cast<long long>(config->n_swa), row * n_windowed * config->n_swa);
  }
  std::printf("\n");
}

}  // namespace

void AddInfoCommand(CLI::App& app) {
  auto o = std::make_shared<InfoOptions>();
  CLI::App* cmd = app.add_subcommand("info", "Show a model's metadata, tensors and costs");
  cmd->add_option("-m,--model", o->model, "GGUF file")->required();
  cmd->add_flag("--full", o->full, "Show whole arrays and strings");
  cmd->callback([o] { Info(*o); });
}

}  // namespace uf::cli
