// Hyperparameters of a decoder-only transformer, read from GGUF metadata and validated once so the
// forward pass can trust every size it uses.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "gguf/gguf.h"

namespace uf::model {

// Mixtral is kLlama with n_expert > 0 (the reference engine's reading of the llama arch).
enum class Architecture { kLlama, kQwen2, kQwen3, kQwen3Moe, kGptOss };

// How a mixture-of-experts router turns its logits into the k experts' weights (the reference's
// expert gating functions). kSoftmax: softmax over all experts, the top k of the probabilities
// (qwen3moe, Mixtral; renormalised over the k when expert_weights_norm). kSoftmaxWeight: the top
// k logits, then a softmax over those k (gpt-oss).
enum class ExpertGating { kSoftmax, kSoftmaxWeight };

// How RoPE pairs dimensions: kNormal rotates adjacent pairs (x[2i], x[2i+1]) (llama); kNeox
// rotates halves (x[i], x[i + rope_dim/2]) (qwen2, qwen3).
enum class RopeType { kNormal, kNeox };

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string architecture_name;  // general.architecture as written in the file
  std::string name;               // general.name, may be empty

  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // attention.key_length, else n_embd / n_head
  int64_t n_ff = 0;
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;  // context_length the model was trained with

  RopeType rope_type = RopeType::kNormal;
  float rope_freq_base = 10000.0f;
  int64_t rope_dim = 0;          // leading dims of each head that are rotated (<= head_dim)
  float rope_freq_scale = 1.0f;  // linear scaling: positions are multiplied by this (1/factor)
  bool has_rope_freq_factors = false;  // rope_freqs.weight present (llama3-style scaling)
  // YaRN (rope.scaling.type = yarn): each frequency's angle blends the interpolated and the
  // original one by a ramp over [yarn_low, yarn_high] (rotation dims counted from the original
  // context), and cos/sin are scaled by rope_mscale (1 + 0.1 ln factor, as the reference).
  float rope_ext_factor = 0.0f;  // 0 = no YaRN blend
  float rope_yarn_low = 0.0f, rope_yarn_high = 0.0f;
  float rope_mscale = 1.0f;     // cos/sin magnitude (rope.scaling.attn_factor et al.)
  int64_t rope_n_ctx_orig = 0;  // rope.scaling.original_context_length (else n_ctx_train)

  // Mixture of experts: 0 experts = a dense FFN. Each MoE layer has a router ([n_expert] logits
  // from the normed input) and n_expert SwiGLU experts of n_ff_exp rows; a token runs the
  // n_expert_used best and sums their outputs by the router's weights.
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  ExpertGating expert_gating = ExpertGating::kSoftmax;
  bool expert_weights_norm = false;   // weights divided by their sum over the k
  float expert_weights_scale = 0.0f;  // 0 or 1 = none (expert_weights_scale)
  bool is_moe() const { return n_expert > 0; }

  // Sliding-window attention (gpt-oss): layers with il % swa_period < swa_period - 1 see only
  // the last n_swa positions (their own included); 0 = every layer sees everything.
  int64_t n_swa = 0;
  int64_t swa_period = 0;
  bool IsSwaLayer(int64_t il) const { return n_swa > 0 && il % swa_period < swa_period - 1; }

  float rms_eps = 1e-5f;
  bool tied_output = false;  // no output.weight: logits use token_embd.weight

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }

  // Reads and validates the metadata (and the presence of the tensors that change behaviour:
  // output.weight, rope_freqs.weight). Unknown architectures give Unimplemented naming them.
  static StatusOr<ModelConfig> FromGguf(const gguf::GgufFile& file);

  std::string DebugString() const;
};

std::string_view ArchitectureName(Architecture arch);

}  // namespace uf::model
