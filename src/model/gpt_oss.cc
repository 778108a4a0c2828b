// gpt-oss: pre-norm attention with biases on q/k/v and the output projection and a learned sink
// logit per head (a key every query sees with no value: it only adds to the softmax's
// denominator), sliding-window attention on alternate layers, YaRN RoPE (config.cc), and a MoE
// FFN whose router and experts have biases and whose activation is the clamped SwiGLU
// (model/moe.cc). The FFN norm is named post_attention_norm.
#include "model/weights.h"

namespace uf::model {

Status BindGptOssLayer(const WeightBinder& b, const ModelConfig& c, int64_t layer,
                       LayerWeights* w) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  UF_ASSIGN_OR_RETURN(w->attn_norm, b.Vector(p + "attn_norm.weight", c.n_embd));
  UF_ASSIGN_OR_RETURN(w->wq, b.Matrix(p + "attn_q.weight", c.q_dim(), c.n_embd));
  UF_ASSIGN_OR_RETURN(w->wk, b.Matrix(p + "attn_k.weight", c.kv_dim(), c.n_embd));
  UF_ASSIGN_OR_RETURN(w->wv, b.Matrix(p + "attn_v.weight", c.kv_dim(), c.n_embd));
  UF_ASSIGN_OR_RETURN(w->bq, b.Vector(p + "attn_q.bias", c.q_dim()));
  UF_ASSIGN_OR_RETURN(w->bk, b.Vector(p + "attn_k.bias", c.kv_dim()));
  UF_ASSIGN_OR_RETURN(w->bv, b.Vector(p + "attn_v.bias", c.kv_dim()));
  UF_ASSIGN_OR_RETURN(w->wo, b.Matrix(p + "attn_output.weight", c.n_embd, c.q_dim()));
  UF_ASSIGN_OR_RETURN(w->bo, b.Vector(p + "attn_output.bias", c.n_embd));
  UF_ASSIGN_OR_RETURN(w->attn_sinks, b.Vector(p + "attn_sinks.weight", c.n_head));
  UF_ASSIGN_OR_RETURN(w->ffn_norm, b.Vector(p + "post_attention_norm.weight", c.n_embd));
  UF_RETURN_IF_ERROR(BindMoeFfn(b, c, layer, w));
  UF_ASSIGN_OR_RETURN(w->router_b, b.Vector(p + "ffn_gate_inp.bias", c.n_expert));
  UF_ASSIGN_OR_RETURN(w->exp_gate_b, b.Floats(p + "ffn_gate_exps.bias", c.n_ff_exp, c.n_expert));
  UF_ASSIGN_OR_RETURN(w->exp_up_b, b.Floats(p + "ffn_up_exps.bias", c.n_ff_exp, c.n_expert));
  UF_ASSIGN_OR_RETURN(w->exp_down_b, b.Floats(p + "ffn_down_exps.bias", c.n_embd, c.n_expert));
  return OkStatus();
}

}  // namespace uf::model
