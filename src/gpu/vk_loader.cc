#include "gpu/vk_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

namespace uf::gpu {

Status VkFns::LoadInstance(VkInstance instance) {
#define UF_VK_LOAD(name)                                                       \
  name = reinterpret_cast<PFN_##name>(vkGetInstanceProcAddr(instance, #name)); \
  if (name == nullptr)                                                         \
    return UnavailableError("the Vulkan loader lacks " #name                   \
                            " (Vulkan "                                        \
                            "1.1 or newer is needed)");
  UF_VK_INSTANCE_FUNCTIONS(UF_VK_LOAD)
  UF_VK_DEVICE_FUNCTIONS(UF_VK_LOAD)
#undef UF_VK_LOAD
  vkGetPhysicalDeviceCooperativeMatrixPropertiesNV =
      reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV>(
          vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV"));
  return OkStatus();
}

StatusOr<VkFns> LoadVulkan() {
  static std::once_flag once;
  static void* lib = nullptr;
  static std::string error;
  std::call_once(once, [] {
    lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      error = e != nullptr ? e : "dlopen failed";
    }
  });
  if (lib == nullptr) {
    return UnavailableError("cannot load the Vulkan loader libvulkan.so.1 (" + error +
                            "); install libvulkan1 and a Vulkan driver (mesa-vulkan-drivers for "
                            "the CPU driver lavapipe, or your GPU vendor's)");
  }
  VkFns f;
  f.vkGetInstanceProcAddr =
      reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
  if (f.vkGetInstanceProcAddr == nullptr) {
    return UnavailableError("libvulkan.so.1 has no vkGetInstanceProcAddr");
  }
  f.vkCreateInstance =
      reinterpret_cast<PFN_vkCreateInstance>(f.vkGetInstanceProcAddr(nullptr, "vkCreateInstance"));
  f.vkEnumerateInstanceVersion = reinterpret_cast<PFN_vkEnumerateInstanceVersion>(
      f.vkGetInstanceProcAddr(nullptr, "vkEnumerateInstanceVersion"));
  if (f.vkCreateInstance == nullptr) {
    return UnavailableError("libvulkan.so.1 has no vkCreateInstance");
  }
  return f;
}

std::string DriverSearchDescription() {
  for (const char* var : {"VK_DRIVER_FILES", "VK_ICD_FILENAMES"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') {
      return std::string("the driver manifests named by ") + var + "=" + v;
    }
  }
  return "the driver manifests in /etc/vulkan/icd.d, /usr/share/vulkan/icd.d and "
         "$XDG_DATA_DIRS/vulkan/icd.d (VK_DRIVER_FILES or VK_ICD_FILENAMES override)";
}

}  // namespace uf::gpu
