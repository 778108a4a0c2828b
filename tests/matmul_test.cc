#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/blocks.h"
#include "kernels/dispatch.h"
#include "kernels/packed.h"
#include "kernels/quant.h"

namespace uf::kernels {
namespace {

const GgmlType kTypes[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0,
                           GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kMXFP4};

// Every tier up to the one chosen at startup (this CPU's best, or UF_ISA's cap).
const std::vector<Isa>& AvailableIsas() {
  static const std::vector<Isa> isas = [] {
    std::vector<Isa> v;
    for (int i = 0; i <= static_cast<int>(ActiveIsa()); ++i) v.push_back(static_cast<Isa>(i));
    return v;
  }();
  return isas;
}

// Restores the ISA chosen at startup when a test ends.
class IsaGuard {
 public:
  IsaGuard() : saved_(AvailableIsas().back()) {}
  ~IsaGuard() { SetIsaForTesting(saved_); }

 private:
  Isa saved_;
};

std::vector<float> Gaussian(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

struct Weights {
  GgmlType type;
  int64_t rows, cols;
  std::vector<uint8_t> data;   // [rows][row_bytes]
  std::vector<float> decoded;  // [rows][cols]
  size_t row_bytes;
};

Weights MakeWeights(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  Weights w{type, rows, cols, {}, {}, KernelRowBytes(type, cols)};
  const auto x = Gaussian(rows * cols, rng);
  w.data.resize(rows * w.row_bytes);
  w.decoded.resize(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    QuantizeRow(type, x.data() + r * cols, w.data.data() + r * w.row_bytes, cols);
    DequantizeRow(type, w.data.data() + r * w.row_bytes, w.decoded.data() + r * cols, cols);
  }
  return w;
}

// The oracle: activations converted with the reference quantizer, then DotReference per output.
// Also returns, per output, the error scale of a float evaluation of that dot product.
void Reference(const Weights& w, const std::vector<float>& x, int64_t n_tokens,
               std::vector<float>* y, std::vector<double>* scale) {
  const GgmlType at = ActivationType(w.type);
  const size_t arb = KernelRowBytes(at, w.cols);
  std::vector<uint8_t> act(arb * n_tokens);
  std::vector<float> act_decoded(w.cols * n_tokens);
  for (int64_t t = 0; t < n_tokens; ++t) {
    QuantizeRow(at, x.data() + t * w.cols, act.data() + t * arb, w.cols);
    DequantizeRow(at, act.data() + t * arb, act_decoded.data() + t * w.cols, w.cols);
  }
  const int64_t bs = std::max<int64_t>(32, KernelBlockSize(w.type));
  y->assign(n_tokens * w.rows, 0.0f);
  scale->assign(n_tokens * w.rows, 0.0);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t r = 0; r < w.rows; ++r) {
      (*y)[t * w.rows + r] =
          DotReference(w.type, w.data.data() + r * w.row_bytes, act.data() + t * arb, w.cols);
      // SIMD and scalar kernels see the same integers and scales and differ only in the order
      // of float operations, each rounding by <= 2^-24 of the magnitudes involved. For the
      // K-quants those magnitudes include the d*scale*q and dmin*min parts separately, which can
      // exceed |w| (up to the block's largest |w|), hence |w| + block max.
      double s = 0.0;
      for (int64_t b = 0; b < w.cols; b += bs) {
        const int64_t e = std::min(w.cols, b + bs);
        float bmax = 0.0f;
        for (int64_t c = b; c < e; ++c) {
          bmax = std::fmax(bmax, std::fabs(w.decoded[r * w.cols + c]));
        }
        for (int64_t c = b; c < e; ++c) {
          s += (std::fabs(w.decoded[r * w.cols + c]) + bmax) *
               std::fabs(act_decoded[t * w.cols + c]);
        }
      }
      (*scale)[t * w.rows + r] = s;
    }
  }
}

// 1e-5 of the error scale: ~100 ulps, enough for any summation order over a few thousand terms,
// while one wrong block or nibble shifts a result by ~1e-2 of it.
constexpr double kRelTol = 1e-5;

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 const std::vector<double>& scale, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    if (!(std::fabs(double(got[i]) - want[i]) <= kRelTol * scale[i] + 1e-30)) {
      ++bad;
      ADD_FAILURE() << what << " output " << i << ": got " << got[i] << " want " << want[i]
                    << " (tol " << kRelTol * scale[i] << ")";
    }
  }
}

