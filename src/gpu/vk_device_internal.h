// Device discovery shared by vk_device.cc (ListDevices and the devices' descriptions) and
// vk_context.cc (the context that opens one): the instance, extension checks, what a device
// offers the kernels (DeviceInfo), and Vulkan errors as Status.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "gpu/backend.h"
#include "gpu/vk_loader.h"

namespace uf::gpu {

// The result's name (VK_ERROR_OUT_OF_DEVICE_MEMORY, ...), or its number.
std::string VkResultName(VkResult r);
// "vulkan: <what> failed: <result>"; out-of-memory results as kResourceExhausted.
Status VkError(const char* what, VkResult r);

#define UF_VK_TRY(what, call)                                 \
  do {                                                        \
    const VkResult uf_vk_r = (call);                          \
    if (uf_vk_r != VK_SUCCESS) return VkError(what, uf_vk_r); \
  } while (0)

inline constexpr char kIntegerDotExtension[] = "VK_KHR_shader_integer_dot_product";
inline constexpr char kCoopMatExtension[] = "VK_NV_cooperative_matrix";
// Core in Vulkan 1.2, but the instance asks for 1.1: the coopmat kernels' shaderFloat16 and
// Vulkan memory model are enabled through their extensions (NVIDIA lists both).
inline constexpr char kFloat16Extension[] = "VK_KHR_shader_float16_int8";
inline constexpr char kMemoryModelExtension[] = "VK_KHR_vulkan_memory_model";

// An instance and its physical devices. Errors name the driver search. `messenger` is the
// validation layer's (UF_GPU_VALIDATE; null without it): close both with CloseInstance.
Status OpenInstance(VkFns* vk, VkInstance* instance, VkDebugUtilsMessengerEXT* messenger,
                    std::vector<VkPhysicalDevice>* devices);

bool HasExtension(const VkFns& vk, VkPhysicalDevice pd, const char* name);

// What device `index` (pd) offers the kernels: memory, subgroup size, limits, the packed int8
// dot, the matrix units.
DeviceInfo Describe(const VkFns& vk, VkPhysicalDevice pd, int index);

}  // namespace uf::gpu
