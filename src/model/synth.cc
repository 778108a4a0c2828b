#include "model/synth.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numbers>
#include <random>

#include "base/clock.h"
#include "base/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/blocks.h"
#include "kernels/quant.h"

namespace uf::model {
namespace {

using gguf::Value;

constexpr uint64_t kAlignment = 32;
// Values drawn from one PRNG stream: big enough that seeding (a few microseconds) is noise,
// small enough that a tensor splits into many chunks for the thread pool.
constexpr int64_t kChunkValues = 1 << 16;

// ---- Random numbers.

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Standard normal values by inverse-transform sampling: a table of the normal quantile function
// at 65536 evenly spaced probabilities, linearly interpolated. Per value that is half a PRNG
// draw, two loads and a multiply-add: several times cheaper than Box-Muller, whose log, sqrt and
// sincos made generation the larger part of writing a file. The interpolated quantile function is
// exact at the knots, so the distribution matches the normal one to well under 0.1% in mean,
// variance and shape; tails stop at 4.5 sigma.
constexpr int kQuantileBits = 16;
constexpr int kQuantileKnots = 1 << kQuantileBits;

// [kQuantileKnots + 1] quantiles at p = i / kQuantileKnots (the two ends at p = 2^-18 and
// 1 - 2^-18), odd-symmetric so the mean is exactly 0.
const std::vector<float>& NormalQuantiles() {
  static const std::vector<float>* table = [] {
    auto* t = new std::vector<float>(kQuantileKnots + 1);
    for (int i = 0; i < kQuantileKnots / 2; ++i) {
      const double p = i == 0 ? 0x1p-18 : static_cast<double>(i) / kQuantileKnots;
      // Bisection on the CDF 0.5 * erfc(-x / sqrt 2); 48 halvings of [-10, 0] reach 4e-14.
      double lo = -10.0, hi = 0.0;
      for (int it = 0; it < 48; ++it) {
        const double mid = 0.5 * (lo + hi);
        if (0.5 * std::erfc(-mid * std::numbers::sqrt2 / 2) < p) {
          lo = mid;
        } else {
          hi = mid;
        }
      }
      (*t)[i] = static_cast<float>(0.5 * (lo + hi));
      (*t)[kQuantileKnots - i] = -(*t)[i];
    }
    (*t)[kQuantileKnots / 2] = 0.0f;
    return t;
  }();
  return *table;
}

// n standard normal values, two per 64-bit draw (16 bits of knot, 16 bits of interpolation).
void FillNormal(std::mt19937_64& rng, const float* quantiles, float* out, int64_t n) {
  auto sample = [quantiles](uint32_t h) {
    const float* q = quantiles + (h >> 16);
    return q[0] + static_cast<float>(h & 0xFFFF) * 0x1p-16f * (q[1] - q[0]);
  };
  for (int64_t i = 0; i < n; i += 2) {
    const uint64_t bits = rng();
    out[i] = sample(static_cast<uint32_t>(bits));
    if (i + 1 < n) out[i + 1] = sample(static_cast<uint32_t>(bits >> 32));
  }
}

// ---- Fast K-quant packing.

// Round to nearest, ties to even, for |v| < 2^22 (callers clamp first): adding 1.5 * 2^23 leaves
// the rounded integer in the low mantissa bits.
inline int RoundToInt(float v) {
  const float t = v + 12582912.0f;
  return static_cast<int>(std::bit_cast<uint32_t>(t) & 0x007FFFFFu) - 0x00400000;
}

inline int ClampRound(float v, float lo, float hi) {
  return RoundToInt(std::min(std::max(v, lo), hi));
}

// ---- Plan.

enum class Role { kTokenEmbd, kOutput, kAttnV, kFfnDown, kExpert, kExpertDown, kOtherMatrix };

int64_t BlockSize(GgmlType t) { return GetGgmlTypeInfo(static_cast<uint32_t>(t))->block_size; }

GgmlType BaseType(SynthFileType t) {
  switch (t) {
    case SynthFileType::kF16:
      return GgmlType::kF16;
    case SynthFileType::kBF16:
      return GgmlType::kBF16;
    case SynthFileType::kQ8_0:
      return GgmlType::kQ8_0;
    case SynthFileType::kQ4_0:
      return GgmlType::kQ4_0;
    case SynthFileType::kQ4_K_M:
      return GgmlType::kQ4_K;
    case SynthFileType::kQ6_K:
      return GgmlType::kQ6_K;
    case SynthFileType::kMXFP4:
      return GgmlType::kMXFP4;
  }
  return GgmlType::kF16;
}

// The reference quantizer's choice for a matrix (llama_tensor_get_type, no imatrix): the output
// matrix (or the tied embedding standing in for it) gets Q6_K unless the file is Q8_0; Q4_K_M
// gives attn_v and ffn_down Q6_K on the first and last eighth of the layers and every third in
// between. Rows that are not a whole number of K-quant blocks fall back: Q6_K to Q8_0 as the
// reference does, Q4_K to Q8_0 where it would pick Q5_0 (which this engine does not run).
// F16/BF16 files are converter output: every matrix in the file type. MXFP4 (the reference's
// MXFP4_MOE, which puts only expert matrices in MXFP4 and the rest in Q8_0) puts every matrix of
// these dense presets but the output in MXFP4, so its kernels carry the whole model; in a MoE
// preset, as the reference, only the experts are MXFP4 and the other matrices Q8_0. Expert
// down matrices follow ffn_down (the reference matches the name "ffn_down").
GgmlType MatrixType(SynthFileType ft, Role role, int64_t layer, int64_t n_layer, int64_t ne0,
                    bool moe) {
  const GgmlType base = BaseType(ft);
  if (ft == SynthFileType::kF16 || ft == SynthFileType::kBF16) return base;
  GgmlType t = base;
  if (ft == SynthFileType::kMXFP4 && moe && role != Role::kExpert && role != Role::kExpertDown) {
    t = GgmlType::kQ8_0;
  }
  if (role == Role::kExpertDown) role = Role::kFfnDown;
  if (role == Role::kOutput) {
    if (ne0 % BlockSize(base) != 0) {
      t = GgmlType::kQ8_0;
    } else if (base != GgmlType::kQ8_0) {
      t = GgmlType::kQ6_K;
    }
  } else if (ft == SynthFileType::kQ4_K_M && (role == Role::kAttnV || role == Role::kFfnDown)) {
    const bool more_bits =
        layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
    if (more_bits) t = GgmlType::kQ6_K;
  }
  if (ne0 % BlockSize(t) != 0) {
    if (t == GgmlType::kQ4_K || t == GgmlType::kQ6_K) t = GgmlType::kQ8_0;
    if (ne0 % BlockSize(t) != 0) t = GgmlType::kF16;
  }
  return t;
}

Status CheckPreset(const SynthPreset& p) {
  auto bad = [&](const std::string& what) {
    return InvalidArgumentError("synth preset '" + p.name + "': " + what);
  };
  if (p.n_embd <= 0 || p.n_layer <= 0 || p.n_head <= 0 || p.n_head_kv <= 0 || p.n_ff <= 0 ||
      p.n_vocab <= 0 || p.head_dim <= 0 || p.n_ctx_train <= 0) {
    return bad("every size must be positive");
  }
  if (p.n_head % p.n_head_kv != 0) return bad("head_count is not a multiple of head_count_kv");
  if (p.head_dim % 2 != 0) return bad("head_dim is odd");
  if (!(p.rope_freq_base > 1.0f) || !(p.rms_eps > 0.0f)) return bad("bad rope base or epsilon");
  const bool oss = p.arch == Architecture::kGptOss;
  if (p.qkv_bias != (p.arch == Architecture::kQwen2 || oss)) {
    return bad("q/k/v biases go with qwen2 and gpt-oss");
  }
  if (p.sliding_window != 0 && (!oss || p.sliding_window < 0)) {
    return bad("a sliding window needs gpt-oss");
  }
  const bool qwen3 = p.arch == Architecture::kQwen3 || p.arch == Architecture::kQwen3Moe;
  if (p.qk_norm != qwen3) return bad("q/k norms go with qwen3 and qwen3moe");
  const bool needs_experts = p.arch == Architecture::kQwen3Moe || oss;
  if ((needs_experts && p.n_expert == 0) ||
      (p.n_expert > 0 && !needs_experts && p.arch != Architecture::kLlama)) {
    return bad("experts go with qwen3moe and gpt-oss (which need them) or llama (Mixtral)");
  }
  if (p.n_expert < 0 || p.n_expert_used < 0 ||
      (p.n_expert > 0 &&
       (p.n_expert_used < 1 || p.n_expert_used > p.n_expert || p.n_ff_exp <= 0))) {
    return bad("bad expert counts");
  }
  if (p.arch == Architecture::kLlama && p.n_expert > 0 && p.n_ff_exp != p.n_ff) {
    // Its GGUF has no expert_feed_forward_length: the experts' width is feed_forward_length.
    return bad("a llama mixture of experts (Mixtral) has one feed-forward width, its experts'");
  }
  if (p.llama3_rope.factor != 0.0 &&
      (p.arch != Architecture::kLlama || !(p.llama3_rope.factor >= 1.0) ||
       !(p.llama3_rope.high_freq_factor > p.llama3_rope.low_freq_factor) ||
       p.llama3_rope.original_context <= 0)) {
    return bad("bad llama3 rope scaling");
  }
  if (!p.rope_scaling.empty() && ((p.rope_scaling != "linear" && p.rope_scaling != "yarn") ||
                                  !(p.rope_scaling_factor >= 1.0) || p.rope_scaling_orig_ctx <= 0 ||
                                  p.llama3_rope.factor != 0.0)) {
    return bad(
        "rope scaling must be linear or yarn, with a factor >= 1 and an original context "
        "(and no llama3 rope_freqs)");
  }
  return OkStatus();
}

}  // namespace

// ---- Types.

std::optional<SynthFileType> ParseSynthFileType(std::string_view name) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (SynthFileType t :
       {SynthFileType::kF16, SynthFileType::kBF16, SynthFileType::kQ8_0, SynthFileType::kQ4_0,
        SynthFileType::kQ4_K_M, SynthFileType::kQ6_K, SynthFileType::kMXFP4}) {
    if (s == SynthFileTypeName(t)) return t;
  }
  return std::nullopt;
}

