// The one dispatch point for weight x activation products. CPU features are detected once; the
// best kernel tier (scalar reference, AVX2, AVX-512 with VNNI/BF16) is chosen for each type.
#pragma once

#include <atomic>
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
  // n matrices of the same shape stored stride bytes apart (a 3-D expert tensor), repacked into
  // one buffer: each alone would round up to whole 2 MiB pages (Qwen3-30B-A3B's 0.9 MB experts
  // took 2 MiB each, 2.3x their bytes).
  static StatusOr<std::vector<Matrix>> CreateStacked(GgmlType type, const void* data,
                                                     size_t stride, int64_t n, int64_t rows,
                                                     int64_t cols);

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

struct GemmTask;  // kernels/dispatch.h

// Chunks [front, back) of one thread's share of a matmul not yet claimed, in one word so the owner
// (from the front) and thieves (from the back) claim with one compare-and-swap each.
struct alignas(64) ChunkRange {
  std::atomic<uint64_t> front_back{0};

  void Reset(int64_t front, int64_t back) {
    front_back.store(static_cast<uint64_t>(front) | static_cast<uint64_t>(back) << 32,
                     std::memory_order_relaxed);
  }
  int64_t TakeFront();  // the next chunk from the front, or -1 when none is left
  int64_t TakeBack();   // the last chunk, or -1 when none is left
};

// One product of up to kMaxMats matrices sharing an input (MatMulMulti), split across the threads
// of a running pool job: for callers that chain the steps of a forward pass in one
// ThreadPool::Run with ThreadPool::Sync between them. The weights are cut into chunks; each
// thread starts on a contiguous run of them (its own stream) and then takes chunks from the back
// of the others' runs (a static split left one core idle for 8-10% of a 1B decode's matmul time:
// a core slowed by the shared host or a worker woken late).
class MatMulTask {
 public:
  static constexpr int kMaxMats = 16;
  // Called after each chunk with the rows [r0, r1) it finished of every matrix (paired mode).
  using RowsDone = void (*)(void* ctx, int64_t r0, int64_t r1);

  // ws share cols and activation type (checked). Reads the active ISA: Init again after it
  // changes. With `paired`, every matrix has the same type and rows and a chunk is the same rows
  // of all of them, so an epilogue can combine them (SwiGLU of gate and up) while they are hot.
  void Init(const Matrix* const* ws, float* const* ys, int n_mats, bool paired = false);
  Isa isa() const { return isa_; }

  // The activations in the kernels' format: act_row_bytes() per token, or x itself when
  // converts() is false (f32 kernels).
  bool converts() const { return act_f32_ == false; }
  size_t act_row_bytes() const { return act_row_bytes_; }
  // Converts tokens [t0, t1) of x ([tokens][cols] f32) into act ([tokens][act_row_bytes]).
  void Convert(const float* x, int64_t t0, int64_t t1, uint8_t* act) const;

  // Sets up the threads' runs for the next Run; not concurrently with Run (e.g. in the
  // completion of the Sync before it). ranges: [n_threads].
  void Reset(ChunkRange* ranges, int n_threads) const;
  // Every thread of the job calls this once per Reset: y = W x for n_tokens tokens.
  void Run(const uint8_t* act, int64_t n_tokens, ChunkRange* ranges, int thread, int n_threads,
           RowsDone done = nullptr, void* ctx = nullptr) const;
  // The whole product on the calling thread.
  void RunAll(const uint8_t* act, int64_t n_tokens) const;

 private:
  void RunChunk(int64_t c, const uint8_t* act, int64_t n_tokens, RowsDone done, void* ctx) const;

  const Matrix* ws_[kMaxMats] = {};
  float* ys_[kMaxMats] = {};
  const uint8_t* wptr_[kMaxMats] = {};
  void (*fns_[kMaxMats])(const GemmTask&, int64_t, int64_t) = {};
  int n_mats_ = 0;
  bool paired_ = false;
  bool act_f32_ = true;
  Isa isa_ = Isa::kScalar;
  int64_t cols_ = 0;
  size_t act_row_bytes_ = 0;
  void (*convert_)(const float*, void*, int64_t) = nullptr;
  uint64_t total_bytes_ = 0;  // all matrices' bytes
  uint64_t chunk_bytes_ = 0;  // unpaired: a chunk's bytes of the concatenated matrices
  int64_t chunk_rows_ = 0;    // paired: rows per chunk
  int64_t n_chunks_ = 0;
};

}  // namespace uf::kernels
