// The Khronos validation layer, on request (UF_GPU_VALIDATE): every Vulkan call the backend makes
// checked against the specification, with synchronization validation (a dispatch reading what
// an earlier one wrote without a barrier between them). Lavapipe runs a command buffer's
// dispatches one after another, so a missing barrier never shows there; a GPU runs them
// together. CI runs the device tests under it so that such a bug fails on lavapipe.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "gpu/vk_loader.h"

namespace uf::gpu {

enum class ValidationMode {
  kOff,    // UF_GPU_VALIDATE unset, empty or "off"
  kAbort,  // "on": an error message ends the process (a test fails with the message)
  kLog,    // "log": every error and warning is printed and the run goes on
};

ValidationMode ValidationRequested();

// What vkCreateInstance needs to turn the layer on: kept alive until the instance exists.
struct ValidationRequest {
  bool on = false;
  const char* layer = "VK_LAYER_KHRONOS_validation";
  const char* extension = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
  VkValidationFeatureEnableEXT enables[1] = {
      VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
  VkValidationFeaturesEXT features{};              // filled by RequestValidation
  VkDebugUtilsMessengerCreateInfoEXT messenger{};  // filled by RequestValidation
};

// With validation requested, fills `r` and chains it into `ci` (the layer, the debug-utils
// extension, synchronization validation, a messenger for vkCreateInstance itself). A missing
// layer is an error naming the package (vulkan-validationlayers), never a silent unchecked run.
Status RequestValidation(const VkFns& vk, ValidationRequest* r, VkInstanceCreateInfo* ci);

// The messenger for the instance's lifetime (null when validation is off).
StatusOr<VkDebugUtilsMessengerEXT> StartMessenger(const VkFns& vk, VkInstance instance,
                                                  const ValidationRequest& r);
// Destroys the messenger (if any), then the instance.
void CloseInstance(const VkFns& vk, VkInstance instance, VkDebugUtilsMessengerEXT messenger);

// Names an object in validation messages (with validation on only).
void NameObject(const VkFns& vk, VkInstance instance, VkDevice device, VkObjectType type,
                uint64_t handle, const char* name);

// Error messages reported in this process so far (tests check it stays 0 under kLog).
int64_t ValidationErrors();

}  // namespace uf::gpu
