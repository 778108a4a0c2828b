#include "model/weights.h"

#include "kernels/quant.h"

namespace uf::model {
namespace {

std::string TypeName(GgmlType t) { return std::string(GgmlTypeName(t)); }

Status CheckShape(const gguf::TensorInfo& t, int64_t ne0, int64_t ne1) {
  const bool ok = t.ne[0] == ne0 && t.ne[1] == ne1 && t.ne[2] == 1 && t.ne[3] == 1;
  if (!ok) {
    return InvalidArgumentError("model: tensor '" + t.name + "' has shape " + t.ShapeString() +
                                ", expected [" + std::to_string(ne0) +
                                (ne1 == 1 ? "" : ", " + std::to_string(ne1)) + "]");
  }
  return OkStatus();
}

Status CheckComputable(const gguf::TensorInfo& t) {
  if (!IsComputeSupported(t.type)) {
    return UnimplementedError("model: tensor '" + t.name + "' has type " + TypeName(t.type) +
                              ", which this engine cannot compute with");
  }
  return OkStatus();
}

}  // namespace

StatusOr<kernels::Matrix> WeightBinder::Matrix(const std::string& name, int64_t rows,
                                               int64_t cols) const {
  const gguf::TensorInfo* t = file_.FindTensor(name);
  if (t == nullptr) return NotFoundError("model: tensor '" + name + "' is missing");
  UF_RETURN_IF_ERROR(CheckShape(*t, cols, rows));
  UF_RETURN_IF_ERROR(CheckComputable(*t));
  auto m = kernels::Matrix::Create(t->type, t->data, rows, cols);
  if (!m.ok()) return m.status().WithContext("model: tensor '" + name + "'");
  return m;
}

StatusOr<std::vector<float>> WeightBinder::Vector(const std::string& name, int64_t n) const {
  const gguf::TensorInfo* t = file_.FindTensor(name);
  if (t == nullptr) return NotFoundError("model: tensor '" + name + "' is missing");
  UF_RETURN_IF_ERROR(CheckShape(*t, n, 1));
  UF_RETURN_IF_ERROR(CheckComputable(*t));
  const auto info = GetGgmlTypeInfo(static_cast<uint32_t>(t->type));
  if (!info || n % info->block_size != 0) {
    return InvalidArgumentError("model: tensor '" + name + "' of type " + TypeName(t->type) +
                                " has " + std::to_string(n) +
                                " values, not a multiple of its block size");
  }
  std::vector<float> v(n);
  kernels::DequantizeRow(t->type, t->data, v.data(), n);
  return v;
}

StatusOr<ModelWeights> BindWeights(const gguf::GgufFile& file, const ModelConfig& c) {
  WeightBinder b(file);
  ModelWeights w;
  w.token_embd = file.FindTensor("token_embd.weight");
  if (w.token_embd == nullptr) return NotFoundError("model: tensor 'token_embd.weight' is missing");
  UF_RETURN_IF_ERROR(CheckShape(*w.token_embd, c.n_embd, c.n_vocab));
  UF_RETURN_IF_ERROR(CheckComputable(*w.token_embd));
  const auto embd_info = GetGgmlTypeInfo(static_cast<uint32_t>(w.token_embd->type));
  if (!embd_info || c.n_embd % embd_info->block_size != 0) {
    return InvalidArgumentError("model: token_embd.weight rows are not a whole number of blocks");
  }
  w.token_embd_row_bytes = GgmlRowBytes(w.token_embd->type, c.n_embd);

  w.layers.resize(c.n_layer);
  for (int64_t il = 0; il < c.n_layer; ++il) {
    Status s;
    switch (c.architecture) {
      case Architecture::kLlama:
        s = BindLlamaLayer(b, c, il, &w.layers[il]);
        break;
      case Architecture::kQwen2:
        s = BindQwen2Layer(b, c, il, &w.layers[il]);
        break;
      case Architecture::kQwen3:
        s = BindQwen3Layer(b, c, il, &w.layers[il]);
        break;
    }
    UF_RETURN_IF_ERROR(s);
  }
  UF_ASSIGN_OR_RETURN(w.output_norm, b.Vector("output_norm.weight", c.n_embd));
  if (c.tied_output) {
    UF_ASSIGN_OR_RETURN(w.output, b.Matrix("token_embd.weight", c.n_vocab, c.n_embd));
  } else {
    UF_ASSIGN_OR_RETURN(w.output, b.Matrix("output.weight", c.n_vocab, c.n_embd));
  }
  if (c.has_rope_freq_factors) {
    UF_ASSIGN_OR_RETURN(w.rope_freq_factors, b.Vector("rope_freqs.weight", c.rope_dim / 2));
    for (float f : w.rope_freq_factors) {
      if (!(f > 0.0f)) return InvalidArgumentError("model: rope_freqs.weight has a value <= 0");
    }
  }
  return w;
}

size_t BytesPerToken(const ModelWeights& w) {
  size_t total = w.output.bytes();
  for (const LayerWeights& l : w.layers) {
    for (const kernels::Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down}) {
      total += m->bytes();
    }
  }
  return total;
}

}  // namespace uf::model