TEST(MatrixTest, CreateValidates) {
  std::vector<uint8_t> buf(1 << 16);
  EXPECT_TRUE(Matrix::Create(GgmlType::kQ4_0, buf.data(), 4, 64).ok());
  const auto not_block = Matrix::Create(GgmlType::kQ4_0, buf.data(), 4, 48);
  EXPECT_EQ(not_block.status().code(), StatusCode::kInvalidArgument);
  const auto not_k_block = Matrix::Create(GgmlType::kQ4_K, buf.data(), 4, 128);
  EXPECT_EQ(not_k_block.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Matrix::Create(GgmlType::kQ5_K, buf.data(), 4, 256).status().code(),
            StatusCode::kUnimplemented);
  EXPECT_EQ(Matrix::Create(GgmlType::kQ8_K, buf.data(), 4, 256).status().code(),
            StatusCode::kUnimplemented);  // activation-only type
  EXPECT_EQ(Matrix::Create(GgmlType::kF32, buf.data(), 0, 8).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Matrix::Create(GgmlType::kF32, nullptr, 4, 8).status().code(),
            StatusCode::kInvalidArgument);
  const auto m = Matrix::Create(GgmlType::kQ8_0, buf.data(), 3, 64);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->rows(), 3);
  EXPECT_EQ(m->cols(), 64);
  EXPECT_EQ(m->row_bytes(), 68u);
  EXPECT_EQ(m->bytes(), 3u * 68u);
}

