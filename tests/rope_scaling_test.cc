// RoPE scaling against the reference engine past 8k positions. Three 2-layer models with real
// vocabularies and 16k contexts are written by synth (seeded: the same bytes the reference ran
// on): Llama 3 rope_freqs (factor 8 over 2k), Qwen2 YaRN (factor 4 over 4k, NeoX rotation) and
// linear (factor 4). tests/data/rope/*.json hold the reference's top-8 logits at 19 positions of
// a 9,000-token sequence (t_i = (7919 i + 11) mod 20000 + 300), computed with F32 K/V and no
// flash attention by llama.cpp (a small program against libllama; see docs/performance.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "engine/kv_cache.h"
#include "model/decoder.h"
#include "model/model.h"
#include "model/synth.h"

namespace uf {
namespace {

struct RopeCase {
  std::string name;    // tests/data/rope/<name>.json
  std::string preset;  // synth preset the shape overrides apply to
  std::string scaling;
  double factor;
  int64_t orig_ctx;
};

// The synth command's overrides (--layers 2 --embd 256 --heads 4 --kv-heads 2 --ff 512
// --ctx 16384 --seed 7 --type q8_0 --rope-scaling ...), applied to the preset.
std::string WriteModel(const RopeCase& c) {
  auto preset = model::FindSynthPreset(c.preset);
  EXPECT_TRUE(preset.ok());
  model::SynthPreset p = *preset;
  p.n_layer = 2;
  p.n_embd = 256;
  p.n_head = 4;
  p.head_dim = 64;
  p.n_head_kv = 2;
  p.n_ff = 512;
  p.n_ctx_train = 16384;
  p.llama3_rope.factor = 0.0;
  if (c.scaling == "llama3") {
    p.llama3_rope = {c.factor, 1.0, 4.0, c.orig_ctx};
  } else {
    p.rope_scaling = c.scaling;
    p.rope_scaling_factor = c.factor;
    p.rope_scaling_orig_ctx = c.orig_ctx;
  }
  auto plan = model::PlanSynth(p, model::SynthFileType::kQ8_0);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("uf_rope_" + c.name + "_" + std::to_string(getpid()) + ".gguf"))
                               .string();
  model::SynthOptions so;
  so.seed = 7;
  so.n_threads = 2;
  auto r = model::WriteSynth(*plan, so, path);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return path;
}

void PrintTo(const RopeCase& c, std::ostream* os) { *os << c.name; }

class RopeScalingTest : public ::testing::TestWithParam<RopeCase> {};

// Tolerances, as in golden_test for Q8_0 weights: each of the reference's top-8 logits within
// 0.03 x max(1, |logit|) of ours, and the same arg-max where the reference's best beats its
// second by at least 2%. Random 2-layer models attend almost uniformly, so wrong angles move
// the logits little: run without their scaling (YaRN off, llama3 factors or the linear factor
// ignored; tried while writing this test) every position past 0 errs by 4e-3 to 1.7e-2 with
// F32 K/V, within that tolerance. The discriminating check is therefore how many positions agree
// to float rounding with F32 K/V: with the right angles some agree to ~4e-6 (the others differ
// by a flip of the 8-bit activation rounding, up to 5e-3; which ones flip follows each kernel
// tier's float rounding: about half of the 18 past position 0 with the AVX-512 kernels; with
// AVX2's 10 (llama3), 12 (yarn) and 3 (linear), with the portable ones 5 (linear)), without them
// none does; at least 2 must be within 1e-4. F16 K/V rounding alone errs 3e-3 to 8e-3: only the tolerance applies there.
TEST_P(RopeScalingTest, LogitsMatchReferencePast8k) {
  const RopeCase c = GetParam();
  std::ifstream in("tests/data/rope/" + c.name + ".json");
  ASSERT_TRUE(in) << "missing reference data for " << c.name;
  const nlohmann::json ref = nlohmann::json::parse(in);
  const int64_t n = ref.at("n_tokens").get<int64_t>();
  std::map<int64_t, std::vector<std::pair<int32_t, float>>> want;
  for (const auto& p : ref.at("positions")) {
    auto& top = want[p.at("pos").get<int64_t>()];
    for (const auto& e : p.at("top"))
      top.emplace_back(e.at(0).get<int32_t>(), e.at(1).get<float>());
  }
  ASSERT_GE(want.rbegin()->first, 8192) << "the reference must reach past 8k";

  const std::string path = WriteModel(c);
  auto m = model::Model::Load(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const model::ModelConfig& cfg = (*m)->config();
  for (engine::KvType kv : {engine::KvType::kF32, engine::KvType::kF16}) {
    engine::KvCacheOptions co;
    co.n_layer = cfg.n_layer;
    co.n_head_kv = cfg.n_head_kv;
    co.head_dim = cfg.head_dim;
    co.type = kv;
    co.max_seq_len = n;
    co.n_blocks = engine::KvCacheOptions::BlocksFor(n, 1, co.block_size);
    auto cache = engine::KvCache::Create(co);
    ASSERT_TRUE(cache.ok());
    ThreadPool pool(2);
    model::DecoderOptions dopt;
    dopt.max_batch = 512;
    dopt.max_outputs = 16;
    auto dec = model::Decoder::Create(**m, cache->get(), dopt, &pool);
    ASSERT_TRUE(dec.ok());
    int checked = 0;
    std::vector<double> worst;  // per position past 0: max relative error over the top 8
    for (int64_t p0 = 0; p0 < n; p0 += 512) {
      model::Batch b;
      std::vector<int64_t> outs;
      for (int64_t p = p0; p < std::min(n, p0 + 512); ++p) {
        const bool w = want.count(p) != 0;
        if (w) outs.push_back(p);
        b.Add(static_cast<int32_t>((p * 7919 + 11) % 20000 + 300), static_cast<int32_t>(p), 0, w);
      }
      ASSERT_TRUE((*dec)->Forward(b).ok());
      for (size_t i = 0; i < outs.size(); ++i) {
        const float* logits = (*dec)->logits(static_cast<int64_t>(i));
        const auto& top = want[outs[i]];
        double w = 0;
        for (const auto& [id, logit] : top) {
          w = std::max<double>(w, std::fabs(logits[id] - logit) / std::max(1.0f, std::fabs(logit)));
        }
        if (outs[i] > 0) worst.push_back(w);
        for (const auto& [id, logit] : top) {
          EXPECT_NEAR(logits[id], logit, 0.03f * std::max(1.0f, std::fabs(logit)))
              << c.name << " " << engine::KvTypeName(kv) << " position " << outs[i] << " token "
              << id;
        }
        if (top[0].second - top[1].second >= 0.02f * std::max(1.0f, std::fabs(top[0].second))) {
          int64_t best = 0;
          for (int64_t v = 1; v < cfg.n_vocab; ++v) best = logits[v] > logits[best] ? v : best;
          EXPECT_EQ(best, top[0].first) << c.name << " position " << outs[i];
        }
        ++checked;
      }
    }
    EXPECT_EQ(checked, static_cast<int>(want.size()));
    if (kv == engine::KvType::kF32) {
      const auto close =
          std::count_if(worst.begin(), worst.end(), [](double e) { return e < 1e-4; });
      EXPECT_GE(close, 2) << c.name << ": positions past 0 within 1e-4 of the reference, of "
                          << worst.size();
    }
  }
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(Reference, RopeScalingTest,
                         ::testing::Values(RopeCase{"llama3", "llama-3.2-1b", "llama3", 8, 2048},
                                           RopeCase{"yarn", "qwen2.5-0.5b", "yarn", 4, 4096},
                                           RopeCase{"linear", "smollm2-135m", "linear", 4, 4096}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace uf
