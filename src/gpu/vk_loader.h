// The Vulkan functions the backend calls, loaded at run time from the loader (libvulkan.so.1) with
// dlopen, so the binary does not need the loader to start: without it only `--device vulkan`
// fails, with a message saying so.
#pragma once

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include "base/status.h"

namespace uf::gpu {

#define UF_VK_INSTANCE_FUNCTIONS(X)           \
  X(vkDestroyInstance)                        \
  X(vkEnumeratePhysicalDevices)               \
  X(vkGetPhysicalDeviceProperties)            \
  X(vkGetPhysicalDeviceProperties2)           \
  X(vkGetPhysicalDeviceFeatures2)             \
  X(vkGetPhysicalDeviceMemoryProperties)      \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkEnumerateDeviceExtensionProperties)     \
  X(vkCreateDevice)

#define UF_VK_DEVICE_FUNCTIONS(X)  \
  X(vkDestroyDevice)               \
  X(vkGetDeviceQueue)              \
  X(vkCreateBuffer)                \
  X(vkDestroyBuffer)               \
  X(vkGetBufferMemoryRequirements) \
  X(vkAllocateMemory)              \
  X(vkFreeMemory)                  \
  X(vkBindBufferMemory)            \
  X(vkMapMemory)                   \
  X(vkUnmapMemory)                 \
  X(vkCreateShaderModule)          \
  X(vkDestroyShaderModule)         \
  X(vkCreateDescriptorSetLayout)   \
  X(vkDestroyDescriptorSetLayout)  \
  X(vkCreatePipelineLayout)        \
  X(vkDestroyPipelineLayout)       \
  X(vkCreateComputePipelines)      \
  X(vkDestroyPipeline)             \
  X(vkCreateDescriptorPool)        \
  X(vkDestroyDescriptorPool)       \
  X(vkAllocateDescriptorSets)      \
  X(vkUpdateDescriptorSets)        \
  X(vkCreateCommandPool)           \
  X(vkDestroyCommandPool)          \
  X(vkAllocateCommandBuffers)      \
  X(vkFreeCommandBuffers)          \
  X(vkBeginCommandBuffer)          \
  X(vkEndCommandBuffer)            \
  X(vkCmdBindPipeline)             \
  X(vkCmdBindDescriptorSets)       \
  X(vkCmdPushConstants)            \
  X(vkCmdDispatch)                 \
  X(vkCmdPipelineBarrier)          \
  X(vkCmdCopyBuffer)               \
  X(vkCmdFillBuffer)               \
  X(vkQueueSubmit)                 \
  X(vkCreateFence)                 \
  X(vkDestroyFence)                \
  X(vkGetFenceStatus)              \
  X(vkWaitForFences)               \
  X(vkResetFences)                 \
  X(vkDeviceWaitIdle)              \
  X(vkCreateQueryPool)             \
  X(vkDestroyQueryPool)            \
  X(vkCmdResetQueryPool)           \
  X(vkCmdWriteTimestamp)           \
  X(vkGetQueryPoolResults)

// Function pointers: the global ones after LoadVulkan, the instance and device ones after
// LoadInstance / LoadDevice (through vkGetInstanceProcAddr, which serves both).
struct VkFns {
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  PFN_vkCreateInstance vkCreateInstance = nullptr;
  PFN_vkEnumerateInstanceVersion vkEnumerateInstanceVersion = nullptr;
#define UF_VK_DECLARE(name) PFN_##name name = nullptr;
  UF_VK_INSTANCE_FUNCTIONS(UF_VK_DECLARE)
  UF_VK_DEVICE_FUNCTIONS(UF_VK_DECLARE)
#undef UF_VK_DECLARE
  // Optional (null where the loader or driver lacks VK_NV_cooperative_matrix).
  PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV
      vkGetPhysicalDeviceCooperativeMatrixPropertiesNV = nullptr;

  Status LoadInstance(VkInstance instance);
};

// Opens the loader once per process; Unavailable (naming libvulkan.so.1 and the package) when
// it is missing.
StatusOr<VkFns> LoadVulkan();

// Where the loader looks for drivers (for error messages): the environment overrides when set,
// else the manifest folders.
std::string DriverSearchDescription();

}  // namespace uf::gpu
