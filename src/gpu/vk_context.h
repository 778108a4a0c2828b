// The Vulkan layer of the GPU backend: one Context per device (instance, device, one compute
// queue), buffers (device-local, or host-visible for the few bytes the host writes or reads per
// step), compute pipelines made from the embedded SPIR-V, and a Recorder that records a sequence
// of dispatches once into a command buffer that is then replayed any number of times.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "gpu/backend.h"
#include "gpu/vk_loader.h"

namespace uf::gpu {

class Context;

// Storage buffers a kernel binds at most: gemmx_*_sum (the down experts with the weighted sum and
// the norm tail, gemm.glsl) 11, gemm1_qkv_* 10. Context::Create refuses a device below it.
constexpr uint32_t kMaxBindings = 12;

// A storage buffer with its own memory. Move-only; freed with the context still alive.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  ~Buffer() { Reset(); }

  VkBuffer handle() const { return buffer_; }
  uint64_t size() const { return size_; }
  // Host pointer of a host-visible buffer (coherent), else null.
  void* mapped() const { return mapped_; }
  bool valid() const { return buffer_ != VK_NULL_HANDLE; }

 private:
  friend class Context;
  void Reset();
  Context* ctx_ = nullptr;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  VkDeviceMemory memory_ = VK_NULL_HANDLE;
  uint64_t size_ = 0;
  void* mapped_ = nullptr;
};

// A compute pipeline: `n_buffers` storage buffers at bindings 0.. of set 0, and up to
// kMaxPushBytes of push constants.
struct Pipeline {
  static constexpr uint32_t kMaxPushBytes = 128;  // the minimum every device guarantees
  std::string name;
  uint32_t n_buffers = 0;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
};

enum class Memory {
  kDevice,  // device-local: weights, cache, activations
  kHost,    // host-visible and coherent: per-step inputs and the logits read back
};

class Context {
 public:
  // Opens device `index` of ListDevices (-1: the first discrete GPU, else device 0).
  static StatusOr<std::unique_ptr<Context>> Create(int index);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const DeviceInfo& info() const { return info_; }
  // Marks the packed int8 dot unusable after its pipelines failed (Kernels::Create falls back),
  // so info() says what runs.
  void DisableIntegerDot() { info_.integer_dot = info_.integer_dot_accelerated = false; }
  // After a driver refused the coopmat pipeline: the tiled GEMM takes its plain kernel.
  void DisableCoopMat() { info_.coopmat = false; }
  const VkFns& vk() const { return vk_; }
  VkDevice device() const { return device_; }

  // size is rounded up to 16 bytes; never 0.
  StatusOr<Buffer> CreateBuffer(uint64_t size, Memory memory);
  // Copies through a host-visible staging buffer (in chunks) and waits for the copy.
  Status Upload(const Buffer& dst, uint64_t offset, const void* src, uint64_t bytes);
  Status Download(const Buffer& src, uint64_t offset, void* dst, uint64_t bytes);

  // The pipeline of embedded shader `name` (src/gpu/shaders/NAME.comp), made once and cached.
  StatusOr<const Pipeline*> GetPipeline(const std::string& name, uint32_t n_buffers);

  // Submits a recorded command buffer and waits for it to finish.
  // Waits by polling the fence (vkGetFenceStatus with a pause between polls) for up to
  // spin_us, then by blocking in vkWaitForFences: waking from the blocking wait leaves a bubble
  // between steps (llama.cpp's Vulkan backend measured up to 5% of decode speed on NVIDIA), and a
  // decode step's engine thread has nothing else to do meanwhile.
  Status SubmitAndWait(VkCommandBuffer cb);
  // The two halves, for command buffers in flight together (each with its own fence): Submit
  // returns at once; Wait waits as SubmitAndWait does and resets the fence.
  Status Submit(VkCommandBuffer cb, VkFence fence);
  Status Wait(VkFence fence);
  // The polling budget: UF_GPU_SPIN_US, or unset 2,000 us (a 1B decode step is ~0.6-0.8 ms on
  // an H200 by issue 28's figures) on a GPU and 0 on a CPU driver, whose shaders run on the
  // cores a polling thread would take.
  int64_t spin_us() const { return spin_us_; }
  void set_spin_us(int64_t us) { spin_us_ = us; }
  VkCommandPool command_pool() const { return command_pool_; }

  bool poisons() const { return poison_; }
  // Bytes of device memory allocated through this context and not freed.
  uint64_t allocated_bytes() const { return allocated_; }
  // Nanoseconds per timestamp tick, 0 when the compute queue has no timestamps.
  double timestamp_period_ns() const { return timestamp_period_ns_; }

 private:
  friend class Buffer;
  Context() = default;
  Status Init(int index);
  // bound: the buffer is bound to shaders (all but the staging buffer, which only copies), so
  // maxStorageBufferRange applies.
  StatusOr<Buffer> CreateBuffer(uint64_t size, Memory memory, bool bound);
  Status Poison(const Buffer& b, bool host_visible);
  Status CopyBuffer(VkBuffer src, uint64_t src_off, VkBuffer dst, uint64_t dst_off, uint64_t n);
  StatusOr<uint32_t> FindMemoryType(uint32_t type_bits, VkMemoryPropertyFlags want,
                                    VkMemoryPropertyFlags prefer) const;

