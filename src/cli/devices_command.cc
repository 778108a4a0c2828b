// `ultrafast devices`: the Vulkan devices `--device vulkan:N` can name, with their memory,
// subgroup size and largest bindable buffer.
#include <cstdio>

#include "cli/common.h"

namespace uf::cli {
namespace {

void Devices() {
  auto devices = gpu::ListDevices();
  if (!devices.ok()) Fail("devices", devices.status());
  // "buffer": the largest buffer a shader may bind (maxStorageBufferRange); the K/V cache of one
  // layer and each weight matrix must fit in it. "dot4": the packed 4 x int8 dot
  // (shaderIntegerDotProduct) the integer GEMMs use, "yes" where the driver says it is one
  // instruction, "lowered" where it is emulated, "no" where the *_dot4 kernels cannot run.
  // "coopmat": the matrix units the tiled GEMM can use (DeviceInfo::coopmat; UF_GPU_MATMUL).
  std::printf("%-3s %-40s %-10s %-8s %10s %9s %10s %-8s %-8s  %s\n", "N", "device", "type",
              "vulkan", "memory", "subgroup", "buffer", "dot4", "coopmat", "driver");
  for (const gpu::DeviceInfo& d : *devices) {
    const char* dot4 = !d.integer_dot ? "no" : d.integer_dot_accelerated ? "yes" : "lowered";
    std::printf("%-3d %-40s %-10s %-8s %7.1f GiB %9u %6.1f GiB %-8s %-8s  %s\n", d.index,
                d.name.c_str(), d.type.c_str(), d.api_version.c_str(),
                static_cast<double>(d.device_local_bytes) / (1 << 30), d.subgroup_size,
                static_cast<double>(d.max_binding_bytes) / (1 << 30), dot4,
                d.coopmat ? "yes" : "no", d.driver.c_str());
  }
}

}  // namespace

void AddDevicesCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "devices", "List the Vulkan devices (for --device vulkan:N) with memory and subgroup size");
  cmd->callback([] { Devices(); });
}

}  // namespace uf::cli
