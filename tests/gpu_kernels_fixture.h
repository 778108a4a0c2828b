// The fixture of the GPU kernel tests (gpu_kernels_test.cc, gpu_topk_test.cc): a Vulkan context
// on whatever device the loader finds first (Mesa's lavapipe in CI), the basic and wide kernels,
// and helpers that move floats and quantized weights to the device and back. Without a device
// every test skips, saying why. Only for tests built with UF_HAVE_VULKAN=1.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "engine/seq_sampler.h"
#include "gpu/vk_context.h"
#include "gpu/vk_kernels.h"
#include "kernels/blocks.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "sampling/sampler.h"

namespace uf::gpu {

inline std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

class GpuKernelsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto ctx = Context::Create(-1);
    if (!ctx.ok()) {
      skip_reason_ = new std::string(ctx.status().ToString());
      return;
    }
    ctx_ = ctx->release();
    // The widest token tile (32) whatever UF_GPU_TILE says, so the batch tests reach every tile.
    auto k = Kernels::Create(ctx_, GemvVariant::kBasic, 32);
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    kernels_ = new Kernels(*k);
    auto w = Kernels::Create(ctx_, GemvVariant::kWide, 32);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    wide_ = new Kernels(*w);
  }
  static void TearDownTestSuite() {
    delete kernels_;
    delete wide_;
    wide_ = nullptr;
    delete ctx_;
    kernels_ = nullptr;
    ctx_ = nullptr;
  }
  void SetUp() override {
    if (ctx_ == nullptr) {
      GTEST_SKIP() << "no usable Vulkan device: " << (skip_reason_ ? *skip_reason_ : "");
    }
  }

  Buffer Floats(const std::vector<float>& v) {
    auto b = ctx_->CreateBuffer(v.size() * 4, Memory::kDevice);
    EXPECT_TRUE(b.ok());
    EXPECT_TRUE(ctx_->Upload(*b, 0, v.data(), v.size() * 4).ok());
    return std::move(*b);
  }
  Buffer Empty(uint64_t bytes) { return std::move(*ctx_->CreateBuffer(bytes, Memory::kDevice)); }
  std::vector<float> Read(const Buffer& b, size_t n) {
    std::vector<float> v(n);
    EXPECT_TRUE(ctx_->Download(b, 0, v.data(), n * 4).ok());
    return v;
  }
  // The per-token inputs of a batch: {token, position, cache row, sequence} each.
  Buffer Tok(const std::vector<std::array<uint32_t, 4> >& rows) {
    Buffer b = std::move(*ctx_->CreateBuffer(rows.size() * 16, Memory::kHost));
    std::memcpy(b.mapped(), rows.data(), rows.size() * 16);
    return b;
  }
  // Weights of `type` quantized from wf, as a kernels::Matrix over data.
  static kernels::Matrix Quantized(GgmlType type, const std::vector<float>& wf, int64_t rows,
                                   int64_t cols, std::vector<uint8_t>* data) {
    const size_t row_bytes = kernels::KernelRowBytes(type, cols);
    data->resize(rows * row_bytes);
    for (int64_t r = 0; r < rows; ++r) {
      kernels::QuantizeRow(type, wf.data() + r * cols, data->data() + r * row_bytes, cols);
    }
    return *kernels::Matrix::Create(type, data->data(), rows, cols);
  }
  // A random matrix of `type` (rows x cols, values of scale 0.1 from seed; its bytes in *data,
  // which must outlive the matrix) on the device.
  static StatusOr<GpuMatrix> RandomMatrix(GgmlType type, int64_t rows, int64_t cols, uint32_t seed,
                                          std::vector<uint8_t>* data) {
    const std::vector<float> wf = Random(rows * cols, seed, 0.1f);
    return UploadMatrix(ctx_, type == GgmlType::kF32
                                  ? *kernels::Matrix::Create(type, wf.data(), rows, cols)
                                  : Quantized(type, wf, rows, cols, data));
  }
  // n_exp random experts of `type` (rows x cols, values of scale 0.5, seeds seed, seed + 1, ...;
  // their bytes in *data, which must outlive *experts), stacked on the device (UploadExperts).
  static StatusOr<GpuMatrix> RandomExperts(GgmlType type, int64_t n_exp, int64_t rows, int64_t cols,
                                           uint32_t seed, std::vector<std::vector<uint8_t> >* data,
                                           std::vector<kernels::Matrix>* experts) {
    data->assign(n_exp, {});
    experts->clear();
    for (int64_t e = 0; e < n_exp; ++e) {
      experts->push_back(Quantized(type, Random(rows * cols, seed + static_cast<uint32_t>(e), 0.5f),
                                   rows, cols, &(*data)[e]));
    }
    return UploadExperts(ctx_, *experts);
  }

  // The activation a GEMM of `type` reads: values of x quantized into q (Q8_0, Q8_K, f16 or
  // bf16 pairs: ActivationFor) as the decoder does; false (nothing recorded) when the type takes
  // f32 values.
  static bool QuantizeFor(Recorder* r, GgmlType type, const Buffer& x, int64_t values,
                          const Buffer& q) {
    if (ActivationFor(type) == Activation::kF32) return false;
    kernels_->QuantizeAs(r, ActivationFor(type), x, 0, values, q);
    return true;
  }
  // x quantized on the device (Q8_K with q8k, else Q8_0), as the words the GEMMs read.
  std::vector<uint32_t> DeviceQuantize(const std::vector<float>& x, bool q8k) {
    const auto n = static_cast<int64_t>(x.size());
    const uint64_t bytes = q8k ? Q8KActivationBytes(n) : Q8ActivationBytes(n);
    Buffer xb = Floats(x), q = Empty(bytes);
    Recorder rec(ctx_);
    if (q8k) {
      kernels_->QuantizeK(&rec, xb, 0, n, q);
    } else {
      kernels_->Quantize(&rec, xb, 0, n, q);
    }
    EXPECT_TRUE(rec.Finish().ok());
    EXPECT_TRUE(rec.Run().ok());
    std::vector<uint32_t> got(bytes / 4);
    EXPECT_TRUE(ctx_->Download(q, 0, got.data(), got.size() * 4).ok());
    return got;
  }
  static uint64_t ActBytes(int64_t values) {
    return std::max(
        {Q8ActivationBytes(values), Q8KActivationBytes(values), PairActivationBytes(values)});
  }

  // Paged attention over an f16 or Q8_0 cache (PagedAttentionMatchesReference).
  std::vector<float> PagedAttention(bool q8, int64_t chunk);

  // The GEMV variants that differ for `type`: the basic kernels, and the wide ones (GemvVariant)
  // for the types that have them (F16, Q8_0, Q4_0).
  static std::vector<const Kernels*> Variants(GgmlType type) {
    if (type == GgmlType::kF16 || type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0) {
      return {kernels_, wide_};
    }
    return {kernels_};
  }
  static const char* VariantName(const Kernels* k) { return k == wide_ ? "wide" : "basic"; }

  static Context* ctx_;
  static Kernels* kernels_;
  static Kernels* wide_;  // GemvVariant::kWide
  static std::string* skip_reason_;
};
inline Context* GpuKernelsTest::ctx_ = nullptr;
inline Kernels* GpuKernelsTest::kernels_ = nullptr;
inline Kernels* GpuKernelsTest::wide_ = nullptr;
inline std::string* GpuKernelsTest::skip_reason_ = nullptr;

