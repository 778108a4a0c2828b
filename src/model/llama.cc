// Llama: the base layout every supported architecture starts from (pre-norm attention with GQA
// and a SwiGLU feed-forward, no biases). With expert_count > 0 it is Mixtral: the FFN is a
// mixture of experts (model/moe.cc).
#include "model/weights.h"

namespace uf::model {

Status BindLlamaLayer(const WeightBinder& b, const ModelConfig& c, int64_t layer, LayerWeights* w) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  UF_ASSIGN_OR_RETURN(w->attn_norm, b.Vector(p + "attn_norm.weight", c.n_embd));
  UF_ASSIGN_OR_RETURN(w->wq, b.Matrix(p + "attn_q.weight", c.q_dim(), c.n_embd));
  UF_ASSIGN_OR_RETURN(w->wk, b.Matrix(p + "attn_k.weight", c.kv_dim(), c.n_embd));
  UF_ASSIGN_OR_RETURN(w->wv, b.Matrix(p + "attn_v.weight", c.kv_dim(), c.n_embd));
  UF_ASSIGN_OR_RETURN(w->wo, b.Matrix(p + "attn_output.weight", c.n_embd, c.q_dim()));
  UF_ASSIGN_OR_RETURN(w->ffn_norm, b.Vector(p + "ffn_norm.weight", c.n_embd));
  if (c.is_moe()) return BindMoeFfn(b, c, layer, w);  // Mixtral, qwen3moe
  UF_ASSIGN_OR_RETURN(w->gate, b.Matrix(p + "ffn_gate.weight", c.n_ff, c.n_embd));
  UF_ASSIGN_OR_RETURN(w->up, b.Matrix(p + "ffn_up.weight", c.n_ff, c.n_embd));
  UF_ASSIGN_OR_RETURN(w->down, b.Matrix(p + "ffn_down.weight", c.n_embd, c.n_ff));
  return OkStatus();
}

}  // namespace uf::model
