// The GPU kernels (src/gpu/shaders) as calls that record one dispatch each into a Recorder, and
// weight matrices in the layout those kernels read. Every kernel has a CPU counterpart in
// src/kernels that tests/gpu_kernels_test.cc compares it with.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "base/status.h"
#include "gpu/vk_context.h"
#include "kernels/matmul.h"

namespace uf::gpu {

// A weight matrix in device memory. F32, F16 and BF16 rows as in GGUF; Q8_0, Q4_0, MXFP4, Q6_K and
// Q4_K split into the quants of every block (word-aligned: 8, 4, 4, 52 and 35 words) followed
// by the blocks' scales as f32 at word d_off (Q4_K: d and dmin, two words a block), so the
// shaders read whole words and never an f16 at an odd address.
struct GpuMatrix {
  GgmlType type = GgmlType::kF32;  // as stored on the device (the file's type)
  int64_t rows = 0, cols = 0;
  uint32_t d_off = 0;  // quantized types: word offset of the scales
  // Stacked experts (UploadExperts): n_experts matrices of `rows` rows each, expert x's rows
  // at x * rows of the stack.
  int64_t n_experts = 1;
  Buffer buffer;
};

// True for the weight types the GPU kernels have (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, MXFP4).
bool GpuSupportsType(GgmlType type);
// True when the type's GEMM takes a Q8_0 activation (Quantize) instead of f32 values.
inline bool TakesQ8Activation(GgmlType type) {
  return type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0 || type == GgmlType::kMXFP4;
}
// True when the type's GEMM takes a Q8_K activation (QuantizeK), as the CPU's K-quant kernels do.
inline bool TakesQ8KActivation(GgmlType type) {
  return type == GgmlType::kQ4_K || type == GgmlType::kQ6_K;
}
// True when the type's GEMM takes its activation as 16-bit pairs of its own format
// (QuantizePairs: F16 weights f16 pairs, BF16 weights bf16 pairs), rounded as the CPU rounds them.
inline bool TakesPairActivation(GgmlType type) {
  return type == GgmlType::kF16 || type == GgmlType::kBF16;
}
// The activation a GEMM reads: f32 values (F32 weights), Q8_0 blocks (Quantize), Q8_K blocks
// (QuantizeK), f16 or bf16 pairs (QuantizePairs).
// The values are the shaders' too (common.glsl's kAct*).
enum class Activation { kF32 = 0, kQ8_0 = 1, kQ8_K = 2, kF16 = 3, kBF16 = 4 };
inline Activation ActivationFor(GgmlType type) {
  return TakesQ8KActivation(type)  ? Activation::kQ8_K
         : TakesQ8Activation(type) ? Activation::kQ8_0
         : type == GgmlType::kF16  ? Activation::kF16
         : type == GgmlType::kBF16 ? Activation::kBF16
                                   : Activation::kF32;
}
// Values per block of a quantized activation (a row of the fused kernels is whole blocks).
inline int64_t ActivationBlock(Activation a) {
  return a == Activation::kQ8_K ? 256 : a == Activation::kQ8_0 ? 32 : 2;
}
// Uploads w (its GGUF rows). Unimplemented for types without a kernel.
StatusOr<GpuMatrix> UploadMatrix(Context* ctx, const kernels::Matrix& w);

// Uploads a layer's experts (one type and shape) as one stacked matrix for GemmExperts.
StatusOr<GpuMatrix> UploadExperts(Context* ctx, std::span<const kernels::Matrix> experts);

// Bytes of scratch a Q8_0 activation of `values` values takes (quantize_q8_0's output).
inline uint64_t Q8ActivationBytes(int64_t values) { return (values / 32) * (32 + 4); }
// The same for a Q8_K activation (quantize_q8_k's output: 292 bytes a block of 256).
inline uint64_t Q8KActivationBytes(int64_t values) { return (values / 256) * (256 + 32 + 4); }
// The same for pairs (quantize_pairs' output: 2 bytes a value).
inline uint64_t PairActivationBytes(int64_t values) { return (values / 2) * 4; }

// The shape of a layer's attention over the paged device cache (see attention.comp).
struct AttentionShape {
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0;
  int64_t n_rows = 0;             // cache rows per KV head: n_blocks * block_size
  uint32_t k_off = 0, v_off = 0;  // words of this layer's K and V
  float scale = 1.0f;
  int64_t block_size = 0, max_blocks = 0;  // block table: [max_seqs][max_blocks]
  int64_t max_len = 0;                     // positions per sequence (the scores' stride)
  bool q8 = false;                         // Q8_0 rows (9 words per 32 values) instead of f16 pairs
  // Split over positions (flash-decoding): positions per workgroup, 0 for the whole context in
  // one. The split depends on a token's position only, so rows stay batch-independent.
  int64_t chunk = 0;
  int64_t window = 0;  // a sliding-window layer's positions (gpt-oss); 0: the whole context
  // attention_tiled.comp's tokens a workgroup (1 .. kTiledAttentionRows / (n_head / n_head_kv)):
  // K/V rows staged once per (KV head, tile of tokens) for all the tile's query rows, the same
  // bits (Kernels::TiledAttentionFits must hold). 0: attention.comp.
  int64_t tile = 0;
  int64_t n_chunks() const { return chunk == 0 ? 1 : (max_len + chunk - 1) / chunk; }
  // Floats of the split's partial sums per (token, query head).
  int64_t part_floats() const { return n_chunks() * (head_dim + 2); }
  // Words of one head's row of K or V in the cache.
  int64_t row_words() const { return q8 ? head_dim / 32 * 9 : head_dim / 2; }
};

// gemv itself, or for kDefault the environment's UF_GPU_GEMV (tune | basic | wide; unset or
// anything else: kTune, the latter with a warning).
GemvVariant ResolveGemv(GemvVariant gemv);

// The widest token tile of the batched GEMMs (8, 16 or 32): max_tile itself, or for 0 the
// environment's UF_GPU_TILE (8 | 16 | 32; unset: 32, anything else: 32 with a warning). 8 is the
// policy before the wide tiles (gemm8_* for every batch), for A/B runs.
int64_t ResolveMaxTile(int64_t max_tile);

// The integer GEMMs' (Q8_0, Q4_0, MXFP4, Q4_K, Q6_K) dot of four int8 lanes: kOn the packed
// instruction (the *_dot4 kernels; the device must have shaderIntegerDotProduct), kOff byte
// extracts, kDefault kOn where the device has it unless the environment's UF_GPU_DOT4 is 0. Both
// give the same bits (integer sums), so this changes speed only.
enum class IntegerDot { kDefault, kOff, kOn };

// The pipelines of every kernel, made once per context. Batched kernels take `tok`, the batch's
// per-token inputs ([n][4] words: token id, position, cache row, sequence; host-written each
// step), so a recording serves every step of its batch size.
class Kernels {
 public:
  // gemv: the one-token GEMV kernels (GemvVariant; kDefault reads UF_GPU_GEMV). max_tile: the
  // widest token tile of the batched GEMMs (ResolveMaxTile; 0 reads UF_GPU_TILE).
  // dot: IntegerDot (kOn on a device without it is an error).
  static StatusOr<Kernels> Create(Context* ctx, GemvVariant gemv = GemvVariant::kDefault,
                                  int64_t max_tile = 0, IntegerDot dot = IntegerDot::kDefault);
  // kBasic, kWide or kTune: what Create resolved.
  GemvVariant gemv() const { return gemv_; }
  // Under kTune, whether the GEMMs recorded from now on take the wide Q8_0 and Q4_0 one-token
  // kernels (the basic ones' bits, so a step's choice changes its speed only).
  void set_wide_gemv(bool on) { wide_now_ = on && gemv_ == GemvVariant::kTune; }
  // The weight types kTune chooses a one-token kernel for.
  static bool TunesGemv(GgmlType t) { return t == GgmlType::kQ8_0 || t == GgmlType::kQ4_0; }
  // Whether the integer GEMMs are the *_dot4 kernels.
  bool integer_dot() const { return dot4_; }
  // The token tile Gemm uses for an n-token batch: 1 for one token (gemm1_*), else the
  // narrowest of 8, 16 and 32 (up to the resolved max tile) that takes the batch in as few tiles
  // as the widest would: 8 up to 8 tokens, 16 up to 16, 32 beyond. Every tile computes a
  // token's row the same way, so the choice changes speed only, never bits.
  int64_t GemmTile(int64_t n) const;

