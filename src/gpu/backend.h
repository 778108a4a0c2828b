// The GPU backend as the rest of the engine sees it: which device a command runs on, the Vulkan
// devices present, and a decoder that runs the forward pass on one of them. Nothing here names a
// Vulkan type, so the callers build the same with or without the backend (src/gpu/no_vulkan.cc
// answers every call with an error saying what to install).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
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
  bool float16 = false;  // shaderFloat16 (not required by the current shaders)
};

// The Vulkan devices the loader finds. Errors (no loader, no driver, no device) name what was
// searched and what to install.
StatusOr<std::vector<DeviceInfo>> ListDevices();

// The read bandwidth of device `device` in bytes/s: passes of uvec4 loads over a buffer of
// `bytes` (clipped to a quarter of the device memory), recorded in one command buffer and timed
// around its submit (so a submit's fixed cost, ~40 us on an H200, is spread over the passes).
StatusOr<double> MeasureReadBandwidth(const DeviceSpec& device, uint64_t bytes, int passes);

// A forward pass of a whole model on one Vulkan device for one sequence, one token per step:
// weights uploaded once at Create, the K/V cache (f16) in device memory, and every step one
// pre-recorded command buffer replayed (the token and position are read from a small host-written
// buffer, so nothing is re-recorded per token). Covers the architectures of src/model (llama,
// qwen2, qwen3) with F32, F16, Q8_0, Q4_0 and Q6_K kernels; BF16 and Q4_K matrices are stored as
// F16 (no kernels of their own yet); other weight types fail Create with Unimplemented naming
// the tensor.
class GpuDecoder {
 public:
  virtual ~GpuDecoder() = default;
  // max_ctx: positions the device cache holds.
  static StatusOr<std::unique_ptr<GpuDecoder>> Create(const model::Model& model,
                                                      const DeviceSpec& device, int64_t max_ctx);

  // Runs token `token` at position `pos` (0 <= pos <= previous pos + 1; a smaller pos rewinds the
  // sequence) and leaves its logits in logits().
  virtual Status Step(int32_t token, int32_t pos) = 0;
  virtual const float* logits() const = 0;  // [n_vocab]
  // GPU time of the last Step from device timestamps (no submit or wait); 0 if unavailable.
  virtual double last_step_gpu_seconds() const = 0;
  virtual int64_t max_ctx() const = 0;
  virtual int64_t n_vocab() const = 0;
  virtual const DeviceInfo& device() const = 0;
  // Bytes of device memory held (weights, cache, scratch).
  virtual uint64_t device_bytes() const = 0;
};

}  // namespace uf::gpu
