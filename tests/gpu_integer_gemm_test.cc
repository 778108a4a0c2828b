// The integer GEMMs' two kernel sets and the K-quant GEMMs' blocks per 4 lanes, on whatever
// Vulkan device the loader finds first (Mesa's lavapipe in CI; gpu_kernels_fixture.h). Both
// compare bits, not tolerances: integer sums are exact in any order, and the K-quant kernels form
// the CPU scalar tier's f32 operations in its order. The gpu_subgroup_*_kquant ctest entries
// rerun this file at lavapipe's 4 and 16 lanes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if UF_HAVE_VULKAN
#include "gpu_kernels_fixture.h"
#endif

namespace uf::gpu {
namespace {

#if !UF_HAVE_VULKAN
TEST(GpuIntegerGemm, NotBuilt) { GTEST_SKIP() << "built without the Vulkan backend"; }
#else

// The K-quant GEMMs are the CPU scalar tier's bits (kernels::DotReference on Q8_K activations)
// for rows of 1, 3 and 9 blocks, so a subgroup's blocks-at-once iteration (kq_cluster.glsl:
// subgroup size / 4 blocks) runs whole, partial and more than once at every subgroup size
// (the gpu_subgroup_* ctest entries rerun this at lavapipe's 4, 16, 32 and 64), for one token
// and for tiles of 8 and 32.
TEST_F(GpuKernelsTest, KQuantGemmIsTheCpuScalarTier) {
  const int64_t rows = 37;
  for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    for (int64_t cols : {int64_t{256}, int64_t{768}, int64_t{2304}}) {
      for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{33}}) {
        SCOPED_TRACE(std::string(GgmlTypeName(type)) + " cols " + std::to_string(cols) +
                     " tokens " + std::to_string(n));
        const std::vector<float> wf = Random(rows * cols, 71, 0.5f), x = Random(n * cols, 72);
        std::vector<uint8_t> data;
        const kernels::Matrix m = Quantized(type, wf, rows, cols, &data);
        std::vector<kernels::BlockQ8_K> xk(n * cols / 256);
        kernels::QuantizeRow(GgmlType::kQ8_K, x.data(), xk.data(), n * cols);
        auto gm = UploadMatrix(ctx_, m);
        ASSERT_TRUE(gm.ok());
        Buffer xb = Floats(x), xq = Empty(ActBytes(n * cols)), y = Empty(n * rows * 4);
        Recorder rec(ctx_);
        QuantizeFor(&rec, type, xb, n * cols, xq);
        kernels_->Gemm(&rec, *gm, xq, n, y);
        ASSERT_TRUE(rec.Finish().ok());
        ASSERT_TRUE(rec.Run().ok());
        const std::vector<float> got = Read(y, n * rows);
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            const float want = kernels::DotReference(type, data.data() + r * m.row_bytes(),
                                                     xk.data() + t * cols / 256, cols);
            ASSERT_EQ(got[t * rows + r], want) << "token " << t << " row " << r;
          }
        }
      }
    }
  }
}

