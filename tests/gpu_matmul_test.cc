// The tiled GEMM of wide batches (gemm_tiled.glsl, Kernels::AddMatMul): its products for F16,
// BF16, Q8_0, Q4_0, Q4_K and Q6_K weights against a double-precision reference of the same f16
// operands (F16: the weights and the f16-rounded activations; quantized: each weight and Q8_0 /
// Q8_K activation value as the CPU dequantizes it, rounded to f16, as the kernel converts them),
// with the bias, the residual add, an output offset and stride, and partial blocks of rows and
// tokens; where Gemm takes it and where it keeps the token-tiled kernels (whose bits it then must
// leave alone).
//
// Lavapipe has no matrix units, so CI runs the plain kernel (kTiled): the shared-memory blocks,
// the copies, the edges and the stores, everything but the fragment calls of the coopmat kernel.
// The coopmat cases run where the device lists DeviceInfo::coopmat (a GPU session's
// tools/gpu_check.sh carries this test) and skip, saying so, elsewhere.
#include "gpu_kernels_fixture.h"

namespace uf::gpu {
namespace {

// v rounded to f16 and back.
std::vector<float> RoundedF16(std::vector<float> v) {
  for (float& x : v) x = kernels::Fp16ToFp32(kernels::Fp32ToFp16(x));
  return v;
}

// The values the tiled GEMM multiplies for weights (or activations) v stored as `type`: the
// type's values (Q8_0 / Q4_0: q x d exactly) rounded to f16.
std::vector<float> Operands(GgmlType type, const std::vector<float>& v) {
  if (type == GgmlType::kF16) return RoundedF16(v);
  if (type == GgmlType::kBF16) {  // rounded to bf16 (as stored, as quantize_pairs rounds), then f16
    std::vector<float> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = kernels::Bf16ToFp32(kernels::Fp32ToBf16(v[i]));
    return RoundedF16(b);
  }
  std::vector<uint8_t> q(kernels::KernelRowBytes(type, static_cast<int64_t>(v.size())));
  kernels::QuantizeRow(type, v.data(), q.data(), static_cast<int64_t>(v.size()));
  std::vector<float> d(v.size());
  kernels::DequantizeRow(type, q.data(), d.data(), static_cast<int64_t>(v.size()));
  return RoundedF16(d);
}

constexpr GgmlType kTiledTypes[] = {GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0,
                                    GgmlType::kQ4_0, GgmlType::kQ4_K, GgmlType::kQ6_K};

class GpuMatMulTest : public GpuKernelsTest {
 protected:
  // Kernels with the tiled GEMM of `mode`, or null (and a reason) where the device cannot run it.
  std::unique_ptr<Kernels> WithMatMul(MatMul mode, std::string* skip) {
    if (mode == MatMul::kCoopMat && !ctx_->info().coopmat) {
      *skip = ctx_->info().name +
              " has no matrix units the coopmat GEMM can use "
              "(DeviceInfo::coopmat); its plain twin ran";
      return nullptr;
    }
    auto k = Kernels::Create(ctx_, GemvVariant::kBasic, 32);
    EXPECT_TRUE(k.ok()) << k.status().ToString();
    auto out = std::make_unique<Kernels>(*k);
    EXPECT_TRUE(out->AddMatMul(ctx_, mode).ok());
    EXPECT_EQ(out->matmul(), mode);
    return out;
  }

