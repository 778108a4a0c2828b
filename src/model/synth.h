// Synthetic models: GGUF files with the exact tensor shapes, hyperparameters, weight-type mix and
// tokenizer layout of real models, filled with seeded random weights. They load and run in any
// engine that runs the real model (llama.cpp included), so speed can be measured at real sizes
// without downloading weights; their output is gibberish.
//
// Writing streams one tensor at a time (GgufWriter fill callbacks): memory stays at the largest
// tensor, never the whole model (an 8B F16 file is 16 GB).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gguf/types.h"
#include "model/config.h"
#include "tokenizer/tokenizer.h"

namespace uf::model {

// Weight-type recipes, named and mixed as the reference engine's quantize tool does them.
enum class SynthFileType { kF16, kBF16, kQ8_0, kQ4_0, kQ4_K_M, kQ6_K, kMXFP4 };

// "f16", "bf16", "q8_0", "q4_0", "q4_k_m", "q6_k", "mxfp4" (case-insensitive).
std::optional<SynthFileType> ParseSynthFileType(std::string_view name);
std::string_view SynthFileTypeName(SynthFileType type);
// general.file_type (the reference engine's llama_ftype numbering).
uint32_t SynthGeneralFileType(SynthFileType type);

struct SynthSpecialToken {
  int32_t id;
  std::string text;
  TokenType type;  // kControl or kUserDefined
};

// Llama 3 RoPE scaling, written as rope_freqs.weight (per-frequency divisors).
struct Llama3RopeScaling {
  double factor = 0.0;  // 0 = no scaling, no rope_freqs tensor
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_context = 8192;
};

struct SynthPreset {
  std::string name;          // CLI name, "llama-3.2-1b"
  std::string display_name;  // general.name
  Architecture arch = Architecture::kLlama;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // written as key_length/value_length when != n_embd / n_head
  int64_t n_ff = 0;
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_embeddings = false;  // no output.weight
  bool qkv_bias = false;         // qwen2
  bool qk_norm = false;          // qwen3, qwen3moe
  // Mixture of experts (0 = dense): blk.N.ffn_gate_inp (F32 router, as the reference quantizer
  // keeps it) and 3-D ffn_{gate,up,down}_exps of n_ff_exp rows (qwen3moe writes
  // expert_feed_forward_length; Mixtral's experts are n_ff wide).
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  // gpt-oss: attention.sliding_window (every other layer; 0 = none).
  int64_t sliding_window = 0;
  Llama3RopeScaling llama3_rope;
  // rope.scaling.type/factor/original_context_length keys ("linear" or "yarn"; empty = none).
  std::string rope_scaling;
  double rope_scaling_factor = 1.0;
  int64_t rope_scaling_orig_ctx = 0;

  // Byte-level BPE tokenizer ("gpt2" model). Ids not taken by special tokens hold, in order, the
  // 256 byte tokens then synthetic merged tokens; ids from n_real_tokens to n_vocab are
  // "[PAD<id>]" unused padding, as converters write vocabularies smaller than the embedding.
  std::string tokenizer_pre;
  std::vector<SynthSpecialToken> special_tokens;
  int64_t n_real_tokens = 0;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t pad_id = -1;  // -1: not written
  bool add_bos = false;
};

// The built-in presets: llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, qwen2.5-0.5b, qwen3-0.6b,
// smollm2-135m, the mixtures of experts qwen3-30b-a3b, mixtral-8x7b and gpt-oss-20b, and
// tiny-qwen3moe, tiny-mixtral and tiny-gpt-oss (a few MiB, 4k vocabularies: for tests against
// the reference engine).
const std::vector<SynthPreset>& SynthPresets();
// NotFound naming the known presets.
StatusOr<SynthPreset> FindSynthPreset(std::string_view name);

// How a tensor's values are drawn before conversion to its type.
enum class SynthInit {
  kGaussian,   // mean + std * N(0, 1)
  kRopeFreqs,  // Llama3RopeFreqFactors, no randomness
};

struct SynthTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;  // GGUF order: ne[0] is the row length
  uint64_t n_bytes = 0;     // without alignment padding
  SynthInit init = SynthInit::kGaussian;
  float mean = 0.0f;
  float std = 0.0f;
};

struct SynthPlan {
  SynthPreset preset;
  SynthFileType file_type = SynthFileType::kF16;
  std::vector<SynthTensor> tensors;  // in file order
  uint64_t n_params = 0;    // elements of all tensors except rope_freqs (the published count)
  uint64_t data_bytes = 0;  // tensor data section, alignment padding included
};

// Tensor list, types and sizes, without generating anything. InvalidArgument when the preset's
// shapes are inconsistent (heads not dividing, rows not a whole number of blocks, ...).
StatusOr<SynthPlan> PlanSynth(const SynthPreset& preset, SynthFileType type);

// Reference-engine convention for Llama 3 scaling: factor 1 for short wavelengths, `factor` for
// long ones, a smooth blend in between. [rope_dim / 2]
std::vector<float> Llama3RopeFreqFactors(const SynthPreset& preset);

// The tokenizer written into the file (also usable without a file).
StatusOr<TokenizerConfig> SynthTokenizerConfig(const SynthPreset& preset);

struct SynthOptions {
  uint64_t seed = 0;
  int n_threads = 0;  // 0: ThreadPool::DefaultThreads()
  // Called after each tensor is written (tensors done, tensors total, data bytes done).
  std::function<void(size_t, size_t, uint64_t)> progress;
};

struct SynthResult {
  uint64_t file_bytes = 0;
  size_t n_tensors = 0;
  double seconds = 0.0;
};

// Generates and writes the file (atomically: a temporary then a rename). The bytes depend only
// on the plan and the seed, not on the thread count.
StatusOr<SynthResult> WriteSynth(const SynthPlan& plan, const SynthOptions& options,
                                 const std::string& path);

// Fast one-pass K-quant quantizers for random weights (exposed for tests). The reference ones in
// kernels/quant.h search scales per sub-block: ~100 ns per value, a quarter of an hour of CPU
// for an 8B file; these keep the range fit that search starts from (~1 ns per value), with an
// RMS error ~10% above the reference's on Gaussian data. n is a multiple of 256.
void SynthQuantizeQ4_K(const float* x, void* dst, int64_t n);
void SynthQuantizeQ6_K(const float* x, void* dst, int64_t n);

}  // namespace uf::model