  // y[t * y_stride + y_off + row] = W x[t] for the n tokens (y_stride 0: w.rows). x holds n rows
  // of w.cols f32 values, or for TakesQ8Activation(w.type) their Q8_0 activation (Quantize of
  // all n rows), for TakesQ8KActivation(w.type) their Q8_K activation (QuantizeK), for
  // TakesPairActivation(w.type) their pairs (QuantizePairs). Each (row, token) result is the same
  // bits whatever n is (gemm.glsl).
  // With accumulate, y[...] += W x[t] instead (a residual add folded into the GEMM: the same
  // bits as the product followed by Add into y). With bias ([w.rows] floats), y[...] = W x[t] +
  // bias[row] (the bits of the product followed by Add of the bias); not with accumulate.
  // With norm, the dispatch's last workgroup to finish also normalizes the n rows of y it wrote
  // (RMSNorm with norm->w, eps) into norm->y and, unless norm->act is kF32, quantizes them into
  // norm->q: RmsNormQuant's bits (RmsNorm's for kF32), with no dispatch and barrier of its own
  // (gemm.glsl's norm tail). counter: one word, zero before the dispatch, zero after it. y_off 0,
  // y_stride w.rows; norm->q may be x (the tail writes it after every read of x).
  struct NormTail {
    const Buffer* w = nullptr;        // [w.rows] the norm's weights
    const Buffer* y = nullptr;        // [n][w.rows] the normalized rows
    const Buffer* q = nullptr;        // their activation of format act
    const Buffer* counter = nullptr;  // [1] the workgroups that finished
    float eps = 0.0f;
    Activation act = Activation::kF32;
  };
  // With rope, the dispatch also does what follows Q's, K's or V's product (gemm.glsl's
  // RopeStore epilogue, the same bits): Q's RoPE in y (Rope), K's RoPE into the f16 cache
  // (KvStore with its rope; y unrotated), or V's store into the cache. y_off 0, y_stride w.rows,
  // not with norm; CanRopeStore says where it runs.
  // kQNorm / kKNorm (one token, CanHeadNorm): qwen3's per-head q/k norm first (with the weights
  // norm, eps), Q's or K's heads each finished by the last of the head's workgroups (gemm.glsl's
  // HeadTail; counter: a zero word per head, zero again after), then Q's RoPE or K's rotated store
  // as above, llama or NEOX pairs (neox): QkNormRopeStore's bits. No bias with them.
  enum class RopeStoreOf { kQ = 1, kK = 2, kV = 3, kQNorm = 4, kKNorm = 5 };
  struct RopeStore {
    RopeStoreOf of = RopeStoreOf::kQ;
    const Buffer* cs = nullptr;             // [positions][rope_dim] the angles (Rope's)
    const Buffer* cache = nullptr;          // the layer's f16 cache (K, V)
    const Buffer* tok = nullptr;            // [n][4] the step's tokens
    const AttentionShape* shape = nullptr;  // head_dim, n_rows, k_off / v_off, row_words
    int64_t rope_dim = 0;
    const Buffer* norm = nullptr;     // kQNorm, kKNorm: [head_dim] the norm's weights
    const Buffer* counter = nullptr;  // kQNorm, kKNorm: [heads] zero
    float eps = 0.0f;
    bool neox = false;  // kQNorm, kKNorm: NEOX pairs
  };
  // Whether Gemm of w over n tokens can take a kQNorm / kKNorm RopeStore: one token, an f16
  // cache, whole heads of at most kMaxHeadTailDim values, each whole workgroups.
  static constexpr int64_t kMaxHeadTailDim = 256;  // the tail's row: norm_q.glsl's uf_norm
  bool CanHeadNorm(const GpuMatrix& w, int64_t n, const AttentionShape& s) const;
  // A mixture-of-experts router's choice of each token's k of n_expert experts (Route).
  struct RouteParams {
    int64_t n_expert = 0, k = 0;
    bool softmax_all = true;  // ExpertGating::kSoftmax, else a softmax over the k (gpt-oss)
    bool norm = false;
    float scale = 0.0f;  // 0 or 1: none
  };
  // With route, the router GEMM (w.rows == params.n_expert logits a token) also routes the n
  // tokens in its last workgroup to finish (gemm.glsl's route tail: route.comp's code, Route's
  // bits; a bias is Gemm's, which Route would add in the same way), so the route needs no dispatch
  // and barrier of its own. A one-token GEMM only (gemm1_* or the wide GEMV: their *_route twins,
  // AddMoeTails); CanRouteTail says where it runs. counter as NormTail's. y_off 0, y_stride
  // w.rows, not with norm or rope.
  struct RouteTail {
    RouteParams params;
    const Buffer* ids = nullptr;      // [n][k] the experts chosen
    const Buffer* weights = nullptr;  // [n][k] their weights
    const Buffer* counter = nullptr;  // [1] the workgroups that finished
  };
  // Makes the kernels of the mixture-of-experts tails for a router of type `router` and down
  // experts of type `down`: the router's one-token GEMMs' *_route twins (Gemm with a RouteTail)
  // and the down experts' gemmx_*_sum twins (GemmExperts with an ExpertSum).
  Status AddMoeTails(Context* ctx, GgmlType router, GgmlType down);
  bool CanRouteTail(const GpuMatrix& w, int64_t n, const RouteParams& rp) const;
  // Makes the kernels that replace a stage for matrices of `type`: the *_stages twins of its
  // token-tiled GEMMs (every tile, basic and wide), which Gemm needs for a NormTail or RopeStore,
  // and for F16 / BF16 GemmGlu's and GemmQkvRope's kernels. Apart from Create because a model
  // needs those of one or two types and each pipeline costs a driver compile (on lavapipe ~30 ms
  // of CPU at creation: all ~75 made every Create's process 2 s slower).
  Status AddStages(Context* ctx, GgmlType type);
  bool HasStages(GgmlType type) const;
  // Whether Gemm of w over n tokens can take a RopeStore (HasStages(w.type) among it): a
  // workgroup's rows are whole RoPE pairs (an even number), llama pairs (not NEOX), an f16 cache,
  // w's rows whole heads.
  bool CanRopeStore(const GpuMatrix& w, int64_t n, const AttentionShape& s, bool neox) const;
  // With UsesMatMul(w, n) (no norm, no rope) Gemm runs the tiled GEMM instead, whose rows are
  // NOT the token-tiled kernels' bits (within rounding of them).
  void Gemm(Recorder* r, const GpuMatrix& w, const Buffer& x, int64_t n, const Buffer& y,
            uint32_t y_off = 0, int64_t y_stride = 0, bool accumulate = false,
            const Buffer* bias = nullptr, const NormTail* norm = nullptr,
            const RopeStore* rope = nullptr, const RouteTail* route = nullptr) const;
  // The tiled GEMM of wide batches (gemm_tiled.glsl; docs/gpu.md "The tiled GEMM"): blocks of 32
  // rows x 64 tokens through shared memory as f16 (quantized weights and activations as q x d),
  // each weight read once per 64 tokens, the products on the matrix units (kCoopMat) or the
  // invocations (kTiled). Made by AddMatMul
  // (kTiled or kCoopMat; kCoopMat on a device without DeviceInfo::coopmat, or whose driver
  // refuses the kernel, makes kTiled's with a warning). Its sums are in another order than the
  // token-tiled kernels', so a batch it takes does not give a row the bits that row has alone:
  // the forward asks for it only by GpuForwardOptions::matmul.
  static constexpr int64_t kMatMulMinTokens = 16;
  Status AddMatMul(Context* ctx, MatMul mode);
  MatMul matmul() const { return matmul_; }  // what AddMatMul made; kOff before
  // Whether Gemm of w over n tokens takes the tiled GEMM: AddMatMul made it, w is F16, BF16,
  // Q8_0, Q4_0, Q4_K or Q6_K (one matrix, columns a multiple of 32), n >= kMatMulMinTokens.
  bool UsesMatMul(const GpuMatrix& w, int64_t n) const;
  // The gate and up GEMMs of a dense FFN and SwiGLU in one dispatch (gemm_glu.glsl): h[t] =
  // SwiGlu(gate x[t], up x[t]) for the n tokens as the pairs of gate's type ([n][rows / 2]
  // words), the bits of Gemm(gate), Gemm(up) and SwiGluQuant's pairs; x as Gemm takes it (pairs).
  // CanGemmGlu says when it runs: F16 or BF16 gate and up of one shape (AddStages made its
  // kernels), even rows, the basic kernels (the wide F16 GEMV sums in another order), n <= 8.
  bool CanGemmGlu(const GpuMatrix& gate, const GpuMatrix& up, int64_t n) const;
  void GemmGlu(Recorder* r, const GpuMatrix& gate, const GpuMatrix& up, const Buffer& x, int64_t n,
               const Buffer& h) const;
  // The products of selected experts (gemmx_*): for each of n_slots slots s,
  // y[s * w.rows + row] = expert ids[s]'s W x[s / x_div] (x as in Gemm, token-major). Reads only
  // the selected experts' rows; each slot's sum is formed as gemm1_* forms a token's, so a slot
  // does not depend on what else the batch holds. No reuse of an expert's weights across the
  // slots that share it (each slot reads its rows again).
  // With sum (the down product of one token: n_slots its k slots, x_div 1), the dispatch also
  // adds the slots' weighted sum into the residual stream: sum->x holds afterwards what
  // MoeSum(y, *sum->weights, *sum->x, 1, n_slots, w.rows, sum->bias, &ids, true) leaves there, the
  // same bits, with no dispatch and barrier of its own (gemm.glsl's SumTail: the last of a row
  // group's slots to finish adds the group's rows). With sum->norm it then normalizes x as
  // MoeSum's norm tail does (norm->counter unused: sum->counter's word 0 counts). counter:
  // SumCounterWords(w) words, zero before the dispatch and after it. CanSumTail says where.
  struct ExpertSum {
    const Buffer* weights = nullptr;  // [k] the slots' weights
    const Buffer* x = nullptr;        // [w.rows] the residual stream
    const Buffer* bias = nullptr;     // [n_expert][w.rows] the down biases (gpt-oss), or none
    const Buffer* counter = nullptr;  // [SumCounterWords(w)] zero
    const NormTail* norm = nullptr;   // the next norm, or none
  };
  bool CanSumTail(const GpuMatrix& w) const;
  int64_t SumCounterWords(const GpuMatrix& w) const;
  void GemmExperts(Recorder* r, const GpuMatrix& w, const Buffer& x, const Buffer& ids,
                   int64_t n_slots, int64_t x_div, const Buffer& y,
                   const ExpertSum* sum = nullptr) const;
  // The slots of a batch grouped by expert (moe_group.comp): order = the n_slots slots sorted by
  // expert, tiles = max_tiles (expert, first index into order, count <= tile) triples, unused
  // ones with count 0. max_tiles: MaxExpertTiles(n_slots, n_expert, tile); tile 8, 16 or 32.
  static constexpr int64_t kMaxExperts = 512;
  static constexpr int64_t kMaxExpertsUsed = 64;  // route.comp's shared top list
  static int64_t MaxExpertTiles(int64_t n_slots, int64_t n_expert, int64_t tile = 8) {
    return (n_slots + tile - 1) / tile + std::min(n_slots, n_expert);
  }
  // The grouped tile for n_slots slots over n_expert experts: the narrowest of 8, 16 and 32
  // (at most the token tile cap, UF_GPU_TILE, and UF_GPU_GROUP_TILE) that takes an expert's
  // average share of the slots in one tile. An expert is read once per tile of the slots that chose
  // it, so a 512-token prefill of a top-8 model over 128 experts (32 slots an expert) reads each
  // expert ~1-2 times at 32 where tiles of 8 read it ~4-5 times; a decode batch (a few slots an
  // expert) keeps 8, whose idle slots hold no registers. Which tile a slot lands in never changes
  // its bits.
  int64_t GroupTile(int64_t n_slots, int64_t n_expert) const;
  void GroupSlots(Recorder* r, const Buffer& ids, const Buffer& order, const Buffer& tiles,
                  int64_t n_slots, int64_t n_expert, int64_t tile = 8) const;
  // GemmExperts over the tiles of GroupSlots (gemmg_*, gemmg16_*, gemmg32_* by its tile): each
  // expert's rows are read once per tile of the slots that chose it; every slot's row the same
  // bits as GemmExperts gives.
  void GemmExpertsGrouped(Recorder* r, const GpuMatrix& w, const Buffer& x, const Buffer& tiles,
                          const Buffer& order, int64_t n_slots, int64_t x_div, const Buffer& y,
                          int64_t tile = 8) const;
  // The router (route.comp): for each of n tokens, from its n_expert logits (plus bias when
  // has_bias), its k experts (best first, ties to the lower index) into ids[t * k + i] and their
  // weights into weights[t * k + i], as model::Decoder::Route computes them (RouteParams above).
  void Route(Recorder* r, const Buffer& logits, const Buffer* bias, const Buffer& ids,
             const Buffer& weights, int64_t n, const RouteParams& rp) const;
  // y[t][i] = sum over r < k of weights[t * k + r] * out[(t * k + r) * cols + i], r in order;
  // with bias ([n_expert][cols], gpt-oss) each out row plus its expert's (ids) bias row first.
  // With accumulate, y[t][i] += that sum (the residual add folded in: y + sum, Add's bits).
  void MoeSum(Recorder* r, const Buffer& out, const Buffer& weights, const Buffer& y, int64_t n,
              int64_t k, int64_t cols, const Buffer* bias = nullptr, const Buffer* ids = nullptr,
              bool accumulate = false) const;
  // gpt-oss's clamped SwiGLU in place in gate ([slots][ff]), each slot's expert (ids) biases
  // added to gate and up first (swiglu_oai.comp).
  void SwiGluOai(Recorder* r, const Buffer& gate, const Buffer& up, const Buffer& gate_b,
                 const Buffer& up_b, const Buffer& ids, int64_t slots, int64_t ff) const;
  // q = x[x_off..+values) as Q8_0 blocks (values a multiple of 32; n rows quantize as one).
  void Quantize(Recorder* r, const Buffer& x, uint32_t x_off, int64_t values,
                const Buffer& q) const;
  // The same as Q8_K blocks of 256 (quantize_q8_k.comp; kernels::QuantizeQ8_K's bits), for
  // the Q4_K and Q6_K GEMMs.
  void QuantizeK(Recorder* r, const Buffer& x, uint32_t x_off, int64_t values,
                 const Buffer& q) const;
  // The same as 16-bit pairs, a word per two values rounded to f16 (bf16 false; the F16 GEMMs)
  // or bf16 (the BF16 GEMMs) as the CPU kernels round them (quantize_pairs.comp); values even.
  void QuantizePairs(Recorder* r, const Buffer& x, uint32_t x_off, int64_t values, bool bf16,
                     const Buffer& q) const;
  // The quantizer of `act` (not kF32): Quantize, QuantizeK or QuantizePairs.
  void QuantizeAs(Recorder* r, Activation act, const Buffer& x, uint32_t x_off, int64_t values,
                  const Buffer& q) const;
  // rows rows of n values: y = RmsNorm(x) * w. y may be x.
  void RmsNorm(Recorder* r, const Buffer& x, uint32_t x_off, const Buffer& w, const Buffer& y,
               uint32_t y_off, int64_t rows, int64_t n, float eps) const;
  // RmsNorm of rows rows of n values (offsets 0, y not x) and y quantized into q in the same
  // dispatch, as QuantizeAs(act) of all rows * n values would: y and q are the two kernels' bits
  // (rmsnorm_q.comp). act not kF32; n a multiple of ActivationBlock(act).
  void RmsNormQuant(Recorder* r, const Buffer& x, const Buffer& w, const Buffer& y, int64_t rows,
                    int64_t n, float eps, Activation act, const Buffer& q) const;
  // SwiGlu of n values into out (out may be gate) and out quantized into q in the same dispatch,
  // as QuantizeAs(act) would: the two kernels' bits (swiglu_q.comp). n a multiple of
  // ActivationBlock(act).
  void SwiGluQuant(Recorder* r, const Buffer& gate, const Buffer& up, const Buffer& out, int64_t n,
                   Activation act, const Buffer& q) const;
  // SwiGluOai and the quantization of its slots * ff values into q, the two kernels' bits.
  void SwiGluOaiQuant(Recorder* r, const Buffer& gate, const Buffer& up, const Buffer& gate_b,
                      const Buffer& up_b, const Buffer& ids, int64_t slots, int64_t ff,
                      Activation act, const Buffer& q) const;
  // y[y_off + i] += x[x_off + i % period] (period 0: no repeat).
  void Add(Recorder* r, const Buffer& x, uint32_t x_off, const Buffer& y, uint32_t y_off, int64_t n,
           int64_t period = 0) const;
  void SwiGlu(Recorder* r, const Buffer& gate, const Buffer& up, const Buffer& out,
              int64_t n) const;
  // In place on n_heads heads of each of the n tokens' rows of x (n_heads * head_dim floats
  // each), at the tokens' positions, angles table cs.
  void Rope(Recorder* r, const Buffer& x, const Buffer& cs, const Buffer& tok, int64_t n,
            int64_t n_heads, int64_t head_dim, int64_t rope_dim, bool neox) const;
  // The n tokens' K and V rows (n_head_kv heads) into the cache at their cache rows, in the
  // layout of s (f16 or Q8_0, at s.k_off / s.v_off).
  // With rope, K is stored rotated as Rope(k, rope->cs, ..., rope->rope_dim, rope->neox) would
  // rotate it first (the same bits; k itself is not changed): one dispatch and barrier fewer.
  struct KvRope {
    const Buffer* cs = nullptr;
    int64_t rope_dim = 0;
    bool neox = false;
  };
  void KvStore(Recorder* r, const Buffer& k, const Buffer& v, const Buffer& cache,
               const Buffer& tok, int64_t n, const AttentionShape& s,
               const KvRope* rope = nullptr) const;
  // qwen3's per-head q/k norms, Q's RoPE and the K/V store in one dispatch (qk_norm_rope.comp):
  // q and the cache hold what RmsNorm(q, q_norm) and RmsNorm(k, k_norm) over the heads' rows,
  // Rope(q, *rope.cs, ...) and KvStore(k, v, cache, tok, n, s, &rope) leave there, the same bits
  // (k itself is not normalized), with one barrier where those take two. Made by AddQkNormRope;
  // QkNormRopeFits says where it runs: an f16 cache, an even head_dim of at most kMaxHeadDim.
  static constexpr int64_t kMaxHeadDim = 512;  // qk_norm_rope.comp's shared row
  Status AddQkNormRope(Context* ctx);
  bool QkNormRopeFits(const AttentionShape& s) const {
    return qk_norm_rope_ != nullptr && !s.q8 && s.head_dim % 2 == 0 && s.head_dim <= kMaxHeadDim;
  }
  void QkNormRopeStore(Recorder* r, const Buffer& q, const Buffer& k, const Buffer& v,
                       const Buffer& q_norm, const Buffer& k_norm, float eps, const Buffer& cache,
                       const Buffer& tok, int64_t n, const AttentionShape& s,
                       const KvRope& rope) const;
  // Q, K and V of the n tokens in one dispatch that also rotates Q and K and stores K and V
  // (gemm1_qkv_*, ..., gemm32_qkv_*: the token tile Gemm takes): q, k, v and the cache hold what
  // Gemm(wq, x, n, q), Gemm(wk, ..., k), Gemm(wv, ..., v), Rope(q, *rope.cs, tok, n, n_head, ...)
  // and KvStore(k, v, cache, tok, n, s, &rope) leave there, the same bits (k unrotated), with no
  // barrier between the products and the rotation: one stage and barrier fewer a layer. x: the
  // tokens' pairs (QuantizePairs). Only where QkvRopeFits.
  void GemmQkvRope(Recorder* r, const GpuMatrix& wq, const GpuMatrix& wk, const GpuMatrix& wv,
                   const Buffer& x, int64_t n, const Buffer& q, const Buffer& k, const Buffer& v,
                   const Buffer& cache, const Buffer& tok, const AttentionShape& s,
                   const KvRope& rope) const;
  // Whether GemmQkvRope takes these: wq, wk, wv all F16 or all BF16, read by the basic GEMMs
  // (whose bits it has; not the wide GEMV), with s.n_head, s.n_head_kv heads of an even
  // s.head_dim as rows and the same columns; an f16 cache; llama's pairs (2 i, 2 i + 1), not
  // NEOX's; an even rope_dim of at most head_dim.
  bool QkvRopeFits(const GpuMatrix& wq, const GpuMatrix& wk, const GpuMatrix& wv, int64_t n,
                   const AttentionShape& s, const KvRope& rope) const;
  // Causal attention of the n tokens' queries (block tables bt); scores: n * n_head * max_len
  // floats of scratch when s.chunk == 0 (unused otherwise: a chunk's scores stay in shared
  // memory); with s.chunk > 0 (<= kMaxAttentionChunk) two dispatches (the chunks, then their
  // combination) and part: n * n_head * s.part_floats() floats of scratch. sinks: n_head sink
  // logits (gpt-oss). q_out: out is also written there as QuantizeAs(q_act, out, n * n_head *
  // head_dim) would write it, the same bits, by the kernel that finishes a head (attention.comp
  // unsplit, attention_combine.comp split); q_act kQ8_0 (head_dim a multiple of 32), kF16 or
  // kBF16; head_dim at most kMaxAttentionChunk.
  static constexpr int64_t kMaxAttentionChunk = 1024;  // attention.comp's kMaxChunk
  // Whether attention_tiled.comp takes s (s.tile > 0): no sliding window, an even head_dim of at
  // most 128, at most kTiledAttentionRows query heads a KV head, and the device's shared memory.
  static constexpr int64_t kTiledAttentionRows = 32;  // attention_tiled.comp's kRows
  bool TiledAttentionFits(const AttentionShape& s) const;
  void Attention(Recorder* r, const Buffer& q, const Buffer& cache, const Buffer& scores,
                 const Buffer& out, const Buffer& tok, const Buffer& bt, int64_t n,
                 const AttentionShape& s, const Buffer* part = nullptr,
                 const Buffer* sinks = nullptr, const Buffer* q_out = nullptr,
                 Activation q_act = Activation::kQ8_0) const;
  // x[t] = table row of token t, for the n tokens.
  void Embed(Recorder* r, const GpuMatrix& table, const Buffer& x, const Buffer& tok,
             int64_t n) const;
  // Embed, then RmsNorm of the n rows of x into y (weights w) and, unless act is kF32, y
  // quantized into q, in one dispatch (embed_q.comp): Embed's and RmsNormQuant's bits
  // (RmsNorm's for kF32). table.cols a multiple of ActivationBlock(act).
  void EmbedNorm(Recorder* r, const GpuMatrix& table, const Buffer& x, const Buffer& tok, int64_t n,
                 const Buffer& w, const Buffer& y, float eps, Activation act,
                 const Buffer& q) const;
  // out[r] = the first index of row r's maximum (sampling::ArgMax), rows of n_vocab logits:
  // two dispatches (argmax.comp), the rows cut into chunks of `chunk` values; part holds
  // ArgMaxPartWords(n_vocab, rows, chunk) words.
  static constexpr int64_t kArgMaxChunk = 4096;
  static int64_t ArgMaxPartWords(int64_t n_vocab, int64_t rows, int64_t chunk = kArgMaxChunk) {
    return rows * ((n_vocab + chunk - 1) / chunk) * 2;
  }
  // With feed (one row: a chained greedy decode step, GpuForward::ForwardGreedyChain), the
  // second dispatch also moves the step's token slot tok [4] (token, position, cache row,
  // sequence) to the next position with the chosen token, the row from the block table bt
  // [.][max_blocks], and writes the token to ring[position % ring_size].
  struct Feed {
    const Buffer* tok = nullptr;
    const Buffer* bt = nullptr;
    const Buffer* ring = nullptr;
    int64_t block_size = 0, max_blocks = 0, ring_size = 0;
  };
  void ArgMax(Recorder* r, const Buffer& logits, const Buffer& out, const Buffer& part,
              int64_t n_vocab, int64_t rows, int64_t chunk = kArgMaxChunk,
              const Feed* feed = nullptr) const;
  // The best k (<= kMaxTopK) tokens of each of rows rows of n_vocab logits, sorted, with the
  // row's max and log-sum-exp: out[r * (2k + 2) + ...] = [k ids][k logits][max][lse] (topk.comp).
  // Two dispatches: TopKChunks (the best k of each chunk of `chunk` values into part, which holds
  // TopKPartWords words), then TopKMerge; TopK records both with a barrier between them.
  static constexpr int64_t kMaxTopK = 64;
  static constexpr int64_t kTopKChunk = 4096;  // sampling::Sampler's lse bound assumes it
  static int64_t TopKPartWords(int64_t n_vocab, int64_t rows, int64_t k,
                               int64_t chunk = kTopKChunk) {
    return rows * ((n_vocab + chunk - 1) / chunk) * (2 * k + 2);
  }
  void TopKChunks(Recorder* r, const Buffer& logits, const Buffer& out, const Buffer& part,
                  int64_t n_vocab, int64_t rows, int64_t k, int64_t chunk = kTopKChunk) const;
  void TopKMerge(Recorder* r, const Buffer& logits, const Buffer& out, const Buffer& part,
                 int64_t n_vocab, int64_t rows, int64_t k, int64_t chunk = kTopKChunk) const;
  void TopK(Recorder* r, const Buffer& logits, const Buffer& out, const Buffer& part,
            int64_t n_vocab, int64_t rows, int64_t k, int64_t chunk = kTopKChunk) const {
    TopKChunks(r, logits, out, part, n_vocab, rows, k, chunk);
    TopKMerge(r, logits, out, part, n_vocab, rows, k, chunk);
  }
  // A chained sampled step's tokens (sample.comp, a workgroup a row): row j's drawn from its
  // best k tokens in top (TopK's [k ids][k logits][max][lse]) with the filters and next uniform
  // in draw[j * draw_words] (kDrawHeaderWords words, then the uniforms), fed to row j of the next
  // step's input through feed as ArgMax's feed does; the row is also copied to
  // top_ring[j][position % feed.ring_size] (2k + 2 words each) and its token to ring[j][...].
  // With cap > 0, row j's known tokens in known (EditRows' ring, at the same slot) join its
  // best k and its mass (cap 0: known is not read).
  static constexpr int64_t kDrawHeaderWords = 8;
  void SampleFeed(Recorder* r, const Buffer& top, const Buffer& draw, const Feed& feed,
                  const Buffer& top_ring, int64_t k, int64_t n_vocab, int64_t rows,
                  int64_t draw_words, const Buffer& known, int64_t cap = 0) const;
  // A chained sampled step's edits (edit_rows.comp, a workgroup a row): row j's bans, logit
  // bias and penalties from state[j * EditStateWords(cap)] (its start window, static list and the
  // chain's tokens by step; EditRows records each step's input token there), its edited tokens
  // listed in ring[j][position % ring_size] (EditRingWords(cap) words: count, ids, raw and
  // edited logits) and set to -inf in the row. cap <= kMaxChainKnown.
  static constexpr int64_t kMaxChainKnown = 4096;  // edit_rows.comp's shared counts
  static constexpr int64_t kEditSteps = 256;       // model::kMaxSampledChainSteps
  static constexpr int64_t EditStateWords(int64_t cap) { return 8 + 4 * cap + 2 * kEditSteps; }
  static constexpr int64_t EditRingWords(int64_t cap) { return 3 * cap + 1; }
  void EditRows(Recorder* r, const Buffer& logits, const Buffer& state, const Buffer& tok,
                const Buffer& ring, int64_t n_vocab, int64_t rows, int64_t cap,
                int64_t ring_size) const;
  // The rows of a step of a batch of sampled chains whose flag in redo (4 words a row: flag,
  // token, position, draws) is set start from that token at that position, their cache slot from
  // feed.bt, their draw counter (draw[j * draw_words + 4]) set to draws (chain_redo.comp: the
  // step's first pass, before the embedding reads the input).
  void ChainRedo(Recorder* r, const Buffer& redo, const Feed& feed, const Buffer& draw,
                 int64_t rows, int64_t draw_words) const;
  // Row j of rows rows of n_vocab logits: the known[j * (cap + 1)] tokens listed after it read
  // into raw[j * cap + ...] and set to -inf (mask_rows.comp: the sampler's edits, applied on the
  // host to the raw values, so that TopK then reduces the tokens it leaves alone).
  void MaskRows(Recorder* r, const Buffer& logits, const Buffer& known, const Buffer& raw,
                int64_t n_vocab, int64_t rows, int64_t cap) const;
  // Words of a row of AllowRows' allow buffer: its flag, then its mask as 32-bit words.
  static int64_t AllowWords(int64_t n_vocab) { return (n_vocab + 63) / 64 * 2 + 1; }
  // Row j of rows rows of n_vocab logits, where allow[j * AllowWords] (its flag) is not 0: the
  // tokens whose bit in the mask after it is clear set to -inf (allow_rows.comp: a grammar's
  // mask, grammar::TokenConstraint::Apply's row, so that TopK reduces the masked row).
  void AllowRows(Recorder* r, const Buffer& logits, const Buffer& allow, int64_t n_vocab,
                 int64_t rows) const;
  // y[j] = x[j] for the rows j < n_rows (of cols floats) with flags[j] != 0.
  void CopyRows(Recorder* r, const Buffer& x, const Buffer& y, const Buffer& flags, int64_t cols,
                int64_t n_rows) const;
  // y[j] = x[idx[j]] for j < n_rows rows of cols floats.
  void Gather(Recorder* r, const Buffer& x, const Buffer& y, const Buffer& idx, int64_t cols,
              int64_t n_rows) const;

