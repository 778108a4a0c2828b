#include "gpu/vk_kernels.h"

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <iterator>
#include <string>
#include <utility>

#include "base/check.h"
#include "base/log.h"
#include "gpu/env_choice.h"
#include "gpu/vk_kernels_internal.h"

namespace uf::gpu {

using kernels_internal::FusedDOff;
using kernels_internal::FusedFormat;
using kernels_internal::GemmShape;
using kernels_internal::Grid;
using kernels_internal::Groups64;
using kernels_internal::ShapeOf;

namespace {

// Bindings of the token-tiled GEMMs (gemm.glsl, not the experts'): W, x, y, bias and the norm
// tail's weights, normalized rows, their activation and counter.
constexpr int kGemmBindings = 8;
// The *_stages twins': binding 8 is the RoPE / store epilogue's tokens (gemm.glsl).
constexpr int kStagesBindings = 9;

// The grouped expert GEMM `name` (gemmg_*, gemmgw_f16) for the grouped tile kTiles[g + 1]:
// gemmg_* itself for 8, gemmg16_* and gemmg32_* (CMakeLists.txt compiles them with -DkTile).
std::string GroupedName(const std::string& name, int g) {
  return g == 0 ? name : "gemmg" + std::to_string(8 << g) + name.substr(5);
}

}  // namespace

GemvVariant ResolveGemv(GemvVariant gemv) {
  static constexpr Choices<GemvVariant, 3> kGemvs = {
      {"tune", GemvVariant::kTune}, {"basic", GemvVariant::kBasic}, {"wide", GemvVariant::kWide}};
  return gemv != GemvVariant::kDefault ? gemv : EnvChoice("UF_GPU_GEMV", kGemvs);
}

bool IntegerDotByDefault(const DeviceInfo& d) {
  const char* env = std::getenv("UF_GPU_DOT4");
  return d.integer_dot && (env == nullptr || std::string(env) != "0");
}

int64_t ResolveMaxTile(int64_t max_tile) {
  if (max_tile != 0) {
    UF_CHECK(max_tile == 8 || max_tile == 16 || max_tile == 32) << "token tile " << max_tile;
    return max_tile;
  }
  static constexpr Choices<int64_t, 3> kTiles = {{"32", 32}, {"8", 8}, {"16", 16}};
  return EnvChoice("UF_GPU_TILE", kTiles);
}

StatusOr<Kernels> Kernels::Create(Context* ctx, GemvVariant gemv, int64_t max_tile,
                                  IntegerDot dot) {
  if (dot == IntegerDot::kDefault) {
    if (!IntegerDotByDefault(ctx->info())) return Create(ctx, gemv, max_tile, IntegerDot::kOff);
    // A driver that refuses the *_dot4 pipelines (their instruction is declared by hand through
    // GL_EXT_spirv_intrinsics; spirv-val passes them, lavapipe runs them, no GPU has yet) costs
    // the packed dot, not the backend.
    auto on = Create(ctx, gemv, max_tile, IntegerDot::kOn);
    if (on.ok()) return on;
    UF_LOG(WARNING) << "vulkan: the packed int8 dot kernels failed (" << on.status().ToString()
                    << "); the integer GEMMs take byte extracts";
    ctx->DisableIntegerDot();
    return Create(ctx, gemv, max_tile, IntegerDot::kOff);
  }
  Kernels k;
  if (dot == IntegerDot::kOn && !ctx->info().integer_dot) {
    return UnavailableError("Vulkan device " + ctx->info().name +
                            " lacks shaderIntegerDotProduct, which the *_dot4 kernels need");
  }
  k.dot4_ = dot == IntegerDot::kOn;
  // The name of an integer GEMM's kernel (a float one's as it is).
  const auto gemm_name = [&k](std::string name, GgmlType type) {
    const bool integer =
        type != GgmlType::kF32 && type != GgmlType::kF16 && type != GgmlType::kBF16;
    return k.dot4_ && integer ? name + "_dot4" : name;
  };
  // A token-tiled GEMM's pipeline; the name of its *_stages twin (the norm tail and the RoPE /
  // store epilogue), which AddStages makes, kept in stage_names_.
  const auto tiled = [&k, ctx](const std::string& name) -> StatusOr<const Pipeline*> {
    UF_ASSIGN_OR_RETURN(const Pipeline* plain, ctx->GetPipeline(name, kGemmBindings));
    k.stage_names_[plain] = name + "_stages";
    return plain;
  };
  k.rows_per_group_ = 64 / ctx->info().subgroup_size;
  // The quantizers' workgroups (64 invocations) hold 64 / lanes subgroups, lanes the subgroup
  // size up to 64 (a wider subgroup is one partly filled): Q8_K gives each subgroup one block of
  // 256, Q8_0 a pass of min(lanes / 8, 4) blocks of 32 (quant_q8.glsl's Q8_0BlocksPerPass). The
  // shaders take any per_group (a device whose subgroups differ from the reported size runs
  // them correctly, only with idle or looping subgroups).
  const uint32_t lanes = std::min<uint32_t>(ctx->info().subgroup_size, 64);
  k.q8k_per_group_ = 64 / lanes;
  k.q8_0_per_group_ = 64 / lanes * std::min<uint32_t>(lanes / std::min<uint32_t>(lanes, 8), 4);
  k.gemv_ = ResolveGemv(gemv);
  k.wide_ = k.gemv_ == GemvVariant::kWide;
  k.max_tile_ = ResolveMaxTile(max_tile);
  // The grouped experts' tile cap (GroupTile): UF_GPU_GROUP_TILE=8|16|32, for an A/B of the
  // experts' tiles alone (UF_GPU_TILE caps both).
  static constexpr Choices<int64_t, 3> kGroupTiles = {{"32", 32}, {"8", 8}, {"16", 16}};
  k.max_group_tile_ = std::min(k.max_tile_, EnvChoice("UF_GPU_GROUP_TILE", kGroupTiles));
  if (k.wide_) {
    // F16: every batch size (the wide order throughout); Q8_0 and Q4_0: one token only (the
    // same bits as gemm1_*, so the batched kernels stay the basic ones).
    UF_ASSIGN_OR_RETURN(k.wide_gemm_[kGemm1][GgmlType::kF16], tiled("gemm1w_f16"));
    UF_ASSIGN_OR_RETURN(k.wide_gemm_[kGemm8][GgmlType::kF16], tiled("gemm8w_f16"));
    UF_ASSIGN_OR_RETURN(k.wide_gemm_[kGemm16][GgmlType::kF16], tiled("gemm16w_f16"));
    UF_ASSIGN_OR_RETURN(k.wide_gemm_[kGemm32][GgmlType::kF16], tiled("gemm32w_f16"));
    UF_ASSIGN_OR_RETURN(k.wide_gemm_[kGemmX][GgmlType::kF16], ctx->GetPipeline("gemmxw_f16", 4));
    k.sum_names_[k.wide_gemm_[kGemmX][GgmlType::kF16]] = "gemmxw_f16_sum";
    for (int g = 0; g < 3; ++g) {
      UF_ASSIGN_OR_RETURN(k.wide_gemm_[kGemmG + g][GgmlType::kF16],
                          ctx->GetPipeline(GroupedName("gemmgw_f16", g), 5));
    }
  }
  if (k.wide_ || k.gemv_ == GemvVariant::kTune) {
    UF_ASSIGN_OR_RETURN(k.wide_gemm_[kGemm1][GgmlType::kQ8_0],
                        tiled(gemm_name("gemm1w_q8_0", GgmlType::kQ8_0)));
    UF_ASSIGN_OR_RETURN(k.wide_gemm_[kGemm1][GgmlType::kQ4_0],
                        tiled(gemm_name("gemm1w_q4_0", GgmlType::kQ4_0)));
  }
  for (const auto& [type, name] :
       std::initializer_list<std::pair<GgmlType, const char*>>{{GgmlType::kF32, "f32"},
                                                               {GgmlType::kF16, "f16"},
                                                               {GgmlType::kBF16, "bf16"},
                                                               {GgmlType::kQ8_0, "q8_0"},
                                                               {GgmlType::kQ4_0, "q4_0"},
                                                               {GgmlType::kQ6_K, "q6_k"},
                                                               {GgmlType::kQ4_K, "q4_k"},
                                                               {GgmlType::kMXFP4, "mxfp4"}}) {
    for (int i = 0; i < kNumTiles; ++i) {
      UF_ASSIGN_OR_RETURN(k.gemm_[i][type],
                          tiled(gemm_name("gemm" + std::to_string(kTiles[i]) + "_" + name, type)));
    }
    const std::string gemmx = gemm_name(std::string("gemmx_") + name, type);
    UF_ASSIGN_OR_RETURN(k.gemmx_[type], ctx->GetPipeline(gemmx, 4));
    k.sum_names_[k.gemmx_[type]] = gemmx + "_sum";
    for (int g = 0; g < 3; ++g) {
      UF_ASSIGN_OR_RETURN(
          k.gemmg_[g][type],
          ctx->GetPipeline(gemm_name(GroupedName(std::string("gemmg_") + name, g), type), 5));
    }
  }
  UF_ASSIGN_OR_RETURN(k.quantize_, ctx->GetPipeline("quantize_q8_0", 2));
  UF_ASSIGN_OR_RETURN(k.quantize_k_, ctx->GetPipeline("quantize_q8_k", 2));
  UF_ASSIGN_OR_RETURN(k.quantize_pairs_, ctx->GetPipeline("quantize_pairs", 2));
  UF_ASSIGN_OR_RETURN(k.rmsnorm_, ctx->GetPipeline("rmsnorm", 3));
  UF_ASSIGN_OR_RETURN(k.rmsnorm_q_, ctx->GetPipeline("rmsnorm_q", 4));
  UF_ASSIGN_OR_RETURN(k.swiglu_q_, ctx->GetPipeline("swiglu_q", 7));
  UF_ASSIGN_OR_RETURN(k.add_, ctx->GetPipeline("add", 2));
  UF_ASSIGN_OR_RETURN(k.swiglu_, ctx->GetPipeline("swiglu", 3));
  UF_ASSIGN_OR_RETURN(k.rope_, ctx->GetPipeline("rope", 3));
  UF_ASSIGN_OR_RETURN(k.kv_store_, ctx->GetPipeline("kv_store", 5));
  UF_ASSIGN_OR_RETURN(k.attention_, ctx->GetPipeline("attention", 8));
  UF_ASSIGN_OR_RETURN(k.attention_combine_, ctx->GetPipeline("attention_combine", 5));
  UF_ASSIGN_OR_RETURN(k.attention_tiled_, ctx->GetPipeline("attention_tiled", 8));
  k.max_shared_bytes_ = ctx->info().max_shared_bytes;
  UF_ASSIGN_OR_RETURN(k.embed_, ctx->GetPipeline("embed", 3));
  UF_ASSIGN_OR_RETURN(k.embed_q_, ctx->GetPipeline("embed_q", 6));
  UF_ASSIGN_OR_RETURN(k.gather_, ctx->GetPipeline("gather", 3));
  UF_ASSIGN_OR_RETURN(k.argmax_, ctx->GetPipeline("argmax", 6));
  UF_ASSIGN_OR_RETURN(k.sample_, ctx->GetPipeline("sample", 7));
  UF_ASSIGN_OR_RETURN(k.edit_rows_, ctx->GetPipeline("edit_rows", 4));
  UF_ASSIGN_OR_RETURN(k.chain_redo_, ctx->GetPipeline("chain_redo", 4));
  UF_ASSIGN_OR_RETURN(k.topk_, ctx->GetPipeline("topk", 3));
  UF_ASSIGN_OR_RETURN(k.copy_rows_, ctx->GetPipeline("copy_rows", 3));
  UF_ASSIGN_OR_RETURN(k.mask_rows_, ctx->GetPipeline("mask_rows", 3));
  UF_ASSIGN_OR_RETURN(k.allow_rows_, ctx->GetPipeline("allow_rows", 2));
  UF_ASSIGN_OR_RETURN(k.route_, ctx->GetPipeline("route", 4));
  UF_ASSIGN_OR_RETURN(k.moe_group_, ctx->GetPipeline("moe_group", 3));
  UF_ASSIGN_OR_RETURN(k.moe_sum_, ctx->GetPipeline("moe_sum", 5));
  UF_ASSIGN_OR_RETURN(k.swiglu_oai_, ctx->GetPipeline("swiglu_oai", 5));
  return k;
}

const Pipeline* Kernels::GemmPipeline(GgmlType type, int tile_index) const {
  const auto it = gemm_[tile_index].find(type);
  UF_CHECK(it != gemm_[tile_index].end()) << "no GEMM for " << GgmlTypeName(type);
  return it->second;
}

int64_t Kernels::GemmTile(int64_t n) const {
  if (n <= 1) return 1;
  // The fewest tiles any allowed width gives is the widest's; of the widths that give that many,
  // the narrowest, so that a partial tile carries the fewest idle token slots (a CPU driver
  // executes them; a GPU skips them at a uniform branch but still allocates their registers).
  const int64_t fewest = (n + max_tile_ - 1) / max_tile_;
  for (int64_t tile : {int64_t{8}, int64_t{16}}) {
    if (tile <= max_tile_ && (n + tile - 1) / tile == fewest) return tile;
  }
  return max_tile_;
}

int Kernels::TileIndex(int64_t tile) {
  const auto it = std::find(std::begin(kTiles), std::end(kTiles), tile);
  UF_CHECK(it != std::end(kTiles)) << "token tile " << tile;
  return static_cast<int>(it - std::begin(kTiles));
}

const Pipeline* Kernels::Wide(int kind, const GpuMatrix& w) const {
  if (!wide_ && !wide_now_) return nullptr;  // (kTune made the Q8_0 and Q4_0 gemm1w_* only)
  if (w.type == GgmlType::kF16 && w.cols % 8 != 0) return nullptr;  // 16-byte aligned rows
  const auto it = wide_gemm_[kind].find(w.type);
  return it == wide_gemm_[kind].end() ? nullptr : it->second;
}

Status Kernels::AddStages(Context* ctx, GgmlType type) {
  if (TakesPairActivation(type) && glu_[0].count(type) == 0) {
    const std::string name = type == GgmlType::kF16 ? "f16" : "bf16";
    UF_ASSIGN_OR_RETURN(glu_[0][type], ctx->GetPipeline("gemm1_glu_" + name, 4));
    UF_ASSIGN_OR_RETURN(glu_[1][type], ctx->GetPipeline("gemm8_glu_" + name, 4));
    for (int i = 0; i < kNumTiles; ++i) {
      UF_ASSIGN_OR_RETURN(
          gemm_qkv_[i][type],
          ctx->GetPipeline("gemm" + std::to_string(kTiles[i]) + "_qkv_" + name, 10));
    }
  }
  for (int kind = 0; kind < kNumTiles; ++kind) {
    for (const auto* pipelines : {&gemm_[kind], &wide_gemm_[kind]}) {
      const auto it = pipelines->find(type);
      if (it == pipelines->end() || stages_.count(it->second) != 0) continue;
      UF_ASSIGN_OR_RETURN(stages_[it->second],
                          ctx->GetPipeline(stage_names_.at(it->second), kStagesBindings));
    }
  }
  return OkStatus();
}

Status Kernels::AddMoeTails(Context* ctx, GgmlType router, GgmlType down) {
  for (const auto* pipelines : {&gemm_[kGemm1], &wide_gemm_[kGemm1]}) {
    const auto it = pipelines->find(router);
    if (it == pipelines->end() || routes_.count(it->second) != 0) continue;
    std::string name = stage_names_.at(it->second);  // NAME_stages
    name.replace(name.size() - 7, 7, "_route");
    UF_ASSIGN_OR_RETURN(routes_[it->second], ctx->GetPipeline(name, kStagesBindings));
  }
  for (const auto* pipelines : {&gemmx_, &wide_gemm_[kGemmX]}) {
    const auto it = pipelines->find(down);
    if (it == pipelines->end() || sums_.count(it->second) != 0) continue;
    UF_ASSIGN_OR_RETURN(sums_[it->second], ctx->GetPipeline(sum_names_.at(it->second), 11));
  }
  return OkStatus();
}

bool Kernels::CanRouteTail(const GpuMatrix& w, int64_t n, const RouteParams& rp) const {
  if (n != 1 || w.n_experts != 1 || UsesMatMul(w, n) || rp.n_expert != w.rows ||
      rp.n_expert > kMaxExperts || rp.k < 1 || rp.k > kMaxExpertsUsed) {
    return false;
  }
  const Pipeline* wide = Wide(kGemm1, w);
  return routes_.count(wide != nullptr ? wide : GemmPipeline(w.type, 0)) != 0;
}

bool Kernels::HasStages(GgmlType type) const {
  const auto it = gemm_[0].find(type);
  return it != gemm_[0].end() && stages_.count(it->second) != 0;
}

Status Kernels::AddMatMul(Context* ctx, MatMul mode) {
  UF_CHECK(mode == MatMul::kTiled || mode == MatMul::kCoopMat) << "AddMatMul: tiled or coopmat";
  if (mode == MatMul::kCoopMat && !ctx->info().coopmat) {
    UF_LOG(WARNING) << "vulkan: " << ctx->info().name
                    << " lacks the matrix units the coopmat GEMM needs (VK_NV_cooperative_matrix, "
                       "16x16x16 f16 fragments, 32-lane subgroups); the tiled GEMM takes its "
                       "plain kernels";
    mode = MatMul::kTiled;
  }
  const std::pair<GgmlType, const char*> kTypes[] = {
      {GgmlType::kF16, "f16"},   {GgmlType::kBF16, "bf16"}, {GgmlType::kQ8_0, "q8_0"},
      {GgmlType::kQ4_0, "q4_0"}, {GgmlType::kQ4_K, "q4_k"}, {GgmlType::kQ6_K, "q6_k"}};
  const auto make = [&](const char* suffix) -> Status {
    for (const auto& [type, name] : kTypes) {
      UF_ASSIGN_OR_RETURN(matmul_pipelines_[type],
                          ctx->GetPipeline(std::string("gemm_tiled_") + name + suffix, 4));
    }
    return OkStatus();
  };
  if (mode == MatMul::kCoopMat) {
    // As with the packed dot: a driver that refuses the kernels costs the matrix units only.
    const Status s = make("_coopmat");
    if (s.ok()) {
      matmul_ = MatMul::kCoopMat;
      return OkStatus();
    }
    UF_LOG(WARNING) << "vulkan: the coopmat GEMM failed (" << s.ToString()
                    << "); the tiled GEMM takes its plain kernels";
    ctx->DisableCoopMat();
  }
  UF_RETURN_IF_ERROR(make(""));
  matmul_ = MatMul::kTiled;
  return OkStatus();
}

bool Kernels::UsesMatMul(const GpuMatrix& w, int64_t n) const {
  return matmul_pipelines_.count(w.type) != 0 && w.n_experts == 1 && w.cols % 32 == 0 &&
         n >= kMatMulMinTokens;
}

bool Kernels::CanRopeStore(const GpuMatrix& w, int64_t n, const AttentionShape& s,
                           bool neox) const {
  if (UsesMatMul(w, n)) return false;
  if (n < 1 || neox || s.q8 || s.head_dim % 2 != 0 || w.n_experts != 1 || !HasStages(w.type)) {
    return false;
  }
  const int64_t group_rows = rows_per_group_ * RowsPerSubgroup(w.type, TileIndex(GemmTile(n)));
  return group_rows % 2 == 0 && w.rows % s.head_dim == 0;
}

void Kernels::Gemm(Recorder* r, const GpuMatrix& w, const Buffer& x, int64_t n, const Buffer& y,
                   uint32_t y_off, int64_t y_stride, bool accumulate, const Buffer* bias,
                   const NormTail* norm, const RopeStore* rope, const RouteTail* route) const {
  UF_CHECK(!(accumulate && bias != nullptr)) << "a GEMM adds a bias or accumulates, not both";
  if (route != nullptr) {
    UF_CHECK(norm == nullptr && rope == nullptr && !accumulate && y_off == 0 &&
             (y_stride == 0 || y_stride == w.rows) && route->ids != nullptr &&
             route->weights != nullptr && route->counter != nullptr &&
             CanRouteTail(w, n, route->params))
        << "GEMM route tail: " << w.rows << " rows, " << n << " tokens";
  }
  if (norm != nullptr) {
    UF_CHECK(y_off == 0 && (y_stride == 0 || y_stride == w.rows) &&
             w.rows % ActivationBlock(norm->act) == 0 && norm->w != nullptr && norm->y != nullptr &&
             norm->counter != nullptr && (norm->act == Activation::kF32 || norm->q != nullptr))
        << "GEMM norm tail: " << w.rows << " rows";
  }
  const bool head =
      rope != nullptr && (rope->of == RopeStoreOf::kQNorm || rope->of == RopeStoreOf::kKNorm);
  if (rope != nullptr) {
    UF_CHECK(norm == nullptr && y_off == 0 && (y_stride == 0 || y_stride == w.rows) &&
             rope->shape != nullptr && rope->cs != nullptr && rope->tok != nullptr &&
             (rope->of == RopeStoreOf::kQ || rope->of == RopeStoreOf::kQNorm ||
              rope->cache != nullptr) &&
             (head ? bias == nullptr && !accumulate && rope->norm != nullptr &&
                         rope->counter != nullptr && CanHeadNorm(w, n, *rope->shape)
                   : CanRopeStore(w, n, *rope->shape, false)))
        << "GEMM RoPE / store epilogue: " << w.rows << " rows";
  }
  const GemmShape shape = ShapeOf(w, n);
  if (norm == nullptr && rope == nullptr && route == nullptr && UsesMatMul(w, n)) {
    const struct {
      uint32_t rows, cols, n, x_stride, y_off, y_stride, acc, bias, w_d_off, x_d_off;
    } push{static_cast<uint32_t>(w.rows),
           static_cast<uint32_t>(w.cols),
           static_cast<uint32_t>(n),
           shape.x_stride,
           y_off,
           static_cast<uint32_t>(y_stride > 0 ? y_stride : w.rows),
           accumulate ? 1u : 0u,
           bias != nullptr ? 1u : 0u,
           w.d_off,
           shape.x_d_off};
    uint32_t gx, gy;
    Grid((w.rows + 31) / 32, &gx, &gy);  // blocks of 32 rows x 64 tokens (gemm_tiled.glsl)
    // The token blocks as the grid's x (TILES_INNER, common.glsl), the row blocks y and z.
    r->Dispatch(*matmul_pipelines_.at(w.type), {w.buffer, x, y, bias != nullptr ? *bias : y}, push,
                static_cast<uint32_t>((n + 63) / 64), gx, gy);
    return;
  }
  const int64_t tile = GemmTile(n);
  const int index = TileIndex(tile);
  const int64_t rows_per_group = rows_per_group_ * RowsPerSubgroup(w.type, index);
  struct {
    uint32_t rows, cols, w_d_off, n, x_stride, x_d_off, y_off, y_stride, acc, bias, norm, format,
        q_d_off;
    float eps;
    uint32_t rope, group_rows, head_dim, rope_dim, n_rows, cache_off, row_words, route, route_k;
    float route_scale;
  } push{static_cast<uint32_t>(w.rows),
         shape.cols,
         w.d_off,
         static_cast<uint32_t>(n),
         shape.x_stride,
         shape.x_d_off,
         y_off,
         static_cast<uint32_t>(y_stride > 0 ? y_stride : w.rows),
         accumulate ? 1u : 0u,
         bias != nullptr ? 1u : 0u,
         norm != nullptr ? 1u : 0u,
         norm != nullptr ? static_cast<uint32_t>(norm->act) : 0u,
         norm != nullptr && norm->act != Activation::kF32 ? FusedDOff(norm->act, n * w.rows) : 0u,
         norm != nullptr ? norm->eps
         : head          ? rope->eps
                         : 0.0f,
         rope != nullptr ? static_cast<uint32_t>(rope->of) + (head && rope->neox ? 2u : 0u) : 0u,
         static_cast<uint32_t>(rows_per_group),
         rope != nullptr ? static_cast<uint32_t>(rope->shape->head_dim) : 0u,
         rope != nullptr ? static_cast<uint32_t>(rope->rope_dim) : 0u,
         rope != nullptr ? static_cast<uint32_t>(rope->shape->n_rows) : 0u,
         rope == nullptr               ? 0u
         : rope->of == RopeStoreOf::kV ? rope->shape->v_off
                                       : rope->shape->k_off,
         rope != nullptr ? static_cast<uint32_t>(rope->shape->row_words()) : 0u,
         route == nullptr
             ? 0u
             : 1u | (route->params.softmax_all ? 2u : 0u) | (route->params.norm ? 4u : 0u),
         route != nullptr ? static_cast<uint32_t>(route->params.k) : 0u,
         route != nullptr ? route->params.scale : 0.0f};
  // One token: gemm1_*, else tiles of GemmTile(n) tokens (the grid's x, TILES_INNER in
  // common.glsl; the row groups y and z). All compute a token's row the same way
  // (tests/gpu_kernels_test.cc checks the bits).
  uint32_t gx, gy;
  Grid((w.rows + rows_per_group - 1) / rows_per_group, &gx, &gy);
  const Pipeline* wide = Wide(index, w);
  // Bindings 4-7: the norm tail's, 4, 5 and 8 the RoPE / store epilogue's, or 5-7 the route
  // tail's (its weights, ids and counter); without a bias binding 3 is never read, nor 4-8
  // without any: any buffer will do (y: a binding the shader declares writable counts as
  // written, and y is this dispatch's own).
  const auto or_y = [&y](const Buffer* b) -> const Buffer& { return b != nullptr ? *b : y; };
  // The head tail: its angles at 3 (no bias then), the norm's weights at 4, its counters at 7.
  const Buffer* b3 = bias ? bias : head ? rope->cs : nullptr;
  const Buffer* b4 = norm ? norm->w : head ? rope->norm : rope ? rope->cs : nullptr;
  const Buffer* b5 = norm ? norm->y : rope ? rope->cache : route ? route->weights : nullptr;
  const Buffer* b6 = norm ? norm->q : route ? route->ids : nullptr;
  const Buffer* b7 = norm ? norm->counter : route ? route->counter : head ? rope->counter : nullptr;
  std::vector<BufferRange> buffers = {w.buffer, x,        y,        or_y(b3),
                                      or_y(b4), or_y(b5), or_y(b6), or_y(b7)};
  const Pipeline* pipeline = wide != nullptr ? wide : GemmPipeline(w.type, index);
  if (route != nullptr) {
    pipeline = routes_.at(pipeline);  // CanRouteTail checked it is there
    buffers.push_back(y);             // binding 8, never read
  } else if (norm != nullptr || rope != nullptr) {
    const auto it = stages_.find(pipeline);
    UF_CHECK(it != stages_.end()) << "GEMM tail or epilogue for " << GgmlTypeName(w.type)
                                  << " without AddStages";
    pipeline = it->second;
    buffers.push_back(or_y(rope ? rope->tok : nullptr));
  }
  r->Dispatch(*pipeline, buffers, push, static_cast<uint32_t>((n + tile - 1) / tile), gx, gy);
}

bool Kernels::CanHeadNorm(const GpuMatrix& w, int64_t n, const AttentionShape& s) const {
  if (n != 1 || UsesMatMul(w, n) || s.q8 || s.head_dim % 2 != 0 || s.head_dim > kMaxHeadTailDim ||
      w.n_experts != 1 || !HasStages(w.type)) {
    return false;
  }
  const int64_t group_rows = rows_per_group_ * RowsPerSubgroup(w.type, TileIndex(GemmTile(n)));
  return s.head_dim % group_rows == 0 && w.rows % s.head_dim == 0;
}

bool Kernels::CanGemmGlu(const GpuMatrix& gate, const GpuMatrix& up, int64_t n) const {
  return glu_[0].count(gate.type) != 0 && up.type == gate.type && up.rows == gate.rows &&
         up.cols == gate.cols && gate.rows % 2 == 0 && gate.n_experts == 1 && up.n_experts == 1 &&
         n >= 1 && n <= 8 && Wide(kGemm1, gate) == nullptr && Wide(kGemm8, gate) == nullptr;
}

void Kernels::GemmGlu(Recorder* r, const GpuMatrix& gate, const GpuMatrix& up, const Buffer& x,
                      int64_t n, const Buffer& h) const {
  UF_CHECK(CanGemmGlu(gate, up, n)) << "GemmGlu: " << GgmlTypeName(gate.type) << " " << gate.rows
                                    << " x " << gate.cols << ", " << n << " tokens";
  const struct {
    uint32_t rows, cols, n;
  } push{static_cast<uint32_t>(gate.rows), static_cast<uint32_t>(gate.cols),
         static_cast<uint32_t>(n)};
  uint32_t gx, gy;
  Grid((gate.rows / 2 + rows_per_group_ - 1) / rows_per_group_, &gx, &gy);
  r->Dispatch(*glu_[n == 1 ? 0 : 1].at(gate.type), {gate.buffer, up.buffer, x, h}, push, 1, gx, gy);
}

void Kernels::Quantize(Recorder* r, const Buffer& x, uint32_t x_off, int64_t values,
                       const Buffer& q) const {
  UF_CHECK(values % 32 == 0);
  const auto blocks = static_cast<uint32_t>(values / 32);
  struct {
    uint32_t blocks, x_off, d_off, per_group;
  } push{blocks, x_off, blocks * 8, q8_0_per_group_};
  uint32_t gx, gy;
  Grid((blocks + q8_0_per_group_ - 1) / q8_0_per_group_, &gx, &gy);
  r->Dispatch(*quantize_, {x, q}, push, gx, gy);
}

void Kernels::QuantizeK(Recorder* r, const Buffer& x, uint32_t x_off, int64_t values,
                        const Buffer& q) const {
  UF_CHECK(values % 256 == 0);
  const auto blocks = static_cast<uint32_t>(values / 256);
  struct {
    uint32_t blocks, x_off, d_off, per_group;
  } push{blocks, x_off, blocks * 72, q8k_per_group_};
  uint32_t gx, gy;
  Grid((blocks + q8k_per_group_ - 1) / q8k_per_group_, &gx, &gy);
  r->Dispatch(*quantize_k_, {x, q}, push, gx, gy);
}

void Kernels::QuantizePairs(Recorder* r, const Buffer& x, uint32_t x_off, int64_t values, bool bf16,
                            const Buffer& q) const {
  UF_CHECK(values % 2 == 0);
  struct {
    uint32_t pairs, x_off, bf16;
  } push{static_cast<uint32_t>(values / 2), x_off, bf16 ? 1u : 0u};
  uint32_t gx, gy;
  Grid((values / 2 + 63) / 64, &gx, &gy);
  r->Dispatch(*quantize_pairs_, {x, q}, push, gx, gy);
}

void Kernels::QuantizeAs(Recorder* r, Activation act, const Buffer& x, uint32_t x_off,
                         int64_t values, const Buffer& q) const {
  UF_CHECK(act != Activation::kF32) << "f32 activations are not quantized";
  if (act == Activation::kQ8_0) {
    Quantize(r, x, x_off, values, q);
  } else if (act == Activation::kQ8_K) {
    QuantizeK(r, x, x_off, values, q);
  } else {
    QuantizePairs(r, x, x_off, values, act == Activation::kBF16, q);
  }
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

void Kernels::RmsNormQuant(Recorder* r, const Buffer& x, const Buffer& w, const Buffer& y,
                           int64_t rows, int64_t n, float eps, Activation act,
                           const Buffer& q) const {
  UF_CHECK(n % ActivationBlock(act) == 0) << "rmsnorm_q: rows of " << n << " values";
  struct {
    uint32_t rows, n;
    float eps;
    uint32_t format, d_off;
  } push{static_cast<uint32_t>(rows), static_cast<uint32_t>(n), eps, FusedFormat(act),
         FusedDOff(act, rows * n)};
  uint32_t gx, gy;
  Grid(rows, &gx, &gy);
  r->Dispatch(*rmsnorm_q_, {x, w, y, q}, push, gx, gy);
}

namespace {
struct SwiGluQPush {
  uint32_t n, format, d_off, oai, ff;
};
constexpr uint64_t kSwiGluSpan = 512;  // values a workgroup of swiglu_q.comp (its kSpan)
}  // namespace

void Kernels::SwiGluQuant(Recorder* r, const Buffer& gate, const Buffer& up, const Buffer& out,
                          int64_t n, Activation act, const Buffer& q) const {
  const SwiGluQPush push{static_cast<uint32_t>(n), FusedFormat(act), FusedDOff(act, n), 0u, 1u};
  uint32_t gx, gy;
  Grid((n + kSwiGluSpan - 1) / kSwiGluSpan, &gx, &gy);
  // Bindings 4-6 (gpt-oss's biases and expert ids) are not read: any buffer will do.
  r->Dispatch(*swiglu_q_, {gate, up, out, q, gate, gate, gate}, push, gx, gy);
}

void Kernels::SwiGluOaiQuant(Recorder* r, const Buffer& gate, const Buffer& up,
                             const Buffer& gate_b, const Buffer& up_b, const Buffer& ids,
                             int64_t slots, int64_t ff, Activation act, const Buffer& q) const {
  const SwiGluQPush push{static_cast<uint32_t>(slots * ff), FusedFormat(act),
                         FusedDOff(act, slots * ff), 1u, static_cast<uint32_t>(ff)};
  uint32_t gx, gy;
  Grid((slots * ff + kSwiGluSpan - 1) / kSwiGluSpan, &gx, &gy);
  r->Dispatch(*swiglu_q_, {gate, up, gate, q, gate_b, up_b, ids}, push, gx, gy);
}

void Kernels::Add(Recorder* r, const Buffer& x, uint32_t x_off, const Buffer& y, uint32_t y_off,
                  int64_t n, int64_t period) const {
  struct {
    uint32_t n, x_off, y_off, x_period;
  } push{static_cast<uint32_t>(n), x_off, y_off, static_cast<uint32_t>(period)};
  uint32_t gx, gy;
  Grid((n + 63) / 64, &gx, &gy);
  r->Dispatch(*add_, {x, y}, push, gx, gy);
}

void Kernels::SwiGlu(Recorder* r, const Buffer& gate, const Buffer& up, const Buffer& out,
                     int64_t n) const {
  const uint32_t push = static_cast<uint32_t>(n);
  uint32_t gx, gy;
  Grid((n + 63) / 64, &gx, &gy);
  r->Dispatch(*swiglu_, {gate, up, out}, push, gx, gy);
}

void Kernels::Rope(Recorder* r, const Buffer& x, const Buffer& cs, const Buffer& tok, int64_t n,
                   int64_t n_heads, int64_t head_dim, int64_t rope_dim, bool neox) const {
  struct {
    uint32_t n_heads, head_dim, rope_dim, neox, x_stride;
  } push{static_cast<uint32_t>(n_heads), static_cast<uint32_t>(head_dim),
         static_cast<uint32_t>(rope_dim), neox ? 1u : 0u,
         static_cast<uint32_t>(n_heads * head_dim)};
  r->Dispatch(*rope_, {x, cs, tok}, push, Groups64(n_heads * rope_dim / 2),
              static_cast<uint32_t>(n));
}

void Kernels::KvStore(Recorder* r, const Buffer& k, const Buffer& v, const Buffer& cache,
                      const Buffer& tok, int64_t n, const AttentionShape& s,
                      const KvRope* rope) const {
  struct {
    uint32_t kv_heads, head_dim, n_rows, k_off, v_off, row_words, q8, rope, rope_dim, neox;
  } push{static_cast<uint32_t>(s.n_head_kv),
         static_cast<uint32_t>(s.head_dim),
         static_cast<uint32_t>(s.n_rows),
         s.k_off,
         s.v_off,
         static_cast<uint32_t>(s.row_words()),
         s.q8 ? 1u : 0u,
         rope != nullptr ? 1u : 0u,
         static_cast<uint32_t>(rope != nullptr ? rope->rope_dim : 0),
         rope != nullptr && rope->neox ? 1u : 0u};
  // Without rope, binding 4 (the angles) is not read: any buffer will do.
  r->Dispatch(*kv_store_, {k, v, cache, tok, rope != nullptr ? *rope->cs : tok}, push,
              Groups64(s.n_head_kv * s.head_dim / 2), static_cast<uint32_t>(n));
}

Status Kernels::AddQkNormRope(Context* ctx) {
  if (qk_norm_rope_ == nullptr) {
    UF_ASSIGN_OR_RETURN(qk_norm_rope_, ctx->GetPipeline("qk_norm_rope", 8));
  }
  return OkStatus();
}

void Kernels::QkNormRopeStore(Recorder* r, const Buffer& q, const Buffer& k, const Buffer& v,
                              const Buffer& q_norm, const Buffer& k_norm, float eps,
                              const Buffer& cache, const Buffer& tok, int64_t n,
                              const AttentionShape& s, const KvRope& rope) const {
  UF_CHECK(QkNormRopeFits(s) && rope.cs != nullptr && rope.rope_dim <= s.head_dim &&
           rope.rope_dim % 2 == 0)
      << "QkNormRopeStore: head_dim " << s.head_dim << ", rope_dim " << rope.rope_dim;
  struct {
    uint32_t n_head, kv_heads, head_dim, rope_dim, neox, n_rows, k_off, v_off, row_words;
    float eps;
  } push{static_cast<uint32_t>(s.n_head),
         static_cast<uint32_t>(s.n_head_kv),
         static_cast<uint32_t>(s.head_dim),
         static_cast<uint32_t>(rope.rope_dim),
         rope.neox ? 1u : 0u,
         static_cast<uint32_t>(s.n_rows),
         s.k_off,
         s.v_off,
         static_cast<uint32_t>(s.row_words()),
         eps};
  r->Dispatch(*qk_norm_rope_, {q, k, v, q_norm, k_norm, *rope.cs, tok, cache}, push,
              static_cast<uint32_t>(s.n_head + s.n_head_kv), static_cast<uint32_t>(n));
}

bool Kernels::QkvRopeFits(const GpuMatrix& wq, const GpuMatrix& wk, const GpuMatrix& wv, int64_t n,
                          const AttentionShape& s, const KvRope& rope) const {
  if (n < 1 || UsesMatMul(wq, n)) return false;
  // Gemm's kernel for these n tokens (its tile; the basic one), whose bits the fused one has.
  const int index = TileIndex(GemmTile(n));
  const auto pairs_of = [&](const GpuMatrix& w, int64_t heads) {
    return w.type == wq.type && w.n_experts == 1 && w.cols == wq.cols && w.cols % 2 == 0 &&
           w.rows == heads * s.head_dim && Wide(index, w) == nullptr;
  };
  return gemm_qkv_[0].count(wq.type) != 0 && pairs_of(wq, s.n_head) && pairs_of(wk, s.n_head_kv) &&
         pairs_of(wv, s.n_head_kv) && s.head_dim % 2 == 0 && !s.q8 && !rope.neox &&
         rope.cs != nullptr && rope.rope_dim % 2 == 0 && rope.rope_dim <= s.head_dim;
}

void Kernels::GemmQkvRope(Recorder* r, const GpuMatrix& wq, const GpuMatrix& wk,
                          const GpuMatrix& wv, const Buffer& x, int64_t n, const Buffer& q,
                          const Buffer& k, const Buffer& v, const Buffer& cache, const Buffer& tok,
                          const AttentionShape& s, const KvRope& rope) const {
  UF_CHECK(QkvRopeFits(wq, wk, wv, n, s, rope)) << "gemm1_qkv: not these matrices and cache";
  struct {
    uint32_t q_rows, kv_rows, cols, n, x_stride, head_dim, rope_dim, n_rows, k_off, v_off,
        row_words;
  } push{static_cast<uint32_t>(wq.rows),
         static_cast<uint32_t>(wk.rows),
         static_cast<uint32_t>(wq.cols),
         static_cast<uint32_t>(n),
         static_cast<uint32_t>(wq.cols / 2),
         static_cast<uint32_t>(s.head_dim),
         static_cast<uint32_t>(rope.rope_dim),
         static_cast<uint32_t>(s.n_rows),
         s.k_off,
         s.v_off,
         static_cast<uint32_t>(s.row_words())};
  // A subgroup per row pair of Q, K and V (gemm_qkv.glsl).
  const int64_t pairs = (wq.rows + 2 * wk.rows) / 2;
  uint32_t gx, gy;
  Grid((pairs + rows_per_group_ - 1) / rows_per_group_, &gx, &gy);
  // Gemm's tile: tiles of it as the grid's x (TILES_INNER, common.glsl).
  const int64_t tile = GemmTile(n);
  r->Dispatch(*gemm_qkv_[TileIndex(tile)].at(wq.type),
              {wq.buffer, wk.buffer, wv.buffer, x, q, k, v, cache, tok, *rope.cs}, push,
              static_cast<uint32_t>((n + tile - 1) / tile), gx, gy);
}

bool Kernels::TiledAttentionFits(const AttentionShape& s) const {
  // attention_tiled.comp's shared memory: 64 staged rows of up to 65 words, 32 x 64 floats of
  // exponentials, 32 maxima and common.glsl's 256 floats.
  constexpr uint32_t kSharedBytes = (64 * 65 + 32 * 64 + 32 + 256) * 4;
  return s.window == 0 && s.head_dim % 2 == 0 && s.head_dim <= 128 &&
         s.n_head / s.n_head_kv <= kTiledAttentionRows && max_shared_bytes_ >= kSharedBytes;
}

void Kernels::Attention(Recorder* r, const Buffer& q, const Buffer& cache, const Buffer& scores,
                        const Buffer& out, const Buffer& tok, const Buffer& bt, int64_t n,
                        const AttentionShape& s, const Buffer* part, const Buffer* sinks,
                        const Buffer* q_out, Activation q_act) const {
  UF_CHECK(s.chunk == 0 || part != nullptr) << "split attention needs its partial sums' buffer";
  UF_CHECK(s.chunk <= kMaxAttentionChunk) << "a split chunk's scores live in shared memory";
  UF_CHECK(q_out == nullptr ||
           (q_act != Activation::kF32 && q_act != Activation::kQ8_K &&
            s.head_dim % ActivationBlock(q_act) == 0 && s.head_dim <= kMaxAttentionChunk))
      << "attention's quantized output: whole blocks a head, the head in shared memory";
  // The shaders' quant: 0 none, else the format (FusedFormat).
  const uint32_t quant = q_out == nullptr ? 0u : FusedFormat(q_act);
  // Words of the n tokens' Q8_0 values ahead of their scales (Quantize's layout).
  const auto q_d_off = static_cast<uint32_t>(n * s.n_head * s.head_dim / 32 * 8);
  struct {
    uint32_t n_head, n_head_kv, head_dim, n_rows, k_off, v_off;
    float scale;
    uint32_t block_size, max_blocks, max_len, row_words, q8, chunk, n_chunks, window, has_sinks;
    uint32_t quant, q_d_off;
  } push{static_cast<uint32_t>(s.n_head),
         static_cast<uint32_t>(s.n_head_kv),
         static_cast<uint32_t>(s.head_dim),
         static_cast<uint32_t>(s.n_rows),
         s.k_off,
         s.v_off,
         s.scale,
         static_cast<uint32_t>(s.block_size),
         static_cast<uint32_t>(s.max_blocks),
         static_cast<uint32_t>(s.max_len),
         static_cast<uint32_t>(s.row_words()),
         s.q8 ? 1u : 0u,
         static_cast<uint32_t>(s.chunk),
         static_cast<uint32_t>(s.n_chunks()),
         static_cast<uint32_t>(s.window),
         sinks != nullptr ? 1u : 0u,
         s.chunk == 0 ? quant : 0u,
         q_d_off};
  // Binding 6: the partial sums when split, the Q8_0 output when unsplit with quant, else never
  // written; without sinks binding 7 is never read: any buffer will do.
  const Buffer& sink_buf = sinks != nullptr ? *sinks : q;
  const Buffer& q_buf = q_out != nullptr ? *q_out : out;
  const Buffer& b6 = part != nullptr && s.chunk != 0 ? *part : q_buf;
  if (s.tile > 0) {
    UF_CHECK(TiledAttentionFits(s) && s.tile <= kTiledAttentionRows / (s.n_head / s.n_head_kv))
        << "attention_tiled.comp does not take this shape";
    const struct {
      decltype(push) a;
      uint32_t n, tile;
    } tiled{push, static_cast<uint32_t>(n), static_cast<uint32_t>(s.tile)};
    r->Dispatch(*attention_tiled_, {q, cache, scores, out, tok, bt, b6, sink_buf}, tiled,
                static_cast<uint32_t>(s.n_head_kv * s.n_chunks()),
                static_cast<uint32_t>((n + s.tile - 1) / s.tile));
  } else {
    r->Dispatch(*attention_, {q, cache, scores, out, tok, bt, b6, sink_buf}, push,
                static_cast<uint32_t>(s.n_head * s.n_chunks()), static_cast<uint32_t>(n));
  }
  if (s.chunk == 0) return;
  const struct {
    uint32_t n_head, head_dim, chunk, n_chunks, window, has_sinks, quant, q_d_off;
  } combine{static_cast<uint32_t>(s.n_head),
            static_cast<uint32_t>(s.head_dim),
            static_cast<uint32_t>(s.chunk),
            static_cast<uint32_t>(s.n_chunks()),
            static_cast<uint32_t>(s.window),
            sinks != nullptr ? 1u : 0u,
            quant,
            q_d_off};
  r->Dispatch(*attention_combine_, {*part, out, tok, sink_buf, q_buf}, combine,
              static_cast<uint32_t>(s.n_head), static_cast<uint32_t>(n));
}

}  // namespace uf::gpu
