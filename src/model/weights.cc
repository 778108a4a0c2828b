#include "model/weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>

#include "kernels/quant.h"

namespace uf::model {
namespace {

std::string TypeName(GgmlType t) { return std::string(GgmlTypeName(t)); }

// Hands the whole pages of a tensor the kernels no longer read (it was repacked into tiles)
// back to the kernel. Without this a MoE file's expert pages (nearly all of the file) stay
// mapped beside their repacked copy until memory pressure evicts them: Qwen3-30B-A3B Q4_K_M is
// 17.3 GiB of file plus 17.3 GiB of tiles on a 24 GiB machine. MADV_PAGEOUT keeps the contents
// (a later read faults them back in from the file; on heap memory, as in a GGUF read from a
// buffer, it only ever swaps), so it is safe whatever backs the bytes; best effort.
void ReleasePages(const uint8_t* data, uint64_t n) {
#if defined(__linux__) && defined(MADV_PAGEOUT)
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + n) & ~(page - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_PAGEOUT);
#else
  (void)data;
  (void)n;
#endif
}

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

StatusOr<std::vector<kernels::Matrix>> WeightBinder::Experts(const std::string& name,
                                                             int64_t n_expert, int64_t rows,
                                                             int64_t cols) const {
  const gguf::TensorInfo* t = file_.FindTensor(name);
  if (t == nullptr) return NotFoundError("model: tensor '" + name + "' is missing");
  if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != n_expert || t->ne[3] != 1) {
    return InvalidArgumentError("model: tensor '" + name + "' has shape " + t->ShapeString() +
                                ", expected [" + std::to_string(cols) + ", " +
                                std::to_string(rows) + ", " + std::to_string(n_expert) + "]");
  }
  UF_RETURN_IF_ERROR(CheckComputable(*t));
  const size_t slice = GgmlRowBytes(t->type, cols) * static_cast<size_t>(rows);
  auto out = kernels::Matrix::CreateStacked(t->type, t->data, slice, n_expert, rows, cols);
  if (!out.ok()) return out.status().WithContext("model: tensor '" + name + "'");
  if ((*out)[0].tiles() != nullptr) ReleasePages(t->data, t->n_bytes);
  return out;
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

StatusOr<std::vector<float>> WeightBinder::Floats(const std::string& name, int64_t ne0,
                                                  int64_t ne1) const {
  const gguf::TensorInfo* t = file_.FindTensor(name);
  if (t == nullptr) return NotFoundError("model: tensor '" + name + "' is missing");
  UF_RETURN_IF_ERROR(CheckShape(*t, ne0, ne1));
  if (t->type != GgmlType::kF32) {
    return UnimplementedError("model: tensor '" + name + "' has type " + TypeName(t->type) +
                              ", expected F32");
  }
  std::vector<float> v(ne0 * ne1);
  std::memcpy(v.data(), t->data, v.size() * sizeof(float));
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
      case Architecture::kQwen3Moe:
        s = BindQwen3Layer(b, c, il, &w.layers[il]);
        break;
      case Architecture::kGptOss:
        s = BindGptOssLayer(b, c, il, &w.layers[il]);
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

namespace {

// Sums f over the matrices a step of `tokens` tokens reads (experts: the average expert times the
// k used for one token, or the expected distinct ones of `tokens`: BytesPerStep) or over all.
template <typename F>
double SumMatrices(const ModelWeights& w, const ModelConfig* active, const F& f,
                   int64_t tokens = 1) {
  double total = f(w.output);
  for (const LayerWeights& l : w.layers) {
    for (const kernels::Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo}) total += f(*m);
    if (l.exp_gate.empty()) {
      for (const kernels::Matrix* m : {&l.gate, &l.up, &l.down}) total += f(*m);
      continue;
    }
    total += f(l.router);
    double experts = 0;
    for (size_t e = 0; e < l.exp_gate.size(); ++e) {
      experts += f(l.exp_gate[e]) + f(l.exp_up[e]) + f(l.exp_down[e]);
    }
    if (active != nullptr) {
      const double used =
          static_cast<double>(active->n_expert_used) / static_cast<double>(l.exp_gate.size());
      // One token: exactly k / E (BytesPerToken's bytes, which tests compare to the byte).
      experts *= tokens <= 1 ? used : 1.0 - std::pow(1.0 - used, static_cast<double>(tokens));
    }
    total += experts;
  }
  return total;
}

double Bytes(const kernels::Matrix& m) { return static_cast<double>(m.bytes()); }
double Params(const kernels::Matrix& m) { return static_cast<double>(m.rows()) * m.cols(); }

}  // namespace

size_t BytesPerToken(const ModelWeights& w, const ModelConfig& c) {
  return static_cast<size_t>(SumMatrices(w, &c, Bytes));
}
double BytesPerStep(const ModelWeights& w, const ModelConfig& c, int64_t tokens) {
  return SumMatrices(w, &c, Bytes, tokens);
}
size_t AllMatrixBytes(const ModelWeights& w) {
  return static_cast<size_t>(SumMatrices(w, nullptr, Bytes));
}
int64_t ActiveParams(const ModelWeights& w, const ModelConfig& c) {
  return static_cast<int64_t>(SumMatrices(w, &c, Params));
}
int64_t AllParams(const ModelWeights& w) {
  return static_cast<int64_t>(SumMatrices(w, nullptr, Params));
}

}  // namespace uf::model
