#include "kernels/matmul.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "base/check.h"
#include "kernels/blocks.h"
#include "kernels/dispatch.h"
#include "kernels/huge_alloc.h"
#include "kernels/packed.h"
#include "kernels/quant.h"

namespace uf::kernels {

class MatrixAccess {
 public:
  static Matrix Make(GgmlType type, const void* data, int64_t rows, int64_t cols) {
    Matrix m;
    m.type_ = type;
    m.rows_ = rows;
    m.cols_ = cols;
    m.row_bytes_ = KernelRowBytes(type, cols);
    m.bytes_ = m.row_bytes_ * static_cast<size_t>(rows);
    m.data_ = static_cast<const uint8_t*>(data);
    return m;
  }
  // Costs one pass over the weights and a heap copy of them (the GGUF bytes stay mapped but
  // are no longer read by matmuls). The copy lives in 2 MiB pages: streaming 4 KiB pages (as
  // mmapped files are) ran at 55-70% of the read bandwidth for F16/BF16, 2 MiB pages at ~96%.
  static void Pack(Matrix* m) {
    HugeBuffer buf = AllocateHuge(PackedBytes(m->type_, m->rows_, m->cols_));
    const Isa isa = ActiveIsa();
    PackMatrix(m->type_, isa, m->data_, m->rows_, m->cols_, buf.get());
    m->tile_variant_ = TileVariant(m->type_, isa);
    m->tiles_ = buf.get();
    m->repacked_ = std::shared_ptr<uint8_t[]>(std::move(buf));
  }
  // Packs each of ms into its slice of one buffer (slices 64-byte aligned) that they share.
  static void PackStacked(std::vector<Matrix>* ms) {
    if (ms->empty()) return;
    const Matrix& m0 = ms->front();
    const size_t slice = (PackedBytes(m0.type_, m0.rows_, m0.cols_) + 63) / 64 * 64;
    HugeBuffer buf = AllocateHuge(slice * ms->size());
    const Isa isa = ActiveIsa();
    std::shared_ptr<uint8_t[]> owner(std::move(buf));
    for (size_t i = 0; i < ms->size(); ++i) {
      Matrix& m = (*ms)[i];
      uint8_t* dst = owner.get() + i * slice;
      PackMatrix(m.type_, isa, m.data_, m.rows_, m.cols_, dst);
      m.tile_variant_ = TileVariant(m.type_, isa);
      m.tiles_ = dst;
      m.repacked_ = owner;
    }
  }
};

namespace {

// Row ranges handed to threads are multiples of this, so no two threads write into the same
// 64-byte line of an f32 output row.
constexpr int64_t kRowAlign = 16;

// Tokens converted on the calling thread below this count; above it the conversion is split
// across the pool (prefill of long prompts).
constexpr int64_t kParallelConvertTokens = 8;

// The unit of work a thread claims (at least 16 rows): big enough that a claim (one atomic on a
// line the owner mostly keeps) costs nothing beside streaming it, small enough that a thread
// finishing early has some left to take. A 1B model's 2048x2048 Q4_0 matrix is 36 chunks.
constexpr uint64_t kChunkBytes = 64 * 1024;

// Ranges kept on the stack up to this many threads.
constexpr int kLocalRanges = 16;

struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};

// The calling thread's activation scratch, grown on demand and reused across calls.
uint8_t* Scratch(size_t bytes) {
  thread_local std::unique_ptr<uint8_t, AlignedFree> buf;
  thread_local size_t capacity = 0;
  if (bytes > capacity) {
    capacity = (bytes + 4095) & ~size_t{4095};
    buf.reset(static_cast<uint8_t*>(std::aligned_alloc(64, capacity)));
    UF_CHECK(buf != nullptr) << "out of memory for " << capacity << " bytes of activations";
  }
  return buf.get();
}

// First row at or after byte offset `off` of the matrix, aligned down to kRowAlign. Adjacent
// threads evaluate it at the same offset, so their ranges neither overlap nor leave gaps.
int64_t RowAt(const Matrix& m, uint64_t off) {
  if (off >= m.bytes()) return m.rows();
  const int64_t r = static_cast<int64_t>(off / m.row_bytes()) / kRowAlign * kRowAlign;
  return std::min(r, m.rows());
}

void RunMatMul(const Matrix* const* ws, float* const* ys, int n_mats, const float* x,
               int64_t n_tokens, ThreadPool* pool) {
  if (n_tokens <= 0 || n_mats == 0) return;
  MatMulTask task;
  task.Init(ws, ys, n_mats);
  // Convert activations once for every matrix.
  const uint8_t* act = reinterpret_cast<const uint8_t*>(x);
  if (task.converts()) {
    uint8_t* buf = Scratch(task.act_row_bytes() * n_tokens);
    if (pool != nullptr && pool->size() > 1 && n_tokens >= kParallelConvertTokens) {
      pool->ParallelFor(n_tokens, 1, [&](int64_t t0, int64_t t1) { task.Convert(x, t0, t1, buf); });
    } else {
      task.Convert(x, 0, n_tokens, buf);
    }
    act = buf;
  }
  const int nt = pool != nullptr ? pool->size() : 1;
  if (nt == 1) {
    task.RunAll(act, n_tokens);
    return;
  }
  ChunkRange local[kLocalRanges];
  std::unique_ptr<ChunkRange[]> heap;
  ChunkRange* ranges = local;
  if (nt > kLocalRanges) {
    heap = std::make_unique<ChunkRange[]>(nt);
    ranges = heap.get();
  }
  task.Reset(ranges, nt);
  struct Args {
    const MatMulTask* task;
    const uint8_t* act;
    int64_t n_tokens;
    ChunkRange* ranges;
  } args{&task, act, n_tokens, ranges};
  // Captures one pointer, so std::function stores it without allocating.
  pool->Run([a = &args](int ti, int n) { a->task->Run(a->act, a->n_tokens, a->ranges, ti, n); });
}

}  // namespace