// --- the fused kernels' tests (gpu_fused_test.cc, gpu_stage_test.cc) ---

// The shape of a test's f16 K/V cache of n_rows rows a KV head (K at word 0, V at half of its
// *words words).
inline AttentionShape CacheShape(int64_t n_head, int64_t n_kv, int64_t head_dim, int64_t n_rows,
                                 uint64_t* words) {
  AttentionShape as;
  as.n_head = n_head;
  as.n_head_kv = n_kv;
  as.head_dim = head_dim;
  as.n_rows = n_rows;
  *words = 2 * n_kv * n_rows * as.row_words();
  as.v_off = static_cast<uint32_t>(*words / 2);
  return as;
}

// A RoPE angle table of max_pos positions (cos / sin pairs of rope_dim / 2 angles each), angles
// 0.29 i: not the model's, any table does for comparing kernels.
inline std::vector<float> TestAngles(int64_t max_pos, int64_t rope_dim) {
  std::vector<float> cs(max_pos * rope_dim);
  for (int64_t i = 0; i < max_pos * rope_dim / 2; ++i) {
    cs[2 * i] = std::cos(0.29f * static_cast<float>(i));
    cs[2 * i + 1] = std::sin(0.29f * static_cast<float>(i));
  }
  return cs;
}

// b's first `bytes` bytes as words.
inline std::vector<uint32_t> Words(Context* ctx, const Buffer& b, uint64_t bytes) {
  std::vector<uint32_t> v(bytes / 4);
  EXPECT_TRUE(ctx->Download(b, 0, v.data(), bytes).ok());
  return v;
}

// Rows of 512 values (two Q8_K blocks, 16 Q8_0 blocks) with a zero block and a value repeated
// with both signs at the largest magnitude (the Q8_K quantizer keeps the first one's sign).
inline std::vector<float> ActivationValues(int64_t n, uint32_t seed) {
  std::vector<float> x = Random(n, seed);
  std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
  x[300] = -4.0f;
  x[301] = 4.0f;
  return x;
}

// The formats the fused kernels write, and their names.
inline constexpr Activation kFusedFormats[] = {Activation::kQ8_0, Activation::kQ8_K,
                                               Activation::kF16, Activation::kBF16};
inline const char* FormatName(Activation a) {
  return a == Activation::kQ8_0   ? "Q8_0"
         : a == Activation::kQ8_K ? "Q8_K"
         : a == Activation::kF16  ? "f16 pairs"
                                  : "bf16 pairs";
}

// The separate kernels' n floats and their activations against the fused kernel's, bitwise.
inline void ExpectSameOutputs(Context* ctx, Activation act, int64_t n, const Buffer& y1,
                              const Buffer& y2, const Buffer& q1, const Buffer& q2) {
  EXPECT_EQ(Words(ctx, y1, n * 4), Words(ctx, y2, n * 4));
  const uint64_t used = act == Activation::kQ8_K   ? Q8KActivationBytes(n)
                        : act == Activation::kQ8_0 ? Q8ActivationBytes(n)
                                                   : PairActivationBytes(n);
  EXPECT_EQ(Words(ctx, q1, used), Words(ctx, q2, used));
}

}  // namespace uf::gpu