std::string_view SynthFileTypeName(SynthFileType type) {
  switch (type) {
    case SynthFileType::kF16:
      return "f16";
    case SynthFileType::kBF16:
      return "bf16";
    case SynthFileType::kQ8_0:
      return "q8_0";
    case SynthFileType::kQ4_0:
      return "q4_0";
    case SynthFileType::kQ4_K_M:
      return "q4_k_m";
    case SynthFileType::kQ6_K:
      return "q6_k";
    case SynthFileType::kMXFP4:
      return "mxfp4";
  }
  return "?";
}

uint32_t SynthGeneralFileType(SynthFileType type) {
  switch (type) {
    case SynthFileType::kF16:
      return 1;
    case SynthFileType::kBF16:
      return 32;
    case SynthFileType::kQ8_0:
      return 7;
    case SynthFileType::kQ4_0:
      return 2;
    case SynthFileType::kQ4_K_M:
      return 15;
    case SynthFileType::kQ6_K:
      return 18;
    case SynthFileType::kMXFP4:
      return 38;  // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
  }
  return 0;
}

// ---- Plan.

std::vector<float> Llama3RopeFreqFactors(const SynthPreset& p) {
  // Float arithmetic throughout, as the reference converter computes these (torch float32).
  const Llama3RopeScaling& s = p.llama3_rope;
  const float factor = static_cast<float>(s.factor);
  const float low = static_cast<float>(s.low_freq_factor);
  const float high = static_cast<float>(s.high_freq_factor);
  const float old_ctx = static_cast<float>(s.original_context);
  const float low_freq_wavelen = old_ctx / low;
  const float high_freq_wavelen = old_ctx / high;
  std::vector<float> out;
  for (int64_t i = 0; i < p.head_dim; i += 2) {
    const float freq =
        1.0f / std::pow(p.rope_freq_base, static_cast<float>(i) / static_cast<float>(p.head_dim));
    const float wavelen = 2.0f * std::numbers::pi_v<float> / freq;
    if (wavelen < high_freq_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_freq_wavelen) {
      out.push_back(factor);
    } else {
      const float smooth = (old_ctx / wavelen - low) / (high - low);
      out.push_back(1.0f / ((1.0f - smooth) / factor + smooth));
    }
  }
  return out;
}

