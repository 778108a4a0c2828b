#include "kernels/experts.h"

#include <algorithm>

#include "base/check.h"
#include "kernels/dispatch.h"
#include "kernels/packed.h"

namespace uf::kernels {
namespace {

// As MatMulTask: chunks of ~64 KiB of weights in multiples of 16 rows.
constexpr uint64_t kChunkBytes = 64 * 1024;
constexpr int64_t kRowAlign = 16;

}  // namespace

ActivationFormat ActivationFormatFor(const Matrix& w) {
  return ActivationFormatFor(w, ActiveIsa());
}

ActivationFormat ActivationFormatFor(const Matrix& w, Isa isa) {
  const KernelSet& ks = GetKernels(w.type(), isa);
  ActivationFormat f;
  f.cols = w.cols();
  f.row_bytes = ks.ActRowBytes(w.cols());
  f.convert = ks.convert;
  return f;
}

void ExpertProduct::Reserve(size_t jobs) { jobs_.reserve(jobs); }

void ExpertProduct::Clear() {
  jobs_.clear();
  n_chunks_ = 0;
}

void ExpertProduct::Add(const ExpertJob& job) {
  UF_CHECK(job.n_mats == 1 || job.n_mats == 2);
  const Isa isa = ActiveIsa();
  Entry e{};
  e.job = job;
  const Matrix& w0 = *job.w[0];
  for (int i = 0; i < job.n_mats; ++i) {
    const Matrix& m = *job.w[i];
    UF_CHECK(m.type() == w0.type() && m.rows() == w0.rows() && m.cols() == w0.cols());
    const KernelSet& ks = GetKernels(m.type(), isa);
    const bool tiles = m.tiles() != nullptr && ks.gemm_tiles != nullptr &&
                       m.tile_variant() == TileVariant(m.type(), isa);
    e.fn[i] = tiles ? ks.gemm_tiles : ks.gemm;
    e.wptr[i] = tiles ? m.tiles() : m.data();
  }
  e.act_row_bytes = GetKernels(w0.type(), isa).ActRowBytes(w0.cols());
  const uint64_t group_bytes = w0.row_bytes() * static_cast<uint64_t>(job.n_mats);
  int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / group_bytes));
  e.chunk_rows = (rows + kRowAlign - 1) / kRowAlign * kRowAlign;
  e.first_chunk = n_chunks_;
  n_chunks_ += job.n_tokens > 0 ? (w0.rows() + e.chunk_rows - 1) / e.chunk_rows : 0;
  jobs_.push_back(e);
}

void ExpertProduct::RunChunk(int64_t c, RowsDone done, void* ctx) const {
  // The job whose chunks hold c: the last one starting at or before it.
  const auto it = std::upper_bound(jobs_.begin(), jobs_.end(), c,
                                   [](int64_t v, const Entry& e) { return v < e.first_chunk; }) -
                  1;
  const Entry& e = *it;
  const ExpertJob& j = e.job;
  const int64_t rows = j.w[0]->rows();
  const int64_t r0 = (c - e.first_chunk) * e.chunk_rows, r1 = std::min(rows, r0 + e.chunk_rows);
  for (int i = 0; i < j.n_mats; ++i) {
    const GemmTask task{e.wptr[i],       j.w[i]->row_bytes(), j.w[i]->cols(), j.act,
                        e.act_row_bytes, j.n_tokens,          j.y[i],         j.ldy};
    e.fn[i](task, r0, r1);
  }
  if (done != nullptr) done(ctx, static_cast<int>(it - jobs_.begin()), r0, r1);
}

void ExpertProduct::Reset(ChunkRange* ranges, int n_threads) const {
  for (int i = 0; i < n_threads; ++i) {
    ranges[i].Reset(n_chunks_ * i / n_threads, n_chunks_ * (i + 1) / n_threads);
  }
}

void ExpertProduct::Run(ChunkRange* ranges, int thread, int n_threads, RowsDone done,
                        void* ctx) const {
  for (int64_t c; (c = ranges[thread].TakeFront()) >= 0;) RunChunk(c, done, ctx);
  for (int j = 1; j < n_threads; ++j) {
    ChunkRange& other = ranges[(thread + j) % n_threads];
    for (int64_t c; (c = other.TakeBack()) >= 0;) RunChunk(c, done, ctx);
  }
}

}  // namespace uf::kernels
