// The GPU backend's entry points in a build without Vulkan (CMake found no Vulkan headers or no
// glslc): every call says so and what to install.
#include "gpu/backend.h"

namespace uf::gpu {
namespace {

Status NotBuilt() {
  return UnavailableError(
      "this ultrafast was built without the Vulkan GPU backend (CMake found no Vulkan headers or "
      "no glslc); install libvulkan-dev and glslc (Debian) and rebuild");
}

}  // namespace

bool VulkanCompiledIn() { return false; }

StatusOr<std::vector<DeviceInfo>> ListDevices() { return NotBuilt(); }

bool IntegerDotByDefault(const DeviceInfo&) { return false; }

StatusOr<double> MeasureReadBandwidth(const DeviceSpec&, uint64_t, int) { return NotBuilt(); }

StatusOr<std::unique_ptr<GpuDecoder>> GpuDecoder::Create(const model::Model&, const DeviceSpec&,
                                                         int64_t, int64_t, engine::KvType,
                                                         GemvVariant) {
  return NotBuilt();
}

StatusOr<std::unique_ptr<GpuForward>> GpuForward::Create(const model::Model&, const DeviceSpec&,
                                                         engine::KvCache*,
                                                         const GpuForwardOptions&) {
  return NotBuilt();
}

}  // namespace uf::gpu