// Stacked matrices (expert tensors) hold the same tiles as each created alone, in one buffer,
// and are validated as Create validates.
TEST(MatrixTest, CreateStackedMatchesCreate) {
  std::mt19937 rng(5);
  for (GgmlType type : kTypes) {
    const int64_t n = 3, rows = 40, cols = 512;  // rows not a tile multiple: padded tails
    const size_t stride = KernelRowBytes(type, cols) * rows;
    std::vector<uint8_t> data(stride * n);
    for (auto& b : data) b = static_cast<uint8_t>(rng() & 0x3F);  // finite f16/bf16/f32 values
    auto stacked = Matrix::CreateStacked(type, data.data(), stride, n, rows, cols);
    ASSERT_TRUE(stacked.ok()) << stacked.status().ToString();
    ASSERT_EQ(stacked->size(), static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const auto one = Matrix::Create(type, data.data() + i * stride, rows, cols);
      ASSERT_TRUE(one.ok());
      const Matrix& m = (*stacked)[i];
      EXPECT_EQ(m.data(), data.data() + i * stride);
      EXPECT_EQ(m.bytes(), one->bytes());
      ASSERT_EQ(m.tiles() != nullptr, one->tiles() != nullptr) << GgmlTypeName(type);
      if (m.tiles() == nullptr) continue;
      EXPECT_EQ(m.tile_variant(), one->tile_variant());
      EXPECT_EQ(std::memcmp(m.tiles(), one->tiles(), PackedBytes(type, rows, cols)), 0)
          << GgmlTypeName(type) << " matrix " << i;
      if (i > 0) EXPECT_GE(m.tiles(), (*stacked)[i - 1].tiles() + PackedBytes(type, rows, cols));
    }
  }
  std::vector<uint8_t> buf(1 << 16);
  EXPECT_EQ(Matrix::CreateStacked(GgmlType::kQ4_K, buf.data(), 0, 2, 4, 128).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Matrix::CreateStacked(GgmlType::kQ5_K, buf.data(), 0, 2, 4, 256).status().code(),
            StatusCode::kUnimplemented);
  EXPECT_EQ(Matrix::CreateStacked(GgmlType::kQ4_0, buf.data(), 0, 0, 4, 64).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(IsaTest, NamesAndCap) {
  EXPECT_EQ(IsaName(Isa::kScalar), "scalar");
  EXPECT_EQ(IsaName(Isa::kAvx2), "avx2");
  EXPECT_EQ(IsaName(Isa::kAvx512), "avx512");
  IsaGuard guard;
  SetIsaForTesting(Isa::kScalar);
  EXPECT_EQ(ActiveIsa(), Isa::kScalar);
}

// Every type x ISA x odd shapes against the scalar oracle.
TEST(MatMulTest, AllTypesIsasAndShapes) {
  IsaGuard guard;
  std::mt19937 rng(42);
  for (GgmlType type : kTypes) {
    const int64_t bs = std::max<int64_t>(32, KernelBlockSize(type));
    // Float types take any width: also widths that leave SIMD tails.
    std::vector<int64_t> widths = {bs, 3 * bs, 5 * bs};
    if (KernelBlockSize(type) == 1) widths.insert(widths.end(), {1, 7, 37, 101});
    for (int64_t rows : {1, 5, 16, 37}) {
      for (int64_t cols : widths) {
        const Weights w = MakeWeights(type, rows, cols, rng);
        // Each tier packs its own tiles (their form can differ: TileVariant).
        std::vector<Matrix> per_isa;
        for (Isa isa : AvailableIsas()) {
          SetIsaForTesting(isa);
          auto m = Matrix::Create(type, w.data.data(), rows, cols);
          ASSERT_TRUE(m.ok()) << m.status().ToString();
          per_isa.push_back(*std::move(m));
        }
        for (int64_t n_tokens : {1, 2, 3, 4, 5, 6, 8, 11, 17}) {
          const auto x = Gaussian(n_tokens * cols, rng);
          std::vector<float> want;
          std::vector<double> scale;
          Reference(w, x, n_tokens, &want, &scale);
          for (size_t i = 0; i < per_isa.size(); ++i) {
            const Isa isa = AvailableIsas()[i];
            const Matrix* m = &per_isa[i];
            SetIsaForTesting(isa);
            std::vector<float> got(n_tokens * rows, NAN);
            MatMul(*m, x.data(), n_tokens, got.data(), nullptr);
            ExpectClose(got, want, scale,
                        IsaName(isa) + " type " + std::to_string(static_cast<int>(type)) + " " +
                            std::to_string(rows) + "x" + std::to_string(cols) + " tokens " +
                            std::to_string(n_tokens));
          }
        }
      }
    }
  }
}

// MXFP4 from random bytes rather than the quantizer: every code (including -0, 8) equally often
// and scales spread over 2^-17..2^13, each tier against the scalar DotMxfp4 within kRelTol of the
// error scale (the tiers use the same integers and scales; only float summation order differs).
TEST(MatMulTest, Mxfp4RandomBlocksOnEveryTier) {
  IsaGuard guard;
  std::mt19937 rng(23);
  const int64_t rows = 21, n_tokens = 5;
  for (int64_t cols : {32, 64, 288, 1024}) {
    Weights w{GgmlType::kMXFP4, rows, cols, {}, {}, KernelRowBytes(GgmlType::kMXFP4, cols)};
    w.data.resize(rows * w.row_bytes);
    for (auto& b : w.data) b = static_cast<uint8_t>(rng());
    for (int64_t r = 0; r < rows; ++r) {
      auto* blocks = reinterpret_cast<BlockMxfp4*>(w.data.data() + r * w.row_bytes);
      for (int64_t b = 0; b < cols / 32; ++b) blocks[b].e = static_cast<uint8_t>(110 + rng() % 31);
    }
    w.decoded.resize(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(w.type, w.data.data() + r * w.row_bytes, w.decoded.data() + r * cols, cols);
    }
    const auto x = Gaussian(n_tokens * cols, rng);
    std::vector<float> want;
    std::vector<double> scale;
    Reference(w, x, n_tokens, &want, &scale);
    for (Isa isa : AvailableIsas()) {
      SetIsaForTesting(isa);
      auto m = Matrix::Create(w.type, w.data.data(), rows, cols);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      for (int64_t nt : {int64_t{1}, n_tokens}) {
        std::vector<float> got(nt * rows, NAN);
        MatMul(*m, x.data(), nt, got.data(), nullptr);
        const std::vector<float> w_nt(want.begin(), want.begin() + nt * rows);
        const std::vector<double> s_nt(scale.begin(), scale.begin() + nt * rows);
        ExpectClose(got, w_nt, s_nt,
                    "mxfp4 " + IsaName(isa) + " cols " + std::to_string(cols) + " tokens " +
                        std::to_string(nt));
      }
    }
  }
}

// Thread splits: every row written exactly once, whatever the thread count.
TEST(MatMulTest, ThreadedMatchesReference) {
  IsaGuard guard;
  std::mt19937 rng(7);
  for (int threads : {2, 3, 5}) {
    ThreadPool pool(threads);
    for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ6_K, GgmlType::kF16}) {
      const int64_t rows = 203, cols = 512;
      const Weights w = MakeWeights(type, rows, cols, rng);
      auto m = Matrix::Create(type, w.data.data(), rows, cols);
      ASSERT_TRUE(m.ok());
      for (int64_t n_tokens : {1, 4, 9}) {
        const auto x = Gaussian(n_tokens * cols, rng);
        std::vector<float> want;
        std::vector<double> scale;
        Reference(w, x, n_tokens, &want, &scale);
        for (Isa isa : AvailableIsas()) {
          SetIsaForTesting(isa);
          std::vector<float> got(n_tokens * rows, NAN);
          MatMul(*m, x.data(), n_tokens, got.data(), &pool);
          ExpectClose(got, want, scale, IsaName(isa) + " threads " + std::to_string(threads));
        }
      }
    }
  }
}

