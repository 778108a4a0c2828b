// The Vulkan devices: the instance, each device's description (DeviceInfo) and `ultrafast
// devices`' list (ListDevices).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/vk_device_internal.h"
#include "gpu/vk_validation.h"

namespace uf::gpu {
namespace {

std::string TypeName(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return "cpu";
    default:
      return "other";
  }
}

// Whether the device lists the fragment gemm_tiled_*_coopmat multiply: 16 x 16 x 16, f16 A
// and B, f32 C and D, subgroup scope.
bool HasCoopMatShape(const VkFns& vk, VkPhysicalDevice pd) {
  if (vk.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV == nullptr) return false;
  uint32_t n = 0;
  if (vk.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(pd, &n, nullptr) != VK_SUCCESS) {
    return false;
  }
  std::vector<VkCooperativeMatrixPropertiesNV> props(
      n, {VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV});
  if (vk.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(pd, &n, props.data()) != VK_SUCCESS) {
    return false;
  }
  for (uint32_t i = 0; i < n; ++i) {
    const VkCooperativeMatrixPropertiesNV& c = props[i];
    if (c.MSize == 16 && c.NSize == 16 && c.KSize == 16 &&
        c.AType == VK_COMPONENT_TYPE_FLOAT16_NV && c.BType == VK_COMPONENT_TYPE_FLOAT16_NV &&
        c.CType == VK_COMPONENT_TYPE_FLOAT32_NV && c.DType == VK_COMPONENT_TYPE_FLOAT32_NV &&
        c.scope == VK_SCOPE_SUBGROUP_NV) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::string VkResultName(VkResult r) {
  switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY:
      return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
      return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED:
      return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST:
      return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_EXTENSION_NOT_PRESENT:
      return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT:
      return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_TOO_MANY_OBJECTS:
      return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_OUT_OF_POOL_MEMORY:
      return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_TIMEOUT:
      return "VK_TIMEOUT";
    default:
      return "VkResult " + std::to_string(static_cast<int>(r));
  }
}

Status VkError(const char* what, VkResult r) {
  const StatusCode code = r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY
                              ? StatusCode::kResourceExhausted
                              : StatusCode::kInternal;
  return Status(code, std::string("vulkan: ") + what + " failed: " + VkResultName(r));
}

Status OpenInstance(VkFns* vk, VkInstance* instance, VkDebugUtilsMessengerEXT* messenger,
                    std::vector<VkPhysicalDevice>* devices) {
  *messenger = VK_NULL_HANDLE;
  uint32_t version = VK_API_VERSION_1_0;
  if (vk->vkEnumerateInstanceVersion != nullptr) vk->vkEnumerateInstanceVersion(&version);
  if (version < VK_API_VERSION_1_1) {
    return UnavailableError("the Vulkan loader supports only Vulkan 1.0; 1.1 or newer is needed");
  }
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "ultrafast";
  app.apiVersion = VK_API_VERSION_1_1;
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &app;
  ValidationRequest validation;
  UF_RETURN_IF_ERROR(RequestValidation(*vk, &validation, &ci));
  const VkResult r = vk->vkCreateInstance(&ci, nullptr, instance);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER) {
    return UnavailableError("no Vulkan driver found: the loader searched " +
                            DriverSearchDescription() +
                            "; install a Vulkan driver (mesa-vulkan-drivers for the CPU driver "
                            "lavapipe, or your GPU vendor's)");
  }
  UF_VK_TRY("vkCreateInstance", r);
  Status s = vk->LoadInstance(*instance);
  if (s.ok()) {
    StatusOr<VkDebugUtilsMessengerEXT> m = StartMessenger(*vk, *instance, validation);
    if (m.ok()) {
      *messenger = *m;
    } else {
      s = m.status();
    }
  }
  if (s.ok()) {
    uint32_t n = 0;
    vk->vkEnumeratePhysicalDevices(*instance, &n, nullptr);
    devices->resize(n);
    if (n > 0) vk->vkEnumeratePhysicalDevices(*instance, &n, devices->data());
    devices->resize(n);
    if (n == 0) {
      s = UnavailableError("no Vulkan device found: the loader searched " +
                           DriverSearchDescription() +
                           " and no driver there reported a device; install a Vulkan driver "
                           "(mesa-vulkan-drivers for the CPU driver lavapipe, or your GPU "
                           "vendor's)");
    }
  }
  if (!s.ok() && vk->vkDestroyInstance != nullptr) {
    CloseInstance(*vk, *instance, *messenger);
    *instance = VK_NULL_HANDLE;
    *messenger = VK_NULL_HANDLE;
  }
  return s;
}

bool HasExtension(const VkFns& vk, VkPhysicalDevice pd, const char* name) {
  uint32_t n = 0;
  if (vk.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkExtensionProperties> exts(n);
  if (vk.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, exts.data()) != VK_SUCCESS) {
    return false;
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (std::strcmp(exts[i].extensionName, name) == 0) return true;
  }
  return false;
}

DeviceInfo Describe(const VkFns& vk, VkPhysicalDevice pd, int index) {
  VkPhysicalDeviceSubgroupProperties sub{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  VkPhysicalDeviceShaderIntegerDotProductProperties dot_props{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES};
  VkPhysicalDeviceProperties base;
  vk.vkGetPhysicalDeviceProperties(pd, &base);
  const bool dot_ext = HasExtension(vk, pd, kIntegerDotExtension);
  VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  props.pNext = &sub;
  // The driver properties are core in 1.2 only.
  if (base.apiVersion >= VK_API_VERSION_1_2) sub.pNext = &drv;
  if (dot_ext) {
    dot_props.pNext = props.pNext;
    props.pNext = &dot_props;
  }
  vk.vkGetPhysicalDeviceProperties2(pd, &props);
  VkPhysicalDeviceShaderFloat16Int8Features f16{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
  VkPhysicalDeviceShaderIntegerDotProductFeatures dot{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
  VkPhysicalDeviceVulkanMemoryModelFeatures memory_model{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
  VkPhysicalDeviceCooperativeMatrixFeaturesNV coopmat{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  const bool coopmat_ext =
      base.apiVersion >= VK_API_VERSION_1_2 && HasExtension(vk, pd, kCoopMatExtension) &&
      HasExtension(vk, pd, kFloat16Extension) && HasExtension(vk, pd, kMemoryModelExtension);
  VkPhysicalDeviceFeatures2 feats{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  if (base.apiVersion >= VK_API_VERSION_1_2) {
    f16.pNext = &memory_model;
    feats.pNext = &f16;
  }
  if (dot_ext) {
    dot.pNext = feats.pNext;
    feats.pNext = &dot;
  }
  if (coopmat_ext) {
    coopmat.pNext = feats.pNext;
    feats.pNext = &coopmat;
  }
  vk.vkGetPhysicalDeviceFeatures2(pd, &feats);
  VkPhysicalDeviceMemoryProperties mem;
  vk.vkGetPhysicalDeviceMemoryProperties(pd, &mem);

  DeviceInfo d;
  d.index = index;
  d.name = props.properties.deviceName;
  d.type = TypeName(props.properties.deviceType);
  const uint32_t v = props.properties.apiVersion;
  d.api_version = std::to_string(VK_API_VERSION_MAJOR(v)) + "." +
                  std::to_string(VK_API_VERSION_MINOR(v)) + "." +
                  std::to_string(VK_API_VERSION_PATCH(v));
  if (base.apiVersion >= VK_API_VERSION_1_2) {
    d.driver = std::string(drv.driverName) + " " + drv.driverInfo;
  }
  for (uint32_t i = 0; i < mem.memoryHeapCount; ++i) {
    if (mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) {
      d.device_local_bytes = std::max<uint64_t>(d.device_local_bytes, mem.memoryHeaps[i].size);
    }
  }
  d.subgroup_size = sub.subgroupSize;
  d.max_binding_bytes = props.properties.limits.maxStorageBufferRange;
  d.max_shared_bytes = props.properties.limits.maxComputeSharedMemorySize;
  d.float16 = f16.shaderFloat16 != VK_FALSE;
  d.integer_dot = dot_ext && dot.shaderIntegerDotProduct != VK_FALSE;
  d.integer_dot_accelerated =
      d.integer_dot && dot_props.integerDotProduct4x8BitPackedSignedAccelerated != VK_FALSE;
  d.coopmat = coopmat_ext && coopmat.cooperativeMatrix != VK_FALSE && d.float16 &&
              memory_model.vulkanMemoryModel != VK_FALSE && d.subgroup_size == 32 &&
              HasCoopMatShape(vk, pd);
  return d;
}

bool VulkanCompiledIn() { return true; }

StatusOr<std::vector<DeviceInfo>> ListDevices() {
  UF_ASSIGN_OR_RETURN(VkFns vk, LoadVulkan());
  VkInstance instance = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  std::vector<VkPhysicalDevice> devices;
  UF_RETURN_IF_ERROR(OpenInstance(&vk, &instance, &messenger, &devices));
  std::vector<DeviceInfo> out;
  for (size_t i = 0; i < devices.size(); ++i) {
    out.push_back(Describe(vk, devices[i], static_cast<int>(i)));
  }
  CloseInstance(vk, instance, messenger);
  return out;
}

}  // namespace uf::gpu