 private:
  // The token tiles of Gemm's kernels, in the order of gemm_ and of WideKind's first entries:
  // gemm1_*, gemm8_*, gemm16_*, gemm32_*.
  static constexpr int64_t kTiles[] = {1, 8, 16, 32};
  static constexpr int kNumTiles = 4;
  const Pipeline* GemmPipeline(GgmlType type, int tile_index) const;
  static int TileIndex(int64_t tile);  // tile's index into kTiles
  // The wide kernel of `kind` (a tile's index into kTiles, kGemmX, kGemmG + the grouped tile's
  // index into kTiles less 1) for w, or nullptr
  // when the basic one runs (wide GEMV off, no wide kernel of w's type and kind, or F16 columns
  // not a multiple of 8). A matrix's choice depends on its type and shape only, never on the
  // batch.
  enum WideKind { kGemm1 = 0, kGemm8 = 1, kGemm16 = 2, kGemm32 = 3, kGemmX = 4, kGemmG = 5 };
  static constexpr int kNumWideKinds = kGemmG + 3;  // the grouped tiles 8, 16 and 32
  const Pipeline* Wide(int kind, const GpuMatrix& w) const;
  // Rows one subgroup of Gemm's kernel computes for the tile kTiles[tile_index]: 2 for the F16
  // and BF16 tiles of 16 and 32 (basic and wide; gemm_pairs.glsl and gemm_f16w.glsl's kRows),
  // else 1.
  static int64_t RowsPerSubgroup(GgmlType type, int tile_index) {
    return TakesPairActivation(type) && kTiles[tile_index] >= 16 ? 2 : 1;
  }

