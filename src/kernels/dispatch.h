// Internal to src/kernels: the kernel table behind MatMul. One entry per (weight type, ISA tier);
// matmul.cc is the only caller.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/types.h"
#include "kernels/matmul.h"

namespace uf::kernels {

// One matmul tile: rows [r0, r1) of W against every token of the converted activations.
struct GemmTask {
  const uint8_t* w;  // [rows][w_row_bytes]
  size_t w_row_bytes;
  int64_t cols;
  const uint8_t* act;  // [n_tokens][act_row_bytes] in ActivationType(weight type)
  size_t act_row_bytes;
  int64_t n_tokens;
  float* y;  // [n_tokens][ldy]; the kernel writes y[t * ldy + r]
  int64_t ldy;
};

// y rows [r0, r1) for all tokens. Hot: validates nothing.
using GemmFn = void (*)(const GemmTask& task, int64_t r0, int64_t r1);
// n floats -> the tier's activation format for this type family (the reference format for the
// scalar tier, packed.h formats for the SIMD tiers).
using ConvertFn = void (*)(const float* x, void* dst, int64_t n);

struct KernelSet {
  GemmFn gemm = nullptr;        // reads GGUF rows
  GemmFn gemm_tiles = nullptr;  // reads packed tiles; null where the tier has none
  ConvertFn convert = nullptr;
  // Activation bytes per act_block values (cols is always a multiple of act_block).
  size_t act_block_bytes = 0;
  int64_t act_block = 1;
  size_t ActRowBytes(int64_t cols) const { return cols / act_block * act_block_bytes; }
};

// Kernels for weights of `type` at tier `isa` (falls back to a lower tier where a type has no
// kernel at that tier, or the CPU lacks a feature it needs). Null gemm for types the engine
// cannot compute with. Types sharing ActivationType() share convert and format within a tier.
const KernelSet& GetKernels(GgmlType type, Isa isa);

// Sums bytes of a buffer with the widest loads available (memory bandwidth probe).
uint64_t SumBytesScalar(const uint8_t* p, size_t n);
uint64_t SumBytesAvx2(const uint8_t* p, size_t n);
uint64_t SumBytesAvx512(const uint8_t* p, size_t n);

// Per-tier tables; each fills the entries it implements and leaves the rest untouched.
void FillScalarKernels(GgmlType type, KernelSet* ks);
void FillAvx2Kernels(GgmlType type, KernelSet* ks);
void FillAvx512Kernels(GgmlType type, KernelSet* ks);

// CPU feature bits the tiers need, probed once.
struct CpuFeatures {
  bool avx2 = false;    // with FMA and F16C
  bool avx512 = false;  // F, BW, VL, DQ, VNNI
  bool avx512bf16 = false;
};
const CpuFeatures& GetCpuFeatures();

}  // namespace uf::kernels