int64_t ChunkRange::TakeFront() {
  uint64_t v = front_back.load(std::memory_order_relaxed);
  while ((v & 0xFFFFFFFFu) < (v >> 32)) {
    if (front_back.compare_exchange_weak(v, v + 1, std::memory_order_relaxed)) {
      return static_cast<int64_t>(v & 0xFFFFFFFFu);
    }
  }
  return -1;
}

int64_t ChunkRange::TakeBack() {
  uint64_t v = front_back.load(std::memory_order_relaxed);
  while ((v & 0xFFFFFFFFu) < (v >> 32)) {
    if (front_back.compare_exchange_weak(v, v - (uint64_t{1} << 32), std::memory_order_relaxed)) {
      return static_cast<int64_t>(v >> 32) - 1;
    }
  }
  return -1;
}

void MatMulTask::Init(const Matrix* const* ws, float* const* ys, int n_mats, bool paired) {
  UF_CHECK(n_mats >= 1 && n_mats <= kMaxMats) << "MatMulTask: 1 to 16 matrices";
  isa_ = ActiveIsa();
  n_mats_ = n_mats;
  paired_ = paired;
  const Matrix& w0 = *ws[0];
  const KernelSet& ks0 = GetKernels(w0.type(), isa_);
  act_f32_ = ActivationType(w0.type()) == GgmlType::kF32;
  cols_ = w0.cols();
  act_row_bytes_ = ks0.ActRowBytes(cols_);
  convert_ = ks0.convert;
  total_bytes_ = 0;
  uint64_t max_row_bytes = 0;
  for (int i = 0; i < n_mats; ++i) {
    const Matrix& m = *ws[i];
    const KernelSet& ks = GetKernels(m.type(), isa_);
    UF_CHECK(m.cols() == cols_ && ks.convert == ks0.convert)
        << "MatMulMulti: matrices must share cols and activation type";
    UF_CHECK(!paired || (m.type() == w0.type() && m.rows() == w0.rows()))
        << "MatMulTask: paired matrices must share type and rows";
    // Tiles exist when the matrix was created under a tier that reads them; a tier selected
    // later for testing that lacks tile kernels, or reads another form of them, reads the GGUF
    // rows instead.
    const bool tiles = m.tiles() != nullptr && ks.gemm_tiles != nullptr &&
                       m.tile_variant() == TileVariant(m.type(), isa_);
    ws_[i] = &m;
    ys_[i] = ys[i];
    fns_[i] = tiles ? ks.gemm_tiles : ks.gemm;
    wptr_[i] = tiles ? m.tiles() : m.data();
    total_bytes_ += m.bytes();
    max_row_bytes = std::max<uint64_t>(max_row_bytes, m.row_bytes());
  }
  if (paired) {
    const uint64_t group_bytes = w0.row_bytes() * static_cast<uint64_t>(n_mats);
    chunk_rows_ = std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / group_bytes));
    chunk_rows_ = (chunk_rows_ + kRowAlign - 1) / kRowAlign * kRowAlign;
    n_chunks_ = (w0.rows() + chunk_rows_ - 1) / chunk_rows_;
  } else {
    chunk_bytes_ = std::max<uint64_t>(kChunkBytes, kRowAlign * max_row_bytes);
    n_chunks_ = static_cast<int64_t>((total_bytes_ + chunk_bytes_ - 1) / chunk_bytes_);
  }
}

void MatMulTask::Convert(const float* x, int64_t t0, int64_t t1, uint8_t* act) const {
  for (int64_t t = t0; t < t1; ++t) convert_(x + t * cols_, act + t * act_row_bytes_, cols_);
}

