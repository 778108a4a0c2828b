#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace uf::model {
namespace {

// YaRN as the reference engine applies it (its llama-context.cpp and ggml's rope): ext_factor 1
// unless the file says otherwise; a magnitude of 1 + 0.1 ln(factor) on cos/sin (with
// yarn_log_multiplier, the ratio of two such terms), times rope.scaling.attn_factor; the ramp's
// ends from where a frequency turns beta_fast (32) and beta_slow (1) times over the original
// context.
Status ReadYarn(const gguf::GgufFile& f, const std::string& p, ModelConfig* c) {
  if (c->rope_n_ctx_orig <= 0 || c->rope_n_ctx_orig > (int64_t{1} << 24)) {
    return InvalidArgumentError(
        "model metadata: rope.scaling.original_context_length must be in "
        "[1, 2^24]");
  }
  const float ext = static_cast<float>(f.GetFloatOr(p + "rope.scaling.yarn_ext_factor", -1.0));
  const float beta_fast = static_cast<float>(f.GetFloatOr(p + "rope.scaling.yarn_beta_fast", 32.0));
  const float beta_slow = static_cast<float>(f.GetFloatOr(p + "rope.scaling.yarn_beta_slow", 1.0));
  const float log_mul =
      static_cast<float>(f.GetFloatOr(p + "rope.scaling.yarn_log_multiplier", 0.0));
  if (!std::isfinite(ext) || !(beta_fast > 0.0f) || !(beta_slow > 0.0f) ||
      !std::isfinite(beta_fast) || !std::isfinite(beta_slow) || !std::isfinite(log_mul)) {
    return InvalidArgumentError(
        "model metadata: bad yarn_ext_factor, yarn_beta_fast, "
        "yarn_beta_slow or yarn_log_multiplier");
  }
  c->rope_ext_factor = ext < 0.0f ? 1.0f : ext;
  if (c->rope_ext_factor != 0.0f) {
    const float factor = 1.0f / c->rope_freq_scale;
    auto mscale = [&](float m) { return factor <= 1.0f ? 1.0f : 0.1f * m * logf(factor) + 1.0f; };
    float attn = log_mul != 0.0f ? mscale(1.0f) / mscale(log_mul) : mscale(1.0f);
    attn *= 1.0f / (1.0f + 0.1f * logf(factor));
    // The rope itself multiplies by 1 + 0.1 ln(1 / freq_scale) again.
    c->rope_mscale *= attn * (1.0f + 0.1f * logf(1.0f / c->rope_freq_scale));
  }
  const float n_dims = static_cast<float>(c->rope_dim);
  auto corr_dim = [&](float n_rot) {
    return n_dims *
           logf(static_cast<float>(c->rope_n_ctx_orig) / (n_rot * 2.0f * 3.14159265358979323846f)) /
           (2.0f * logf(c->rope_freq_base));
  };
  c->rope_yarn_low = std::max(0.0f, std::floor(corr_dim(beta_fast)));
  c->rope_yarn_high = std::min(n_dims - 1.0f, std::ceil(corr_dim(beta_slow)));
  return OkStatus();
}

// Largest size any dimension may take; catches garbage metadata before it becomes an allocation.
constexpr int64_t kMaxDim = int64_t{1} << 24;

StatusOr<int64_t> RequiredInt(const gguf::GgufFile& f, const std::string& key) {
  auto v = f.GetInt(key);
  if (!v.ok()) return v.status().WithContext("model metadata");
  return *v;
}

Status CheckRange(std::string_view what, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    std::ostringstream os;
    os << "model metadata: " << what << " = " << v << " is out of range [" << lo << ", " << hi
       << "]";
    return InvalidArgumentError(os.str());
  }
  return OkStatus();
}

