// Products of a mixture-of-experts layer: several experts, each with its own tokens, cut into
// chunks of rows that the threads of a running pool job share in one pass (a decode step's k
// experts are k small matrices: k pool-wide products in a row cost k waits for the slowest
// thread, and each alone is too small to split well).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/matmul.h"

namespace uf::kernels {

// The activation format products with a matrix read: row_bytes per token, written by Convert
// (a copy for the f32 kernels).
struct ActivationFormat {
  size_t row_bytes = 0;
  int64_t cols = 0;
  void (*convert)(const float*, void*, int64_t) = nullptr;
  void Convert(const float* x, uint8_t* dst) const { convert(x, dst, cols); }
};
// For the active ISA (as MatMulTask::Init reads it), or a given one (sizing buffers for any).
ActivationFormat ActivationFormatFor(const Matrix& w);
ActivationFormat ActivationFormatFor(const Matrix& w, Isa isa);

// One expert's product: one matrix (down) or two with the same type and rows computed on the
// same chunks (gate and up, so an epilogue can combine them while hot), on n_tokens rows of
// activations.
struct ExpertJob {
  const Matrix* w[2] = {nullptr, nullptr};
  float* y[2] = {nullptr, nullptr};  // [n_tokens][ldy]; y[t * ldy + r]
  int n_mats = 1;
  const uint8_t* act = nullptr;  // [n_tokens][ActivationFormatFor(w[0]).row_bytes]
  int64_t n_tokens = 0;
  int64_t ldy = 0;
};

class ExpertProduct {
 public:
  // Called after each chunk with the job and the rows [r0, r1) it finished (r0 a multiple of 16).
  using RowsDone = void (*)(void* ctx, int job, int64_t r0, int64_t r1);

  void Reserve(size_t jobs);  // so Add does not allocate on the hot path
  void Clear();
  void Add(const ExpertJob& job);
  int n_jobs() const { return static_cast<int>(jobs_.size()); }
  const ExpertJob& job(int i) const { return jobs_[i].job; }
  // Sets up the threads' runs for the next Run; not concurrently with Run.
  void Reset(ChunkRange* ranges, int n_threads) const;
  // Every thread of the job calls this once per Reset.
  void Run(ChunkRange* ranges, int thread, int n_threads, RowsDone done = nullptr,
           void* ctx = nullptr) const;

 private:
  struct Entry {
    ExpertJob job;
    const uint8_t* wptr[2];
    void (*fn[2])(const GemmTask&, int64_t, int64_t);
    size_t act_row_bytes;
    int64_t chunk_rows;
    int64_t first_chunk;  // global index of its first chunk
  };
  void RunChunk(int64_t c, RowsDone done, void* ctx) const;

  std::vector<Entry> jobs_;
  int64_t n_chunks_ = 0;
};

}  // namespace uf::kernels
