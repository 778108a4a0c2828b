#include "cli/bench_gpu.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/clock.h"
#include "cli/common.h"

namespace uf::cli {

int GpuBench(const GpuBenchOptions& o) {
  auto loaded = LoadModel(o.model);
  if (!loaded.ok()) Fail("bench", loaded.status());
  const model::Model& m = *loaded->model;
  const int64_t n_vocab = m.config().n_vocab;
  const int64_t ctx = std::max<int64_t>(o.depth + o.n_prompt + o.n_gen, 1);
  const double t_up = NowSeconds();
  auto dec = gpu::GpuDecoder::Create(m, o.device, ctx);
  if (!dec.ok()) Fail("bench", dec.status());
  const double upload_s = NowSeconds() - t_up;
  gpu::GpuDecoder& d = **dec;

  // Tokens: a fixed pseudo-random walk over the vocabulary (the content does not change the
  // work of a step).
  const auto token = [&](int64_t i) {
    return static_cast<int32_t>((i * 7919 + 13) % std::max<int64_t>(n_vocab - 1, 1) + 1);
  };
  const auto steps = [&](int64_t from, int64_t n) {
    for (int64_t i = from; i < from + n; ++i) {
      const Status s = d.Step(token(i), static_cast<int32_t>(i));
      if (!s.ok()) Fail("bench", s);
    }
  };
  steps(0, o.depth);
  std::vector<double> pp, tg, tg_gpu;  // tok/s: wall clock; GPU time alone (timestamps)
  for (int rep = 0; rep < std::max(o.reps, 1); ++rep) {
    if (o.n_prompt > 0) {
      const double t0 = NowSeconds();
      steps(o.depth, o.n_prompt);
      pp.push_back(o.n_prompt / (NowSeconds() - t0));
    }
    if (o.n_gen > 0) {
      double gpu_s = 0.0;
      const double t0 = NowSeconds();
      for (int64_t i = o.depth + o.n_prompt; i < o.depth + o.n_prompt + o.n_gen; ++i) {
        const Status s = d.Step(token(i), static_cast<int32_t>(i));
        if (!s.ok()) Fail("bench", s);
        gpu_s += d.last_step_gpu_seconds();
      }
      tg.push_back(o.n_gen / (NowSeconds() - t0));
      tg_gpu.push_back(gpu_s > 0 ? o.n_gen / gpu_s : 0.0);
    }
  }
  auto bw = gpu::MeasureReadBandwidth(o.device, uint64_t{1} << 30, 8);
  const double bw_bytes = bw.ok() ? *bw : 0.0;
  const double pp_tok_s = Median(pp), tg_tok_s = Median(tg), tg_gpu_tok_s = Median(tg_gpu);
  // Bytes a decode step reads: the weights as the file holds them (BF16/Q4_K/Q6_K are F16 on the
  // device for now, which reads more) plus the f16 K/V up to the mean decode position.
  const double kv_bytes =
      2.0 * 2 * m.config().n_layer * m.config().kv_dim() * (o.depth + o.n_prompt + o.n_gen / 2.0);
  const double bytes_per_token = static_cast<double>(m.bytes_per_token()) + kv_bytes;
  const double roofline = bw_bytes > 0 ? tg_tok_s * bytes_per_token / bw_bytes : 0.0;
  if (o.json) {
    nlohmann::json j;
    j["model"] = o.model;
    j["device"] = d.device().name;
    j["device_type"] = d.device().type;
    j["upload_s"] = upload_s;
    j["device_bytes"] = d.device_bytes();
    j["depth"] = o.depth;
    j["pp_tok_s"] = pp_tok_s;
    j["tg_tok_s"] = tg_tok_s;
    j["tg_gpu_tok_s"] = tg_gpu_tok_s;
    j["bytes_per_token"] = bytes_per_token;
    j["read_bw_gb_s"] = bw_bytes / 1e9;
    j["roofline"] = roofline;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("device: Vulkan %d, %s (%s), %.0f MiB held, weights uploaded in %.2f s\n",
              d.device().index, d.device().name.c_str(), d.device().type.c_str(),
              static_cast<double>(d.device_bytes()) / (1 << 20), upload_s);
  if (!bw.ok()) std::printf("read bandwidth: not measured (%s)\n", bw.status().ToString().c_str());
  std::printf("%-8s %-12s %14s %16s %12s %10s\n", "depth", "test", "tok/s", "bytes/token",
              "GB/s read", "roofline");
  if (o.n_prompt > 0) {
    std::printf("%-8lld %-12s %14.1f %16s %12s %10s\n", static_cast<long long>(o.depth),
                ("pp" + std::to_string(o.n_prompt) + "*").c_str(), pp_tok_s, "", "", "");
  }
  if (o.n_gen > 0) {
    std::printf("%-8lld %-12s %14.1f %16.0f %12.1f %9.1f%%\n", static_cast<long long>(o.depth),
                ("tg" + std::to_string(o.n_gen)).c_str(), tg_tok_s, bytes_per_token, bw_bytes / 1e9,
                100.0 * roofline);
  }
  if (o.n_gen > 0 && tg_gpu_tok_s > 0) {
    std::printf("%-8lld %-12s %14.1f   (GPU time alone, from timestamps: %.1f us/token)\n",
                static_cast<long long>(o.depth), ("tg" + std::to_string(o.n_gen) + " gpu").c_str(),
                tg_gpu_tok_s, 1e6 / tg_gpu_tok_s);
  }
  std::printf(
      "* the GPU path has no batched prefill yet: the prompt runs one token per step.\n"
      "tok/s is wall clock around each step's submit and wait; the roofline uses it.\n");
  return 0;
}

}  // namespace uf::cli
