#include "planner/model_shape.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <memory>

#include "gguf/gguf.h"
#include "gguf/types.h"
#include "model/synth.h"

namespace uf::planner {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

ModelShape Shape(std::string name, int64_t n_layer, int64_t n_embd, int64_t n_head,
                 int64_t n_head_kv, int64_t head_dim, int64_t n_ff, int64_t n_vocab, bool tied) {
  ModelShape s;
  s.name = std::move(name);
  s.n_layer = n_layer;
  s.n_embd = n_embd;
  s.n_head = n_head;
  s.n_head_kv = n_head_kv;
  s.head_dim = head_dim;
  s.n_ff = n_ff;
  s.n_vocab = n_vocab;
  s.tied_output = tied;
  return s;
}

// Layers of n_layer that a sliding window of n_swa positions applies to (ModelConfig::IsSwaLayer).
int64_t WindowedLayers(int64_t n_layer, int64_t n_swa, int64_t period) {
  if (n_swa <= 0 || period < 1) return 0;
  int64_t n = 0;
  for (int64_t il = 0; il < n_layer; ++il) n += il % period < period - 1;
  return n;
}

std::vector<ModelShape> MakePresets() {
  std::vector<ModelShape> v;
  for (const model::SynthPreset& p : model::SynthPresets()) {
    // A MoE preset's layers have no dense FFN (n_ff is the routed experts' or unused).
    ModelShape s = Shape(p.name, p.n_layer, p.n_embd, p.n_head, p.n_head_kv, p.head_dim,
                         p.n_expert > 0 ? 0 : p.n_ff, p.n_vocab, p.tied_embeddings);
    s.n_expert = p.n_expert;
    s.n_expert_used = p.n_expert_used;
    s.n_ff_expert = p.n_ff_exp;
    s.n_swa = p.sliding_window;
    v.push_back(s);
  }
  // Planning only (no synth preset: their files would be 140 GB and 810 GB in 16 bits). Shapes
  // from the models' Hugging Face config.json.
  v.push_back(Shape("llama-3.1-70b", 80, 8192, 64, 8, 128, 28672, 128256, false));
  v.push_back(Shape("llama-3.1-405b", 126, 16384, 128, 8, 128, 53248, 128256, false));
  // Mixtral-8x7B (46.7B parameters held, 12.9B active) and Qwen3-30B-A3B come from their synth
  // presets.
  return v;
}

}  // namespace

double ModelCost::StepWeightBytes(int64_t batch) const {
  const double b = static_cast<double>(std::max<int64_t>(batch, 1));
  double bytes = always_bytes + b * embd_row_bytes;
  if (n_expert > 0 && expert_bytes > 0) {
    // Each token picks n_expert_used of n_expert; an expert escapes all b tokens with
    // probability (1 - used / n)^b under uniform routing.
    const double n = static_cast<double>(n_expert);
    const double used = static_cast<double>(n_expert_used);
    const double touched = n * (1.0 - std::pow(1.0 - used / n, b));
    bytes += static_cast<double>(n_layer) * touched * expert_bytes;
  }
  return bytes;
}

StatusOr<double> WeightTypeBits(std::string_view type) {
  const std::string t = Lower(type);
  if (t == "f32") return 32.0;
  if (t == "f16" || t == "bf16") return 16.0;
  if (t == "fp8") return 8.0;
  if (t == "q8_0") return 8.5;     // 32 int8 + one f16 scale
  if (t == "q6_k") return 6.5625;  // 210 bytes per 256
  // The reference quantizer's Q4_K_M mix (Q4_K with Q6_K for half the V and FFN-down rows)
  // averages ~4.85 bits on Llama shapes.
  if (t == "q4_k_m") return 4.85;
  if (t == "q4_0") return 4.5;  // 32 nibbles + one f16 scale
  if (t == "fp4") return 4.5;   // NVFP4: 16 values share an FP8 scale
  return InvalidArgumentError("unknown weight type '" + std::string(type) +
                              "' (known: f32, f16, bf16, fp8, q8_0, q6_k, q4_k_m, q4_0, fp4)");
}

StatusOr<double> KvTypeBytes(std::string_view type) {
  const std::string t = Lower(type);
  if (t == "f32") return 4.0;
  if (t == "f16" || t == "bf16") return 2.0;
  if (t == "fp8") return 1.0;
  if (t == "q8_0") return 34.0 / 32.0;
  return InvalidArgumentError("unknown KV type '" + std::string(type) +
                              "' (known: f32, f16, bf16, fp8, q8_0)");
}

