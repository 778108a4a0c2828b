// The GPU backend as the rest of the engine sees it: which device a command runs on, the Vulkan
// devices present, and a decoder that runs the forward pass on one of them. Nothing here names a
// Vulkan type, so the callers build the same with or without the backend (src/gpu/no_vulkan.cc
// answers every call with an error saying what to install).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/kv_cache.h"
#include "model/batch.h"
#include "model/model.h"

namespace uf::gpu {

// Where a command runs: `cpu` or `vulkan[:N]` (N = index in `ultrafast devices`; without it the
// first discrete GPU, else the first device).
struct DeviceSpec {
  bool vulkan = false;
  int index = -1;  // -1: pick
  std::string ToString() const;
};
StatusOr<DeviceSpec> ParseDeviceSpec(std::string_view s);

// True when this binary was built with the Vulkan backend.
bool VulkanCompiledIn();

struct DeviceInfo {
  int index = 0;
  std::string name;
  std::string type;  // discrete, integrated, virtual, cpu, other
  std::string api_version;
  std::string driver;               // driver name and info
  uint64_t device_local_bytes = 0;  // the largest device-local memory heap
  uint32_t subgroup_size = 0;
  // maxStorageBufferRange: the largest buffer a shader may bind (4 GiB - 1 on NVIDIA and AMD);
  // every buffer here is bound whole, so no buffer may be larger.
  uint64_t max_binding_bytes = 0;
  // Whether a buffer past max_binding_bytes is refused: on every device but a CPU driver
  // (lavapipe binds past its 128 MiB in practice, so the synthetic 1B shapes run there), and
  // wherever UF_GPU_BINDING_LIMIT sets the limit (the refusals tested on lavapipe).
  bool binding_limit_enforced = true;
  // maxComputeSharedMemorySize: a workgroup's shared memory (Vulkan guarantees 16 KiB; NVIDIA 48,
  // AMD and Intel 64). attention_tiled.comp needs ~26 KiB (Kernels::TiledAttentionFits).
  uint32_t max_shared_bytes = 0;
  bool float16 = false;  // shaderFloat16 (not required by the current shaders)
  // shaderIntegerDotProduct (VK_KHR_shader_integer_dot_product, core in 1.3): the packed
  // 4 x int8 dot the Q8_0 / Q4_0 / MXFP4 / K-quant GEMMs use when present (the *_dot4 kernels);
  // accelerated: the driver says it is one instruction (NVIDIA's dp4a), not a lowering.
  bool integer_dot = false;
  bool integer_dot_accelerated = false;
  // The matrix units, as the tiled GEMM's gemm_tiled_*_coopmat kernels use them: VK_NV_cooperative_
  // matrix with a 16 x 16 x 16 subgroup fragment of f16 inputs and f32 accumulators, shaderFloat16,
  // vulkanMemoryModel (the fragment loads' SPIR-V declares it) and 32-lane subgroups (the kernel
  // is 4 subgroups of 32). NVIDIA lists these from Turing on; lavapipe does not.
  bool coopmat = false;
};

// Whether the integer GEMMs run the packed int8 dot (the *_dot4 kernels) on device d unless told
// otherwise: d has shaderIntegerDotProduct and the environment's UF_GPU_DOT4 is not 0.
bool IntegerDotByDefault(const DeviceInfo& d);

// Whether a one-token step's o and down GEMMs run the RMSNorm after them in their last workgroup
// (Kernels::NormTail; docs/gpu.md "The norm tail"): the same bits either way; two dispatches and
// barriers fewer a layer against a tail that one workgroup runs after all the others, which of
// the two costs more depends on the device. kTune: measured on the device (StepTuner, as
// AttentionTiles::kTune: the first one-token steps alternate it off and on, timed, then the
// faster runs). kOn / kOff: always that. kDefault: the environment's UF_GPU_NORM_TAIL (tune | on |
// off, or 1 | 0; unset or anything else tune, the latter with a warning).
enum class NormTail { kDefault, kTune, kOn, kOff };
NormTail ResolveNormTail(NormTail t);
const char* NormTailName(NormTail t);  // "tune", "on", "off"
// Whether decoding chains its steps on the device (`run --device vulkan`: GpuDecoder::GreedyChain
// greedy, GenerateOptions::chain sampled; `serve --device vulkan`: ServiceOptions::chain_steps):
// UF_GPU_CHAIN=on (the default) or off (one step a token, the host's round trip between steps;
// for A/B runs). The same tokens either way.
bool ChainSteps();

// The Vulkan devices the loader finds. Errors (no loader, no driver, no device) name what was
// searched and what to install.
StatusOr<std::vector<DeviceInfo>> ListDevices();

// The read bandwidth of device `device` in bytes/s: passes of uvec4 loads over a buffer of
// `bytes` (clipped to a quarter of the device memory), recorded in one command buffer and timed
// around its submit (so a submit's fixed cost, ~40 us on an H200, is spread over the passes).
StatusOr<double> MeasureReadBandwidth(const DeviceSpec& device, uint64_t bytes, int passes);

// Which one-token GEMV kernels the Vulkan backend runs (docs/gpu.md "The wide GEMV"). kBasic:
// one subgroup per row, word loads (gemm1_*). kWide: 16-byte loads per lane, several in flight
// (F16: gemm*w_f16 for every batch size, a different summation order than kBasic; Q8_0 and Q4_0:
// gemm1w_*, the same bits as kBasic). kTune: F16 and BF16 basic (the wide F16 order would be a
// choice for every batch size, so for the whole process), the Q8_0 and Q4_0 one-token GEMVs
// chosen by timing both on the device (StepTuner, as AttentionTiles::kTune; the same bits either
// way). kDefault: the environment's UF_GPU_GEMV (tune | basic | wide; unset or anything else
// tune, the latter with a warning).
enum class GemvVariant { kDefault, kBasic, kWide, kTune };

// The tiled GEMM for F16, BF16, Q8_0, Q4_0, Q4_K and Q6_K batches of 16 tokens and more
// (docs/gpu.md "The tiled GEMM"): kOff the
// token-tiled kernels (every row the bits it has alone), kTiled shared-memory blocks multiplied
// by the invocations, kCoopMat the same blocks on the matrix units (VK_NV_cooperative_matrix;
// DeviceInfo::coopmat, else kTiled). kDefault: the environment's UF_GPU_MATMUL (off | tiled |
// coopmat), unset or anything else kOff, the latter with a warning: off until a GPU has measured
// it, and because its rows are not the one-token rows' bits (a speculative verify batch of 16
// tokens or more would no longer be bit-identical to decoding).
enum class MatMul { kDefault, kOff, kTiled, kCoopMat };
MatMul ResolveMatMul(MatMul m);
const char* MatMulName(MatMul m);  // "off", "tiled", "coopmat"

// Which attention kernel a step takes; both give every row the same bits (docs/gpu.md "Tiled
// attention"), so the choice is speed only. attention_tiled.comp stages K and V once for a tile
// of tokens and a KV head's query heads: tiles of a run of one sequence's tokens when the
// batch's runs average kTiledAttentionRun tokens or more (prefill chunks, verify batches), else
// of one token (a decode batch: only a KV head's query heads share its rows); attention.comp
// runs a workgroup per query head and token. kTune: measured on the device (StepTuner: per class
// of step, the first steps alternate the two, timed, then the faster runs). kAuto: tiled for runs,
// attention.comp for decode batches, unmeasured. kTiled / kToken: always that one (where the tiled
// kernel takes the layer's shape). kDefault: the environment's UF_GPU_ATTENTION (tune | auto |
// tiled | token; unset or anything else tune, the latter with a warning).
enum class AttentionTiles { kDefault, kTune, kAuto, kTiled, kToken };
constexpr int64_t kTiledAttentionRun = 4;
AttentionTiles ResolveAttentionTiles(AttentionTiles a);
const char* AttentionTilesName(AttentionTiles a);  // "tune", "auto", "tiled", "token"

// The batched forward on one Vulkan device, behind the same step interface as the CPU decoder
// (model::BatchForward), for the serving engine: a batch of tokens of several sequences (prefill
// chunks, decode tokens, speculative verify rows) in one pass over the weights (GEMM kernels
// tiled over the tokens), causal attention within and across the batch, K/V of every position
// into a device pool paged exactly like `cache` (the engine's KvCache keeps the block tables,
// prefix sharing and eviction; only its host storage goes unused, see
// KvCacheOptions::host_storage). Each token's row is computed the same way whatever else the
// batch holds, so a row of a k + 1-token verify batch is bit-identical to the same token decoded
// alone. One command buffer is recorded per (tokens, logits rows) shape and replayed.
// GPU time of one kernel in a profiled step (GpuForwardOptions::profile): its dispatches and
// the time between the completion timestamps around them.
struct KernelTime {
  std::string name;  // the shader, e.g. "gemm1_q4_0"
  int dispatches = 0;
  double seconds = 0.0;
};

struct GpuForwardOptions {
  int64_t max_batch = 64;   // tokens per Forward
  int64_t max_outputs = 0;  // rows per Forward that may want logits; 0 = max_batch
  // Best tokens a logits row can be reduced to on the device (Batch::top_only, top()); at most
  // 64; 0 turns the reduction off (every row comes back whole).
  int32_t top_k = 64;
  // Known tokens per reduced row (Batch::known_ids: the tokens a request's bias, bans and
  // penalties edit, read out raw and masked before the reduction); 0: rows with edits come back
  // whole.
  int32_t max_known = 1024;
  // Attention split over positions (flash-decoding) in chunks of this many positions when the
  // cache's context is longer than one chunk: at depth a decode step then runs n_head * depth /
  // chunk workgroups instead of n_head. 0: never split.
  int64_t attention_chunk = 256;
  GemvVariant gemv = GemvVariant::kDefault;
  // Fused kernels and shared barriers (docs/gpu.md, "One step"): RMSNorm and SwiGLU with the
  // activation quantization after them, the residual adds inside the GEMMs before them, and one
  // barrier after independent dispatches (Q, K and V; gate and up). The same bits as false, which
  // records one dispatch per operation with a barrier after each (kept for the tests that compare
  // the two, and to count what the fusions save).
  bool fuse = true;
  // With fuse, the RMSNorm after a one-token step's o and down products in those GEMMs' last
  // workgroup (NormTail; Kernels::NormTail: the same bits, two dispatches and barriers fewer a
  // layer), timed against the separate norm by default.
  NormTail norm_tail = NormTail::kDefault;
  // With fuse, a one-token step's mixture-of-experts layers take their stages' tails: the router
  // GEMM also routes in its last workgroup (Kernels::RouteTail: Route's bits) and the down
  // experts' GEMM adds the weighted sum into the residual stream (Kernels::ExpertSum: MoeSum's
  // bits), two dispatches and barriers fewer a MoE layer. The environment's UF_GPU_MOE_TAILS=0
  // turns them off (an A/B on a device).
  bool moe_tails = true;
  MatMul matmul = MatMul::kDefault;
  AttentionTiles attention_tiles = AttentionTiles::kDefault;
  // A timestamp after every dispatch, for last_step_profile() (`bench --device vulkan
  // --profile`). Timestamps wait for the work before them, so a profiled step runs slower.
  bool profile = false;
};
class GpuForward : public model::BatchForward {
 public:
  // cache must be f16 or q8_0 and outlive the forward.
  static StatusOr<std::unique_ptr<GpuForward>> Create(const model::Model& model,
                                                      const DeviceSpec& device,
                                                      engine::KvCache* cache,
                                                      const GpuForwardOptions& options);
  // Forward, but for greedy decoding without bias, bans or penalties: the arg-max of each row
  // that wants logits (sampling::ArgMax's choice) is taken on the device and only the tokens come
  // back (tokens: n_outputs() of them); logits() is not updated.
  virtual Status ForwardGreedy(const model::Batch& batch, int32_t* tokens) = 0;
  // ForwardGreedyChain (model::BatchForward) runs here: each step's arg-max is fed to the next by
  // argmax.comp's feed. A step a tuner times (last_step_trial) runs alone, the chain drained.
  // ForwardSampledChains too (with options.top_k > 0): sample.comp draws from topk.comp's rows,
  // a row per stream (up to chain_streams() of them).
  // Rows that came back reduced to their best tokens (Batch::top_only, and each sampled chain
  // step's rows), since Create.
  virtual int64_t rows_reduced() const = 0;
  // Reduced rows copied back whole afterwards (FetchLogits), since Create.
  virtual int64_t rows_fetched() const = 0;
  // GPU time of the last Forward from device timestamps (no submit or wait); 0 if unavailable.
  virtual double last_step_gpu_seconds() const = 0;
  // What the tuned choices (AttentionTiles::kTune, NormTail::kTune) measured so far: a line per
  // class of step with the two ways' median times and the choice.
  virtual std::vector<std::string> step_tuning() const { return {}; }
  // Whether the last Forward was a tuner's trial: a step timed to choose between two ways that
  // give the same bits, so later steps of its class may run the other way at another speed.
  // (bench runs its passes untimed until no step is one.)
  virtual bool last_step_trial() const { return false; }
  // Dispatches and compute-to-compute barriers in the last Forward's recorded step (on an H200 a
  // dependent dispatch costs ~1.9 us with its barrier, ~0.2 us without); 0 before any Forward.
  virtual int last_step_dispatches() const = 0;
  virtual int last_step_barriers() const = 0;
  // With options.profile: the last Forward's GPU time per kernel, in the order the kernels first
  // ran; empty without it or without device timestamps.
  virtual std::vector<KernelTime> last_step_profile() const = 0;
  virtual const DeviceInfo& device() const = 0;
  // Bytes of device memory held (weights, cache, scratch).
  virtual uint64_t device_bytes() const = 0;
};

// One sequence on one Vulkan device (run, logits, bench): a GpuForward over a cache of its own
// (max_ctx positions). Step runs one token; Prefill runs a prompt in batches. Covers the
// architectures of src/model (llama, qwen2, qwen3) with F32, F16, BF16, Q8_0, Q4_0, Q4_K and Q6_K
// weights; other weight types fail Create with Unimplemented naming the tensor.
class GpuDecoder {
 public:
  virtual ~GpuDecoder() = default;
  // max_ctx: positions the device cache holds; max_batch: tokens per Prefill pass; kv_type: f16
  // or q8_0.
  static StatusOr<std::unique_ptr<GpuDecoder>> Create(const model::Model& model,
                                                      const DeviceSpec& device, int64_t max_ctx,
                                                      int64_t max_batch = 64,
                                                      engine::KvType kv_type = engine::KvType::kF16,
                                                      GemvVariant gemv = GemvVariant::kDefault);

