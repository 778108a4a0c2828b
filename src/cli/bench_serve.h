// `ultrafast bench --serve`: one stream through the serving path (the serving engine in-process,
// and HTTP to an in-process `serve` on loopback) against the engine alone, at temperature 0 and 1.
#pragma once

#include <cstdint>
#include <string>

#include "cli/common.h"
#include "engine/kv_cache.h"

namespace uf::cli {

struct ServeBenchOptions {
  std::string model;
  int64_t n_prompt = 32;
  int64_t n_gen = 128;
  int threads = 0;
  int reps = 5;
  bool json = false;
  engine::KvType kv_type = engine::KvType::kF16;
  // vulkan: every path's forward (the engine alone, the serving engine, HTTP) on the device.
  gpu::DeviceSpec device;
  // Every path's forward an engine::HostOnlyForward (no model computed; rows reduced to their
  // best 64 as on a GPU): the serving path's own cost per token, whatever the device.
  bool host_only = false;
};

// Prints the table (or JSON); returns the exit code. Fails the command on errors.
int ServeBench(const ServeBenchOptions& options);

}  // namespace uf::cli