  uint32_t rows_per_group_ = 1;  // GEMM rows per workgroup: 64 / subgroup size
  uint32_t q8_0_per_group_ = 8;  // Q8_0 blocks per workgroup of quantize_q8_0 (Create)
  uint32_t q8k_per_group_ = 8;   // Q8_K blocks per workgroup of quantize_q8_k: its subgroups
  int64_t max_tile_ = 32;        // the widest token tile Gemm takes (ResolveMaxTile)
  int64_t max_group_tile_ = 32;  // the widest grouped tile (GroupTile): at most max_tile_
  // By token tile (kTiles: gemm1_*, gemm8_*, gemm16_*, gemm32_*), per weight type.
  std::map<GgmlType, const Pipeline*> gemm_[kNumTiles];
  std::map<GgmlType, const Pipeline*> gemmx_;  // stacked experts, one slot per z
  // Stacked experts, a tile of one expert per z; by grouped tile (8, 16, 32: kTiles' index - 1).
  std::map<GgmlType, const Pipeline*> gemmg_[3];
  std::map<GgmlType, const Pipeline*> glu_[2];  // GemmGlu: gemm1_glu_*, gemm8_glu_*
  GemvVariant gemv_ = GemvVariant::kBasic;
  bool wide_ = false;      // kWide: every wide kernel
  bool wide_now_ = false;  // kTune: this recording's Q8_0 and Q4_0 one-token GEMVs are wide
  bool dot4_ = false;      // the integer GEMMs are the *_dot4 kernels
  MatMul matmul_ = MatMul::kOff;
  // By weight type: gemm_tiled_* or gemm_tiled_*_coopmat (AddMatMul).
  std::map<GgmlType, const Pipeline*> matmul_pipelines_;
  std::map<GgmlType, const Pipeline*> wide_gemm_[kNumWideKinds];  // by WideKind: the wide kernels
  // A token-tiled GEMM's (basic or wide) *_stages twin: with the norm tail and the RoPE / store
  // epilogue, whose barrier() the plain kernel does without. Made by AddStages for the types
  // that need them; every twin's name, by its plain kernel.
  std::map<const Pipeline*, const Pipeline*> stages_;
  std::map<const Pipeline*, std::string> stage_names_;
  // A one-token GEMM's (basic or wide) *_route twin: with the route tail (AddMoeTails).
  std::map<const Pipeline*, const Pipeline*> routes_;
  // An expert GEMM's (gemmx_*, gemmxw_f16) *_sum twin: with the sum tail (AddMoeTails); every
  // twin's name by its plain kernel.
  std::map<const Pipeline*, const Pipeline*> sums_;
  std::map<const Pipeline*, std::string> sum_names_;
  const Pipeline* moe_group_ = nullptr;
  const Pipeline* route_ = nullptr;
  const Pipeline* moe_sum_ = nullptr;
  const Pipeline* swiglu_oai_ = nullptr;
  const Pipeline* quantize_ = nullptr;
  const Pipeline* quantize_k_ = nullptr;
  const Pipeline* quantize_pairs_ = nullptr;
  const Pipeline* rmsnorm_ = nullptr;
  const Pipeline* rmsnorm_q_ = nullptr;
  const Pipeline* swiglu_q_ = nullptr;
  const Pipeline* add_ = nullptr;
  const Pipeline* swiglu_ = nullptr;
  const Pipeline* rope_ = nullptr;
  const Pipeline* kv_store_ = nullptr;
  const Pipeline* qk_norm_rope_ = nullptr;  // AddQkNormRope
  // gemm1_qkv_*, ..., gemm32_qkv_* by token tile (kTiles; GemmQkvRope), F16 and BF16.
  std::map<GgmlType, const Pipeline*> gemm_qkv_[kNumTiles];
  const Pipeline* attention_ = nullptr;
  const Pipeline* attention_combine_ = nullptr;
  const Pipeline* attention_tiled_ = nullptr;
  uint32_t max_shared_bytes_ = 0;  // the device's maxComputeSharedMemorySize
  const Pipeline* embed_ = nullptr;
  const Pipeline* embed_q_ = nullptr;
  const Pipeline* gather_ = nullptr;
  const Pipeline* argmax_ = nullptr;
  const Pipeline* sample_ = nullptr;
  const Pipeline* chain_redo_ = nullptr;
  const Pipeline* topk_ = nullptr;
  const Pipeline* copy_rows_ = nullptr;
  const Pipeline* mask_rows_ = nullptr;
  const Pipeline* edit_rows_ = nullptr;
  const Pipeline* allow_rows_ = nullptr;
};

}  // namespace uf::gpu
