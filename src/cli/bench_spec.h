// `ultrafast bench --spec`: decode speed with and without speculative decoding on three
// workloads (edit, extraction, open generation), greedy, side by side in one run.
#pragma once

#include <cstdint>
#include <string>

#include "engine/kv_cache.h"
#include "gpu/backend.h"

namespace uf::cli {

struct SpecBenchOptions {
  std::string model;
  std::string draft;  // draft model path ("" = no draft-model mode)
  std::string text = "../shared/data/tinyshakespeare.txt";  // passages for the prompts
  int64_t n_gen = 128;
  int spec_k = 8;
  int threads = 0;
  int reps = 3;
  bool json = false;
  engine::KvType kv_type = engine::KvType::kF16;
  // vulkan: the target model's forward (plain decode and every verify step) on the device; a
  // draft model's forward stays on the CPU.
  gpu::DeviceSpec device;
};

// Prints the table (or JSON); returns the exit code. Fails the command on errors.
int SpecBench(const SpecBenchOptions& options);

}  // namespace uf::cli
