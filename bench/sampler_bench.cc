// Per-token cost of the sampler chain (sampling::Sampler, what run, serve and bench all use) over
// real vocabulary sizes, for the settings clients send: the OpenAI default (temperature 1, no
// top-k, top-p 1), llama.cpp's default (top-k 40, top-p 0.95, min-p 0.05, temperature 0.8), top-p
// alone, min-p alone, greedy, and penalties with bias. Rows are Gaussian logits: "flat" (sd 0.7,
// what random-weight models give: top-p keeps most of the vocabulary) and "peaked" (sd 4).
//
// Beside each figure, the sort-based chain this sampler replaced (a copy of the row, a full sort
// of the vocabulary when top-k is off) measured on the same rows in the same run, so the ratio
// holds on a noisy machine. Prints one JSON object per line.
//
//   sampler_bench [--vocab 32000,128256,151936] [--iters 200]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "sampling/sampler.h"

namespace {

using uf::sampling::Sampler;
using uf::sampling::SamplingParams;

// The chain before it was rewritten: every candidate materialised, a full sort when top-k is off,
// scalar double exps. Kept here only as the baseline of this benchmark.
int32_t SortChain(const SamplingParams& p, const float* logits, int32_t n, std::mt19937_64& rng,
                  std::vector<float>& copy, std::vector<std::pair<float, int32_t>>& cand) {
  copy.assign(logits, logits + n);
  cand.clear();
  for (int32_t i = 0; i < n; ++i) cand.emplace_back(copy[i], i);
  auto higher = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  if (p.top_k > 0 && p.top_k < n) {
    std::partial_sort(cand.begin(), cand.begin() + p.top_k, cand.end(), higher);
    cand.resize(p.top_k);
  } else {
    std::sort(cand.begin(), cand.end(), higher);
  }
  const double max = cand[0].first;
  double z = 0;
  for (const auto& c : cand) z += std::exp(c.first - max);
  if (p.min_p > 0) {
    const float t = static_cast<float>(max) + std::log(p.min_p);
    std::erase_if(cand, [&](const auto& c) { return c.first < t; });
  }
  if (p.top_p < 1) {
    double cum = 0;
    for (size_t i = 0; i < cand.size(); ++i) {
      cum += std::exp(cand[i].first - max) / z;
      if (cum >= p.top_p) {
        cand.resize(i + 1);
        break;
      }
    }
  }
  double total = 0;
  for (const auto& c : cand) total += std::exp((c.first - max) / p.temperature);
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;
  double cum = 0;
  for (const auto& c : cand) {
    cum += std::exp((c.first - max) / p.temperature);
    if (u < cum) return c.second;
  }
  return cand.back().second;
}

struct Setting {
  const char* name;
  SamplingParams params;
  bool edits;  // bias, a banned token and a 64-token penalty window
};

std::vector<Setting> Settings() {
  auto make = [](float t, int32_t k, float top_p, float min_p) {
    SamplingParams p;
    p.temperature = t;
    p.top_k = k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = 1;
    return p;
  };
  SamplingParams pen = make(1.0f, 0, 1.0f, 0.0f);
  pen.presence_penalty = 0.5f;
  pen.frequency_penalty = 0.2f;
  return {{"openai_default_t1", make(1.0f, 0, 1.0f, 0.0f), false},
          {"llama_default_k40_p095_minp005", make(0.8f, 40, 0.95f, 0.05f), false},
          {"k40_p095_minp005_t1", make(1.0f, 40, 0.95f, 0.05f), false},
          {"top_p_09", make(1.0f, 0, 0.9f, 0.0f), false},
          {"top_p_09_t07", make(0.7f, 0, 0.9f, 0.0f), false},
          {"min_p_005", make(1.0f, 0, 1.0f, 0.05f), false},
          {"greedy", make(0.0f, 0, 1.0f, 0.0f), false},
          {"t1_penalties_bias_ban", pen, true}};
}

template <typename F>
double MedianMicros(int iters, F&& f) {
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Per-token cost of the sampler chain");
  std::string vocabs = "32000,128256,151936";
  int iters = 200;
  app.add_option("--vocab", vocabs, "vocabulary sizes")->capture_default_str();
  app.add_option("--iters", iters, "samples per figure (median)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::vector<int32_t> sizes;
  std::stringstream ss(vocabs);
  for (std::string item; std::getline(ss, item, ',');) sizes.push_back(std::stoi(item));
  const std::string isa = uf::kernels::IsaName(uf::kernels::ActiveIsa());
  for (int32_t n : sizes) {
    for (const char* shape : {"flat", "peaked"}) {
      std::mt19937 gen(3);
      std::normal_distribution<float> g(0.0f, std::string(shape) == "flat" ? 0.7f : 4.0f);
      // Several rows, cycled, so one row's cache state does not flatter either chain.
      std::vector<std::vector<float>> rows(4, std::vector<float>(n));
      for (auto& r : rows) {
        for (float& x : r) x = g(gen);
      }
      for (const Setting& s : Settings()) {
        Sampler sampler(s.params, n);
        if (s.edits) {
          sampler.SetLogitBias({{11, 2.0f}, {n - 5, -1.0f}});
          sampler.SetBanned({n - 1});
          for (int i = 0; i < 64; ++i) sampler.Accept((i * 7919) % n);
        }
        size_t row = 0;
        const double ours = MedianMicros(iters, [&] { sampler.Sample(rows[row++ % 4].data()); });
        const Sampler::Work work = sampler.work();
        std::mt19937_64 rng(1);
        std::vector<float> copy;
        std::vector<std::pair<float, int32_t>> cand;
        cand.reserve(n);
        const int base_iters = std::max(5, iters / 10);  // the sort chain is slow at 152k
        const double before = s.params.greedy() ? ours : MedianMicros(base_iters, [&] {
          SortChain(s.params, rows[row++ % 4].data(), n, rng, copy, cand);
        });
        const nlohmann::json j = {{"vocab", n},
                                  {"rows", shape},
                                  {"setting", s.name},
                                  {"isa", isa},
                                  {"us_per_token", ours},
                                  {"sort_chain_us", before},
                                  {"speedup", before / ours},
                                  {"row_reads", work.row_reads},
                                  {"gathered", work.gathered},
                                  {"sorted", work.sorted}};
        std::printf("%s\n", j.dump().c_str());
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
