// A loaded model: the mapped GGUF file, its validated config and the weights bound to it.
// Immutable after Load, so one Model can serve any number of decoders/threads.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/weights.h"

namespace uf::model {

class Model {
 public:
  static StatusOr<std::unique_ptr<Model>> Load(const std::string& path);
  static StatusOr<std::unique_ptr<Model>> FromFile(std::unique_ptr<gguf::GgufFile> file);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const gguf::GgufFile& file() const { return *file_; }

  // Bytes of weights streamed per decoded token (BytesPerToken: the selected experts only).
  size_t bytes_per_token() const { return bytes_per_token_; }

  // out[0..n_embd) = the embedding row of `token` (dequantized). token must be in range.
  void EmbedToken(int32_t token, float* out) const;

 private:
  Model() = default;

  std::unique_ptr<gguf::GgufFile> file_;
  ModelConfig config_;
  ModelWeights weights_;
  size_t bytes_per_token_ = 0;
};

}  // namespace uf::model
