// The one dispatch point for weight x activation products. CPU features are detected once; the
// best kernel tier (scalar reference, AVX2, AVX-512 with VNNI/BF16) is chosen for each type.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "gguf/types.h"

namespace uf::kernels {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
// Best ISA this CPU supports, capped by UF_ISA=scalar|avx2|avx512 when set (tests, benchmarks).
Isa ActiveIsa();
void SetIsaForTesting(Isa isa);  // must not exceed what the CPU supports
std::string IsaName(Isa isa);

// A weight matrix of a linear layer, [rows = out_features][cols = in_features]. Wraps the mmapped
// GGUF tensor (ne[0] = cols, ne[1] = rows) zero-copy, or a repacked copy when the kernels for
// this type and ISA want another layout.
// With a SIMD tier active, Create copies the weights once (one pass, same byte count, in 2 MiB
// pages): quantized types into 16-row tiles, float types as they are. That costs load time and
// memory but decode streams them at the DRAM read bandwidth (see src/kernels/packed.h).
class Matrix {
 public:
  Matrix() = default;
  // Fails (InvalidArgument/Unimplemented) on unsupported types or cols not a block multiple.
  static StatusOr<Matrix> Create(GgmlType type, const void* data, int64_t rows, int64_t cols);

  GgmlType type() const { return type_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  // Bytes streamed from memory by one full pass over the matrix (what a decode step reads).
  size_t bytes() const { return bytes_; }
  const uint8_t* data() const { return data_; }
  size_t row_bytes() const { return row_bytes_; }
  // The same weights repacked into 16-row tiles for the SIMD kernels (kernels/packed.h), or
  // null when the active kernels read the GGUF rows directly.
  const uint8_t* tiles() const { return tiles_; }
  // The form of tiles() (kernels/packed.h TileVariant), fixed by the tier active at Create.
  int tile_variant() const { return tile_variant_; }

 private:
  GgmlType type_ = GgmlType::kF32;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  size_t row_bytes_ = 0;
  size_t bytes_ = 0;
  const uint8_t* data_ = nullptr;   // [rows][row_bytes] in the GGUF layout (maybe a copy)
  const uint8_t* tiles_ = nullptr;  // [ceil(rows / 16)][16 * row_bytes], or null
  int tile_variant_ = 0;
  std::shared_ptr<uint8_t[]> repacked_;  // owner of tiles_ or of the copied data_
  friend class MatrixAccess;
};

// y[t * rows + r] = sum_c W[r][c] * x[t * cols + c] for t in [0, n_tokens).
// x: [n_tokens][cols] f32, y: [n_tokens][rows] f32. Activations are converted to
// ActivationType(w.type()) once per call. Work is split across the pool's threads by rows.
void MatMul(const Matrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool);

// Several matrices sharing one input (Q/K/V, gate/up): one activation conversion and one pool
// dispatch for all of them. Every matrix must have the same cols and type family.
void MatMulMulti(const std::vector<const Matrix*>& ws, const float* x, int64_t n_tokens,
                 const std::vector<float*>& ys, ThreadPool* pool);

}  // namespace uf::kernels
