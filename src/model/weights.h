// Weights of a decoder-only transformer bound to the tensors of a GGUF file. Matrices wrap the
// mapped file zero-copy (kernels::Matrix); small vectors (norms, biases) are converted to F32 once
// at load so the forward pass never branches on their type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"
#include "model/config.h"

namespace uf::model {

struct LayerWeights {
  std::vector<float> attn_norm;  // [n_embd]
  kernels::Matrix wq;            // [q_dim][n_embd]
  kernels::Matrix wk;            // [kv_dim][n_embd]
  kernels::Matrix wv;            // [kv_dim][n_embd]
  kernels::Matrix wo;            // [n_embd][q_dim]
  std::vector<float> bq;         // [q_dim], empty when the architecture has no bias (qwen2 has)
  std::vector<float> bk;         // [kv_dim] or empty
  std::vector<float> bv;         // [kv_dim] or empty
  std::vector<float> q_norm;     // [head_dim], empty unless per-head q/k RMS norm (qwen3)
  std::vector<float> k_norm;     // [head_dim] or empty
  std::vector<float> ffn_norm;   // [n_embd]
  kernels::Matrix gate;          // [n_ff][n_embd]
  kernels::Matrix up;            // [n_ff][n_embd]
  kernels::Matrix down;          // [n_embd][n_ff]
  // Mixture of experts (model/moe.cc), in place of gate/up/down when the config has experts.
  kernels::Matrix router;                 // [n_expert][n_embd] (ffn_gate_inp)
  std::vector<kernels::Matrix> exp_gate;  // [n_expert] of [n_ff_exp][n_embd]
  std::vector<kernels::Matrix> exp_up;    // [n_expert] of [n_ff_exp][n_embd]
  std::vector<kernels::Matrix> exp_down;  // [n_expert] of [n_embd][n_ff_exp]
  // gpt-oss (gpt_oss.cc): biases of the output projection, router and experts, and one learned
  // attention sink logit per query head. Empty elsewhere.
  std::vector<float> bo;          // [n_embd]
  std::vector<float> attn_sinks;  // [n_head]
  std::vector<float> router_b;    // [n_expert]
  std::vector<float> exp_gate_b;  // [n_expert][n_ff_exp]
  std::vector<float> exp_up_b;    // [n_expert][n_ff_exp]
  std::vector<float> exp_down_b;  // [n_expert][n_embd]
};

struct ModelWeights {
  const gguf::TensorInfo* token_embd = nullptr;  // [n_vocab][n_embd], any dequantizable type
  size_t token_embd_row_bytes = 0;
  std::vector<LayerWeights> layers;      // [n_layer]
  std::vector<float> output_norm;        // [n_embd]
  kernels::Matrix output;                // [n_vocab][n_embd]; token_embd when tied
  std::vector<float> rope_freq_factors;  // [rope_dim / 2], empty unless rope_freqs.weight
};

// Looks up tensors by name and checks their shapes against what the config implies, so a file
// whose tensors disagree with its metadata fails at load with a message naming the tensor.
class WeightBinder {
 public:
  explicit WeightBinder(const gguf::GgufFile& file) : file_(file) {}

  bool Has(const std::string& name) const { return file_.FindTensor(name) != nullptr; }
  // A 2-D weight of a linear layer with `rows` outputs and `cols` inputs (GGUF ne = [cols, rows]).
  StatusOr<kernels::Matrix> Matrix(const std::string& name, int64_t rows, int64_t cols) const;
  // Expert `e` of a 3-D expert tensor (GGUF ne = [cols, rows, n_expert]): a matrix over its
  // slice of the mapped tensor, checked against the whole tensor's shape.
  StatusOr<std::vector<kernels::Matrix>> Experts(const std::string& name, int64_t n_expert,
                                                 int64_t rows, int64_t cols) const;
  // A 1-D tensor of n values (F32, F16 or BF16), converted to F32.
  StatusOr<std::vector<float>> Vector(const std::string& name, int64_t n) const;
  // A 2-D tensor of F32 values (GGUF ne = [ne0, ne1]), row after row.
  StatusOr<std::vector<float>> Floats(const std::string& name, int64_t ne0, int64_t ne1) const;

 private:
  const gguf::GgufFile& file_;
};

// Per-architecture binding of one layer's tensors (llama.cc, qwen2.cc, qwen3.cc). The shared
// decoder applies the optional steps (biases, q/k norms) whenever their vectors are bound.
Status BindLlamaLayer(const WeightBinder& b, const ModelConfig& c, int64_t layer, LayerWeights* w);
Status BindQwen2Layer(const WeightBinder& b, const ModelConfig& c, int64_t layer, LayerWeights* w);
Status BindQwen3Layer(const WeightBinder& b, const ModelConfig& c, int64_t layer, LayerWeights* w);
Status BindGptOssLayer(const WeightBinder& b, const ModelConfig& c, int64_t layer, LayerWeights* w);

// The router and experts of a MoE layer (model/moe.cc): blk.N.ffn_{gate,up,down}_exps.weight,
// or the older per-expert layout blk.N.ffn_{gate,up,down}.E.weight.
Status BindMoeFfn(const WeightBinder& b, const ModelConfig& c, int64_t layer, LayerWeights* w);

// Binds every tensor the config calls for.
StatusOr<ModelWeights> BindWeights(const gguf::GgufFile& file, const ModelConfig& config);

// Bytes of weights a batch-1 decode step streams: every layer's attention matrices, the router
// and the n_expert_used experts a token selects (or the dense FFN), plus the output matrix.
size_t BytesPerToken(const ModelWeights& weights, const ModelConfig& config);
// Bytes of weights a step of `tokens` tokens (a decode batch, a prompt's batch) streams, each
// matrix once: BytesPerToken's, with each layer's experts those the tokens are expected to
// select together if a router picks its n_expert_used of n_expert uniformly, n_expert (1 - (1 -
// used / n_expert)^tokens) of them (a 64-stream Mixtral step reads ~all 8, 4x one token's 2).
// An estimate for MoE models (a real router is skewed: fewer); exact for dense ones.
double BytesPerStep(const ModelWeights& weights, const ModelConfig& config, int64_t tokens);
// Every matrix's bytes (all experts): what the file's weights occupy.
size_t AllMatrixBytes(const ModelWeights& weights);
// Parameters a token computes with (the matrices BytesPerToken counts), and all of them; the
// embedding table counted in neither (a decode step reads one row of it).
int64_t ActiveParams(const ModelWeights& weights, const ModelConfig& config);
int64_t AllParams(const ModelWeights& weights);

}  // namespace uf::model