// Mixture-of-experts keys as the reference engine reads them: expert_count and
// expert_used_count; the expert FFN width from expert_feed_forward_length (qwen3moe; else
// feed_forward_length, as Mixtral's experts are the llama FFN); softmax gating with the k weights
// renormalised for both architectures (their graphs pass norm_w = true).
Status ReadExperts(const gguf::GgufFile& f, const std::string& p, ModelConfig* c) {
  c->n_expert = f.GetIntOr(p + "expert_count", 0);
  c->n_expert_used = f.GetIntOr(p + "expert_used_count", 0);
  if (c->n_expert == 0) {
    if (c->architecture == Architecture::kQwen3Moe || c->architecture == Architecture::kGptOss) {
      return InvalidArgumentError("model metadata: " + c->architecture_name +
                                  " needs expert_count > 0");
    }
    c->n_expert_used = 0;
    return OkStatus();
  }
  UF_RETURN_IF_ERROR(CheckRange("expert_count", c->n_expert, 1, 4096));
  UF_RETURN_IF_ERROR(CheckRange("expert_used_count", c->n_expert_used, 1, c->n_expert));
  if (c->n_expert_used > 64) {
    return UnimplementedError("model metadata: more than 64 experts per token");
  }
  if (c->architecture != Architecture::kLlama && c->architecture != Architecture::kQwen3Moe &&
      c->architecture != Architecture::kGptOss) {
    return UnimplementedError("model metadata: experts in a '" + c->architecture_name +
                              "' model are not supported");
  }
  c->n_ff_exp = f.GetIntOr(p + "expert_feed_forward_length", 0);
  if (c->n_ff_exp == 0) {
    c->n_ff_exp = c->architecture == Architecture::kLlama ? c->n_ff : c->n_ff / c->n_expert_used;
  }
  UF_RETURN_IF_ERROR(CheckRange("expert_feed_forward_length", c->n_ff_exp, 1, kMaxDim));
  // gpt-oss: the top k logits, a softmax over them, no renormalisation (norm_w = false).
  const bool oss = c->architecture == Architecture::kGptOss;
  c->expert_gating = oss ? ExpertGating::kSoftmaxWeight : ExpertGating::kSoftmax;
  c->expert_weights_norm = !oss;
  const double scale = f.GetFloatOr(p + "expert_weights_scale", 0.0);
  if (!std::isfinite(scale) || scale < 0.0) {
    return InvalidArgumentError("model metadata: expert_weights_scale must be >= 0");
  }
  c->expert_weights_scale = static_cast<float>(scale);
  return OkStatus();
}

}  // namespace

std::string_view ArchitectureName(Architecture arch) {
  switch (arch) {
    case Architecture::kLlama:
      return "llama";
    case Architecture::kQwen2:
      return "qwen2";
    case Architecture::kQwen3:
      return "qwen3";
    case Architecture::kQwen3Moe:
      return "qwen3moe";
    case Architecture::kGptOss:
      return "gpt-oss";
  }
  return "?";
}