  // y = W x over n tokens by the tiled GEMM (a y_stride past the rows and a y_off, the rows
  // between left as they were), plain, with a bias or added to y, against the reference. The
  // bound is that of any order of f32 additions: 2 (cols + 1) 2^-24 sum |w x| (+ |y| or |b|).
  void CheckProducts(MatMul mode) {
    std::string skip;
    std::unique_ptr<Kernels> k = WithMatMul(mode, &skip);
    if (k == nullptr) GTEST_SKIP() << skip;
    struct Shape {
      int64_t rows, cols, n;
    };
    // Partial blocks of rows (37, 70, 100, 33) and of tokens (17, 65, 100, 40: 64-token blocks),
    // one whole block, a single 32-column step and up to 24 of them.
    for (const Shape& s : {Shape{37, 64, 16}, Shape{32, 32, 64}, Shape{100, 256, 17},
                           Shape{70, 128, 65}, Shape{16, 512, 100}, Shape{33, 768, 40}}) {
      SCOPED_TRACE(std::to_string(s.rows) + " x " + std::to_string(s.cols) + ", " +
                   std::to_string(s.n) + " tokens");
      const std::vector<float> wf = Random(s.rows * s.cols, 31, 0.5f);
      const std::vector<float> x = Random(s.n * s.cols, 32);
      const std::vector<float> bias = Random(s.rows, 33), y0 = Random(s.n * (s.rows + 3) + 5, 34);
      for (GgmlType type : kTiledTypes) {
        // K-quants are blocks of 256 (every step of each, sub-blocks 0-7, across blocks at 512
        // and 768 columns).
        if (TakesQ8KActivation(type) && s.cols % 256 != 0) continue;
        SCOPED_TRACE(GgmlTypeName(type));
        std::vector<uint8_t> data;
        auto gm = UploadMatrix(ctx_, Quantized(type, wf, s.rows, s.cols, &data));
        ASSERT_TRUE(gm.ok());
        ASSERT_TRUE(k->UsesMatMul(*gm, s.n));
        const std::vector<float> wr = Operands(type, wf);
        const std::vector<float> xr = Operands(kernels::ActivationType(type), x);
        Buffer xb = Floats(x), xq = Empty(ActBytes(s.n * s.cols)), bb = Floats(bias);
        for (int variant = 0; variant < 3; ++variant) {  // plain, bias, accumulate
          SCOPED_TRACE(variant == 0 ? "plain" : variant == 1 ? "bias" : "accumulate");
          const uint32_t y_off = 5;
          const int64_t y_stride = s.rows + 3;
          Buffer y = Floats(y0);
          Recorder rec(ctx_);
          ASSERT_TRUE(QuantizeFor(&rec, type, xb, s.n * s.cols, xq));
          k->Gemm(&rec, *gm, xq, s.n, y, y_off, y_stride, variant == 2,
                  variant == 1 ? &bb : nullptr);
          ASSERT_TRUE(rec.Finish().ok());
          ASSERT_TRUE(rec.Run().ok());
          const std::vector<float> got = Read(y, y0.size());
          std::vector<bool> written(y0.size(), false);
          int64_t over = 0;
          double worst = 0.0;
          for (int64_t t = 0; t < s.n; ++t) {
            for (int64_t r = 0; r < s.rows; ++r) {
              double sum = 0.0, mag = 0.0;
              for (int64_t c = 0; c < s.cols; ++c) {
                const double p = static_cast<double>(wr[r * s.cols + c]) * xr[t * s.cols + c];
                sum += p;
                mag += std::fabs(p);
              }
              const size_t i = y_off + t * y_stride + r;
              written[i] = true;
              const double extra = variant == 1 ? bias[r] : variant == 2 ? y0[i] : 0.0;
              const double want = sum + extra;
              const double bound =
                  2.0 * (s.cols + 1) * std::ldexp(1.0, -24) * (mag + std::fabs(extra)) + 1e-30;
              const double err = std::fabs(got[i] - want);
              worst = std::max(worst, err / bound);
              over += err > bound;
            }
          }
          EXPECT_EQ(over, 0) << "products past the rounding bound; worst " << worst << " x bound";
          std::printf("[%s gemm] %s %lldx%lld, %lld tokens, %s: worst error %.3f of the bound\n",
                      MatMulName(mode), std::string(GgmlTypeName(type)).c_str(),
                      static_cast<long long>(s.rows), static_cast<long long>(s.cols),
                      static_cast<long long>(s.n),
                      variant == 0   ? "plain"
                      : variant == 1 ? "bias"
                                     : "accumulate",
                      worst);
          // Nothing outside the n x rows outputs changes (the rows of a stride, the y_off before).
          for (size_t i = 0; i < y0.size(); ++i) {
            if (!written[i]) {
              ASSERT_EQ(got[i], y0[i]) << "word " << i << " not an output";
            }
          }
        }
      }
    }
  }
};

TEST_F(GpuMatMulTest, TiledProductsWithinRounding) { CheckProducts(MatMul::kTiled); }

TEST_F(GpuMatMulTest, CoopMatProductsWithinRounding) { CheckProducts(MatMul::kCoopMat); }

// The tiled GEMM takes F16, Q8_0 and Q4_0 matrices (one, columns a multiple of 32) for batches of
// at least kMatMulMinTokens; everything else keeps the token-tiled kernels, bit for bit: a 15-token
// batch with the tiled GEMM made gives exactly the rows it gives without, and 16 tokens do not (the
// sums' order changed), which shows the dispatch, not a silent fallback, is what the products test
// above measured.
TEST_F(GpuMatMulTest, TakesWideBatchesOfItsTypesOnly) {
  std::string skip;
  std::unique_ptr<Kernels> k = WithMatMul(MatMul::kTiled, &skip);
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(kernels_->matmul(), MatMul::kOff);
  const int64_t rows = 64, cols = 256, n = Kernels::kMatMulMinTokens;
  const std::vector<float> wf = Random(rows * cols, 41, 0.5f), x = Random(n * cols, 42);
  std::vector<uint8_t> data, data_f32;
  auto f16 = UploadMatrix(ctx_, Quantized(GgmlType::kF16, wf, rows, cols, &data));
  auto f32 = UploadMatrix(ctx_, Quantized(GgmlType::kF32, wf, rows, cols, &data_f32));
  ASSERT_TRUE(f16.ok() && f32.ok());
  EXPECT_FALSE(kernels_->UsesMatMul(*f16, n));  // not made
  EXPECT_FALSE(k->UsesMatMul(*f16, n - 1));
  EXPECT_TRUE(k->UsesMatMul(*f16, n));
  EXPECT_TRUE(k->UsesMatMul(*f16, 4096));
  EXPECT_FALSE(k->UsesMatMul(*f32, n));  // F32 keeps the token-tiled kernels
  std::vector<uint8_t> data_odd;
  auto odd =
      UploadMatrix(ctx_, Quantized(GgmlType::kF16, Random(rows * 48, 43), rows, 48, &data_odd));
  ASSERT_TRUE(odd.ok());
  EXPECT_FALSE(k->UsesMatMul(*odd, n));  // 48 columns: not whole 32-column steps

  Buffer xb = Floats(x), xq = Empty(PairActivationBytes(n * cols));
  const auto run = [&](const Kernels& kern, int64_t tokens) {
    Buffer y = Empty(tokens * rows * 4);
    Recorder rec(ctx_);
    kern.QuantizePairs(&rec, xb, 0, tokens * cols, false, xq);
    kern.Gemm(&rec, *f16, xq, tokens, y);
    EXPECT_TRUE(rec.Finish().ok());
    EXPECT_TRUE(rec.Run().ok());
    return Words(ctx_, y, tokens * rows * 4);
  };
  EXPECT_EQ(run(*k, n - 1), run(*kernels_, n - 1));
  EXPECT_NE(run(*k, n), run(*kernels_, n));
  // The stages a batch of the tiled GEMM cannot take inside it (they need the token-tiled
  // kernels' workgroups): the RoPE / store epilogue and the one-dispatch Q/K/V.
  ASSERT_TRUE(k->AddStages(ctx_, GgmlType::kF16).ok());
  AttentionShape shape;
  shape.n_head = shape.n_head_kv = 1;
  shape.head_dim = rows;
  shape.n_rows = 64;
  EXPECT_TRUE(k->CanRopeStore(*f16, n - 1, shape, false));
  EXPECT_FALSE(k->CanRopeStore(*f16, n, shape, false));
}

}  // namespace
}  // namespace uf::gpu
