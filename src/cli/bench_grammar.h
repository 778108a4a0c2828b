// `ultrafast bench --grammar FILE`: decode speed of the serving engine with and without a
// grammar's token mask (src/grammar), the same prompt and sampling settings, side by side.
#pragma once

#include <cstdint>
#include <string>

#include "engine/kv_cache.h"
#include "gpu/backend.h"

namespace uf::cli {

struct GrammarBenchOptions {
  std::string model;
  // A JSON schema, or {"type": "json_object"} for plain JSON mode.
  std::string grammar_file;
  int64_t n_gen = 128;
  int threads = 0;
  int reps = 3;
  bool json = false;
  engine::KvType kv_type = engine::KvType::kF16;
  // vulkan: the serving engine's forward on the device; the mask is found and applied on the
  // host, so a constrained row comes back whole every token.
  gpu::DeviceSpec device;
};

// Prints the table (or JSON); returns the exit code. Fails the command on errors.
int GrammarBench(const GrammarBenchOptions& options);

}  // namespace uf::cli
