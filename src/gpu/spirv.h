// The compute shaders of the GPU backend (src/gpu/shaders/*.comp), compiled to SPIR-V by glslc at
// build time and embedded by tools/embed_spirv.cmake, so the binary reads no shader file at run
// time.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace uf::gpu {

struct SpirvModule {
  std::string_view name;  // the shader's file name without .comp
  std::span<const uint32_t> words;
};

// Every embedded shader (generated).
std::span<const SpirvModule> SpirvModules();

}  // namespace uf::gpu