  VkFns vk_;
  DeviceInfo info_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;  // UF_GPU_VALIDATE only
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkPhysicalDeviceMemoryProperties mem_props_{};
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  double timestamp_period_ns_ = 0.0;
  int64_t spin_us_ = 0;  // SubmitAndWait's polling budget
  // UF_GPU_POISON=on (unset: on under UF_GPU_VALIDATE): every new buffer is filled with a NaN
  // pattern, so that a kernel reading memory nothing wrote fails its test here as it would on a
  // GPU, whose allocations hold old data where lavapipe's fresh pages read as zeros.
  bool poison_ = false;
  bool poison_by_fill_ = false;  // UF_GPU_POISON=fill: the device's fill for every buffer
  VkCommandPool command_pool_ = VK_NULL_HANDLE;
  VkCommandBuffer transfer_cb_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  Buffer staging_;
  std::map<std::string, std::unique_ptr<Pipeline>> pipelines_;
  uint64_t allocated_ = 0;
};

// A range of a buffer bound to one binding of a dispatch.
struct BufferRange {
  const Buffer* buffer = nullptr;
  uint64_t offset = 0;
  uint64_t size = VK_WHOLE_SIZE;
  BufferRange(const Buffer& b) : buffer(&b) {}  // NOLINT: whole buffers read naturally
  BufferRange(const Buffer& b, uint64_t off, uint64_t n) : buffer(&b), offset(off), size(n) {}
};

// Records dispatches into one command buffer, then Finish; Run submits it and waits, as often as
// wanted. Every dispatch sees the writes of the ones before it: a full compute barrier separates
// each from the next, except inside a group (BeginGroup .. EndGroup), whose dispatches share one
// barrier after the group. A barrier is recorded only ahead of a following dispatch (the last
// dispatch's writes reach the host through Finish's barrier), and costs ~1.7 us of a dependent
// dispatch on an H200 (docs/gpu.md), so independent dispatches belong in a group.
// Per-step values (token, position) must come from buffers, not from push constants: those are
// fixed at record time.
class Recorder {
 public:
  // profile: a timestamp after every dispatch (up to kMaxProfiled), for Profile().
  explicit Recorder(Context* ctx, bool profile = false);
  static constexpr int kMaxProfiled = 4096;
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // buffers.size() must equal the pipeline's n_buffers; push_bytes <= Pipeline::kMaxPushBytes.
  void Dispatch(const Pipeline& p, const std::vector<BufferRange>& buffers, const void* push,
                uint32_t push_bytes, uint32_t groups_x, uint32_t groups_y = 1,
                uint32_t groups_z = 1);
  template <typename Push>
  void Dispatch(const Pipeline& p, const std::vector<BufferRange>& buffers, const Push& push,
                uint32_t groups_x, uint32_t groups_y = 1, uint32_t groups_z = 1) {
    static_assert(sizeof(Push) <= Pipeline::kMaxPushBytes);
    Dispatch(p, buffers, &push, sizeof(Push), groups_x, groups_y, groups_z);
  }
  // The dispatches recorded until EndGroup are independent: none reads or writes a range another
  // of them writes. No barrier between them; one after the group (ahead of the next dispatch).
  void BeginGroup();
  void EndGroup();
  Status Finish();  // ends recording; the first error of recording, if any
  Status Run();     // submits and waits; Finish first
  // Run's two halves, so that the host can queue the next command buffer while this one runs
  // (GpuForward::ForwardGreedyChain). A Recorder is submitted again only after its Wait; the
  // recordings of a queue run in submission order, each after the one before (Finish's barrier).
  Status Submit();
  Status Wait();  // no-op unless submitted
  int dispatches() const { return dispatches_; }
  // Compute-to-compute barriers recorded (not Finish's barrier towards the host).
  int barriers() const { return barriers_; }
  // GPU time of the last Run between the first and the last command, from timestamps (without
  // the submit and the wait); 0 where the device has no compute timestamps.
  double last_gpu_seconds() const { return last_gpu_seconds_; }
  // With profile: the last Run's time per pipeline (the intervals between the completion
  // timestamps after each dispatch; the dispatches of a group overlap, so the group's total is
  // right and its split approximate), in the order the pipelines first ran.
  std::vector<KernelTime> Profile() const;

 private:
  VkDescriptorSet AllocateSet(const Pipeline& p);

  Context* ctx_;
  VkCommandBuffer cb_ = VK_NULL_HANDLE;
  std::vector<VkDescriptorPool> pools_;
  uint32_t sets_left_ = 0;
  Status status_;
  bool finished_ = false;
  VkFence fence_ = VK_NULL_HANDLE;  // made at the first Submit
  bool pending_ = false;            // submitted, not yet waited for
  VkQueryPool timestamps_ = VK_NULL_HANDLE;
  double last_gpu_seconds_ = 0.0;
  bool profile_ = false;
  std::vector<std::string> profiled_;     // the pipeline of each timestamped dispatch
  std::vector<double> dispatch_seconds_;  // of the last Run, per timestamped dispatch
  int dispatches_ = 0;
  int barriers_ = 0;
  bool in_group_ = false;
  // A dispatch since the last barrier whose writes a later one may read.
  bool pending_barrier_ = false;
};

}  // namespace uf::gpu
