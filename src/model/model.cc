#include "model/model.h"

#include "kernels/quant.h"

namespace uf::model {

StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& path) {
  auto file = gguf::GgufFile::Open(path);
  if (!file.ok()) return file.status();
  auto model = FromFile(std::move(file).value());
  if (!model.ok()) return model.status().WithContext(path);
  return model;
}

StatusOr<std::unique_ptr<Model>> Model::FromFile(std::unique_ptr<gguf::GgufFile> file) {
  UF_CHECK(file != nullptr);
  std::unique_ptr<Model> m(new Model());
  UF_ASSIGN_OR_RETURN(m->config_, ModelConfig::FromGguf(*file));
  UF_ASSIGN_OR_RETURN(m->weights_, BindWeights(*file, m->config_));
  m->bytes_per_token_ = BytesPerToken(m->weights_, m->config_);
  m->file_ = std::move(file);
  return m;
}

void Model::EmbedToken(int32_t token, float* out) const {
  UF_DCHECK(token >= 0 && token < config_.n_vocab);
  const uint8_t* row =
      weights_.token_embd->data + static_cast<size_t>(token) * weights_.token_embd_row_bytes;
  kernels::DequantizeRow(weights_.token_embd->type, row, out, config_.n_embd);
}

}  // namespace uf::model