StatusOr<ModelConfig> ModelConfig::FromGguf(const gguf::GgufFile& f) {
  ModelConfig c;
  auto arch = f.GetString("general.architecture");
  if (!arch.ok()) return arch.status().WithContext("model metadata");
  c.architecture_name = *arch;
  if (c.architecture_name == "llama") {
    c.architecture = Architecture::kLlama;
    c.rope_type = RopeType::kNormal;
  } else if (c.architecture_name == "qwen2") {
    c.architecture = Architecture::kQwen2;
    c.rope_type = RopeType::kNeox;
  } else if (c.architecture_name == "qwen3") {
    c.architecture = Architecture::kQwen3;
    c.rope_type = RopeType::kNeox;
  } else if (c.architecture_name == "qwen3moe") {
    c.architecture = Architecture::kQwen3Moe;
    c.rope_type = RopeType::kNeox;
  } else if (c.architecture_name == "gpt-oss") {
    c.architecture = Architecture::kGptOss;
    c.rope_type = RopeType::kNeox;
  } else {
    return UnimplementedError(
        "model architecture '" + c.architecture_name +
        "' is not supported (supported: llama, qwen2, qwen3, qwen3moe, gpt-oss)");
  }
  c.name = f.GetStringOr("general.name", "");
  const std::string p = c.architecture_name + ".";

  UF_ASSIGN_OR_RETURN(c.n_embd, RequiredInt(f, p + "embedding_length"));
  UF_ASSIGN_OR_RETURN(c.n_layer, RequiredInt(f, p + "block_count"));
  UF_ASSIGN_OR_RETURN(c.n_head, RequiredInt(f, p + "attention.head_count"));
  UF_ASSIGN_OR_RETURN(c.n_ff, RequiredInt(f, p + "feed_forward_length"));
  UF_RETURN_IF_ERROR(CheckRange("embedding_length", c.n_embd, 1, kMaxDim));
  UF_RETURN_IF_ERROR(CheckRange("block_count", c.n_layer, 1, 4096));
  UF_RETURN_IF_ERROR(CheckRange("attention.head_count", c.n_head, 1, 65536));
  UF_RETURN_IF_ERROR(CheckRange("feed_forward_length", c.n_ff, 1, kMaxDim));

  c.n_head_kv = f.GetIntOr(p + "attention.head_count_kv", c.n_head);
  UF_RETURN_IF_ERROR(CheckRange("attention.head_count_kv", c.n_head_kv, 1, c.n_head));
  if (c.n_head % c.n_head_kv != 0) {
    return InvalidArgumentError(
        "model metadata: attention.head_count (" + std::to_string(c.n_head) +
        ") is not a multiple of attention.head_count_kv (" + std::to_string(c.n_head_kv) + ")");
  }
  if (f.Find(p + "attention.key_length") != nullptr) {
    UF_ASSIGN_OR_RETURN(c.head_dim, RequiredInt(f, p + "attention.key_length"));
  } else {
    if (c.n_embd % c.n_head != 0) {
      return InvalidArgumentError("model metadata: embedding_length (" + std::to_string(c.n_embd) +
                                  ") is not a multiple of head_count (" + std::to_string(c.n_head) +
                                  ") and key_length is absent");
    }
    c.head_dim = c.n_embd / c.n_head;
  }
  UF_RETURN_IF_ERROR(CheckRange("attention.key_length", c.head_dim, 2, 4096));
  if (c.head_dim % 2 != 0) {
    return InvalidArgumentError("model metadata: head dimension " + std::to_string(c.head_dim) +
                                " is odd");
  }
  const int64_t value_length = f.GetIntOr(p + "attention.value_length", c.head_dim);
  if (value_length != c.head_dim) {
    return UnimplementedError("model metadata: attention.value_length (" +
                              std::to_string(value_length) + ") != key_length (" +
                              std::to_string(c.head_dim) + ") is not supported");
  }

  c.n_ctx_train = f.GetIntOr(p + "context_length", 4096);
  UF_RETURN_IF_ERROR(CheckRange("context_length", c.n_ctx_train, 1, int64_t{1} << 30));

  // Vocabulary: explicit key, else the tokenizer's token list, else the embedding's row count.
  const gguf::TensorInfo* embd = f.FindTensor("token_embd.weight");
  if (embd == nullptr) return NotFoundError("model: tensor 'token_embd.weight' is missing");
  if (f.Find(p + "vocab_size") != nullptr) {
    UF_ASSIGN_OR_RETURN(c.n_vocab, RequiredInt(f, p + "vocab_size"));
  } else if (const gguf::Value* tokens = f.Find("tokenizer.ggml.tokens");
             tokens != nullptr && tokens->is_array()) {
    c.n_vocab = static_cast<int64_t>(tokens->array_size());
  } else {
    c.n_vocab = embd->ne[1];
  }
  UF_RETURN_IF_ERROR(CheckRange("vocab_size", c.n_vocab, 1, int64_t{1} << 28));

  c.rope_dim = f.GetIntOr(p + "rope.dimension_count", c.head_dim);
  UF_RETURN_IF_ERROR(CheckRange("rope.dimension_count", c.rope_dim, 2, c.head_dim));
  if (c.rope_dim % 2 != 0) {
    return InvalidArgumentError("model metadata: rope.dimension_count " +
                                std::to_string(c.rope_dim) + " is odd");
  }
  c.rope_freq_base = static_cast<float>(f.GetFloatOr(p + "rope.freq_base", 10000.0));
  if (!(c.rope_freq_base > 1.0f) || !std::isfinite(c.rope_freq_base)) {
    return InvalidArgumentError("model metadata: rope.freq_base must be > 1");
  }

  // RoPE scaling. Linear scaling divides positions by the factor; YaRN blends interpolated and
  // original angles per frequency (and scales cos/sin); llama3's per-frequency factors come as a
  // tensor (rope_freqs.weight) and need no key. Anything else changes the math in ways we do not
  // implement, so refuse rather than produce subtly wrong logits.
  std::string scaling = f.GetStringOr(p + "rope.scaling.type", "");
  double factor = f.GetFloatOr(p + "rope.scaling.factor", 0.0);
  if (scaling.empty() && f.Find(p + "rope.scale_linear") != nullptr) {
    scaling = "linear";
    factor = f.GetFloatOr(p + "rope.scale_linear", 1.0);
  }
  const double attn_factor = f.GetFloatOr(p + "rope.scaling.attn_factor", 1.0);
  if (!(attn_factor > 0.0) || !std::isfinite(attn_factor)) {
    return InvalidArgumentError("model metadata: rope.scaling.attn_factor must be > 0");
  }
  c.rope_n_ctx_orig = f.GetIntOr(p + "rope.scaling.original_context_length", c.n_ctx_train);
  if (scaling == "linear" || scaling == "yarn") {
    if (factor == 0.0) factor = 1.0;
    if (!(factor > 0.0) || !std::isfinite(factor)) {
      return InvalidArgumentError("model metadata: rope scaling factor must be > 0");
    }
    c.rope_freq_scale = static_cast<float>(1.0 / factor);
  } else if (!scaling.empty() && scaling != "none") {
    return UnimplementedError("model metadata: rope scaling type '" + scaling +
                              "' is not supported (supported: none, linear, yarn, llama3 "
                              "rope_freqs)");
  }
  c.rope_mscale = static_cast<float>(attn_factor);
  if (scaling == "yarn") {
    UF_RETURN_IF_ERROR(ReadYarn(f, p, &c));
  }
  if (const gguf::TensorInfo* freqs = f.FindTensor("rope_freqs.weight"); freqs != nullptr) {
    if (freqs->n_elements() != c.rope_dim / 2) {
      return InvalidArgumentError("model: rope_freqs.weight has " +
                                  std::to_string(freqs->n_elements()) + " elements, expected " +
                                  std::to_string(c.rope_dim / 2));
    }
    c.has_rope_freq_factors = true;
  }

  const double eps = f.GetFloatOr(p + "attention.layer_norm_rms_epsilon", 1e-5);
  if (!(eps > 0.0) || !(eps < 1.0)) {
    return InvalidArgumentError(
        "model metadata: attention.layer_norm_rms_epsilon must be in (0, 1)");
  }
  c.rms_eps = static_cast<float>(eps);

  UF_RETURN_IF_ERROR(ReadExperts(f, p, &c));
  if (c.architecture == Architecture::kGptOss) {
    // Sliding window on every layer but each swa_period-th (the reference's default period 2:
    // even layers windowed, odd layers full).
    c.n_swa = f.GetIntOr(p + "attention.sliding_window", 0);
    c.swa_period = f.GetIntOr(p + "attention.sliding_window_pattern", 2);
    UF_RETURN_IF_ERROR(CheckRange("attention.sliding_window", c.n_swa, 0, int64_t{1} << 30));
    UF_RETURN_IF_ERROR(CheckRange("attention.sliding_window_pattern", c.swa_period, 1, 4096));
  }

  c.tied_output = f.FindTensor("output.weight") == nullptr;
  if (embd->n_dims != 2 || embd->ne[0] != c.n_embd || embd->ne[1] != c.n_vocab) {
    return InvalidArgumentError("model: token_embd.weight has shape " + embd->ShapeString() +
                                ", expected [" + std::to_string(c.n_embd) + ", " +
                                std::to_string(c.n_vocab) + "]");
  }
  return c;
}

