// `bench --device vulkan`: prefill, decode and batched decode through gpu::GpuForward, beside
// the device's read bandwidth measured in the same run (docs/gpu.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/backend.h"

namespace uf::cli {

struct GpuBenchOptions {
  std::string model;
  gpu::DeviceSpec device;
  int64_t n_prompt = 512;
  int64_t n_gen = 128;
  int64_t depth = 0;
  int reps = 3;
  bool json = false;
  // A second forward with a timestamp after every dispatch: the GPU time per kernel of a
  // one-token decode step at the end of the decode figures' positions.
  bool profile = false;
  std::vector<int> batch;    // streams of each batched-decode run (--batch)
  int64_t batch_steps = 32;  // decode steps of each batched run (--batch-steps), as on the CPU
};

// Prints the table (or JSON); returns the exit code.
int GpuBench(const GpuBenchOptions& o);

}  // namespace uf::cli
