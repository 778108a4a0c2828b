#include "gpu/vk_validation.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gpu/env_choice.h"
#include "gpu/vk_device_internal.h"

namespace uf::gpu {
namespace {

constexpr Choices<ValidationMode, 4> kModes = {{"off", ValidationMode::kOff},
                                               {"on", ValidationMode::kAbort},
                                               {"1", ValidationMode::kAbort},
                                               {"log", ValidationMode::kLog}};

std::atomic<int64_t> g_errors{0};

// Runs on whichever thread made the call (an HTTP thread never does: the engine thread owns the
// device), so it writes straight to stderr rather than through UF_LOG's buffering.
VKAPI_ATTR VkBool32 VKAPI_CALL OnMessage(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                         VkDebugUtilsMessageTypeFlagsEXT types,
                                         const VkDebugUtilsMessengerCallbackDataEXT* data,
                                         void* user) {
  // Only the layer's own findings count: the loader reports through the same messenger, as
  // "errors", things that are not (a driver manifest it cannot open, which the no-device tests
  // point it at on purpose); its failures reach the caller as VkResults anyway.
  const bool error = (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) != 0 &&
                     (types & VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT) != 0;
  const char* text = data != nullptr && data->pMessage != nullptr ? data->pMessage : "(no text)";
  std::fprintf(stderr, "[gpu] validation %s: %s\n", error ? "error" : "warning", text);
  if (error) {
    g_errors.fetch_add(1, std::memory_order_relaxed);
    if (static_cast<ValidationMode>(reinterpret_cast<intptr_t>(user)) == ValidationMode::kAbort) {
      std::fprintf(stderr, "[gpu] UF_GPU_VALIDATE=on: stopping at the first error\n");
      std::fflush(stderr);
      std::abort();
    }
  }
  return VK_FALSE;  // the call itself goes on, as it would without the layer
}

bool HasLayer(const VkFns& vk, const char* name) {
  auto enumerate = reinterpret_cast<PFN_vkEnumerateInstanceLayerProperties>(
      vk.vkGetInstanceProcAddr(nullptr, "vkEnumerateInstanceLayerProperties"));
  if (enumerate == nullptr) return false;
  uint32_t n = 0;
  if (enumerate(&n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkLayerProperties> layers(n);
  if (enumerate(&n, layers.data()) != VK_SUCCESS) return false;
  for (uint32_t i = 0; i < n; ++i) {
    if (std::strcmp(layers[i].layerName, name) == 0) return true;
  }
  return false;
}

}  // namespace

ValidationMode ValidationRequested() { return EnvChoice("UF_GPU_VALIDATE", kModes); }

Status RequestValidation(const VkFns& vk, ValidationRequest* r, VkInstanceCreateInfo* ci) {
  const ValidationMode mode = ValidationRequested();
  if (mode == ValidationMode::kOff) return OkStatus();
  if (!HasLayer(vk, r->layer)) {
    return UnavailableError(std::string("UF_GPU_VALIDATE is set but the Vulkan loader finds no ") +
                            r->layer +
                            " (install vulkan-validationlayers, or unset UF_GPU_VALIDATE)");
  }
  r->on = true;
  // Synchronization validation across command buffers too (a chain queues a step while the one
  // before runs): a layer setting that VkValidationFeaturesEXT cannot name in this header's
  // version, read from the environment. Set only where the user has not set their own.
  if (std::getenv("VK_LAYER_ENABLES") == nullptr) {
    setenv("VK_LAYER_ENABLES",
           "VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT:"
           "VALIDATION_CHECK_ENABLE_SYNCHRONIZATION_VALIDATION_QUEUE_SUBMIT",
           0);
  }
  r->features.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT;
  r->features.enabledValidationFeatureCount = 1;
  r->features.pEnabledValidationFeatures = r->enables;
  r->messenger.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
  r->messenger.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                                 VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  r->messenger.messageType =
      VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT;
  r->messenger.pfnUserCallback = OnMessage;
  r->messenger.pUserData = reinterpret_cast<void*>(static_cast<intptr_t>(mode));
  // Chained ahead of whatever the caller had: the features and a messenger that covers
  // vkCreateInstance and vkDestroyInstance themselves.
  r->messenger.pNext = ci->pNext;
  r->features.pNext = &r->messenger;
  ci->pNext = &r->features;
  ci->enabledLayerCount = 1;
  ci->ppEnabledLayerNames = &r->layer;
  ci->enabledExtensionCount = 1;
  ci->ppEnabledExtensionNames = &r->extension;
  return OkStatus();
}

StatusOr<VkDebugUtilsMessengerEXT> StartMessenger(const VkFns& vk, VkInstance instance,
                                                  const ValidationRequest& r) {
  if (!r.on) return VkDebugUtilsMessengerEXT{VK_NULL_HANDLE};
  auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
      vk.vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT"));
  if (create == nullptr) return UnavailableError("the validation layer lacks VK_EXT_debug_utils");
  VkDebugUtilsMessengerCreateInfoEXT info = r.messenger;
  info.pNext = nullptr;
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  UF_VK_TRY("vkCreateDebugUtilsMessengerEXT", create(instance, &info, nullptr, &messenger));
  return messenger;
}

void CloseInstance(const VkFns& vk, VkInstance instance, VkDebugUtilsMessengerEXT messenger) {
  if (instance == VK_NULL_HANDLE) return;
  if (messenger != VK_NULL_HANDLE) {
    auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        vk.vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"));
    if (destroy != nullptr) destroy(instance, messenger, nullptr);
  }
  vk.vkDestroyInstance(instance, nullptr);
}

void NameObject(const VkFns& vk, VkInstance instance, VkDevice device, VkObjectType type,
                uint64_t handle, const char* name) {
  auto set_name = reinterpret_cast<PFN_vkSetDebugUtilsObjectNameEXT>(
      vk.vkGetInstanceProcAddr(instance, "vkSetDebugUtilsObjectNameEXT"));
  if (set_name == nullptr) return;
  VkDebugUtilsObjectNameInfoEXT info{VK_STRUCTURE_TYPE_DEBUG_UTILS_OBJECT_NAME_INFO_EXT};
  info.objectType = type;
  info.objectHandle = handle;
  info.pObjectName = name;
  set_name(device, &info);
}

int64_t ValidationErrors() { return g_errors.load(std::memory_order_relaxed); }

}  // namespace uf::gpu
