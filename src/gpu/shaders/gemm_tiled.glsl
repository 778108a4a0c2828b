// The tiled GEMM of wide batches (Kernels::AddMatMul; docs/gpu.md "The tiled GEMM"):
// y[t * y_stride + y_off + row] = W[row] . x[t], W and x as the token-tiled GEMMs take them (F16
// / BF16 weights with their pairs, Q8_0 / Q4_0 weights with Q8_0 blocks, Q4_K / Q6_K with Q8_K
// blocks), each operand converted to f16 in shared memory (quantized values dequantized as the
// CPU does, rounded once) and the products summed in f32 in another order: NOT the token-tiled
// GEMMs' bits (F16 / BF16: within rounding of them; quantized: within the f16 rounding of each
// operand of their exact integer dot), so a row of a batch this kernel takes is close to the same
// row decoded alone, not identical (the forward uses it only when asked, and only for batches of
// at least Kernels::kMatMulMinTokens tokens). The includer (gemm_tiled_*.comp) declares W and X
// (bindings 0, 1) and defines FetchA / StoreA and FetchB / StoreB: its invocation's part of a
// step's blocks loaded into registers, then stored into the shared blocks as f16 pairs.
//
// A workgroup of 128 invocations computes a kBM x kBN block (rows x tokens) of y: each step over
// the columns copies a kBM x kBK block of W and a kBN x kBK block of x into shared memory (the
// next step's held in registers while this one computes), then multiplies them. So each weight
// is read once per kBN tokens (once a step for a decode batch of up to 64 streams) and each
// activation once per kBM rows.
// - Built with COOPMAT (gemm_tiled_*_coopmat): the products go to the matrix units through
//   VK_NV_cooperative_matrix (16 x 16 x 16 f16 fragments, f32 accumulators): subgroup s of the
//   4 (32 lanes each) takes tokens 16 s .. 16 s + 15 of every row fragment. The device must list
//   that fragment shape (Context: DeviceInfo::coopmat).
// - Without (gemm_tiled_*): the same tiles multiplied by the invocations themselves (4 rows x
//   4 tokens of f32 accumulators each), on any device: the plain path, and the kernel that lets a
//   device without matrix units (lavapipe in CI) run every line of the tiling but the fragment
//   calls.
// Shapes: cols a multiple of kBK (F16: x_stride a multiple of 4 words); rows and n any (a partial
// block takes zero weights / activations for the rows / tokens past the end and stores nothing
// for them).
#extension GL_EXT_control_flow_attributes : require
#ifdef COOPMAT
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#endif

#define kBM 32   // rows of a block
#define kBN 64   // tokens of a block
#define kBK 32   // columns a step
#define kWords (kBK / 2)       // f16-pair words of a block row a step
#define kStride (kWords + 4)   // words of a shared row: padded against bank conflicts, 16-byte rows
#define kCStride (kBM + 4)     // floats of a token's column of the output block
layout(local_size_x = 128) in;

// rows, cols (values); n tokens; x_stride (words a token); y_off, y_stride; acc: 1 to add the
// product to y (the residual add, as gemm.glsl's acc); bias: 1 to add bias[row] (not with acc);
// w_d_off, x_d_off: the words of the weights' and the activation's block scales (quantized).
layout(push_constant) uniform P {
  uint rows, cols, n, x_stride, y_off, y_stride, acc, bias, w_d_off, x_d_off;
} p;
layout(std430, binding = 2) buffer Y { float y[]; };
layout(std430, binding = 3) readonly buffer B { float bias_v[]; };

// One shared array (9 KiB; 16 KiB is all a device must have): during the steps W's block (row r's
// pair words at r * kStride) and x's (token t's at kBOff + t * kStride); after them the product
// as f32 bits, (row r, token t) at t * kCStride + r.
#define kBOff (kBM * kStride)
shared uint sh[kBN * kCStride];

// The block's first row and token (its workgroup's), for the includer's Fetch functions.
uint g_row0, g_t0;