// MatMulMulti over matrices ms (made from ws, sharing cols) against the scalar oracle, each
// output starting as NaN so a row no thread wrote fails.
void ExpectMultiMatchesReference(const std::vector<Weights>& ws, const std::vector<Matrix>& ms,
                                 const std::vector<float>& x, int64_t n_tokens, ThreadPool* pool,
                                 const std::string& what) {
  std::vector<std::vector<float>> outs(ws.size());
  std::vector<float*> ys;
  std::vector<const Matrix*> mps;
  for (size_t i = 0; i < ws.size(); ++i) {
    outs[i].assign(n_tokens * ws[i].rows, NAN);
    ys.push_back(outs[i].data());
    mps.push_back(&ms[i]);
  }
  MatMulMulti(mps, x.data(), n_tokens, ys, pool);
  for (size_t i = 0; i < ws.size(); ++i) {
    std::vector<float> want;
    std::vector<double> scale;
    Reference(ws[i], x, n_tokens, &want, &scale);
    ExpectClose(outs[i], want, scale, what + " matrix " + std::to_string(i));
  }
}

// Q4_K and Q6_K share Q8_K activations, as Q/K/V do in Q4_K_M files.
TEST(MatMulTest, MultiMatchesSeparateCalls) {
  IsaGuard guard;
  std::mt19937 rng(9);
  ThreadPool pool(3);
  const int64_t cols = 512;
  std::vector<Weights> ws;
  ws.push_back(MakeWeights(GgmlType::kQ4_K, 64, cols, rng));
  ws.push_back(MakeWeights(GgmlType::kQ6_K, 19, cols, rng));
  ws.push_back(MakeWeights(GgmlType::kQ4_K, 33, cols, rng));
  std::vector<Matrix> ms;
  for (const auto& w : ws) ms.push_back(*Matrix::Create(w.type, w.data.data(), w.rows, cols));
  for (int64_t n_tokens : {1, 6}) {
    const auto x = Gaussian(n_tokens * cols, rng);
    for (Isa isa : AvailableIsas()) {
      SetIsaForTesting(isa);
      ExpectMultiMatchesReference(ws, ms, x, n_tokens, &pool, IsaName(isa) + " multi");
    }
  }
}

