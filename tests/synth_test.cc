// Synthetic model files (src/model/synth.h): presets against the published model configs and
// parameter counts, the weight-type mix against files made by the reference quantizer, and
// written files against the loader, the forward pass and the tokenizer.
#include "model/synth.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "engine/kv_cache.h"
#include "gguf/gguf.h"
#include "kernels/quant.h"
#include "model/batch.h"
#include "model/decoder.h"
#include "model/model.h"
#include "shared_data.h"
#include "tokenizer/tokenizer.h"

namespace uf::model {
namespace {

namespace fs = std::filesystem;

SynthPreset Preset(const std::string& name) {
  auto p = FindSynthPreset(name);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : SynthPreset{};
}

SynthPlan Plan(const SynthPreset& preset, SynthFileType type) {
  auto plan = PlanSynth(preset, type);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return plan.ok() ? *plan : SynthPlan{};
}

const SynthTensor* FindTensor(const SynthPlan& plan, const std::string& name) {
  for (const SynthTensor& t : plan.tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

GgmlType TypeOf(const SynthPlan& plan, const std::string& name) {
  const SynthTensor* t = FindTensor(plan, name);
  EXPECT_NE(t, nullptr) << name;
  return t != nullptr ? t->type : GgmlType::kI8;
}

// Shrinks a preset to a few layers and a 1024-token vocabulary (specials moved to the top), so
// files take milliseconds to write while keeping the architecture's tensor layout.
SynthPreset Tiny(SynthPreset p, int64_t n_embd, int64_t n_head, int64_t n_head_kv,
                 int64_t head_dim) {
  p.name = "tiny-" + p.name;
  p.n_embd = n_embd;
  p.n_layer = 3;
  p.n_head = n_head;
  p.n_head_kv = n_head_kv;
  p.head_dim = head_dim;
  p.n_ff = 2 * n_embd;
  p.n_vocab = 1024;
  p.n_real_tokens = 1000;
  std::vector<SynthSpecialToken> specials;
  for (size_t i = 0; i < p.special_tokens.size() && i < 8; ++i) {
    specials.push_back(p.special_tokens[i]);
    specials.back().id = static_cast<int32_t>(992 + i);
  }
  p.special_tokens = specials;
  p.bos_id = 992;
  p.eos_id = 993;
  p.pad_id = -1;
  return p;
}

SynthOptions Options(uint64_t seed, int n_threads) {
  SynthOptions o;
  o.seed = seed;
  o.n_threads = n_threads;
  return o;
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("uf_synth_test_" + std::to_string(::getpid()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::vector<char> ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

// ---- Presets and plans (no file written).

struct PublishedConfig {
  const char* preset;
  Architecture arch;
  int64_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab;
  bool tied;
  float rope_base, rms_eps;
  // Total parameter count of the published safetensors (tied embeddings counted once).
  uint64_t n_params;
};

// From each model's Hugging Face config.json and model card.
const PublishedConfig kPublished[] = {
    {"llama-3.2-1b", Architecture::kLlama, 2048, 16, 32, 8, 64, 8192, 128256, true, 500000.0f,
     1e-5f, 1235814400},
    {"llama-3.2-3b", Architecture::kLlama, 3072, 28, 24, 8, 128, 8192, 128256, true, 500000.0f,
     1e-5f, 3212749824},
    {"llama-3.1-8b", Architecture::kLlama, 4096, 32, 32, 8, 128, 14336, 128256, false, 500000.0f,
     1e-5f, 8030261248},
    {"qwen2.5-0.5b", Architecture::kQwen2, 896, 24, 14, 2, 64, 4864, 151936, true, 1e6f, 1e-6f,
     494032768},
    {"qwen3-0.6b", Architecture::kQwen3, 1024, 28, 16, 8, 128, 3072, 151936, true, 1e6f, 1e-6f,
     596049920},
    {"smollm2-135m", Architecture::kLlama, 576, 30, 9, 3, 64, 1536, 49152, true, 100000.0f, 1e-5f,
     134515008},
};

// Mixtures of experts: the published totals (Hugging Face model cards: 30.5B, 46.7B and 20.9B),
// which count routers, norms, biases and sinks too.
struct PublishedMoe {
  const char* preset;
  Architecture arch;
  int64_t n_expert, n_expert_used, n_ff_exp;
  uint64_t n_params;
};
const PublishedMoe kPublishedMoe[] = {
    {"qwen3-30b-a3b", Architecture::kQwen3Moe, 128, 8, 768, 30532122624},
    {"mixtral-8x7b", Architecture::kLlama, 8, 2, 14336, 46702792704},
    {"gpt-oss-20b", Architecture::kGptOss, 32, 4, 2880, 20914757184},
};

TEST(SynthPresets, MoePresetsMatchPublishedConfigs) {
  for (const PublishedMoe& c : kPublishedMoe) {
    SCOPED_TRACE(c.preset);
    const SynthPreset p = Preset(c.preset);
    EXPECT_EQ(p.arch, c.arch);
    EXPECT_EQ(p.n_expert, c.n_expert);
    EXPECT_EQ(p.n_expert_used, c.n_expert_used);
    EXPECT_EQ(p.n_ff_exp, c.n_ff_exp);
    const SynthPlan plan = Plan(p, SynthFileType::kQ4_K_M);
    EXPECT_EQ(plan.n_params, c.n_params);
    const SynthTensor* gate = FindTensor(plan, "blk.0.ffn_gate_exps.weight");
    ASSERT_NE(gate, nullptr);
    EXPECT_EQ(gate->ne, (std::vector<int64_t>{p.n_embd, c.n_ff_exp, c.n_expert}));
    EXPECT_EQ(FindTensor(plan, "blk.0.ffn_down_exps.weight")->ne,
              (std::vector<int64_t>{c.n_ff_exp, p.n_embd, c.n_expert}));
    // The reference quantizer keeps routers in F32; ffn_down of the first layers gets Q6_K
    // (gpt-oss's 2880-wide rows are not whole K-quant blocks: Q8_0).
    EXPECT_EQ(TypeOf(plan, "blk.0.ffn_gate_inp.weight"), GgmlType::kF32);
    const bool k_quants = p.n_embd % 256 == 0;
    EXPECT_EQ(gate->type, k_quants ? GgmlType::kQ4_K : GgmlType::kQ8_0);
    EXPECT_EQ(TypeOf(plan, "blk.0.ffn_down_exps.weight"),
              k_quants ? GgmlType::kQ6_K : GgmlType::kQ8_0);
    EXPECT_EQ(FindTensor(plan, "blk.0.ffn_gate.weight"), nullptr);
    // MXFP4 (the reference's MXFP4_MOE): experts in MXFP4, other matrices Q8_0.
    const SynthPlan fp4 = Plan(p, SynthFileType::kMXFP4);
    EXPECT_EQ(TypeOf(fp4, "blk.0.ffn_up_exps.weight"), GgmlType::kMXFP4);
    EXPECT_EQ(TypeOf(fp4, "blk.0.attn_q.weight"), GgmlType::kQ8_0);
  }
}

TEST(SynthPresets, MatchPublishedConfigsAndParameterCounts) {
  // The MoE presets and their tiny test versions.
  ASSERT_EQ(SynthPresets().size(), std::size(kPublished) + 2 * std::size(kPublishedMoe));
  for (const PublishedConfig& c : kPublished) {
    SCOPED_TRACE(c.preset);
    const SynthPreset p = Preset(c.preset);
    EXPECT_EQ(p.arch, c.arch);
    EXPECT_EQ(p.n_embd, c.n_embd);
    EXPECT_EQ(p.n_layer, c.n_layer);
    EXPECT_EQ(p.n_head, c.n_head);
    EXPECT_EQ(p.n_head_kv, c.n_head_kv);
    EXPECT_EQ(p.head_dim, c.head_dim);
    EXPECT_EQ(p.n_ff, c.n_ff);
    EXPECT_EQ(p.n_vocab, c.n_vocab);
    EXPECT_EQ(p.tied_embeddings, c.tied);
    EXPECT_EQ(p.rope_freq_base, c.rope_base);
    EXPECT_EQ(p.rms_eps, c.rms_eps);
    const SynthPlan plan = Plan(p, SynthFileType::kF16);
    EXPECT_EQ(plan.n_params, c.n_params);
  }
  EXPECT_EQ(FindSynthPreset("llama-9b").status().code(), StatusCode::kNotFound);
  EXPECT_NE(FindSynthPreset("llama-9b").status().message().find("smollm2-135m"), std::string::npos);
}

TEST(SynthPlan, TensorShapesFollowTheArchitecture) {
  for (const PublishedConfig& c : kPublished) {
    SCOPED_TRACE(c.preset);
    const SynthPlan plan = Plan(Preset(c.preset), SynthFileType::kQ8_0);
    const int64_t q = c.n_head * c.head_dim, kv = c.n_head_kv * c.head_dim;
    const std::map<std::string, std::vector<int64_t>> want = {
        {"token_embd.weight", {c.n_embd, c.n_vocab}},  {"output_norm.weight", {c.n_embd}},
        {"blk.0.attn_norm.weight", {c.n_embd}},        {"blk.0.attn_q.weight", {c.n_embd, q}},
        {"blk.0.attn_k.weight", {c.n_embd, kv}},       {"blk.0.attn_v.weight", {c.n_embd, kv}},
        {"blk.0.attn_output.weight", {q, c.n_embd}},   {"blk.0.ffn_norm.weight", {c.n_embd}},
        {"blk.0.ffn_gate.weight", {c.n_embd, c.n_ff}}, {"blk.0.ffn_up.weight", {c.n_embd, c.n_ff}},
        {"blk.0.ffn_down.weight", {c.n_ff, c.n_embd}},
    };
    for (const auto& [name, ne] : want) {
      const SynthTensor* t = FindTensor(plan, name);
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ(t->ne, ne) << name;
    }
    size_t per_layer = 9;
    if (c.arch == Architecture::kQwen2) {
      per_layer += 3;
      ASSERT_NE(FindTensor(plan, "blk.0.attn_q.bias"), nullptr);
      EXPECT_EQ(FindTensor(plan, "blk.0.attn_k.bias")->ne, std::vector<int64_t>{kv});
    }
    if (c.arch == Architecture::kQwen3) {
      per_layer += 2;
      ASSERT_NE(FindTensor(plan, "blk.0.attn_q_norm.weight"), nullptr);
      EXPECT_EQ(FindTensor(plan, "blk.0.attn_k_norm.weight")->ne, std::vector<int64_t>{c.head_dim});
    }
    const bool llama3 = std::string(c.preset).rfind("llama-3", 0) == 0;
    if (llama3) {
      ASSERT_NE(FindTensor(plan, "rope_freqs.weight"), nullptr);
      EXPECT_EQ(TypeOf(plan, "rope_freqs.weight"), GgmlType::kF32);
      EXPECT_EQ(FindTensor(plan, "rope_freqs.weight")->ne, std::vector<int64_t>{c.head_dim / 2});
    }
    EXPECT_EQ(FindTensor(plan, "output.weight") != nullptr, !c.tied);
    EXPECT_EQ(plan.tensors.size(), per_layer * c.n_layer + 2 + (c.tied ? 0 : 1) + (llama3 ? 1 : 0));
    for (const SynthTensor& t : plan.tensors) {
      if (t.ne.size() == 1) {
        EXPECT_EQ(t.type, GgmlType::kF32) << t.name;
      }
    }
  }
}

// The reference quantizer's layer selection for Q4_K_M, written out: the first and last eighth
// of the layers and every third layer in between.
std::set<int64_t> MoreBitsLayers(int64_t n) {
  if (n == 16) return {0, 1, 4, 7, 10, 13, 14, 15};
  if (n == 32) return {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
  if (n == 24) return {0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23};
  ADD_FAILURE() << "no table for " << n << " layers";
  return {};
}

TEST(SynthPlan, Q4KMMixFollowsTheReferenceQuantizer) {
  for (const char* name : {"llama-3.2-1b", "llama-3.1-8b"}) {
    SCOPED_TRACE(name);
    const SynthPreset p = Preset(name);
    const SynthPlan plan = Plan(p, SynthFileType::kQ4_K_M);
    const std::set<int64_t> more = MoreBitsLayers(p.n_layer);
    for (int64_t il = 0; il < p.n_layer; ++il) {
      const std::string b = "blk." + std::to_string(il) + ".";
      const GgmlType v = more.count(il) ? GgmlType::kQ6_K : GgmlType::kQ4_K;
      EXPECT_EQ(TypeOf(plan, b + "attn_v.weight"), v) << il;
      EXPECT_EQ(TypeOf(plan, b + "ffn_down.weight"), v) << il;
      for (const char* t : {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"}) {
        EXPECT_EQ(TypeOf(plan, b + t + ".weight"), GgmlType::kQ4_K) << b << t;
      }
      EXPECT_EQ(TypeOf(plan, b + "attn_norm.weight"), GgmlType::kF32);
    }
    if (p.tied_embeddings) {  // the embedding doubles as the output matrix
      EXPECT_EQ(TypeOf(plan, "token_embd.weight"), GgmlType::kQ6_K);
    } else {
      EXPECT_EQ(TypeOf(plan, "token_embd.weight"), GgmlType::kQ4_K);
      EXPECT_EQ(TypeOf(plan, "output.weight"), GgmlType::kQ6_K);
    }
  }
  // Qwen2.5-0.5B: 896-wide rows are not whole 256-blocks, so they fall back to Q8_0; ffn_down's
  // 4864-wide rows (19 blocks) stay K-quants.
  const SynthPlan qwen = Plan(Preset("qwen2.5-0.5b"), SynthFileType::kQ4_K_M);
  const std::set<int64_t> more = MoreBitsLayers(24);
  for (int64_t il = 0; il < 24; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    EXPECT_EQ(TypeOf(qwen, b + "attn_q.weight"), GgmlType::kQ8_0);
    EXPECT_EQ(TypeOf(qwen, b + "attn_v.weight"), GgmlType::kQ8_0);
    EXPECT_EQ(TypeOf(qwen, b + "attn_q.bias"), GgmlType::kF32);
    EXPECT_EQ(TypeOf(qwen, b + "ffn_down.weight"),
              more.count(il) ? GgmlType::kQ6_K : GgmlType::kQ4_K);
  }
  EXPECT_EQ(TypeOf(qwen, "token_embd.weight"), GgmlType::kQ8_0);
}

TEST(SynthPlan, OtherTypesFollowTheReferenceQuantizer) {
  const SynthPlan q40 = Plan(Preset("llama-3.2-1b"), SynthFileType::kQ4_0);
  EXPECT_EQ(TypeOf(q40, "token_embd.weight"), GgmlType::kQ6_K);  // tied: output rule
  EXPECT_EQ(TypeOf(q40, "blk.3.attn_v.weight"), GgmlType::kQ4_0);
  EXPECT_EQ(TypeOf(q40, "blk.3.ffn_down.weight"), GgmlType::kQ4_0);
  const SynthPlan q40_8b = Plan(Preset("llama-3.1-8b"), SynthFileType::kQ4_0);
  EXPECT_EQ(TypeOf(q40_8b, "token_embd.weight"), GgmlType::kQ4_0);
  EXPECT_EQ(TypeOf(q40_8b, "output.weight"), GgmlType::kQ6_K);
  // 576-wide rows: the output rule's Q6_K needs whole 256-blocks, so Q8_0.
  const SynthPlan smol_q40 = Plan(Preset("smollm2-135m"), SynthFileType::kQ4_0);
  EXPECT_EQ(TypeOf(smol_q40, "token_embd.weight"), GgmlType::kQ8_0);
  EXPECT_EQ(TypeOf(smol_q40, "blk.0.attn_q.weight"), GgmlType::kQ4_0);
  const SynthPlan smol_q6 = Plan(Preset("smollm2-135m"), SynthFileType::kQ6_K);
  EXPECT_EQ(TypeOf(smol_q6, "blk.0.attn_q.weight"), GgmlType::kQ8_0);
  EXPECT_EQ(TypeOf(smol_q6, "blk.0.ffn_down.weight"), GgmlType::kQ6_K);  // 1536 = 6 blocks
  const SynthPlan q8 = Plan(Preset("llama-3.1-8b"), SynthFileType::kQ8_0);
  EXPECT_EQ(TypeOf(q8, "output.weight"), GgmlType::kQ8_0);
  // MXFP4: every matrix of a dense preset but the output (the output rule as for Q4_0).
  const SynthPlan mx = Plan(Preset("llama-3.1-8b"), SynthFileType::kMXFP4);
  EXPECT_EQ(TypeOf(mx, "token_embd.weight"), GgmlType::kMXFP4);
  EXPECT_EQ(TypeOf(mx, "blk.3.attn_v.weight"), GgmlType::kMXFP4);
  EXPECT_EQ(TypeOf(mx, "blk.3.ffn_down.weight"), GgmlType::kMXFP4);
  EXPECT_EQ(TypeOf(mx, "output.weight"), GgmlType::kQ6_K);
  for (SynthFileType ft : {SynthFileType::kF16, SynthFileType::kBF16}) {
    const SynthPlan f = Plan(Preset("qwen3-0.6b"), ft);
    const GgmlType want = ft == SynthFileType::kF16 ? GgmlType::kF16 : GgmlType::kBF16;
    EXPECT_EQ(TypeOf(f, "token_embd.weight"), want);
    EXPECT_EQ(TypeOf(f, "blk.5.attn_v.weight"), want);
    EXPECT_EQ(TypeOf(f, "blk.5.attn_q_norm.weight"), GgmlType::kF32);
  }
}

// The shared tiny models were quantized by the reference engine's own tool: a preset of the
// same shape must get the same type for every tensor.
TEST(SynthPlan, TypesMatchReferenceQuantizedFiles) {
  UF_REQUIRE_SHARED();
  SynthPreset p = Tiny(Preset("smollm2-135m"), 256, 4, 2, 64);
  p.n_layer = 2;
  p.n_ff = 512;
  p.n_vocab = 32000;
  p.n_real_tokens = 32000;
  const std::pair<const char*, SynthFileType> files[] = {
      {"q4_k_m", SynthFileType::kQ4_K_M}, {"q4_0", SynthFileType::kQ4_0},
      {"q6_k", SynthFileType::kQ6_K},     {"q8_0", SynthFileType::kQ8_0},
      {"f16", SynthFileType::kF16},       {"bf16", SynthFileType::kBF16}};
  for (const auto& [suffix, ft] : files) {
    SCOPED_TRACE(suffix);
    auto file =
        gguf::GgufFile::Open(std::string("../shared/models/tiny-llama-256-") + suffix + ".gguf");
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    const SynthPlan plan = Plan(p, ft);
    EXPECT_EQ((*file)->tensors().size(), plan.tensors.size());
    for (const gguf::TensorInfo& t : (*file)->tensors()) {
      const SynthTensor* s = FindTensor(plan, t.name);
      ASSERT_NE(s, nullptr) << t.name;
      EXPECT_EQ(s->type, t.type) << t.name;
      EXPECT_EQ(s->n_bytes, t.n_bytes) << t.name;
    }
    EXPECT_EQ((*file)->GetIntOr("general.file_type", -1), SynthGeneralFileType(ft));
  }
}

TEST(SynthPlan, DataBytesAddUpAndBadPresetsAreRejected) {
  const SynthPlan plan = Plan(Preset("qwen2.5-0.5b"), SynthFileType::kQ8_0);
  uint64_t want = 0;
  for (const SynthTensor& t : plan.tensors) {
    uint64_t n = 1;
    for (int64_t d : t.ne) n *= d;
    // Q8_0: 34 bytes per 32 values; F32: 4 bytes per value; each tensor padded to 32 bytes.
    const uint64_t bytes = t.ne.size() == 1 ? 4 * n : n / 32 * 34;
    EXPECT_EQ(t.n_bytes, bytes) << t.name;
    want += (bytes + 31) / 32 * 32;
  }
  EXPECT_EQ(plan.data_bytes, want);

  SynthPreset bad = Preset("smollm2-135m");
  bad.n_head_kv = 4;  // 9 heads
  EXPECT_EQ(PlanSynth(bad, SynthFileType::kQ8_0).status().code(), StatusCode::kInvalidArgument);
  bad = Preset("smollm2-135m");
  bad.head_dim = 63;
  EXPECT_EQ(PlanSynth(bad, SynthFileType::kQ8_0).status().code(), StatusCode::kInvalidArgument);
  // Mixtral's file would say feed_forward_length 2048 over experts of 14336 rows.
  bad = Preset("mixtral-8x7b");
  bad.n_ff = 2048;
  EXPECT_EQ(PlanSynth(bad, SynthFileType::kQ8_0).status().code(), StatusCode::kInvalidArgument);
  // Rows that are not whole blocks of any quantized type fall back to F16, as the reference does.
  SynthPreset odd = Preset("smollm2-135m");
  odd.n_embd = 100;
  const SynthPlan odd_plan = Plan(odd, SynthFileType::kQ4_K_M);
  EXPECT_EQ(TypeOf(odd_plan, "blk.0.attn_q.weight"), GgmlType::kF16);
  EXPECT_EQ(TypeOf(odd_plan, "blk.0.ffn_down.weight"), GgmlType::kQ6_K);  // 1536-wide rows
  EXPECT_EQ(ParseSynthFileType("Q4_K_M"), SynthFileType::kQ4_K_M);
  EXPECT_EQ(ParseSynthFileType("MXFP4"), SynthFileType::kMXFP4);
  EXPECT_EQ(SynthGeneralFileType(SynthFileType::kMXFP4), 38u);  // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
  EXPECT_FALSE(ParseSynthFileType("q5_k_m").has_value());
}

TEST(SynthRope, Llama3FactorsMatchTheFormula) {
  for (const char* name : {"llama-3.2-1b", "llama-3.1-8b"}) {
    SCOPED_TRACE(name);
    const SynthPreset p = Preset(name);
    const std::vector<float> f = Llama3RopeFreqFactors(p);
    ASSERT_EQ(static_cast<int64_t>(f.size()), p.head_dim / 2);
    const double factor = std::string(name) == "llama-3.2-1b" ? 32.0 : 8.0;
    int n_one = 0, n_factor = 0;
    for (size_t i = 0; i < f.size(); ++i) {
      // Meta's reference: wavelengths under 8192/4 keep their frequency, over 8192/1 are
      // divided by the factor, and in between blend smoothly.
      const double freq = std::pow(500000.0, -2.0 * i / p.head_dim);
      const double wavelen = 2 * M_PI / freq;
      double want;
      if (wavelen < 2048) {
        want = 1;
        ++n_one;
      } else if (wavelen > 8192) {
        want = factor;
        ++n_factor;
      } else {
        const double smooth = (8192 / wavelen - 1) / (4 - 1);
        want = 1 / ((1 - smooth) / factor + smooth);
      }
      EXPECT_NEAR(f[i], want, 1e-5 * want) << i;  // float vs double evaluation
    }
    EXPECT_GT(n_one, 0);
    EXPECT_GT(n_factor, 0);
    EXPECT_LT(n_one + n_factor, static_cast<int>(f.size()));  // some blended
  }
}

// ---- Tokenizer.

TEST(SynthTokenizer, VocabularyIsValidBpeWithRealSpecialIds) {
  struct Special {
    const char* preset;
    int32_t id;
    const char* text;
    TokenType type;  // as the reference converter types them
  };
  constexpr TokenType kControl = TokenType::kControl;
  const Special specials[] = {
      {"llama-3.2-1b", 128000, "<|begin_of_text|>", kControl},
      {"llama-3.2-1b", 128001, "<|end_of_text|>", kControl},
      {"llama-3.2-1b", 128009, "<|eot_id|>", kControl},
      {"llama-3.2-1b", 128255, "<|reserved_special_token_247|>", kControl},
      {"qwen2.5-0.5b", 151643, "<|endoftext|>", kControl},
      {"qwen2.5-0.5b", 151644, "<|im_start|>", kControl},
      {"qwen2.5-0.5b", 151645, "<|im_end|>", kControl},
      {"qwen2.5-0.5b", 151657, "<tool_call>", TokenType::kUserDefined},
      {"qwen2.5-0.5b", 151664, "<|file_sep|>", kControl},
      {"qwen3-0.6b", 151668, "</think>", TokenType::kUserDefined},
      {"smollm2-135m", 0, "<|endoftext|>", kControl},
      {"smollm2-135m", 2, "<|im_end|>", kControl},
  };
  const std::string texts[] = {
      "Hello world! The quick brown fox jumps over the lazy dog.",
      "  indented code:\n\tx = 12345 + 678;\n\n",
      "Unicode: caf\xC3\xA9, \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E, \xF0\x9F\x98\x80 ok",
  };
  for (const char* name : {"llama-3.2-1b", "qwen2.5-0.5b", "qwen3-0.6b", "smollm2-135m"}) {
    SCOPED_TRACE(name);
    const SynthPreset p = Preset(name);
    auto config = SynthTokenizerConfig(p);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    ASSERT_EQ(static_cast<int64_t>(config->tokens.size()), p.n_vocab);
    std::set<std::string> unique(config->tokens.begin(), config->tokens.end());
    EXPECT_EQ(unique.size(), config->tokens.size()) << "token strings must be unique";
    for (const std::string& m : config->merges) {
      const size_t space = m.find(' ');
      ASSERT_NE(space, std::string::npos) << m;
      const std::string a = m.substr(0, space), b = m.substr(space + 1);
      ASSERT_TRUE(unique.count(a) && unique.count(b) && unique.count(a + b)) << m;
    }
    for (const Special& s : specials) {
      if (std::string(s.preset) != name) continue;
      EXPECT_EQ(config->tokens[s.id], s.text);
      EXPECT_EQ(config->token_types[s.id], s.type) << s.text;
    }
    auto tok = Tokenizer::FromConfig(*config);
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    for (const std::string& text : texts) {
      const std::vector<int32_t> ids = (*tok)->Encode(text, /*add_bos=*/false, false);
      EXPECT_EQ((*tok)->Decode(ids), text);
    }
    // Merges join letters into words of up to 4-5 letters: English needs well under one token
    // per two bytes.
    EXPECT_LT((*tok)->Encode(texts[0], false, false).size(), texts[0].size() / 2);
    const std::vector<int32_t> with_bos = (*tok)->Encode("hi", /*add_bos=*/true, false);
    EXPECT_EQ(!with_bos.empty() && with_bos[0] == p.bos_id, p.add_bos);
  }
}

// ---- Written files.

// Loads a written file and checks it against its plan: loader, sizes, tensor types and shapes.
std::unique_ptr<Model> LoadAndCheck(const std::string& path, const SynthPlan& plan) {
  auto m = Model::Load(path);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return nullptr;
  const gguf::GgufFile& f = (*m)->file();
  EXPECT_EQ(f.file_size(), f.data_offset() + plan.data_bytes);
  EXPECT_EQ(f.tensors().size(), plan.tensors.size());
  for (const SynthTensor& t : plan.tensors) {
    const gguf::TensorInfo* info = f.FindTensor(t.name);
    EXPECT_NE(info, nullptr) << t.name;
    if (info == nullptr) continue;
    EXPECT_EQ(info->type, t.type) << t.name;
    EXPECT_EQ(std::vector<int64_t>(info->ne, info->ne + info->n_dims), t.ne) << t.name;
  }
  const SynthPreset& p = plan.preset;
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.architecture, p.arch);
  EXPECT_EQ(c.n_embd, p.n_embd);
  EXPECT_EQ(c.n_layer, p.n_layer);
  EXPECT_EQ(c.n_head, p.n_head);
  EXPECT_EQ(c.n_head_kv, p.n_head_kv);
  EXPECT_EQ(c.head_dim, p.head_dim);
  EXPECT_EQ(c.n_ff, p.n_ff);
  EXPECT_EQ(c.n_vocab, p.n_vocab);
  EXPECT_EQ(c.n_ctx_train, p.n_ctx_train);
  EXPECT_EQ(c.rope_freq_base, p.rope_freq_base);
  EXPECT_EQ(c.rms_eps, p.rms_eps);
  EXPECT_EQ(c.tied_output, p.tied_embeddings);
  EXPECT_EQ(c.has_rope_freq_factors, p.llama3_rope.factor != 0.0);
  EXPECT_EQ(f.GetIntOr("general.file_type", -1), SynthGeneralFileType(plan.file_type));
  return std::move(m).value();
}

struct Stats {
  double mean = 0, std = 0, within_1sd = 0;  // fraction of |x - mean| < std
};

Stats TensorStats(const gguf::GgufFile& f, const std::string& name) {
  const gguf::TensorInfo* t = f.FindTensor(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  std::vector<float> v(t->n_elements());
  kernels::DequantizeRow(t->type, t->data, v.data(), t->n_elements());
  double sum = 0, sum2 = 0;
  for (float x : v) sum += x;
  Stats s;
  s.mean = sum / v.size();
  for (float x : v) sum2 += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(sum2 / v.size());
  size_t inside = 0;
  for (float x : v) inside += std::fabs(x - s.mean) < s.std;
  s.within_1sd = static_cast<double>(inside) / v.size();
  return s;
}

// Runs the prompt through the decoder; returns the last token's logits.
std::vector<float> LastLogits(const Model& m, const std::vector<int32_t>& ids) {
  const auto n = static_cast<int64_t>(ids.size());
  engine::KvCacheOptions co;
  co.n_layer = m.config().n_layer;
  co.n_head_kv = m.config().n_head_kv;
  co.head_dim = m.config().head_dim;
  co.n_blocks = engine::KvCacheOptions::BlocksFor(n, 1, co.block_size);
  co.max_seq_len = n;
  auto cache = engine::KvCache::Create(co);
  EXPECT_TRUE(cache.ok()) << cache.status().ToString();
  if (!cache.ok()) return {};
  ThreadPool pool(2);
  auto decoder = Decoder::Create(m, cache->get(), {.max_batch = n}, &pool);
  EXPECT_TRUE(decoder.ok()) << decoder.status().ToString();
  if (!decoder.ok()) return {};
  Batch batch;
  for (int64_t i = 0; i < n; ++i) batch.Add(ids[i], static_cast<int32_t>(i), 0, i + 1 == n);
  const Status st = (*decoder)->Forward(batch);
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (!st.ok()) return {};
  const float* l = (*decoder)->logits(0);
  return std::vector<float>(l, l + m.config().n_vocab);
}

void ExpectUsableLogits(const std::vector<float>& logits) {
  ASSERT_FALSE(logits.empty());
  float lo = logits[0], hi = logits[0];
  for (float x : logits) {
    ASSERT_TRUE(std::isfinite(x));
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  EXPECT_GT(hi - lo, 1e-3f) << "logits should depend on the token";
}

// The real SmolLM2-135M shape, written, loaded, run and tokenized. Weight statistics: Q8_0
// keeps values to ~0.4% of a block's max, so the dequantized mean and std equal the intended
// ones to sampling error (331k values: std error of the std ~0.1%); 10% leaves room for the
// quantizer without hiding a wrong scale.
TEST(SynthWrite, SmolLM2LoadsRunsAndTokenizes) {
  TempDir dir;
  for (SynthFileType ft : {SynthFileType::kQ8_0, SynthFileType::kQ4_0}) {
    SCOPED_TRACE(SynthFileTypeName(ft));
    const SynthPlan plan = Plan(Preset("smollm2-135m"), ft);
    const std::string path = dir.File("smollm2.gguf");
    auto r = WriteSynth(plan, Options(7, 0), path);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->n_tensors, plan.tensors.size());
    EXPECT_EQ(r->file_bytes, fs::file_size(path));
    std::unique_ptr<Model> m = LoadAndCheck(path, plan);
    ASSERT_NE(m, nullptr);

    if (ft == SynthFileType::kQ8_0) {
      const Stats q = TensorStats(m->file(), "blk.0.attn_q.weight");
      EXPECT_NEAR(q.mean, 0.0, 0.001);
      EXPECT_NEAR(q.std, 0.02, 0.002);
      // Gaussian shape: 68.3% within one standard deviation (sampling error ~0.1%).
      EXPECT_NEAR(q.within_1sd, 0.6827, 0.005);
      const Stats down = TensorStats(m->file(), "blk.29.ffn_down.weight");
      EXPECT_NEAR(down.std, 0.02 / std::sqrt(60.0), 0.1 * 0.02 / std::sqrt(60.0));
      const Stats norm = TensorStats(m->file(), "blk.3.attn_norm.weight");
      EXPECT_NEAR(norm.mean, 1.0, 0.01);
      EXPECT_NEAR(norm.std, 0.02, 0.004);  // 576 values: std error ~3%
    } else {
      const Stats q = TensorStats(m->file(), "blk.0.attn_q.weight");
      EXPECT_NEAR(q.std, 0.02, 0.002);  // 4-bit rounding adds < 1% variance
    }

    auto tok = Tokenizer::FromGguf(m->file());
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    EXPECT_EQ((*tok)->vocab_size(), 49152);
    const std::string text = "<|im_start|>user\nHello there, synthetic world!<|im_end|>";
    const std::vector<int32_t> ids = (*tok)->Encode(text, true, /*parse_special=*/true);
    EXPECT_EQ(ids.front(), 1);  // <|im_start|>
    EXPECT_EQ((*tok)->Decode(ids), text);
    ExpectUsableLogits(LastLogits(*m, ids));
  }
}

// Every architecture, through Q4_K_M's mixed types and the llama3 rope_freqs path, shrunk so the
// files are tiny; plus BF16/F16/Q6_K/MXFP4 on one of them.
TEST(SynthWrite, EveryArchitectureRuns) {
  TempDir dir;
  const std::pair<SynthPreset, SynthFileType> cases[] = {
      {Tiny(Preset("llama-3.2-1b"), 256, 4, 2, 64), SynthFileType::kQ4_K_M},
      {Tiny(Preset("qwen2.5-0.5b"), 256, 4, 2, 64), SynthFileType::kQ4_K_M},
      {Tiny(Preset("qwen3-0.6b"), 256, 4, 2, 128), SynthFileType::kQ4_K_M},
      {Tiny(Preset("llama-3.1-8b"), 256, 4, 2, 64), SynthFileType::kBF16},
      {Tiny(Preset("llama-3.1-8b"), 256, 4, 2, 64), SynthFileType::kF16},
      {Tiny(Preset("qwen3-0.6b"), 256, 4, 2, 128), SynthFileType::kQ6_K},
      {Tiny(Preset("llama-3.2-1b"), 256, 4, 2, 64), SynthFileType::kMXFP4},
  };
  for (const auto& [preset, ft] : cases) {
    SCOPED_TRACE(preset.name + " " + std::string(SynthFileTypeName(ft)));
    const SynthPlan plan = Plan(preset, ft);
    const std::string path = dir.File("tiny.gguf");
    auto r = WriteSynth(plan, Options(1, 2), path);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::unique_ptr<Model> m = LoadAndCheck(path, plan);
    ASSERT_NE(m, nullptr);
    if (preset.llama3_rope.factor != 0.0) {
      EXPECT_EQ(m->weights().rope_freq_factors, Llama3RopeFreqFactors(preset));
    }
    // Both K-quant types of the mix: std within 10% of the intended 0.02.
    for (const char* name : {"blk.0.attn_q.weight", "blk.0.attn_v.weight"}) {
      EXPECT_NEAR(TensorStats(m->file(), name).std, 0.02, 0.002) << name;
    }
    auto tok = Tokenizer::FromGguf(m->file());
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    const std::vector<int32_t> ids = (*tok)->Encode("the cat sat on a mat", true, false);
    EXPECT_EQ((*tok)->Decode(ids), "the cat sat on a mat");
    ExpectUsableLogits(LastLogits(*m, ids));
  }
}

TEST(SynthWrite, BytesDependOnTheSeedOnly) {
  TempDir dir;
  const SynthPlan plan = Plan(Tiny(Preset("llama-3.2-1b"), 256, 4, 2, 64), SynthFileType::kQ4_K_M);
  ASSERT_TRUE(WriteSynth(plan, Options(5, 1), dir.File("a.gguf")).ok());
  ASSERT_TRUE(WriteSynth(plan, Options(5, 3), dir.File("b.gguf")).ok());
  ASSERT_TRUE(WriteSynth(plan, Options(6, 2), dir.File("c.gguf")).ok());
  const std::vector<char> a = ReadAll(dir.File("a.gguf")), b = ReadAll(dir.File("b.gguf")),
                          c = ReadAll(dir.File("c.gguf"));
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "same seed, different thread counts";
  ASSERT_EQ(a.size(), c.size());
  EXPECT_FALSE(a == c) << "different seeds";
}

TEST(SynthWrite, UnwritablePathIsAnError) {
  const SynthPlan plan = Plan(Tiny(Preset("smollm2-135m"), 64, 2, 1, 32), SynthFileType::kQ8_0);
  auto r = WriteSynth(plan, Options(0, 1), "/nonexistent-dir/x.gguf");
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent-dir/x.gguf"), std::string::npos)
      << r.status().ToString();
  // A vocabulary too small for its special and byte tokens fails before anything is generated.
  SynthPreset bad = Tiny(Preset("smollm2-135m"), 64, 2, 1, 32);
  bad.n_real_tokens = 200;
  TempDir dir;
  r = WriteSynth(Plan(bad, SynthFileType::kQ8_0), Options(0, 1), dir.File("bad.gguf"));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_FALSE(fs::exists(dir.File("bad.gguf")));
}

// ---- Fast K-quant packing against the reference quantizer and dequantizer.

// The one-pass fit is where the reference's scale search starts, so its error can only be
// somewhat larger: within 25% in RMS on Gaussian data. Decoding goes through the reference
// dequantizer, so a packing mistake shows up as a huge error.
TEST(SynthQuant, FastKQuantsDecodeCloseToTheReference) {
  const int64_t n = 256 * 64;
  std::vector<float> x(n);
  std::mt19937 gen(3);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  for (float& v : x) v = dist(gen);
  x[5] = 0.3f;  // an outlier block
  for (GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    SCOPED_TRACE(GgmlTypeName(t));
    std::vector<uint8_t> fast(GgmlRowBytes(t, n)), ref(GgmlRowBytes(t, n));
    if (t == GgmlType::kQ4_K) {
      SynthQuantizeQ4_K(x.data(), fast.data(), n);
    } else {
      SynthQuantizeQ6_K(x.data(), fast.data(), n);
    }
    kernels::QuantizeRow(t, x.data(), ref.data(), n);
    std::vector<float> yf(n), yr(n);
    kernels::DequantizeRow(t, fast.data(), yf.data(), n);
    kernels::DequantizeRow(t, ref.data(), yr.data(), n);
    double ef = 0, er = 0;
    for (int64_t i = 0; i < n; ++i) {
      ef += (yf[i] - x[i]) * (yf[i] - x[i]);
      er += (yr[i] - x[i]) * (yr[i] - x[i]);
    }
    ef = std::sqrt(ef / n);
    er = std::sqrt(er / n);
    EXPECT_LT(ef, 1.25 * er) << "fast " << ef << " reference " << er;
    // Sanity: the error is a small fraction of the spread (4-bit: ~1/30 of 6 sigma).
    EXPECT_LT(ef, (t == GgmlType::kQ4_K ? 0.1 : 0.03) * 0.02);
  }
}

}  // namespace
}  // namespace uf::model