// The includer's: this invocation's part of the W block (kBM rows) and the x block (kBN tokens)
// of columns k0 .. k0 + kBK - 1 into registers, zero past the last row / token; then into the
// shared blocks as f16-pair words (sh[r * kStride + word], sh[kBOff + t * kStride + word]).
void FetchA(uint k0);
void StoreA();
void FetchB(uint k0);
void StoreB();

void main() {
  // The token block is the grid's x, the row block its y and z (TILES_INNER in common.glsl: a
  // row block's token blocks run together, so their weight reads share L2).
  g_row0 = (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * kBM;
  if (g_row0 >= p.rows) return;  // uniform: the whole workgroup
  g_t0 = gl_WorkGroupID.x * kBN;
  const uint id = gl_LocalInvocationIndex;
  FetchA(0);
  FetchB(0);

#ifdef COOPMAT
  const uint s = gl_SubgroupID;  // 0..3: tokens 16 s .. 16 s + 15
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[kBM / 16];
  [[unroll]] for (uint i = 0; i < kBM / 16; ++i) {
    acc[i] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
  }
#else
  const uint rg = id % 8, tg = id / 8;  // rows 4 rg .. 4 rg + 3, tokens 4 tg .. 4 tg + 3
  float acc[4][4];
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    [[unroll]] for (uint j = 0; j < 4; ++j) acc[i][j] = 0.0;
  }
#endif

  for (uint k0 = 0; k0 < p.cols; k0 += kBK) {
    barrier();  // the last step's reads of the shared blocks are done
    StoreA();
    StoreB();
    barrier();
    if (k0 + kBK < p.cols) {  // the next step's loads, in flight while this one multiplies
      FetchA(k0 + kBK);
      FetchB(k0 + kBK);
    }
#ifdef COOPMAT
    [[unroll]] for (uint kk = 0; kk < kBK / 16; ++kk) {
      // x's block is W's transpose's partner: token t's 16 values of k are a column of B.
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> b;
      coopMatLoadNV(b, sh, kBOff + 16 * s * kStride + 8 * kk, kStride, true);
      [[unroll]] for (uint i = 0; i < kBM / 16; ++i) {
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a;
        coopMatLoadNV(a, sh, 16 * i * kStride + 8 * kk, kStride, false);
        acc[i] = coopMatMulAddNV(a, b, acc[i]);
      }
    }
#else
    [[unroll]] for (uint k = 0; k < kWords; ++k) {
      vec2 a[4], b[4];
      [[unroll]] for (uint i = 0; i < 4; ++i) {
        a[i] = unpackHalf2x16(sh[(4 * rg + i) * kStride + k]);
      }
      [[unroll]] for (uint j = 0; j < 4; ++j) {
        b[j] = unpackHalf2x16(sh[kBOff + (4 * tg + j) * kStride + k]);
      }
      [[unroll]] for (uint i = 0; i < 4; ++i) {
        [[unroll]] for (uint j = 0; j < 4; ++j) acc[i][j] += a[i].x * b[j].x + a[i].y * b[j].y;
      }
    }
#endif
  }

  // The block through shared memory, so the stores to y are whole rows of consecutive words and
  // the bias, the residual add and the edges are plain code.
  barrier();  // every subgroup's last reads of the blocks, which the product overwrites
#ifdef COOPMAT
  [[unroll]] for (uint i = 0; i < kBM / 16; ++i) {
    coopMatStoreNV(acc[i], sh, 16 * s * kCStride + 16 * i, kCStride, true);
  }
#else
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    [[unroll]] for (uint j = 0; j < 4; ++j) {
      sh[(4 * tg + j) * kCStride + 4 * rg + i] = floatBitsToUint(acc[i][j]);
    }
  }
#endif
  barrier();
  [[unroll]] for (uint e = id; e < kBM * kBN; e += 128) {
    const uint r = e % kBM, t = e / kBM;
    if (g_row0 + r >= p.rows || g_t0 + t >= p.n) continue;
    const uint row = g_row0 + r;
    const uint i = p.y_off + (g_t0 + t) * p.y_stride + row;
    const float v = uintBitsToFloat(sh[t * kCStride + r]);
    y[i] = p.acc != 0 ? y[i] + v : p.bias != 0 ? v + bias_v[row] : v;
  }
}
