// Weight upload in the layout the GPU kernels read (vk_kernels.h's GpuMatrix): F32, F16 and BF16
// rows as in GGUF, the quantized types split into word-aligned quants and f32 scales.
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "gpu/vk_kernels.h"
#include "kernels/blocks.h"
#include "kernels/quant.h"

namespace uf::gpu {
namespace {

float HalfToFloat(uint16_t h) {
  float f;
  kernels::DequantizeRow(GgmlType::kF16, &h, &f, 1);
  return f;
}

// The rows of one or several matrices of the same type and shape (stacked experts: matrix i's
// rows follow matrix i - 1's on the device).
struct Rows {
  std::span<const kernels::Matrix> mats;
  GgmlType type() const { return mats[0].type(); }
  int64_t rows() const { return mats[0].rows() * static_cast<int64_t>(mats.size()); }
  int64_t cols() const { return mats[0].cols(); }
  const uint8_t* Row(int64_t r) const {
    const kernels::Matrix& m = mats[r / mats[0].rows()];
    return m.data() + (r % m.rows()) * m.row_bytes();
  }
};

// A K-quant matrix as its kernel reads it: per block of 256 values `words` words of quants, then
// after all of them `scales` f32 scales per block; pack(block, quants, scales) writes one block's.
template <typename Block, typename Pack>
StatusOr<GpuMatrix> UploadKBlocks(Context* ctx, const Rows& w, uint64_t words, uint64_t scales,
                                  Pack pack) {
  GpuMatrix m;
  m.type = w.type();
  m.rows = w.rows();
  m.cols = w.cols();
  const int64_t blocks = w.cols() / kernels::kQK_K;
  const uint64_t total_blocks = static_cast<uint64_t>(w.rows()) * blocks;
  if (total_blocks * (words + scales) >= (uint64_t{1} << 32)) {
    return UnimplementedError("the Vulkan backend addresses at most 2^32 words per matrix");
  }
  m.d_off = static_cast<uint32_t>(total_blocks * words);
  std::vector<uint32_t> host(total_blocks * (words + scales));
  for (int64_t r = 0; r < w.rows(); ++r) {
    const auto* row = reinterpret_cast<const Block*>(w.Row(r));
    for (int64_t b = 0; b < blocks; ++b) {
      const uint64_t i = r * blocks + b;
      float block_scales[2];
      pack(row[b], reinterpret_cast<uint8_t*>(&host[i * words]), block_scales);
      std::memcpy(&host[m.d_off + scales * i], block_scales, scales * 4);
    }
  }
  UF_ASSIGN_OR_RETURN(m.buffer, ctx->CreateBuffer(host.size() * 4, Memory::kDevice));
  UF_RETURN_IF_ERROR(ctx->Upload(m.buffer, 0, host.data(), host.size() * 4));
  return m;
}

// The f16 at p (a block's field, not necessarily aligned) as f32.
float Half(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return HalfToFloat(v);
}

// Q6_K: each block's ql, qh and scales as 52 words (they are 208 bytes, whole words, but the
// blocks are 210 bytes apart in the file), the f32 super-block scales after all of them.
StatusOr<GpuMatrix> UploadQ6K(Context* ctx, const Rows& w) {
  return UploadKBlocks<kernels::BlockQ6_K>(
      ctx, w, 52, 1, [](const kernels::BlockQ6_K& blk, uint8_t* dst, float* d) {
        std::memcpy(dst, blk.ql, 128);
        std::memcpy(dst + 128, blk.qh, 64);
        std::memcpy(dst + 192, blk.scales, 16);
        d[0] = Half(&blk.d);
      });
}

// Q4_K: each block's qs and packed scales as 35 words (144 bytes in the file, 140 of them
// word-aligned here), then d and dmin of every block as f32 pairs.
StatusOr<GpuMatrix> UploadQ4K(Context* ctx, const Rows& w) {
  return UploadKBlocks<kernels::BlockQ4_K>(
      ctx, w, 35, 2, [](const kernels::BlockQ4_K& blk, uint8_t* dst, float* d) {
        std::memcpy(dst, blk.qs, 128);
        std::memcpy(dst + 128, blk.scales, 12);
        d[0] = Half(&blk.d);
        d[1] = Half(&blk.dmin);
      });
}

}  // namespace

bool GpuSupportsType(GgmlType type) {
  return type == GgmlType::kF32 || type == GgmlType::kF16 || type == GgmlType::kBF16 ||
         type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0 || type == GgmlType::kQ6_K ||
         type == GgmlType::kQ4_K || type == GgmlType::kMXFP4;
}

namespace {

StatusOr<GpuMatrix> UploadRows(Context* ctx, const Rows& w) {
  if (!GpuSupportsType(w.type())) {
    return UnimplementedError("the Vulkan backend has no kernel for weights of type " +
                              std::string(GgmlTypeName(w.type())) +
                              " (it has F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K and MXFP4)");
  }
  GpuMatrix m;
  m.type = w.type();
  m.rows = w.rows();
  m.cols = w.cols();
  if (w.type() == GgmlType::kF32 || w.type() == GgmlType::kF16 || w.type() == GgmlType::kBF16) {
    if (w.type() != GgmlType::kF32 && w.cols() % 2 != 0) {
      return UnimplementedError("the Vulkan backend needs an even number of F16/BF16 columns");
    }
    // Each matrix's rows are contiguous (GGUF rows): one upload per matrix.
    const uint64_t bytes = w.mats[0].rows() * w.mats[0].row_bytes();
    UF_ASSIGN_OR_RETURN(m.buffer, ctx->CreateBuffer(bytes * w.mats.size(), Memory::kDevice));
    for (size_t i = 0; i < w.mats.size(); ++i) {
      UF_RETURN_IF_ERROR(ctx->Upload(m.buffer, i * bytes, w.mats[i].data(), bytes));
    }
    return m;
  }
  if (w.type() == GgmlType::kQ6_K) return UploadQ6K(ctx, w);
  if (w.type() == GgmlType::kQ4_K) return UploadQ4K(ctx, w);
  // Q8_0, Q4_0 and MXFP4: 32 values a block, the quants in 8 or 4 words (MXFP4's nibbles are
  // laid out as Q4_0's), the scale as f32 (MXFP4: half its E8M0 scale, as the CPU's integer
  // dot of doubled E2M1 values takes it).
  const bool q8 = w.type() == GgmlType::kQ8_0;
  const bool mx = w.type() == GgmlType::kMXFP4;
  const int64_t blocks = w.cols() / 32;
  const uint32_t qwords = q8 ? 8 : 4;
  const uint64_t total_blocks = static_cast<uint64_t>(w.rows()) * blocks;
  if (total_blocks * (qwords + 1) >= (uint64_t{1} << 32)) {
    return UnimplementedError("the Vulkan backend addresses at most 2^32 words per matrix");
  }
  m.d_off = static_cast<uint32_t>(total_blocks * qwords);
  std::vector<uint32_t> host(total_blocks * (qwords + 1));
  for (int64_t r = 0; r < w.rows(); ++r) {
    const uint8_t* row = w.Row(r);
    for (int64_t b = 0; b < blocks; ++b) {
      const uint64_t i = r * blocks + b;
      uint16_t d;
      const uint8_t* qs;
      if (mx) {
        const auto* blk = reinterpret_cast<const kernels::BlockMxfp4*>(row) + b;
        std::memcpy(&host[i * qwords], blk->qs, qwords * 4);
        const float df = kernels::E8M0Half(blk->e);
        std::memcpy(&host[m.d_off + i], &df, 4);
        continue;
      }
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

}  // namespace

StatusOr<GpuMatrix> UploadMatrix(Context* ctx, const kernels::Matrix& w) {
  return UploadRows(ctx, Rows{std::span<const kernels::Matrix>(&w, 1)});
}

StatusOr<GpuMatrix> UploadExperts(Context* ctx, std::span<const kernels::Matrix> experts) {
  if (experts.empty()) return InvalidArgumentError("gpu: no experts to upload");
  for (const kernels::Matrix& e : experts) {
    if (e.type() != experts[0].type() || e.rows() != experts[0].rows() ||
        e.cols() != experts[0].cols()) {
      return UnimplementedError("the Vulkan backend needs a layer's experts of one type and shape");
    }
  }
  UF_ASSIGN_OR_RETURN(GpuMatrix m, UploadRows(ctx, Rows{experts}));
  m.rows = experts[0].rows();
  m.n_experts = static_cast<int64_t>(experts.size());
  return m;
}

}  // namespace uf::gpu
