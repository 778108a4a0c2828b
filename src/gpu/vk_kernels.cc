#include "gpu/vk_kernels.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "kernels/blocks.h"
#include "kernels/ops.h"
#include "kernels/quant.h"

namespace uf::gpu {
namespace {

constexpr uint32_t kMaxGroups = 32768;  // per grid dimension (every device allows 65535)

// A grid of n workgroups as (x, y) within the per-dimension limit; shaders read GroupIndex().
void Grid(uint64_t n, uint32_t* x, uint32_t* y) {
  *x = static_cast<uint32_t>(std::min<uint64_t>(n, kMaxGroups));
  *y = static_cast<uint32_t>((n + kMaxGroups - 1) / kMaxGroups);
}

// Groups of 64 invocations for n elementwise items.
uint32_t Groups64(uint64_t n) {
  UF_CHECK((n + 63) / 64 <= 65535) << "elementwise kernel over " << n << " values";
  return static_cast<uint32_t>((n + 63) / 64);
}

float HalfToFloat(uint16_t h) {
  float f;
  kernels::DequantizeRow(GgmlType::kF16, &h, &f, 1);
  return f;
}

// Stopgap for the types without a GPU kernel yet (BF16, Q4_K): the weights dequantized once and
// stored as F16 (exact for BF16 in F16's range; for Q4_K it adds F16 rounding, far below its own
// step), multiplied with F16-rounded activations where the CPU uses BF16 or Q8_K ones. It costs
// device memory (2 bytes a weight instead of 0.56 for Q4_K) and bandwidth, which is what native
// kernels will win back.
StatusOr<GpuMatrix> UploadAsF16(Context* ctx, const kernels::Matrix& w) {
  GpuMatrix m;
  m.type = GgmlType::kF16;
  m.converted_from = w.type();
  m.rows = w.rows();
  m.cols = w.cols();
  if (w.cols() % 2 != 0) return UnimplementedError("the Vulkan backend needs even F16 columns");
  const uint64_t bytes = static_cast<uint64_t>(w.rows()) * w.cols() * 2;
  UF_ASSIGN_OR_RETURN(m.buffer, ctx->CreateBuffer(bytes, Memory::kDevice));
  // In pieces of whole rows, so the host never holds the whole converted matrix.
  const int64_t rows_per_piece = std::max<int64_t>(1, (int64_t{4} << 20) / (w.cols() * 2));
  std::vector<float> f(rows_per_piece * w.cols());
  std::vector<uint16_t> h(rows_per_piece * w.cols());
  for (int64_t r0 = 0; r0 < w.rows(); r0 += rows_per_piece) {
    const int64_t n = std::min(rows_per_piece, w.rows() - r0);
    for (int64_t r = 0; r < n; ++r) {
      kernels::DequantizeRow(w.type(), w.data() + (r0 + r) * w.row_bytes(), f.data() + r * w.cols(),
                             w.cols());
    }
    kernels::F32ToF16(f.data(), h.data(), n * w.cols());
    UF_RETURN_IF_ERROR(ctx->Upload(m.buffer, static_cast<uint64_t>(r0) * w.cols() * 2, h.data(),
                                   static_cast<uint64_t>(n) * w.cols() * 2));
  }
  return m;
}

// Q6_K: each block's ql, qh and scales as 52 words (they are 208 bytes, whole words, but the
// blocks are 210 bytes apart in the file), the f32 super-block scales after all of them.
StatusOr<GpuMatrix> UploadQ6K(Context* ctx, const kernels::Matrix& w) {
  GpuMatrix m;
  m.type = m.converted_from = GgmlType::kQ6_K;
  m.rows = w.rows();
  m.cols = w.cols();
  const int64_t blocks = w.cols() / kernels::kQK_K;
  const uint64_t total_blocks = static_cast<uint64_t>(w.rows()) * blocks;
  if (total_blocks * 53 >= (uint64_t{1} << 32)) {
    return UnimplementedError("the Vulkan backend addresses at most 2^32 words per matrix");
  }
  m.d_off = static_cast<uint32_t>(total_blocks * 52);
  std::vector<uint32_t> host(total_blocks * 53);
  for (int64_t r = 0; r < w.rows(); ++r) {
    const auto* row = reinterpret_cast<const kernels::BlockQ6_K*>(w.data() + r * w.row_bytes());
    for (int64_t b = 0; b < blocks; ++b) {
      const uint64_t i = r * blocks + b;
      auto* dst = reinterpret_cast<uint8_t*>(&host[i * 52]);
      std::memcpy(dst, row[b].ql, 128);
      std::memcpy(dst + 128, row[b].qh, 64);
      std::memcpy(dst + 192, row[b].scales, 16);
      uint16_t d;
      std::memcpy(&d, &row[b].d, 2);
      const float df = HalfToFloat(d);
      std::memcpy(&host[m.d_off + i], &df, 4);
    }
  }
  UF_ASSIGN_OR_RETURN(m.buffer, ctx->CreateBuffer(host.size() * 4, Memory::kDevice));
  UF_RETURN_IF_ERROR(ctx->Upload(m.buffer, 0, host.data(), host.size() * 4));
  return m;
}

}  // namespace

bool GpuSupportsType(GgmlType type) {
  return type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kQ8_0 ||
         type == GgmlType::kQ4_0 || type == GgmlType::kQ6_K;
}

StatusOr<GpuMatrix> UploadMatrix(Context* ctx, const kernels::Matrix& w) {
  if (!GpuSupportsType(w.type())) {
    if (w.type() != GgmlType::kBF16 && w.type() != GgmlType::kQ4_K) {
      return UnimplementedError("the Vulkan backend has no kernel for weights of type " +
                                std::string(GgmlTypeName(w.type())) +
                                " (it has F32, F16, Q8_0, Q4_0 and Q6_K; BF16 and Q4_K run "
                                "converted to F16)");
    }
    return UploadAsF16(ctx, w);
  }
  GpuMatrix m;
  m.type = m.converted_from = w.type();
  m.rows = w.rows();
  m.cols = w.cols();
  const uint8_t* src = w.data();
  if (w.type() == GgmlType::kF32 || w.type() == GgmlType::kF16) {
    if (w.type() == GgmlType::kF16 && w.cols() % 2 != 0) {
      return UnimplementedError("the Vulkan backend needs an even number of F16 columns");
    }
    const uint64_t bytes = w.rows() * w.row_bytes();
    UF_ASSIGN_OR_RETURN(m.buffer, ctx->CreateBuffer(bytes, Memory::kDevice));
    UF_RETURN_IF_ERROR(ctx->Upload(m.buffer, 0, src, bytes));
    return m;
  }
  if (w.type() == GgmlType::kQ6_K) return UploadQ6K(ctx, w);
  const bool q8 = w.type() == GgmlType::kQ8_0;
  const int64_t blocks = w.cols() / 32;
  const uint32_t qwords = q8 ? 8 : 4;
  const uint64_t total_blocks = static_cast<uint64_t>(w.rows()) * blocks;
  if (total_blocks * (qwords + 1) >= (uint64_t{1} << 32)) {
    return UnimplementedError("the Vulkan backend addresses at most 2^32 words per matrix");
  }
  m.d_off = static_cast<uint32_t>(total_blocks * qwords);
  std::vector<uint32_t> host(total_blocks * (qwords + 1));
  for (int64_t r = 0; r < w.rows(); ++r) {
    const uint8_t* row = src + r * w.row_bytes();
    for (int64_t b = 0; b < blocks; ++b) {
      const uint64_t i = r * blocks + b;
      uint16_t d;
      const uint8_t* qs;
      if (q8) {
        const auto* blk = reinterpret_cast<const kernels::BlockQ8_0*>(row) + b;
        std::memcpy(&d, &blk->d, 2);
        qs = reinterpret_cast<const uint8_t*>(blk->qs);
      } else {
        const auto* blk = reinterpret_cast<const kernels::BlockQ4_0*>(row) + b;
        std::memcpy(&d, &blk->d, 2);
        qs = blk->qs;
      }
      std::memcpy(&host[i * qwords], qs, qwords * 4);
      const float df = HalfToFloat(d);
      std::memcpy(&host[m.d_off + i], &df, 4);
    }
  }
  UF_ASSIGN_OR_RETURN(m.buffer, ctx->CreateBuffer(host.size() * 4, Memory::kDevice));
  UF_RETURN_IF_ERROR(ctx->Upload(m.buffer, 0, host.data(), host.size() * 4));
  return m;
}

StatusOr<Kernels> Kernels::Create(Context* ctx) {
  Kernels k;
  k.rows_per_group_ = 64 / ctx->info().subgroup_size;
  UF_ASSIGN_OR_RETURN(k.gemv_f32_, ctx->GetPipeline("gemv_f32", 3));
  UF_ASSIGN_OR_RETURN(k.gemv_f16_, ctx->GetPipeline("gemv_f16", 3));
  UF_ASSIGN_OR_RETURN(k.gemv_q8_0_, ctx->GetPipeline("gemv_q8_0", 3));
  UF_ASSIGN_OR_RETURN(k.gemv_q4_0_, ctx->GetPipeline("gemv_q4_0", 3));
  UF_ASSIGN_OR_RETURN(k.gemv_q6_k_, ctx->GetPipeline("gemv_q6_k", 3));
  UF_ASSIGN_OR_RETURN(k.quantize_, ctx->GetPipeline("quantize_q8_0", 2));
  UF_ASSIGN_OR_RETURN(k.rmsnorm_, ctx->GetPipeline("rmsnorm", 3));
  UF_ASSIGN_OR_RETURN(k.add_, ctx->GetPipeline("add", 2));
  UF_ASSIGN_OR_RETURN(k.swiglu_, ctx->GetPipeline("swiglu", 3));
  UF_ASSIGN_OR_RETURN(k.rope_, ctx->GetPipeline("rope", 3));
  UF_ASSIGN_OR_RETURN(k.kv_store_, ctx->GetPipeline("kv_store", 4));
  UF_ASSIGN_OR_RETURN(k.attention_, ctx->GetPipeline("attention", 5));
  UF_ASSIGN_OR_RETURN(k.embed_, ctx->GetPipeline("embed", 3));
  return k;
}

void Kernels::Gemv(Recorder* r, const GpuMatrix& w, const Buffer& x, uint32_t x_off,
                   const Buffer& y, uint32_t y_off) const {
  uint32_t gx, gy;
  Grid((w.rows + rows_per_group_ - 1) / rows_per_group_, &gx, &gy);
  const auto rows = static_cast<uint32_t>(w.rows), cols = static_cast<uint32_t>(w.cols);
  if (w.type == GgmlType::kF32 || w.type == GgmlType::kF16) {
    struct {
      uint32_t rows, cols, x_off, y_off;
    } push{rows, cols, x_off, y_off};
    r->Dispatch(w.type == GgmlType::kF32 ? *gemv_f32_ : *gemv_f16_, {w.buffer, x, y}, push, gx, gy);
    return;
  }
  if (w.type == GgmlType::kQ6_K) {
    struct {
      uint32_t rows, blocks, w_d_off, x_off, y_off;
    } push{rows, cols / 256, w.d_off, x_off, y_off};
    r->Dispatch(*gemv_q6_k_, {w.buffer, x, y}, push, gx, gy);
    return;
  }
  UF_CHECK(x_off == 0) << "quantized GEMV: the activation starts at 0";
  const uint32_t blocks = cols / 32;
  struct {
    uint32_t rows, blocks, w_d_off, x_d_off, y_off;
  } push{rows, blocks, w.d_off, blocks * 8, y_off};
  r->Dispatch(w.type == GgmlType::kQ8_0 ? *gemv_q8_0_ : *gemv_q4_0_, {w.buffer, x, y}, push, gx,
              gy);
}

void Kernels::Quantize(Recorder* r, const Buffer& x, uint32_t x_off, int64_t cols,
                       const Buffer& q) const {
  UF_CHECK(cols % 32 == 0);
  const auto blocks = static_cast<uint32_t>(cols / 32);
  struct {
    uint32_t blocks, x_off, d_off;
  } push{blocks, x_off, blocks * 8};
  r->Dispatch(*quantize_, {x, q}, push, Groups64(blocks));
}

void Kernels::RmsNorm(Recorder* r, const Buffer& x, uint32_t x_off, const Buffer& w,
                      const Buffer& y, uint32_t y_off, int64_t rows, int64_t n, float eps) const {
  struct {
    uint32_t rows, n, x_off, y_off;
    float eps;
  } push{static_cast<uint32_t>(rows), static_cast<uint32_t>(n), x_off, y_off, eps};
  uint32_t gx, gy;
  Grid(rows, &gx, &gy);
  r->Dispatch(*rmsnorm_, {x, w, y}, push, gx, gy);
}

void Kernels::Add(Recorder* r, const Buffer& x, uint32_t x_off, const Buffer& y, uint32_t y_off,
                  int64_t n, int64_t period) const {
  struct {
    uint32_t n, x_off, y_off, x_period;
  } push{static_cast<uint32_t>(n), x_off, y_off, static_cast<uint32_t>(period)};
  r->Dispatch(*add_, {x, y}, push, Groups64(n));
}

void Kernels::SwiGlu(Recorder* r, const Buffer& gate, const Buffer& up, const Buffer& out,
                     int64_t n) const {
  const uint32_t push = static_cast<uint32_t>(n);
  r->Dispatch(*swiglu_, {gate, up, out}, push, Groups64(n));
}

void Kernels::Rope(Recorder* r, const Buffer& x, uint32_t x_off, const Buffer& cs,
                   const Buffer& step, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
                   bool neox) const {
  struct {
    uint32_t n_heads, head_dim, rope_dim, neox, x_off;
  } push{static_cast<uint32_t>(n_heads), static_cast<uint32_t>(head_dim),
         static_cast<uint32_t>(rope_dim), neox ? 1u : 0u, x_off};
  r->Dispatch(*rope_, {x, cs, step}, push, Groups64(n_heads * rope_dim / 2));
}

void Kernels::KvStore(Recorder* r, const Buffer& k, const Buffer& v, const Buffer& cache,
                      const Buffer& step, int64_t kv_heads, int64_t head_dim, int64_t max_ctx,
                      uint32_t k_off, uint32_t v_off) const {
  struct {
    uint32_t kv_heads, head_dim, max_ctx, k_off, v_off;
  } push{static_cast<uint32_t>(kv_heads), static_cast<uint32_t>(head_dim),
         static_cast<uint32_t>(max_ctx), k_off, v_off};
  r->Dispatch(*kv_store_, {k, v, cache, step}, push, Groups64(kv_heads * head_dim / 2));
}

void Kernels::Attention(Recorder* r, const Buffer& q, const Buffer& cache, const Buffer& scores,
                        const Buffer& out, const Buffer& step, int64_t n_head, int64_t n_head_kv,
                        int64_t head_dim, int64_t max_ctx, uint32_t k_off, uint32_t v_off,
                        float scale) const {
  struct {
    uint32_t n_head, n_head_kv, head_dim, max_ctx, k_off, v_off;
    float scale;
  } push{static_cast<uint32_t>(n_head),
         static_cast<uint32_t>(n_head_kv),
         static_cast<uint32_t>(head_dim),
         static_cast<uint32_t>(max_ctx),
         k_off,
         v_off,
         scale};
  r->Dispatch(*attention_, {q, cache, scores, out, step}, push, static_cast<uint32_t>(n_head));
}

void Kernels::Embed(Recorder* r, const GpuMatrix& table, const Buffer& x,
                    const Buffer& step) const {
  const uint32_t type = table.type == GgmlType::kF32    ? 0
                        : table.type == GgmlType::kF16  ? 1
                        : table.type == GgmlType::kQ8_0 ? 2
                        : table.type == GgmlType::kQ4_0 ? 3
                                                        : 4;
  struct {
    uint32_t type, cols, d_off;
  } push{type, static_cast<uint32_t>(table.cols), table.d_off};
  r->Dispatch(*embed_, {table.buffer, x, step}, push, Groups64(table.cols));
}

}  // namespace uf::gpu