void MatMulTask::RunChunk(int64_t c, const uint8_t* act, int64_t n_tokens, RowsDone done,
                          void* ctx) const {
  const size_t act_row = act_row_bytes_;
  if (paired_) {
    const int64_t rows = ws_[0]->rows();
    const int64_t r0 = c * chunk_rows_, r1 = std::min(rows, r0 + chunk_rows_);
    for (int i = 0; i < n_mats_; ++i) {
      const GemmTask task{wptr_[i], ws_[i]->row_bytes(), cols_, act, act_row, n_tokens, ys_[i],
                          rows};
      fns_[i](task, r0, r1);
    }
    if (done != nullptr) done(ctx, r0, r1);
    return;
  }
  const uint64_t b0 = chunk_bytes_ * c, b1 = std::min(total_bytes_, b0 + chunk_bytes_);
  uint64_t base = 0;
  for (int i = 0; i < n_mats_ && base < b1; ++i) {
    const Matrix& m = *ws_[i];
    const uint64_t end = base + m.bytes();
    if (b0 < end) {
      const int64_t r0 = RowAt(m, b0 > base ? b0 - base : 0);
      const int64_t r1 = RowAt(m, b1 - base);
      if (r0 < r1) {
        const GemmTask task{wptr_[i], m.row_bytes(), cols_,  act,
                            act_row,  n_tokens,      ys_[i], m.rows()};
        fns_[i](task, r0, r1);
      }
    }
    base = end;
  }
}

void MatMulTask::Reset(ChunkRange* ranges, int n_threads) const {
  for (int i = 0; i < n_threads; ++i) {
    ranges[i].Reset(n_chunks_ * i / n_threads, n_chunks_ * (i + 1) / n_threads);
  }
}

void MatMulTask::Run(const uint8_t* act, int64_t n_tokens, ChunkRange* ranges, int thread,
                     int n_threads, RowsDone done, void* ctx) const {
  for (int64_t c; (c = ranges[thread].TakeFront()) >= 0;) RunChunk(c, act, n_tokens, done, ctx);
  for (int j = 1; j < n_threads; ++j) {
    ChunkRange& other = ranges[(thread + j) % n_threads];
    for (int64_t c; (c = other.TakeBack()) >= 0;) RunChunk(c, act, n_tokens, done, ctx);
  }
}

void MatMulTask::RunAll(const uint8_t* act, int64_t n_tokens) const {
  for (int64_t c = 0; c < n_chunks_; ++c) RunChunk(c, act, n_tokens, nullptr, nullptr);
}

StatusOr<Matrix> Matrix::Create(GgmlType type, const void* data, int64_t rows, int64_t cols) {
  if (GetKernels(type, Isa::kScalar).gemm == nullptr) {
    return UnimplementedError("matmul: weight type " + std::string(GgmlTypeName(type)) +
                              " is not supported");
  }
  if (rows <= 0 || cols <= 0) {
    return InvalidArgumentError("matmul: bad matrix shape " + std::to_string(rows) + "x" +
                                std::to_string(cols));
  }
  const int64_t bs = KernelBlockSize(type);
  if (cols % bs != 0) {
    return InvalidArgumentError("matmul: " + std::to_string(cols) +
                                " columns is not a multiple of the block size " +
                                std::to_string(bs));
  }
  if (data == nullptr) return InvalidArgumentError("matmul: null weight data");
  Matrix m = MatrixAccess::Make(type, data, rows, cols);
  if (GetKernels(type, ActiveIsa()).gemm_tiles != nullptr) MatrixAccess::Pack(&m);
  return m;
}

StatusOr<std::vector<Matrix>> Matrix::CreateStacked(GgmlType type, const void* data,
                                                    size_t stride, int64_t n, int64_t rows,
                                                    int64_t cols) {
  if (n <= 0) return InvalidArgumentError("matmul: no matrices to stack");
  if (data == nullptr) return InvalidArgumentError("matmul: null weight data");
  std::vector<Matrix> out;
  out.reserve(n);
  const uint8_t* p = static_cast<const uint8_t*>(data);
  // The checks of Create, without its per-matrix copy.
  if (GetKernels(type, Isa::kScalar).gemm == nullptr) {
    return UnimplementedError("matmul: weight type " + std::string(GgmlTypeName(type)) +
                              " is not supported");
  }
  if (rows <= 0 || cols <= 0 || cols % KernelBlockSize(type) != 0) {
    return InvalidArgumentError("matmul: bad matrix shape " + std::to_string(rows) + "x" +
                                std::to_string(cols));
  }
  for (int64_t i = 0; i < n; ++i) out.push_back(MatrixAccess::Make(type, p + i * stride, rows, cols));
  if (GetKernels(type, ActiveIsa()).gemm_tiles != nullptr) MatrixAccess::PackStacked(&out);
  return out;
}

void MatMul(const Matrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool* pool) {
  const Matrix* ws[1] = {&w};
  float* ys[1] = {y};
  RunMatMul(ws, ys, 1, x, n_tokens, pool);
}

void MatMulMulti(const std::vector<const Matrix*>& ws, const float* x, int64_t n_tokens,
                 const std::vector<float*>& ys, ThreadPool* pool) {
  UF_CHECK_EQ(ws.size(), ys.size());
  RunMatMul(ws.data(), ys.data(), static_cast<int>(ws.size()), x, n_tokens, pool);
}

}  // namespace uf::kernels