// Matrices of many work chunks (64 KiB, or 16 rows where those are larger), claimed by threads
// that run out of their own from the others: every row of every matrix written exactly once,
// for chunk edges inside and between matrices and rows larger than a chunk.
TEST(MatMulTest, ManyChunksAcrossMatricesAndThreads) {
  IsaGuard guard;
  std::mt19937 rng(13);
  const int64_t cols = 1024;
  std::vector<Weights> ws;
  ws.push_back(MakeWeights(GgmlType::kQ4_K, 700, cols, rng));  // 6.2 chunks
  ws.push_back(MakeWeights(GgmlType::kQ6_K, 333, cols, rng));
  ws.push_back(MakeWeights(GgmlType::kQ4_K, 1001, cols, rng));
  std::vector<Matrix> ms;
  for (const auto& w : ws) ms.push_back(*Matrix::Create(w.type, w.data.data(), w.rows, cols));
  const Weights wide = MakeWeights(GgmlType::kF32, 150, 4096, rng);  // 16 rows = 256 KiB
  const Matrix mwide = *Matrix::Create(wide.type, wide.data.data(), wide.rows, wide.cols);
  for (int threads : {2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n_tokens : {1, 2, 5}) {
      const auto x = Gaussian(n_tokens * cols, rng);
      const auto xw = Gaussian(n_tokens * wide.cols, rng);
      for (Isa isa : AvailableIsas()) {
        SetIsaForTesting(isa);
        const std::string what = IsaName(isa) + " threads " + std::to_string(threads) + " tokens " +
                                 std::to_string(n_tokens);
        ExpectMultiMatchesReference(ws, ms, x, n_tokens, &pool, what);
        std::vector<float> got(n_tokens * wide.rows, NAN), want;
        std::vector<double> scale;
        MatMul(mwide, xw.data(), n_tokens, got.data(), &pool);
        Reference(wide, xw, n_tokens, &want, &scale);
        ExpectClose(got, want, scale, what + " f32");
      }
    }
  }
}

// Larger shapes where blocked/batched kernels take their fast paths (tiles of tokens and rows).
TEST(MatMulTest, LargeBatched) {
  IsaGuard guard;
  std::mt19937 rng(11);
  ThreadPool pool(2);
  for (GgmlType type : kTypes) {
    const int64_t rows = 72, cols = 1024, n_tokens = 33;
    const Weights w = MakeWeights(type, rows, cols, rng);
    auto m = Matrix::Create(type, w.data.data(), rows, cols);
    ASSERT_TRUE(m.ok());
    const auto x = Gaussian(n_tokens * cols, rng);
    std::vector<float> want;
    std::vector<double> scale;
    Reference(w, x, n_tokens, &want, &scale);
    for (Isa isa : AvailableIsas()) {
      SetIsaForTesting(isa);
      std::vector<float> got(n_tokens * rows, NAN);
      MatMul(*m, x.data(), n_tokens, got.data(), &pool);
      ExpectClose(got, want, scale,
                  IsaName(isa) + " type " + std::to_string(static_cast<int>(type)));
    }
  }
}

// A matrix created under one tier and multiplied under another (tests switch tiers): created
// under scalar it has no tiles and every tier reads its GGUF rows; where two tiers read different
// tile forms (Q6_K, Q8_0: AVX2 against AVX-512) the rows are read too, never the other form.
// Every ordered pair of available tiers, every type. (On a CPU without AVX-512 no pair has two
// tile forms.)
TEST(MatMulTest, MatrixCreatedUnderAnotherTierRunsOnEveryTier) {
  IsaGuard guard;
  std::mt19937 rng(17);
  for (GgmlType type : kTypes) {
    const int64_t rows = 37, cols = 512, n_tokens = 3;
    const Weights w = MakeWeights(type, rows, cols, rng);
    const auto x = Gaussian(n_tokens * cols, rng);
    std::vector<float> want;
    std::vector<double> scale;
    Reference(w, x, n_tokens, &want, &scale);
    for (Isa packed_for : AvailableIsas()) {
      SetIsaForTesting(packed_for);
      auto m = Matrix::Create(type, w.data.data(), rows, cols);
      ASSERT_TRUE(m.ok());
      if (packed_for == Isa::kScalar) {
        EXPECT_EQ(m->tiles(), nullptr);
      }
      EXPECT_EQ(m->tile_variant(), m->tiles() ? TileVariant(type, packed_for) : 0);
      for (Isa isa : AvailableIsas()) {
        SetIsaForTesting(isa);
        std::vector<float> got(n_tokens * rows, NAN);
        MatMul(*m, x.data(), n_tokens, got.data(), nullptr);
        ExpectClose(got, want, scale,
                    "packed for " + IsaName(packed_for) + ", run on " + IsaName(isa) + " type " +
                        std::to_string(static_cast<int>(type)));
      }
    }
  }
}

// The float tiers' activation formats: values rounded as the reference rounds them, stored
// as f32, or (AVX-512 BF16) as the bf16 bits.
void ReferenceF16AsF32(const float* x, void* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) static_cast<float*>(dst)[i] = Fp16ToFp32(Fp32ToFp16(x[i]));
}
void ReferenceBf16AsF32(const float* x, void* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) static_cast<float*>(dst)[i] = Bf16ToFp32(Fp32ToBf16(x[i]));
}
void ReferenceBf16(const float* x, void* dst, int64_t n) {
  QuantizeRow(GgmlType::kBF16, x, dst, n);
}