  // Runs token `token` at position `pos` (0 <= pos <= previous pos + 1; a smaller pos rewinds the
  // sequence) and leaves its logits in logits().
  virtual Status Step(int32_t token, int32_t pos) = 0;
  // Step, returning the greedy next token (the arg-max, taken on the device: the logits stay
  // there and logits() is not updated).
  virtual StatusOr<int32_t> StepGreedy(int32_t token, int32_t pos) = 0;
  // Up to n StepGreedy steps from (token, pos), each step's token fed to the next on the device
  // (GpuForward::ForwardGreedyChain); on_token gets each next token and returns false to stop.
  // Returns the steps taken; the sequence then ends at pos + that many.
  // banned: tokens never chosen (the end tokens when ignoring EOS; at most 1,024).
  virtual StatusOr<int64_t> GreedyChain(int32_t token, int32_t pos, int64_t n,
                                        const std::function<bool(int32_t)>& on_token,
                                        std::span<const int32_t> banned = {}) = 0;
  // Runs tokens at positions pos, pos + 1, ... in passes of up to max_batch tokens; logits() then
  // holds the last token's logits, and all_logits(i) those of token i of the last pass when
  // every_logits is set.
  virtual Status Prefill(std::span<const int32_t> tokens, int32_t pos,
                         bool every_logits = false) = 0;
  virtual const float* logits() const = 0;  // [n_vocab]
  // Logits of token i of the last Prefill pass (every_logits), or of the last Step (i = 0).
  virtual const float* all_logits(int64_t i) const = 0;
  // GPU time of the last Step from device timestamps (no submit or wait); 0 if unavailable.
  virtual double last_step_gpu_seconds() const = 0;
  virtual int64_t max_ctx() const = 0;
  virtual int64_t max_batch() const = 0;
  virtual int64_t n_vocab() const = 0;
  virtual const DeviceInfo& device() const = 0;
  // Bytes of device memory held (weights, cache, scratch).
  virtual uint64_t device_bytes() const = 0;
};

}  // namespace uf::gpu
