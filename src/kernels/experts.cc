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
// A thread claims up to this many of its own chunks at once (about 1 MiB) and reads them in one
// kernel call; thieves take single chunks from the back.
constexpr int64_t kRunChunks = 16;

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
  n_pairs_ = 0;
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
  const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / w0.row_bytes()));
  e.chunk_rows = (rows + kRowAlign - 1) / kRowAlign * kRowAlign;
  e.row_chunks = job.n_tokens > 0 ? (w0.rows() + e.chunk_rows - 1) / e.chunk_rows : 0;
  e.first_chunk = n_chunks_;
  e.first_pair = n_pairs_;
  n_chunks_ += e.row_chunks * job.n_mats;
  if (job.n_mats == 2) n_pairs_ += e.row_chunks;
  jobs_.push_back(e);
}

void ExpertProduct::RunChunks(int64_t c0, int64_t c1, RowsDone done, void* ctx) const {
  while (c0 < c1) {
    // The job whose chunks hold c0: the last one starting at or before it.
    const auto it = std::upper_bound(jobs_.begin(), jobs_.end(), c0,
                                     [](int64_t v, const Entry& e) { return v < e.first_chunk; }) -
                    1;
    const Entry& e = *it;
    const ExpertJob& j = e.job;
    const int64_t mat = (c0 - e.first_chunk) / e.row_chunks;
    const int64_t rc0 = (c0 - e.first_chunk) % e.row_chunks;
    // Consecutive chunks of one matrix are its consecutive rows: one kernel call.
    const int64_t rc1 = rc0 + std::min(c1 - c0, e.row_chunks - rc0);
    const int64_t rows = j.w[0]->rows();
    const GemmTask task{e.wptr[mat],      j.w[mat]->row_bytes(),
                        j.w[mat]->cols(), j.act,
                        e.act_row_bytes,  j.n_tokens,
                        j.y[mat],         j.ldy};
    e.fn[mat](task, rc0 * e.chunk_rows, std::min(rows, rc1 * e.chunk_rows));
    c0 += rc1 - rc0;
    if (done == nullptr) continue;
    for (int64_t rc = rc0; rc < rc1; ++rc) {
      // The last of the two matrices to finish these rows runs the epilogue; acq_rel makes
      // the other thread's rows visible to it.
      if (j.n_mats == 2 &&
          pending_[e.first_pair + rc].fetch_sub(1, std::memory_order_acq_rel) != 1) {
        continue;
      }
      done(ctx, static_cast<int>(it - jobs_.begin()), rc * e.chunk_rows,
           std::min(rows, (rc + 1) * e.chunk_rows));
    }
  }
}

void ExpertProduct::Reset(ChunkRange* ranges, int n_threads) const {
  if (pending_size_ < n_pairs_) {  // grows to the largest step seen (not per step)
    pending_size_ = std::max<int64_t>(n_pairs_, 2 * pending_size_);
    pending_ = std::make_unique<std::atomic<int32_t>[]>(pending_size_);
  }
  for (int64_t i = 0; i < n_pairs_; ++i) pending_[i].store(2, std::memory_order_relaxed);
  for (int i = 0; i < n_threads; ++i) {
    ranges[i].Reset(n_chunks_ * i / n_threads, n_chunks_ * (i + 1) / n_threads);
  }
}

void ExpertProduct::Run(ChunkRange* ranges, int thread, int n_threads, RowsDone done,
                        void* ctx) const {
  for (int64_t c0, c1; (c0 = ranges[thread].TakeFront(kRunChunks, &c1)) >= 0;) {
    RunChunks(c0, c1, done, ctx);
  }
  for (int j = 1; j < n_threads; ++j) {
    ChunkRange& other = ranges[(thread + j) % n_threads];
    for (int64_t c; (c = other.TakeBack()) >= 0;) RunChunks(c, c + 1, done, ctx);
  }
}

}  // namespace uf::kernels
