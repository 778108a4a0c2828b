// Qwen2: the llama layout plus biases on the q, k and v projections.
#include "model/weights.h"

namespace uf::model {

Status BindQwen2Layer(const WeightBinder& b, const ModelConfig& c, int64_t layer, LayerWeights* w) {
  UF_RETURN_IF_ERROR(BindLlamaLayer(b, c, layer, w));
  const std::string p = "blk." + std::to_string(layer) + ".";
  UF_ASSIGN_OR_RETURN(w->bq, b.Vector(p + "attn_q.bias", c.q_dim()));
  UF_ASSIGN_OR_RETURN(w->bk, b.Vector(p + "attn_k.bias", c.kv_dim()));
  UF_ASSIGN_OR_RETURN(w->bv, b.Vector(p + "attn_v.bias", c.kv_dim()));
  return OkStatus();
}

}  // namespace uf::model