StatusOr<SynthPlan> PlanSynth(const SynthPreset& preset, SynthFileType type) {
  UF_RETURN_IF_ERROR(CheckPreset(preset));
  SynthPlan plan;
  plan.preset = preset;
  plan.file_type = type;
  const SynthPreset& p = plan.preset;
  const bool oss = p.arch == Architecture::kGptOss;
  const int64_t q_dim = p.n_head * p.head_dim, kv_dim = p.n_head_kv * p.head_dim;
  const float std_in = 0.02f;
  // Projections into the residual stream: GPT-2's 1/sqrt(2 * n_layer) scaling keeps the
  // stream's variance from growing with depth.
  const float std_out = 0.02f / std::sqrt(2.0f * static_cast<float>(p.n_layer));

  Status status;
  auto vec = [&](std::string name, int64_t n, float mean, float std) {
    plan.tensors.push_back(
        {std::move(name), GgmlType::kF32, {n}, 0, SynthInit::kGaussian, mean, std});
  };
  auto mat = [&](std::string name, Role role, int64_t layer, int64_t ne0, int64_t ne1, float std) {
    const GgmlType t = MatrixType(type, role, layer, p.n_layer, ne0, p.n_expert > 0);
    plan.tensors.push_back({std::move(name), t, {ne0, ne1}, 0, SynthInit::kGaussian, 0.0f, std});
  };
  auto experts = [&](std::string name, Role role, int64_t layer, int64_t ne0, int64_t ne1,
                     float std) {
    const GgmlType t = MatrixType(type, role, layer, p.n_layer, ne0, true);
    plan.tensors.push_back(
        {std::move(name), t, {ne0, ne1, p.n_expert}, 0, SynthInit::kGaussian, 0.0f, std});
  };

  if (p.llama3_rope.factor != 0.0) {
    plan.tensors.push_back({"rope_freqs.weight",
                            GgmlType::kF32,
                            {p.head_dim / 2},
                            0,
                            SynthInit::kRopeFreqs,
                            0.0f,
                            0.0f});
  }
  mat("token_embd.weight", p.tied_embeddings ? Role::kOutput : Role::kTokenEmbd, 0, p.n_embd,
      p.n_vocab, std_in);
  for (int64_t il = 0; il < p.n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    vec(b + "attn_norm.weight", p.n_embd, 1.0f, 0.02f);
    mat(b + "attn_q.weight", Role::kOtherMatrix, il, p.n_embd, q_dim, std_in);
    mat(b + "attn_k.weight", Role::kOtherMatrix, il, p.n_embd, kv_dim, std_in);
    mat(b + "attn_v.weight", Role::kAttnV, il, p.n_embd, kv_dim, std_in);
    if (p.qkv_bias) {
      vec(b + "attn_q.bias", q_dim, 0.0f, 0.02f);
      vec(b + "attn_k.bias", kv_dim, 0.0f, 0.02f);
      vec(b + "attn_v.bias", kv_dim, 0.0f, 0.02f);
    }
    if (oss) {
      // Output bias, and sink logits of the size of the scores (a head pays real attention to
      // its sink).
      vec(b + "attn_output.bias", p.n_embd, 0.0f, 0.02f);
      vec(b + "attn_sinks.weight", p.n_head, 0.0f, 0.5f);
    }
    if (p.qk_norm) {
      vec(b + "attn_q_norm.weight", p.head_dim, 1.0f, 0.02f);
      vec(b + "attn_k_norm.weight", p.head_dim, 1.0f, 0.02f);
    }
    mat(b + "attn_output.weight", Role::kOtherMatrix, il, q_dim, p.n_embd, std_out);
    vec(b + (oss ? "post_attention_norm.weight" : "ffn_norm.weight"), p.n_embd, 1.0f, 0.02f);
    if (p.n_expert > 0) {
      // A wider router than std_in so the random experts' probabilities differ (a router of
      // near-equal logits makes the top-k choice a coin toss on rounding).
      plan.tensors.push_back({b + "ffn_gate_inp.weight",
                              GgmlType::kF32,
                              {p.n_embd, p.n_expert},
                              0,
                              SynthInit::kGaussian,
                              0.0f,
                              0.1f});
      experts(b + "ffn_gate_exps.weight", Role::kExpert, il, p.n_embd, p.n_ff_exp, std_in);
      experts(b + "ffn_down_exps.weight", Role::kExpertDown, il, p.n_ff_exp, p.n_embd, std_out);
      experts(b + "ffn_up_exps.weight", Role::kExpert, il, p.n_embd, p.n_ff_exp, std_in);
      if (oss) {
        vec(b + "ffn_gate_inp.bias", p.n_expert, 0.0f, 0.1f);
        for (const char* n : {"ffn_gate_exps.bias", "ffn_down_exps.bias", "ffn_up_exps.bias"}) {
          const int64_t rows = std::string(n) == "ffn_down_exps.bias" ? p.n_embd : p.n_ff_exp;
          plan.tensors.push_back(
              {b + n, GgmlType::kF32, {rows, p.n_expert}, 0, SynthInit::kGaussian, 0.0f, 0.02f});
        }
      }
      continue;
    }
    mat(b + "ffn_gate.weight", Role::kOtherMatrix, il, p.n_embd, p.n_ff, std_in);
    mat(b + "ffn_up.weight", Role::kOtherMatrix, il, p.n_embd, p.n_ff, std_in);
    mat(b + "ffn_down.weight", Role::kFfnDown, il, p.n_ff, p.n_embd, std_out);
  }
  vec("output_norm.weight", p.n_embd, 1.0f, 0.02f);
  if (!p.tied_embeddings) mat("output.weight", Role::kOutput, 0, p.n_embd, p.n_vocab, std_in);

  for (SynthTensor& t : plan.tensors) {
    if (t.ne[0] % BlockSize(t.type) != 0) {
      return InvalidArgumentError("synth preset '" + p.name + "': tensor " + t.name + " rows of " +
                                  std::to_string(t.ne[0]) + " values are not whole blocks of " +
                                  std::string(GgmlTypeName(t.type)));
    }
    int64_t rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
    t.n_bytes = GgmlRowBytes(t.type, t.ne[0]) * static_cast<uint64_t>(rows);
    plan.data_bytes += (t.n_bytes + kAlignment - 1) / kAlignment * kAlignment;
    if (t.init != SynthInit::kRopeFreqs) plan.n_params += t.ne[0] * rows;
  }
  return plan;
}

