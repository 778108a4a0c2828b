// The mixture-of-experts kernels: the experts' GEMMs (one slot, or grouped by expert in tiles of
// 8, 16 or 32 slots), the grouping itself, the router's top k and the weighted sum of the k
// outputs, gpt-oss's clamped SwiGLU.
#include <algorithm>
#include <cstdint>
#include <string>
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

bool Kernels::CanSumTail(const GpuMatrix& w) const {
  const auto it = gemmx_.find(w.type);
  if (it == gemmx_.end()) return false;
  const Pipeline* wide = Wide(kGemmX, w);
  return sums_.count(wide != nullptr ? wide : it->second) != 0;
}

int64_t Kernels::SumCounterWords(const GpuMatrix& w) const {
  uint32_t gx, gy;
  Grid((w.rows + rows_per_group_ - 1) / rows_per_group_, &gx, &gy);
  return 1 + static_cast<int64_t>(gx) * gy;  // word 0, then one per workgroup of a slot
}

void Kernels::GemmExperts(Recorder* r, const GpuMatrix& w, const Buffer& x, const Buffer& ids,
                          int64_t n_slots, int64_t x_div, const Buffer& y,
                          const ExpertSum* sum) const {
  UF_CHECK(n_slots >= 1 && n_slots <= 65535 && x_div >= 1) << "expert slots " << n_slots;
  uint32_t gx, gy;
  Grid((w.rows + rows_per_group_ - 1) / rows_per_group_, &gx, &gy);
  const auto it = gemmx_.find(w.type);
  UF_CHECK(it != gemmx_.end()) << "no expert GEMM for " << GgmlTypeName(w.type);
  const Pipeline* wide = Wide(kGemmX, w);
  const Pipeline* pipeline = wide != nullptr ? wide : it->second;
  const ExpertPush push = MakeExpertPush(w, n_slots, x_div);
  if (sum == nullptr) {
    r->Dispatch(*pipeline, {w.buffer, x, y, ids}, push, gx, gy, static_cast<uint32_t>(n_slots));
    return;
  }
  const NormTail* norm = sum->norm;
  UF_CHECK(CanSumTail(w) && x_div == 1 && sum->weights != nullptr && sum->x != nullptr &&
           sum->counter != nullptr &&
           (norm == nullptr ||
            (w.rows % ActivationBlock(norm->act) == 0 && norm->w != nullptr && norm->y != nullptr &&
             (norm->act == Activation::kF32 || norm->q != nullptr))))
      << "expert GEMM sum tail: " << w.rows << " rows, " << n_slots << " slots";
  const struct {
    ExpertPush e;
    uint32_t group_rows, has_bias, norm, format, q_d_off;
    float eps;
  } sum_push{push,
             static_cast<uint32_t>(rows_per_group_),
             sum->bias != nullptr ? 1u : 0u,
             norm != nullptr ? 1u : 0u,
             norm != nullptr ? static_cast<uint32_t>(norm->act) : 0u,
             norm != nullptr && norm->act != Activation::kF32 ? FusedDOff(norm->act, w.rows) : 0u,
             norm != nullptr ? norm->eps : 0.0f};
  // Without a bias binding 6 is never read, nor 8-10 without the norm: any buffer will do (y for
  // the ones declared writable: this dispatch's own).
  const auto or_y = [&y](const Buffer* b) -> const Buffer& { return b != nullptr ? *b : y; };
  r->Dispatch(*sums_.at(pipeline),
              {w.buffer, x, y, ids, *sum->weights, *sum->x, or_y(sum->bias), *sum->counter,
               or_y(norm != nullptr ? norm->w : nullptr), or_y(norm != nullptr ? norm->y : nullptr),
               or_y(norm != nullptr ? norm->q : nullptr)},
              sum_push, gx, gy, static_cast<uint32_t>(n_slots));
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
                     bool accumulate) const {
  UF_CHECK((bias == nullptr) == (ids == nullptr));
  struct {
    uint32_t n, k, cols, has_bias, acc;
  } push{static_cast<uint32_t>(n * cols), static_cast<uint32_t>(k), static_cast<uint32_t>(cols),
         bias != nullptr ? 1u : 0u, accumulate ? 1u : 0u};
  uint32_t gx, gy;
  Grid((n * cols + 63) / 64, &gx, &gy);
  // Without a bias, bindings 3 and 4 are never read: any buffer will do.
  r->Dispatch(*moe_sum_,
              {out, weights, y, bias != nullptr ? *bias : out, ids != nullptr ? *ids : out}, push,
              gx, gy);
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
