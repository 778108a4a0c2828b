// The serving engine on the first Vulkan device, for the GPU service tests (gpu_serve_test.cc,
// gpu_grammar_test.cc): why a test skips, and ServiceOptions::make_forward for a device forward.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/service.h"
#include "gpu/backend.h"
#include "model/model.h"

namespace uf::testing_gpu {

// Empty when a Vulkan device is usable, else why not.
inline std::string SkipReason() {
  if (!gpu::VulkanCompiledIn()) return "built without the Vulkan backend";
  auto devices = gpu::ListDevices();
  if (!devices.ok()) return "no usable Vulkan device: " + devices.status().ToString();
  return "";
}

// A forward on the first Vulkan device reducing rows to their best top_k tokens (0: every row
// whole); *made (if not null) points to it once the service has made it.
inline decltype(engine::ServiceOptions::make_forward) DeviceForward(const model::Model& m,
                                                                    int32_t top_k,
                                                                    gpu::GpuForward** made) {
  return [&m, top_k, made](
             engine::KvCache* cache,
             const model::DecoderOptions& d) -> StatusOr<std::unique_ptr<model::BatchForward>> {
    UF_ASSIGN_OR_RETURN(
        std::unique_ptr<gpu::GpuForward> f,
        gpu::GpuForward::Create(
            m, gpu::DeviceSpec{.vulkan = true, .index = -1}, cache,
            {.max_batch = d.max_batch, .max_outputs = d.max_outputs, .top_k = top_k}));
    if (made != nullptr) *made = f.get();
    return std::unique_ptr<model::BatchForward>(std::move(f));
  };
}

// The constrained requests' schema (gpu_grammar_test.cc, gpu_serve_chain_test.cc): an object
// of a bounded string, an integer and an enum, all required.
inline nlohmann::ordered_json PersonSchema() {
  return {{"type", "object"},
          {"properties",
           {{"name", {{"type", "string"}, {"maxLength", 12}}},
            {"age", {{"type", "integer"}}},
            {"city", {{"enum", {"Verona", "Mantua", "Padua"}}}}}},
          {"required", {"name", "age", "city"}}};
}

}  // namespace uf::testing_gpu