// ---- Fast K-quants.

void SynthQuantizeQ4_K(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<kernels::BlockQ4_K*>(dst);
  for (int64_t b = 0; b < n / kernels::kQK_K; ++b, x += kernels::kQK_K) {
    // Each sub-block of 32 spans [lo, hi] with lo <= 0 (the format subtracts a min >= 0):
    // scale = (hi - lo) / 15, min = -lo.
    float scale[8], min[8], max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
      float lo = x[32 * j], hi = lo;
      for (int l = 1; l < 32; ++l) {
        lo = std::min(lo, x[32 * j + l]);
        hi = std::max(hi, x[32 * j + l]);
      }
      lo = std::min(lo, 0.0f);
      scale[j] = (hi - lo) / 15.0f;
      min[j] = -lo;
      max_scale = std::max(max_scale, scale[j]);
      max_min = std::max(max_min, min[j]);
    }
    // 6-bit sub-block scales and mins against the f16 super-block scales, chosen against the
    // values those decode to so the codes below see the scales the reader will.
    y[b].d = kernels::Fp32ToFp16(max_scale / 63.0f);
    y[b].dmin = kernels::Fp32ToFp16(max_min / 63.0f);
    const float d = kernels::Fp16ToFp32(y[b].d), dmin = kernels::Fp16ToFp32(y[b].dmin);
    const float inv_d = d > 0.0f ? 1.0f / d : 0.0f, inv_dmin = dmin > 0.0f ? 1.0f / dmin : 0.0f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; ++j) {
      ls[j] = static_cast<uint8_t>(ClampRound(scale[j] * inv_d, 0.0f, 63.0f));
      lm[j] = static_cast<uint8_t>(ClampRound(min[j] * inv_dmin, 0.0f, 63.0f));
    }
    // Packing (GetScaleMinK4 reads it back): sub-blocks 0-3 in the low 6 bits of bytes 0-7;
    // 4-7 split into low nibbles in bytes 8-11 and top 2 bits in bytes 0-7's spare bits.
    uint8_t* sc = y[b].scales;
    for (int j = 0; j < 4; ++j) {
      sc[j] = static_cast<uint8_t>(ls[j] | ((ls[j + 4] >> 4) << 6));
      sc[j + 4] = static_cast<uint8_t>(lm[j] | ((lm[j + 4] >> 4) << 6));
      sc[j + 8] = static_cast<uint8_t>((ls[j + 4] & 0xF) | ((lm[j + 4] & 0xF) << 4));
    }
    uint8_t q[kernels::kQK_K];
    for (int j = 0; j < 8; ++j) {
      const float ds = d * ls[j], dm = dmin * lm[j];
      const float inv = ds > 0.0f ? 1.0f / ds : 0.0f;
      for (int l = 0; l < 32; ++l) {
        q[32 * j + l] = static_cast<uint8_t>(ClampRound((x[32 * j + l] + dm) * inv, 0.0f, 15.0f));
      }
    }
    for (int g = 0; g < 4; ++g) {
      for (int l = 0; l < 32; ++l) {
        y[b].qs[32 * g + l] = static_cast<uint8_t>(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
      }
    }
  }
}

