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

// Chunks [front, back) of one thread's run not yet claimed, in one word so the owner (from the
// front) and thieves (from the back) claim with one compare-and-swap each.
struct alignas(64) ChunkRange {
  std::atomic<uint64_t> front_back{0};

  void Reset(int64_t front, int64_t back) {
    front_back.store(static_cast<uint64_t>(front) | static_cast<uint64_t>(back) << 32,
                     std::memory_order_relaxed);
  }
  // The next chunk from the front, or -1 when none is left.
  int64_t TakeFront() {
    uint64_t v = front_back.load(std::memory_order_relaxed);
    while ((v & 0xFFFFFFFFu) < (v >> 32)) {
      if (front_back.compare_exchange_weak(v, v + 1, std::memory_order_relaxed)) {
        return static_cast<int64_t>(v & 0xFFFFFFFFu);
      }
    }
    return -1;
  }
  // The last chunk, or -1 when none is left.
  int64_t TakeBack() {
    uint64_t v = front_back.load(std::memory_order_relaxed);
    while ((v & 0xFFFFFFFFu) < (v >> 32)) {
      if (front_back.compare_exchange_weak(v, v - (uint64_t{1} << 32), std::memory_order_relaxed)) {
        return static_cast<int64_t>(v >> 32) - 1;
      }
    }
    return -1;
  }
};
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
  const Isa isa = ActiveIsa();
  const Matrix& w0 = *ws[0];
  const GgmlType act_type = ActivationType(w0.type());
  const int64_t cols = w0.cols();
  const KernelSet& ks0 = GetKernels(w0.type(), isa);
  const size_t act_row_bytes = ks0.ActRowBytes(cols);

  // Convert activations once for every matrix.
  const uint8_t* act;
  if (act_type == GgmlType::kF32) {
    act = reinterpret_cast<const uint8_t*>(x);
  } else {
    uint8_t* buf = Scratch(act_row_bytes * n_tokens);
    auto convert = [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) ks0.convert(x + t * cols, buf + t * act_row_bytes, cols);
    };
    if (pool != nullptr && pool->size() > 1 && n_tokens >= kParallelConvertTokens) {
      pool->ParallelFor(n_tokens, 1, convert);
    } else {
      convert(0, n_tokens);
    }
    act = buf;
  }

  uint64_t total_bytes = 0;
  GemmFn fns[16];
  const uint8_t* wptr[16];
  UF_CHECK(n_mats <= 16) << "MatMulMulti supports at most 16 matrices";
  for (int i = 0; i < n_mats; ++i) {
    const KernelSet& ks = GetKernels(ws[i]->type(), isa);
    UF_CHECK(ws[i]->cols() == cols && ks.convert == ks0.convert)
        << "MatMulMulti: matrices must share cols and activation type";
    // Tiles exist when the matrix was created under a tier that reads them; a tier selected
    // later for testing that lacks tile kernels, or reads another form of them, reads the GGUF
    // rows instead.
    const bool tiles = ws[i]->tiles() != nullptr && ks.gemm_tiles != nullptr &&
                       ws[i]->tile_variant() == TileVariant(ws[i]->type(), isa);
    fns[i] = tiles ? ks.gemm_tiles : ks.gemm;
    wptr[i] = tiles ? ws[i]->tiles() : ws[i]->data();
    total_bytes += ws[i]->bytes();
  }

  // The concatenated weight bytes are cut into chunks, and each thread starts on a contiguous
  // run of them (its own stream, as a static split would give it). A thread that finishes its
  // run takes chunks from the back of the others' runs: a static split left one core idle for
  // 8-10% of the matmul time of a 1B decode (one core slowed by the shared host, a worker woken
  // late), waiting at the end of every matmul.
  uint64_t chunk_bytes = kChunkBytes;
  for (int i = 0; i < n_mats; ++i) {
    chunk_bytes = std::max<uint64_t>(chunk_bytes, kRowAlign * ws[i]->row_bytes());
  }
  const int64_t n_chunks = static_cast<int64_t>((total_bytes + chunk_bytes - 1) / chunk_bytes);
  auto run_chunk = [&](int64_t c) {
    const uint64_t b0 = chunk_bytes * c, b1 = std::min(total_bytes, b0 + chunk_bytes);
    uint64_t base = 0;
    for (int i = 0; i < n_mats && base < b1; ++i) {
      const Matrix& m = *ws[i];
      const uint64_t end = base + m.bytes();
      if (b0 < end) {
        const int64_t r0 = RowAt(m, b0 > base ? b0 - base : 0);
        const int64_t r1 = RowAt(m, b1 - base);
        if (r0 < r1) {
          const GemmTask task{wptr[i],       m.row_bytes(), cols,  act,
                              act_row_bytes, n_tokens,      ys[i], m.rows()};
          fns[i](task, r0, r1);
        }
      }
      base = end;
    }
  };
  const int nt = pool != nullptr ? pool->size() : 1;
  if (nt == 1 || n_chunks == 1) {
    for (int64_t c = 0; c < n_chunks; ++c) run_chunk(c);
    return;
  }
  ChunkRange local[kLocalRanges];
  std::unique_ptr<ChunkRange[]> heap;
  ChunkRange* ranges = local;
  if (nt > kLocalRanges) {
    heap = std::make_unique<ChunkRange[]>(nt);
    ranges = heap.get();
  }
  for (int i = 0; i < nt; ++i) ranges[i].Reset(n_chunks * i / nt, n_chunks * (i + 1) / nt);
  pool->Run([&](int ti, int n) {
    for (int64_t c; (c = ranges[ti].TakeFront()) >= 0;) run_chunk(c);
    for (int j = 1; j < n; ++j) {
      ChunkRange& other = ranges[(ti + j) % n];
      for (int64_t c; (c = other.TakeBack()) >= 0;) run_chunk(c);
    }
  });
}

}  // namespace

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
