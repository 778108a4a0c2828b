// The GPU kernels (src/gpu/shaders) as calls that record one dispatch each into a Recorder, and
// weight matrices in the layout those kernels read. Every kernel has a CPU counterpart in
// src/kernels that tests/gpu_kernels_test.cc compares it with.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "gpu/vk_context.h"
#include "kernels/matmul.h"

namespace uf::gpu {

// A weight matrix in device memory. F32 and F16 rows as in GGUF; Q8_0, Q4_0 and Q6_K split into
// the quants of every block (word-aligned: 8, 4 and 52 words per block) followed by the blocks'
// scales as f32 at word d_off, so the shaders read whole words and never an f16 at an odd
// address.
struct GpuMatrix {
  GgmlType type = GgmlType::kF32;  // as stored on the device
  GgmlType converted_from = type;  // the file's type (BF16, Q4_K, Q6_K are stored as F16)
  int64_t rows = 0, cols = 0;
  uint32_t d_off = 0;  // Q8_0 / Q4_0: word offset of the scales
  Buffer buffer;
};

// True for the weight types the GPU kernels have (F32, F16, Q8_0, Q4_0, Q6_K).
bool GpuSupportsType(GgmlType type);
// Uploads w (its GGUF rows). BF16 and Q4_K have no kernel yet: they are dequantized and stored
// as F16 (see UploadAsF16 in vk_kernels.cc). Unimplemented for other types.
StatusOr<GpuMatrix> UploadMatrix(Context* ctx, const kernels::Matrix& w);

// Bytes of scratch a Q8_0 activation vector of `cols` values takes (quantize_q8_0's output).
inline uint64_t Q8ActivationBytes(int64_t cols) { return (cols / 32) * (32 + 4); }

// The pipelines of every kernel, made once per context.
class Kernels {
 public:
  static StatusOr<Kernels> Create(Context* ctx);

  // y[y_off..+rows) = W x[x_off..+cols). For Q8_0/Q4_0 weights x is a Q8_0 activation (Quantize)
  // and x_off must be 0; the others take f32 x.
  void Gemv(Recorder* r, const GpuMatrix& w, const Buffer& x, uint32_t x_off, const Buffer& y,
            uint32_t y_off) const;
  // q = x[x_off..+cols) as Q8_0 blocks (cols a multiple of 32).
  void Quantize(Recorder* r, const Buffer& x, uint32_t x_off, int64_t cols, const Buffer& q) const;
  // rows rows of n values: y = RmsNorm(x) * w. y may be x.
  void RmsNorm(Recorder* r, const Buffer& x, uint32_t x_off, const Buffer& w, const Buffer& y,
               uint32_t y_off, int64_t rows, int64_t n, float eps) const;
  // y[y_off + i] += x[x_off + i % period] (period 0: no repeat).
  void Add(Recorder* r, const Buffer& x, uint32_t x_off, const Buffer& y, uint32_t y_off, int64_t n,
           int64_t period = 0) const;
  void SwiGlu(Recorder* r, const Buffer& gate, const Buffer& up, const Buffer& out,
              int64_t n) const;
  // In place on n_heads heads of x at x_off, position step[1], angles table cs.
  void Rope(Recorder* r, const Buffer& x, uint32_t x_off, const Buffer& cs, const Buffer& step,
            int64_t n_heads, int64_t head_dim, int64_t rope_dim, bool neox) const;
  void KvStore(Recorder* r, const Buffer& k, const Buffer& v, const Buffer& cache,
               const Buffer& step, int64_t kv_heads, int64_t head_dim, int64_t max_ctx,
               uint32_t k_off, uint32_t v_off) const;
  void Attention(Recorder* r, const Buffer& q, const Buffer& cache, const Buffer& scores,
                 const Buffer& out, const Buffer& step, int64_t n_head, int64_t n_head_kv,
                 int64_t head_dim, int64_t max_ctx, uint32_t k_off, uint32_t v_off,
                 float scale) const;
  void Embed(Recorder* r, const GpuMatrix& table, const Buffer& x, const Buffer& step) const;

 private:
  uint32_t rows_per_group_ = 1;  // GEMV rows per workgroup: 64 / subgroup size
  const Pipeline* gemv_f32_ = nullptr;
  const Pipeline* gemv_f16_ = nullptr;
  const Pipeline* gemv_q8_0_ = nullptr;
  const Pipeline* gemv_q4_0_ = nullptr;
  const Pipeline* gemv_q6_k_ = nullptr;
  const Pipeline* quantize_ = nullptr;
  const Pipeline* rmsnorm_ = nullptr;
  const Pipeline* add_ = nullptr;
  const Pipeline* swiglu_ = nullptr;
  const Pipeline* rope_ = nullptr;
  const Pipeline* kv_store_ = nullptr;
  const Pipeline* attention_ = nullptr;
  const Pipeline* embed_ = nullptr;
};

}  // namespace uf::gpu