void SynthQuantizeQ6_K(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<kernels::BlockQ6_K*>(dst);
  for (int64_t b = 0; b < n / kernels::kQK_K; ++b, x += kernels::kQK_K) {
    // Each sub-block of 16 maps its largest-magnitude value to -32 exactly (range -32..31).
    float scale[16], max_scale = 0.0f;
    for (int j = 0; j < 16; ++j) {
      float amax = 0.0f, max = 0.0f;
      for (int l = 0; l < 16; ++l) {
        const float v = x[16 * j + l];
        if (std::fabs(v) > amax) {
          amax = std::fabs(v);
          max = v;
        }
      }
      scale[j] = max / -32.0f;
      if (std::fabs(scale[j]) > std::fabs(max_scale)) max_scale = scale[j];
    }
    std::memset(&y[b], 0, sizeof(kernels::BlockQ6_K));
    if (max_scale == 0.0f) continue;
    // int8 sub-block scales: the largest maps to -128 against d = max_scale / -128.
    const float iscale = -128.0f / max_scale;
    y[b].d = kernels::Fp32ToFp16(1.0f / iscale);
    const float d = kernels::Fp16ToFp32(y[b].d);
    uint8_t q[kernels::kQK_K];
    for (int j = 0; j < 16; ++j) {
      y[b].scales[j] = static_cast<int8_t>(ClampRound(iscale * scale[j], -128.0f, 127.0f));
      const float ds = d * y[b].scales[j];
      const float inv = ds != 0.0f ? 1.0f / ds : 0.0f;
      for (int l = 0; l < 16; ++l) {
        q[16 * j + l] = static_cast<uint8_t>(ClampRound(x[16 * j + l] * inv, -32.0f, 31.0f) + 32);
      }
    }
    // Packing: each half of 128 values keeps 4 low bits of value l and l+64 in ql and the top
    // 2 bits of l, l+32, l+64, l+96 in qh.
    for (int half = 0; half < 2; ++half) {
      const uint8_t* qq = q + 128 * half;
      uint8_t* ql = y[b].ql + 64 * half;
      uint8_t* qh = y[b].qh + 32 * half;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((qq[l] & 0xF) | ((qq[l + 64] & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((qq[l + 32] & 0xF) | ((qq[l + 96] & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) |
                                     ((qq[l + 64] >> 4) << 4) | ((qq[l + 96] >> 4) << 6));
      }
    }
  }
}

// ---- Writing.

namespace {

void ConvertRow(GgmlType type, const float* x, uint8_t* dst, int64_t n) {
  switch (type) {
    case GgmlType::kQ4_K:
      return SynthQuantizeQ4_K(x, dst, n);
    case GgmlType::kQ6_K:
      return SynthQuantizeQ6_K(x, dst, n);
    default:
      return kernels::QuantizeRow(type, x, dst, n);
  }
}

// Generates tensor `index` of the plan into dst, chunk by chunk on the pool. Chunk c of a tensor
// draws from its own stream seeded by (seed, index, c), so the bytes do not depend on which
// thread takes which chunk.
void FillTensor(const SynthTensor& t, size_t index, uint64_t seed, ThreadPool* pool, uint8_t* dst) {
  const int64_t ne0 = t.ne[0];
  int64_t rows = 1;
  for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
  const size_t row_bytes = GgmlRowBytes(t.type, ne0);
  const int64_t chunk_rows = std::max<int64_t>(1, kChunkValues / ne0);
  const int64_t n_chunks = (rows + chunk_rows - 1) / chunk_rows;
  const float* quantiles = NormalQuantiles().data();
  std::atomic<int64_t> next{0};
  pool->Run([&](int, int) {
    std::vector<float> row(ne0);  // [ne0]
    for (;;) {
      const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= n_chunks) break;
      std::mt19937_64 rng(SplitMix64(seed ^ SplitMix64((index << 32) ^ c)));
      const int64_t end = std::min(rows, (c + 1) * chunk_rows);
      for (int64_t r = c * chunk_rows; r < end; ++r) {
        FillNormal(rng, quantiles, row.data(), ne0);
        for (float& v : row) v = t.mean + t.std * v;
        ConvertRow(t.type, row.data(), dst + r * row_bytes, ne0);
      }
    }
  });
}

Status SetMetadata(const SynthPlan& plan, gguf::GgufWriter* w) {
  const SynthPreset& p = plan.preset;
  UF_ASSIGN_OR_RETURN(TokenizerConfig tok, SynthTokenizerConfig(p));
  const std::string a(ArchitectureName(p.arch));
  w->Set("general.architecture", Value::String(a));
  w->Set("general.type", Value::String("model"));
  w->Set("general.name", Value::String(p.display_name));
  w->Set("general.file_type", Value::U32(SynthGeneralFileType(plan.file_type)));
  w->Set("general.quantization_version", Value::U32(2));
  w->Set("general.alignment", Value::U32(static_cast<uint32_t>(kAlignment)));
  w->Set(a + ".vocab_size", Value::U32(static_cast<uint32_t>(p.n_vocab)));
  w->Set(a + ".context_length", Value::U32(static_cast<uint32_t>(p.n_ctx_train)));
  w->Set(a + ".embedding_length", Value::U32(static_cast<uint32_t>(p.n_embd)));
  w->Set(a + ".block_count", Value::U32(static_cast<uint32_t>(p.n_layer)));
  w->Set(a + ".feed_forward_length", Value::U32(static_cast<uint32_t>(p.n_ff)));
  w->Set(a + ".attention.head_count", Value::U32(static_cast<uint32_t>(p.n_head)));
  w->Set(a + ".attention.head_count_kv", Value::U32(static_cast<uint32_t>(p.n_head_kv)));
  if (p.head_dim * p.n_head != p.n_embd) {
    w->Set(a + ".attention.key_length", Value::U32(static_cast<uint32_t>(p.head_dim)));
    w->Set(a + ".attention.value_length", Value::U32(static_cast<uint32_t>(p.head_dim)));
  }
  w->Set(a + ".rope.dimension_count", Value::U32(static_cast<uint32_t>(p.head_dim)));
  w->Set(a + ".rope.freq_base", Value::F32(p.rope_freq_base));
  if (!p.rope_scaling.empty()) {
    w->Set(a + ".rope.scaling.type", Value::String(p.rope_scaling));
    w->Set(a + ".rope.scaling.factor", Value::F32(static_cast<float>(p.rope_scaling_factor)));
    w->Set(a + ".rope.scaling.original_context_length",
           Value::U32(static_cast<uint32_t>(p.rope_scaling_orig_ctx)));
  }
  w->Set(a + ".attention.layer_norm_rms_epsilon", Value::F32(p.rms_eps));
  if (p.n_expert > 0) {
    w->Set(a + ".expert_count", Value::U32(static_cast<uint32_t>(p.n_expert)));
    w->Set(a + ".expert_used_count", Value::U32(static_cast<uint32_t>(p.n_expert_used)));
    if (p.arch != Architecture::kLlama) {
      w->Set(a + ".expert_feed_forward_length", Value::U32(static_cast<uint32_t>(p.n_ff_exp)));
    }
  }
  if (p.sliding_window > 0) {
    w->Set(a + ".attention.sliding_window", Value::U32(static_cast<uint32_t>(p.sliding_window)));
  }

  w->Set("tokenizer.ggml.model", Value::String("gpt2"));
  w->Set("tokenizer.ggml.pre", Value::String(p.tokenizer_pre));
  std::vector<int64_t> types(tok.token_types.size());
  for (size_t i = 0; i < types.size(); ++i) types[i] = static_cast<int64_t>(tok.token_types[i]);
  w->Set("tokenizer.ggml.tokens", Value::StringArray(std::move(tok.tokens)));
  w->Set("tokenizer.ggml.token_type", Value::I32Array(std::move(types)));
  w->Set("tokenizer.ggml.merges", Value::StringArray(std::move(tok.merges)));
  if (p.bos_id >= 0) w->Set("tokenizer.ggml.bos_token_id", Value::U32(p.bos_id));
  if (p.eos_id >= 0) w->Set("tokenizer.ggml.eos_token_id", Value::U32(p.eos_id));
  if (p.pad_id >= 0) w->Set("tokenizer.ggml.padding_token_id", Value::U32(p.pad_id));
  w->Set("tokenizer.ggml.add_bos_token", Value::Bool(p.add_bos));
  return OkStatus();
}

}  // namespace

StatusOr<SynthResult> WriteSynth(const SynthPlan& plan, const SynthOptions& options,
                                 const std::string& path) {
  const double t0 = NowSeconds();
  gguf::GgufWriter w(3, kAlignment);
  UF_RETURN_IF_ERROR(SetMetadata(plan, &w));
  ThreadPool pool(options.n_threads > 0 ? options.n_threads : ThreadPool::DefaultThreads());
  const std::vector<float> rope_factors = plan.preset.llama3_rope.factor != 0.0
                                              ? Llama3RopeFreqFactors(plan.preset)
                                              : std::vector<float>();
  size_t done = 0;
  uint64_t bytes_done = 0;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const SynthTensor& t = plan.tensors[i];
    auto fill = [&, i](uint8_t* dst, size_t n) {
      if (t.init == SynthInit::kRopeFreqs) {
        std::memcpy(dst, rope_factors.data(), std::min(n, rope_factors.size() * sizeof(float)));
      } else {
        FillTensor(t, i, options.seed, &pool, dst);
      }
      ++done;
      bytes_done += n;
      if (options.progress) options.progress(done, plan.tensors.size(), bytes_done);
    };
    UF_RETURN_IF_ERROR(w.AddTensor(t.name, t.type, t.ne, fill));
  }
  UF_RETURN_IF_ERROR(w.WriteToFile(path));
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return InternalError(path + ": cannot stat the written file: " + ec.message());
  SynthResult r;
  r.file_bytes = size;
  r.n_tensors = plan.tensors.size();
  r.seconds = NowSeconds() - t0;
  return r;
}

}  // namespace uf::model