// The SIMD tiers' activation converters must produce exactly the bytes of the portable ones
// (which derive from the reference quantizers), or results would drift from the reference.
TEST(ConvertTest, SimdConvertersMatchPortableBitForBit) {
  std::mt19937 rng(17);
  const int64_t n = 1024;
  std::vector<float> x = Gaussian(n, rng);
  // Hard cases: an all-zero block, a block whose extreme is negative and repeated with both
  // signs, exact ties after scaling, subnormals and huge values.
  for (int i = 0; i < 256; ++i) x[i] = 0.0f;
  x[300] = -5.0f;
  x[301] = 5.0f;
  for (int i = 512; i < 544; ++i) x[i] = (i - 528) * 0.5f;
  x[600] = 1e-40f;
  x[700] = 3e30f;
  struct Case {
    GgmlType type;
    ConvertFn portable;
    size_t bytes;
  };
  const Case cases[] = {
      {GgmlType::kQ4_0, ConvertActQ8_0, n / 32 * sizeof(ActQ8_0)},
      {GgmlType::kQ4_K, ConvertActQ8_K, n / 256 * sizeof(ActQ8_K)},
      {GgmlType::kF16, ReferenceF16AsF32, n * sizeof(float)},
      {GgmlType::kBF16, nullptr, 0},  // format depends on the tier
  };
  for (Isa isa : AvailableIsas()) {
    if (isa == Isa::kScalar) continue;
    for (Case c : cases) {
      const KernelSet& ks = GetKernels(c.type, isa);
      if (c.type == GgmlType::kBF16) {
        const bool bf16 = ks.act_block_bytes == sizeof(uint16_t);
        c.portable = bf16 ? ReferenceBf16 : ReferenceBf16AsF32;
        c.bytes = n * ks.act_block_bytes;
      }
      ASSERT_EQ(ks.ActRowBytes(n), c.bytes) << IsaName(isa);
      std::vector<uint8_t> want(c.bytes), got(c.bytes, 0xAA);
      c.portable(x.data(), want.data(), n);
      ks.convert(x.data(), got.data(), n);
      EXPECT_EQ(want, got) << IsaName(isa) << " type " << static_cast<int>(c.type);
      EXPECT_NE(ks.gemm_tiles, nullptr) << IsaName(isa);
    }
  }
}

// A partial last tile is padded with zero rows, which must produce zeros (not NaN from
// uninitialised scales) even though MatMul never stores them.
TEST(PackTest, PaddingRowsOfTheLastTileAreZero) {
  std::mt19937 rng(19);
  for (GgmlType type : kTypes) {
    const Isa best = AvailableIsas().back();
    // Types whose kernels at a SIMD tier read GGUF rows (MXFP4 on AVX2) have nothing to pad.
    if (best != Isa::kScalar && GetKernels(type, best).gemm_tiles == nullptr) continue;
    const int64_t rows = 19, cols = 512;
    const Weights w = MakeWeights(type, rows, cols, rng);
    std::vector<uint8_t> packed(PackedBytes(type, rows, cols));
    ASSERT_EQ(packed.size(), 32 * w.row_bytes);  // same bytes as 32 GGUF rows
    PackMatrix(type, best, w.data.data(), rows, cols, packed.data());
    const KernelSet& ks = GetKernels(type, best);
    if (ks.gemm_tiles == nullptr) GTEST_SKIP() << "no tile kernels on this CPU";
    const auto x = Gaussian(cols, rng);
    std::vector<uint8_t> act(ks.ActRowBytes(cols));
    ks.convert(x.data(), act.data(), cols);
    std::vector<float> y(32, NAN);
    const GemmTask task{packed.data(), w.row_bytes, cols, act.data(), act.size(), 1, y.data(), 32};
    ks.gemm_tiles(task, 0, 32);
    for (int64_t r = rows; r < 32; ++r) EXPECT_EQ(y[r], 0.0f) << "padding row " << r;
  }
}

}  // namespace
}  // namespace uf::kernels
