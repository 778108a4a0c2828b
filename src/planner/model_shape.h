// What the planner needs to know about a model: the bytes a decode step must read (weights that
// every token touches, experts that only some tokens touch, K/V per cached position), the bytes
// it must hold, and the multiply-adds per token. From a GGUF file's metadata and tensor table
// (exact bytes, nothing loaded), or from a preset shape and a weight type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace uf::planner {

// A transformer shape. Dense models leave the expert fields at 0.
struct ModelShape {
  std::string name;
  int64_t n_layer = 0;
  int64_t n_embd = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t n_ff = 0;  // dense FFN width (0 when every layer is MoE)
  int64_t n_vocab = 0;
  bool tied_output = false;  // logits use the embedding table
  // Mixture of experts: every layer routes each token to n_expert_used of n_expert FFNs of width
  // n_ff_expert (plus the dense FFN of width n_ff, when non-zero, as a shared expert).
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_expert = 0;
  // Sliding-window attention (gpt-oss): layers il with il % swa_period < swa_period - 1 see and
  // keep only the last n_swa positions; 0 = none.
  int64_t n_swa = 0;
  int64_t swa_period = 2;
};

// Decode-step cost of a model in a given weight and KV type.
struct ModelCost {
  std::string name;
  std::string weight_type;  // "bf16", "q4_0", ... ("mixed" when a file mixes)
  double always_bytes = 0;  // read by every decode step: attention, dense FFN, output, norms
  double expert_bytes = 0;  // one expert's FFN in one layer (0: dense)
  int64_t n_layer = 0;
  int64_t n_expert = 0;       // per layer
  int64_t n_expert_used = 0;  // per token per layer
  double embd_row_bytes = 0;  // one token's embedding row (read per sequence)
  double held_bytes = 0;      // all weights, embedding table included
  double total_params = 0;
  double active_params = 0;          // multiply-adds per token (2 flops each), embedding excluded
  bool quantized = false;            // matmuls run at the quantized rate (HardwareProfile)
  double kv_bytes_per_position = 0;  // K and V of one cached position, all full-context layers
  // K and V the sliding-window layers of one sequence hold (their window, the engine keeps no
  // more) and a decode step reads, whatever the context; 0 without such layers.
  double kv_window_bytes = 0;
  int64_t windowed_layers = 0;  // of n_layer, attending to the last n_swa positions only
  int64_t n_swa = 0;
  int64_t q_dim = 0;                 // n_head x head_dim: attention's multiply-adds per position
  int64_t n_ctx_train = 0;           // 0 when unknown

  // Weight bytes one decode step of `batch` sequences reads: every always-read byte, the
  // expected number of distinct experts the batch routes to (uniform routing), one embedding
  // row per sequence.
  double StepWeightBytes(int64_t batch) const;
};

// Bits per weight of a type name: f32, f16, bf16, fp8, q8_0, q6_k, q4_k_m, q4_0, fp4 (block
// scales included: q4_0 is 4.5, q8_0 8.5). InvalidArgument naming the known types.
StatusOr<double> WeightTypeBits(std::string_view type);
// Bytes per element of a K/V cache type: f32, f16, bf16, fp8, q8_0.
StatusOr<double> KvTypeBytes(std::string_view type);

// The planner's presets: the synth presets (llama-3.2-1b, ..., smollm2-135m, the MoE ones
// qwen3-30b-a3b and mixtral-8x7b with their experts) plus shapes for planning only:
// llama-3.1-70b and llama-3.1-405b.
const std::vector<ModelShape>& PlannerPresets();
StatusOr<ModelShape> FindPlannerPreset(std::string_view name);

// Cost of a preset shape with every matrix in `weight_type` (the embedding table too; real files
// keep the output matrix at a higher precision, which a GGUF file's own cost captures).
StatusOr<ModelCost> CostFromShape(const ModelShape& shape, std::string_view weight_type,
                                  std::string_view kv_type);

// Cost from a GGUF file's metadata and tensor table; experts are tensors named *_exps.
// InvalidArgument (naming the file) when it is not a GGUF file or lacks the shape keys.
StatusOr<ModelCost> CostFromGguf(const std::string& path, std::string_view kv_type);

}  // namespace uf::planner