std::string ModelConfig::DebugString() const {
  std::ostringstream os;
  os << "arch=" << architecture_name << " n_embd=" << n_embd << " n_layer=" << n_layer
     << " n_head=" << n_head << " n_head_kv=" << n_head_kv << " head_dim=" << head_dim
     << " n_ff=" << n_ff << " n_vocab=" << n_vocab << " n_ctx_train=" << n_ctx_train
     << " rope=" << (rope_type == RopeType::kNeox ? "neox" : "normal") << " rope_dim=" << rope_dim
     << " rope_base=" << rope_freq_base << " rope_scale=" << rope_freq_scale
     << (has_rope_freq_factors ? " rope_freqs" : "");
  if (rope_ext_factor != 0.0f) {
    os << " yarn(orig_ctx=" << rope_n_ctx_orig << " ramp=" << rope_yarn_low << ".."
       << rope_yarn_high << ")";
  }
  if (rope_mscale != 1.0f) os << " rope_mscale=" << rope_mscale;
  if (n_swa > 0) os << " swa=" << n_swa << "/" << swa_period;
  if (is_moe()) {
    os << " experts=" << n_expert << " used=" << n_expert_used << " n_ff_exp=" << n_ff_exp;
  }
  os << " rms_eps=" << rms_eps << (tied_output ? " tied_output" : "");
  return os.str();
}

}  // namespace uf::model
