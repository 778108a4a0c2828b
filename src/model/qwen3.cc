// Qwen3: the llama layout plus an RMS norm over each head of q and k (weights shared by all heads)
// applied after the projection and before RoPE; no biases.
#include "model/weights.h"

namespace uf::model {

Status BindQwen3Layer(const WeightBinder& b, const ModelConfig& c, int64_t layer, LayerWeights* w) {
  UF_RETURN_IF_ERROR(BindLlamaLayer(b, c, layer, w));
  const std::string p = "blk." + std::to_string(layer) + ".";
  UF_ASSIGN_OR_RETURN(w->q_norm, b.Vector(p + "attn_q_norm.weight", c.head_dim));
  UF_ASSIGN_OR_RETURN(w->k_norm, b.Vector(p + "attn_k_norm.weight", c.head_dim));
  return OkStatus();
}

}  // namespace uf::model
