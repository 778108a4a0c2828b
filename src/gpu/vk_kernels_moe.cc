// The mixture-of-experts kernels: the experts' GEMMs (one slot, or grouped by expert in tiles of
// 8, 16 or 32 slots), the grouping itself, the router's top k and the weighted sum of the k
// outputs, gpt-oss's clamped SwiGLU.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/check.h"
#include "gpu/vk_kernels.h"
#include "gpu/vk_kernels_internal.h"

namespace uf::gpu {

using kernels_internal::FusedDOff;
using kernels_internal::GemmShape;
using kernels_internal::Grid;
using kernels_internal::ShapeOf;

namespace {

// The push constants of gemmx_* and gemmg_*.
struct ExpertPush {
  uint32_t rows, cols, w_d_off, n, x_stride, x_d_off, y_off, y_stride, x_div, acc;
};
ExpertPush MakeExpertPush(const GpuMatrix& w, int64_t n_slots, int64_t x_div) {
  const GemmShape shape = ShapeOf(w, (n_slots + x_div - 1) / x_div);  // its activation rows
  return {static_cast<uint32_t>(w.rows),
          shape.cols,
          w.d_off,
          static_cast<uint32_t>(n_slots),
          shape.x_stride,
          shape.x_d_off,
          0u,
          static_cast<uint32_t>(w.rows),
          static_cast<uint32_t>(x_div),
          0u};
}

}  // namespace

int64_t Kernels::GroupTile(int64_t n_slots, int64_t n_expert) const {
  const int64_t share = (n_slots + n_expert - 1) / std::max<int64_t>(n_expert, 1);
  for (int64_t tile : {int64_t{8}, int64_t{16}}) {
    if (tile >= max_group_tile_ || share <= tile) return tile;
  }
  return 32;
}

void Kernels::GroupSlots(Recorder* r, const Buffer& ids, const Buffer& order, const Buffer& tiles,
                         int64_t n_slots, int64_t n_expert, int64_t tile) const {
  UF_CHECK(n_expert <= kMaxExperts) << n_expert << " experts";
  UF_CHECK(tile == 8 || tile == 16 || tile == 32) << "grouped tile " << tile;
  const struct {
    uint32_t n_slots, n_expert, max_tiles, tile;
  } push{static_cast<uint32_t>(n_slots), static_cast<uint32_t>(n_expert),
         static_cast<uint32_t>(MaxExpertTiles(n_slots, n_expert, tile)),
         static_cast<uint32_t>(tile)};
  r->Dispatch(*moe_group_, {ids, order, tiles}, push, 1);
}

void Kernels::GemmExpertsGrouped(Recorder* r, const GpuMatrix& w, const Buffer& x,
                                 const Buffer& tiles, const Buffer& order, int64_t n_slots,
                                 int64_t x_div, const Buffer& y, int64_t tile) const {
  const int64_t max_tiles = MaxExpertTiles(n_slots, w.n_experts, tile);
  UF_CHECK(n_slots >= 1 && max_tiles <= 65535 && x_div >= 1) << "expert slots " << n_slots;
  const int index = TileIndex(tile);  // 1, 2 or 3: gemmg_[index - 1]
  UF_CHECK(index >= 1) << "grouped tile " << tile;
  // F16 and BF16 tiles of 16 and 32 compute two rows a subgroup, as Gemm's do.
  const int64_t rows_per_group = rows_per_group_ * RowsPerSubgroup(w.type, index);
  uint32_t gx, gy;
  Grid((w.rows + rows_per_group - 1) / rows_per_group, &gx, &gy);
  const auto it = gemmg_[index - 1].find(w.type);
  UF_CHECK(it != gemmg_[index - 1].end()) << "no grouped expert GEMM for " << GgmlTypeName(w.type);
  const Pipeline* wide = Wide(kGemmG + index - 1, w);
  r->Dispatch(wide != nullptr ? *wide : *it->second, {w.buffer, x, y, tiles, order},
              MakeExpertPush(w, n_slots, x_div), static_cast<uint32_t>(max_tiles), gx, gy);
}

void Kernels::GemmExperts(Recorder* r, const GpuMatrix& w, const Buffer& x, const Buffer& ids,
                          int64_t n_slots, int64_t x_div, const Buffer& y) const {
  UF_CHECK(n_slots >= 1 && n_slots <= 65535 && x_div >= 1) << "expert slots " << n_slots;
  uint32_t gx, gy;
  Grid((w.rows + rows_per_group_ - 1) / rows_per_group_, &gx, &gy);
  const auto it = gemmx_.find(w.type);
  UF_CHECK(it != gemmx_.end()) << "no expert GEMM for " << GgmlTypeName(w.type);
  const Pipeline* wide = Wide(kGemmX, w);
  r->Dispatch(wide != nullptr ? *wide : *it->second, {w.buffer, x, y, ids},
              MakeExpertPush(w, n_slots, x_div), gx, gy, static_cast<uint32_t>(n_slots));
}

void Kernels::Route(Recorder* r, const Buffer& logits, const Buffer* bias, const Buffer& ids,
                    const Buffer& weights, int64_t n, const RouteParams& rp) const {
  struct {
    uint32_t n, n_expert, k, softmax_all, norm, has_bias;
    float scale;
  } push{static_cast<uint32_t>(n),
         static_cast<uint32_t>(rp.n_expert),
         static_cast<uint32_t>(rp.k),
         rp.softmax_all ? 1u : 0u,
         rp.norm ? 1u : 0u,
         bias != nullptr ? 1u : 0u,
         rp.scale};
  UF_CHECK(rp.n_expert <= kMaxExperts && rp.k <= kMaxExpertsUsed) << rp.k << " of " << rp.n_expert;
  // One workgroup per token. Without a bias, binding 1 is never read: any buffer will do.
  uint32_t gx, gy;
  Grid(n, &gx, &gy);
  r->Dispatch(*route_, {logits, bias != nullptr ? *bias : logits, ids, weights}, push, gx, gy);
}

void Kernels::MoeSum(Recorder* r, const Buffer& out, const Buffer& weights, const Buffer& y,
                     int64_t n, int64_t k, int64_t cols, const Buffer* bias, const Buffer* ids,
                     bool accumulate, const NormTail* norm) const {
  UF_CHECK((bias == nullptr) == (ids == nullptr));
  if (norm != nullptr) {
    UF_CHECK(moe_sum_stages_ != nullptr && cols % ActivationBlock(norm->act) == 0 &&
             norm->w != nullptr && norm->y != nullptr && norm->counter != nullptr &&
             (norm->act == Activation::kF32 || norm->q != nullptr))
        << "MoeSum norm tail: " << cols << " columns";
  }
  struct {
    uint32_t n, k, cols, has_bias, acc, norm, format, q_d_off;
    float eps;
  } push{static_cast<uint32_t>(n * cols),
         static_cast<uint32_t>(k),
         static_cast<uint32_t>(cols),
         bias != nullptr ? 1u : 0u,
         accumulate ? 1u : 0u,
         norm != nullptr ? 1u : 0u,
         norm != nullptr ? static_cast<uint32_t>(norm->act) : 0u,
         norm != nullptr && norm->act != Activation::kF32 ? FusedDOff(norm->act, n * cols) : 0u,
         norm != nullptr ? norm->eps : 0.0f};
  uint32_t gx, gy;
  Grid((n * cols + 63) / 64, &gx, &gy);
  // Without a bias, bindings 3 and 4 are never read, nor 5-8 without the norm: any buffer will
  // do (y for the ones the tail writes: a binding declared writable counts as written).
  std::vector<BufferRange> buffers = {out, weights, y, bias != nullptr ? *bias : out,
                                      ids != nullptr ? *ids : out};
  if (norm != nullptr) {
    buffers.insert(buffers.end(),
                   {*norm->w, *norm->y, norm->q != nullptr ? *norm->q : y, *norm->counter});
  }
  r->Dispatch(norm != nullptr ? *moe_sum_stages_ : *moe_sum_, buffers, push, gx, gy);
}

void Kernels::SwiGluOai(Recorder* r, const Buffer& gate, const Buffer& up, const Buffer& gate_b,
                        const Buffer& up_b, const Buffer& ids, int64_t slots, int64_t ff) const {
  struct {
    uint32_t n, ff;
  } push{static_cast<uint32_t>(slots * ff), static_cast<uint32_t>(ff)};
  uint32_t gx, gy;
  Grid((slots * ff + 63) / 64, &gx, &gy);
  r->Dispatch(*swiglu_oai_, {gate, up, gate_b, up_b, ids}, push, gx, gy);
}

}  // namespace uf::gpu