// The integer GEMMs with the packed int8 dot (IntegerDot::kOn, the *_dot4 kernels) give the bits
// of the byte-extract ones (kOff), for every integer weight type, every token tile (batches of
// 1, 5, 16 and 33 tokens: gemm1, 8, 16, 32), the wide one-token GEMV, and the experts' GEMMs
// (gemmx_*, gemmg_* in tiles of 8 and 32: 33 slots, 11 an expert). Their sums are integers, exact
// in any order, so any difference is a wrong lane or sign (Q4_0's and Q6_K's offsets are subtracted
// byte-wise without borrows: every nibble value occurs, and Q8_K activations reach -128).
// GemmMatchesCpu and the goldens check the default kernels (kOn where the device has it) against
// the CPU, so this carries that to devices without the instruction. The fixture's kernels must be
// the dot4 ones where the device has the feature, so that the rest of the suite runs the path a GPU
// runs.
TEST_F(GpuKernelsTest, IntegerDotKernelsEqualPlainOnes) {
  if (!ctx_->info().integer_dot) GTEST_SKIP() << "the device lacks shaderIntegerDotProduct";
  const char* env = std::getenv("UF_GPU_DOT4");
  if (env == nullptr || std::string(env) != "0") {
    EXPECT_TRUE(kernels_->integer_dot());
  }
  const int64_t rows = 37, cols = 512, n_exp = 3, max_n = 33;
  std::vector<Kernels> plain, dot;
  for (GemvVariant g : {GemvVariant::kBasic, GemvVariant::kWide}) {
    auto a = Kernels::Create(ctx_, g, 32, IntegerDot::kOff);
    auto b = Kernels::Create(ctx_, g, 32, IntegerDot::kOn);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_FALSE(a->integer_dot());
    EXPECT_TRUE(b->integer_dot());
    plain.push_back(*a);
    dot.push_back(*b);
  }
  std::vector<float> x = Random(max_n * cols, 61, 2.0f);
  x[5] = 40.0f;  // a block whose largest magnitude is positive: Q8_K's -128 on the other side
  std::vector<uint32_t> ids(max_n);
  for (int64_t t = 0; t < max_n; ++t) ids[t] = static_cast<uint32_t>((7 * t + 2) % n_exp);
  Buffer idb = Empty(ids.size() * 4);
  ASSERT_TRUE(ctx_->Upload(idb, 0, ids.data(), ids.size() * 4).ok());
  for (GgmlType type :
       {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kMXFP4, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    SCOPED_TRACE(GgmlTypeName(type));
    std::vector<std::vector<uint8_t> > data;
    std::vector<kernels::Matrix> experts;
    auto stacked = RandomExperts(type, n_exp, rows, cols, 62, &data, &experts);
    auto gm = UploadMatrix(ctx_, experts[0]);
    ASSERT_TRUE(gm.ok() && stacked.ok());
    Buffer xb = Floats(x), xq = Empty(ActBytes(max_n * cols));
    // Every kernel of one Kernels object into its own output, in one recording.
    const auto run = [&](const Kernels& k, bool wide) {
      Buffer y = Empty(4 * max_n * rows * 4), ye = Empty(max_n * rows * 4);
      Buffer yg = Empty(max_n * rows * 4), yg32 = Empty(max_n * rows * 4);
      Buffer order = Empty(max_n * 4), tiles = Empty(Kernels::MaxExpertTiles(max_n, n_exp) * 12);
      Recorder rec(ctx_);
      uint32_t off = 0;
      for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{16}, int64_t{33}}) {
        if (wide && n > 1) continue;  // the wide set has no integer batch kernels
        Recorder rn(ctx_);  // an activation's layout (where its scales start) depends on n
        QuantizeFor(&rn, type, xb, n * cols, xq);
        k.Gemm(&rn, *gm, xq, n, y, off);
        EXPECT_TRUE(rn.Finish().ok());
        EXPECT_TRUE(rn.Run().ok());
        off += static_cast<uint32_t>(n * rows);
      }
      QuantizeFor(&rec, type, xb, max_n * cols, xq);
      if (!wide) {
        k.GemmExperts(&rec, *stacked, xq, idb, max_n, 1, ye);
        k.GroupSlots(&rec, idb, order, tiles, max_n, n_exp);
        k.GemmExpertsGrouped(&rec, *stacked, xq, tiles, order, max_n, 1, yg);
        k.GroupSlots(&rec, idb, order, tiles, max_n, n_exp, 32);
        k.GemmExpertsGrouped(&rec, *stacked, xq, tiles, order, max_n, 1, yg32, 32);
      }
      EXPECT_TRUE(rec.Finish().ok());
      EXPECT_TRUE(rec.Run().ok());
      std::vector<float> out = Read(y, off);
      if (!wide) {
        for (const Buffer* b : {&ye, &yg, &yg32}) {
          const std::vector<float> e = Read(*b, max_n * rows);
          out.insert(out.end(), e.begin(), e.end());
        }
      }
      return out;
    };
    for (int v = 0; v < 2; ++v) {
      SCOPED_TRACE(v == 0 ? "basic" : "wide");
      const std::vector<float> want = run(plain[v], v == 1), got = run(dot[v], v == 1);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_TRUE(std::isfinite(want[i]) && std::fabs(want[i]) < 1e4) << "output " << i;
        ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0)
            << "output " << i << ": " << got[i] << " against " << want[i];
      }
    }
  }
}

#endif  // UF_HAVE_VULKAN

}  // namespace
}  // namespace uf::gpu