const std::vector<ModelShape>& PlannerPresets() {
  static const std::vector<ModelShape>* const kPresets = new std::vector<ModelShape>(MakePresets());
  return *kPresets;
}

StatusOr<ModelShape> FindPlannerPreset(std::string_view name) {
  const std::string n = Lower(name);
  std::string known;
  for (const ModelShape& s : PlannerPresets()) {
    if (s.name == n) return s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  return NotFoundError("unknown model preset '" + std::string(name) + "' (known: " + known +
                       "; or a .gguf file)");
}

StatusOr<ModelCost> CostFromShape(const ModelShape& s, std::string_view weight_type,
                                  std::string_view kv_type) {
  UF_ASSIGN_OR_RETURN(const double bits, WeightTypeBits(weight_type));
  UF_ASSIGN_OR_RETURN(const double kv_bytes, KvTypeBytes(kv_type));
  if (s.n_layer <= 0 || s.n_embd <= 0 || s.n_head <= 0 || s.n_head_kv <= 0 || s.head_dim <= 0 ||
      s.n_vocab <= 0 || (s.n_ff <= 0 && s.n_expert <= 0) ||
      (s.n_expert > 0 &&
       (s.n_expert_used <= 0 || s.n_expert_used > s.n_expert || s.n_ff_expert <= 0))) {
    return InvalidArgumentError("model shape '" + s.name + "' has non-positive sizes");
  }
  const double bytes_per_param = bits / 8.0;
  const double e = static_cast<double>(s.n_embd);
  const double q_dim = static_cast<double>(s.n_head * s.head_dim);
  const double kv_dim = static_cast<double>(s.n_head_kv * s.head_dim);
  const double layers = static_cast<double>(s.n_layer);
  // Per layer: q and o projections, k and v projections, the dense FFN's gate, up and down, and
  // two norm vectors (f32).
  const double attn = 2.0 * e * q_dim + 2.0 * e * kv_dim;
  const double dense_ffn = 3.0 * e * static_cast<double>(s.n_ff);
  const double expert = 3.0 * e * static_cast<double>(s.n_ff_expert);
  const double table = static_cast<double>(s.n_vocab) * e;

  ModelCost c;
  c.name = s.name;
  c.weight_type = Lower(weight_type);
  c.n_layer = s.n_layer;
  c.n_expert = s.n_expert;
  c.n_expert_used = s.n_expert_used;
  c.expert_bytes = expert * bytes_per_param;
  c.always_bytes = layers * ((attn + dense_ffn) * bytes_per_param + 2.0 * e * 4.0) + e * 4.0 +
                   table * bytes_per_param;  // the output matrix (the table itself when tied)
  c.embd_row_bytes = e * bytes_per_param;
  const double expert_params = layers * static_cast<double>(s.n_expert) * expert;
  c.total_params = layers * (attn + dense_ffn) + expert_params + table * (s.tied_output ? 1 : 2);
  c.held_bytes = c.total_params * bytes_per_param;
  c.active_params =
      layers * (attn + dense_ffn) + table + layers * static_cast<double>(s.n_expert_used) * expert;
  c.quantized = !(c.weight_type == "f32" || c.weight_type == "f16" || c.weight_type == "bf16");
  const int64_t windowed = WindowedLayers(s.n_layer, s.n_swa, s.swa_period);
  c.kv_bytes_per_position = 2.0 * static_cast<double>(s.n_layer - windowed) * kv_dim * kv_bytes;
  c.kv_window_bytes = 2.0 * static_cast<double>(windowed * s.n_swa) * kv_dim * kv_bytes;
  c.windowed_layers = windowed;
  c.n_swa = windowed > 0 ? s.n_swa : 0;
  c.q_dim = s.n_head * s.head_dim;
  return c;
}

StatusOr<ModelCost> CostFromGguf(const std::string& path, std::string_view kv_type) {
  UF_ASSIGN_OR_RETURN(const double kv_bytes, KvTypeBytes(kv_type));
  auto opened = gguf::GgufFile::Open(path);
  if (!opened.ok()) {
    return InvalidArgumentError("'" + path +
                                "' is not a readable GGUF file: " + opened.status().message());
  }
  const gguf::GgufFile& f = **opened;
  const std::string arch = f.GetStringOr("general.architecture", "");
  auto key = [&](const char* k) { return arch + "." + k; };
  const int64_t n_layer = f.GetIntOr(key("block_count"), 0);
  const int64_t n_embd = f.GetIntOr(key("embedding_length"), 0);
  const int64_t n_head = f.GetIntOr(key("attention.head_count"), 0);
  const int64_t n_head_kv = f.GetIntOr(key("attention.head_count_kv"), n_head);
  const int64_t head_dim =
      f.GetIntOr(key("attention.key_length"), n_head > 0 ? n_embd / n_head : 0);
  const int64_t value_dim = f.GetIntOr(key("attention.value_length"), head_dim);
  if (arch.empty() || n_layer <= 0 || n_embd <= 0 || n_head <= 0 || n_head_kv <= 0 ||
      head_dim <= 0) {
    return InvalidArgumentError("'" + path +
                                "': GGUF metadata lacks the architecture's block_count, "
                                "embedding_length or attention.head_count");
  }
  ModelCost c;
  c.name = f.GetStringOr("general.name", path);
  c.n_layer = n_layer;
  c.n_expert = f.GetIntOr(key("expert_count"), 0);
  c.n_expert_used = f.GetIntOr(key("expert_used_count"), 0);
  c.n_ctx_train = f.GetIntOr(key("context_length"), 0);
  c.q_dim = n_head * head_dim;
  // gpt-oss's sliding window, read as model::ModelConfig reads it.
  const int64_t n_swa = arch == "gpt-oss" ? f.GetIntOr(key("attention.sliding_window"), 0) : 0;
  const int64_t windowed =
      WindowedLayers(n_layer, n_swa, f.GetIntOr(key("attention.sliding_window_pattern"), 2));
  c.kv_bytes_per_position =
      static_cast<double>((n_layer - windowed) * n_head_kv * (head_dim + value_dim)) * kv_bytes;
  c.kv_window_bytes =
      static_cast<double>(windowed * n_swa * n_head_kv * (head_dim + value_dim)) * kv_bytes;
  c.windowed_layers = windowed;
  c.n_swa = windowed > 0 ? n_swa : 0;

  const gguf::TensorInfo* embd = f.FindTensor("token_embd.weight");
  const bool tied = f.FindTensor("output.weight") == nullptr;
  double expert_total = 0, expert_params = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    const double bytes = static_cast<double>(t.n_bytes);
    const double params = static_cast<double>(t.n_elements());
    c.held_bytes += bytes;
    c.total_params += params;
    if (&t == embd) {
      if (t.ne[1] > 0) c.embd_row_bytes = bytes / static_cast<double>(t.ne[1]);
      if (tied) {  // the table is also the output matrix, read whole by every step
        c.always_bytes += bytes;
        c.active_params += params;
      }
    } else if (t.name.find("_exps") != std::string::npos) {
      expert_total += bytes;
      expert_params += params;
    } else {
      c.always_bytes += bytes;
      c.active_params += params;
    }
  }
  if (expert_total > 0) {
    if (c.n_expert <= 0 || c.n_expert_used <= 0 || c.n_expert_used > c.n_expert) {
      return InvalidArgumentError("'" + path +
                                  "': expert tensors without a valid expert_count "
                                  "and expert_used_count");
    }
    c.expert_bytes = expert_total / static_cast<double>(n_layer * c.n_expert);
    c.active_params +=
        expert_params * static_cast<double>(c.n_expert_used) / static_cast<double>(c.n_expert);
  } else {
    c.n_expert = c.n_expert_used = 0;
  }
  // The type of most of the bytes, as bench names it: the FFN matrices.
  const gguf::TensorInfo* ffn = f.FindTensor("blk.0.ffn_gate.weight");
  if (ffn == nullptr) ffn = f.FindTensor("blk.0.ffn_gate_exps.weight");
  if (ffn == nullptr) ffn = f.FindTensor("blk.0.ffn_up.weight");
  c.weight_type = ffn != nullptr ? Lower(GgmlTypeName(ffn->type)) : "mixed";
  c.quantized = ffn != nullptr && !(ffn->type == GgmlType::kF32 || ffn->type == GgmlType::kF16 ||
                                    ffn->type == GgmlType::kBF16);
  if (c.always_bytes <= 0) {
    return InvalidArgumentError("'" + path + "': no weight tensors");
  }
  return c;
}

}  // namespace uf::planner
