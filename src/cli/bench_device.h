// What `bench --spec/--serve/--grammar` step on `--device vulkan`: the forward of the serving
// engine (engine::ServiceOptions::make_forward) and of engine::Generate (a GenerateTarget) as a
// gpu::GpuForward instead of the CPU decoder. Everything above the step (sampling, speculation's
// drafting, grammars, the HTTP server) stays on the host.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/generate.h"
#include "engine/kv_cache.h"
#include "engine/service.h"
#include "gpu/backend.h"
#include "model/decoder.h"
#include "model/model.h"

namespace uf::cli {

// ServiceOptions::make_forward for a Vulkan device (serve and bench): a gpu::GpuForward with the
// engine's batch sizes; logs the device and its memory under `who`.
decltype(engine::ServiceOptions::make_forward) GpuForwardFactory(const model::Model& model,
                                                                 const gpu::DeviceSpec& device,
                                                                 std::string_view who);

// One sequence's forward for engine::Generate: the CPU decoder over a host cache, or a
// gpu::GpuForward over a cache of block tables only (K/V on the device). kv_type f32 is refused
// on the device.
struct BenchForward {
  std::unique_ptr<engine::KvCache> cache;
  std::unique_ptr<model::Decoder> cpu;
  std::unique_ptr<gpu::GpuForward> gpu;
  std::unique_ptr<model::BatchForward> host_only;  // engine::HostOnlyForward
  engine::GenerateTarget target;
  model::BatchForward& forward() { return *target.forward; }
};
StatusOr<std::unique_ptr<BenchForward>> MakeBenchForward(const model::Model& model,
                                                         const gpu::DeviceSpec& device, int64_t ctx,
                                                         engine::KvType kv_type, int64_t max_batch,
                                                         int64_t max_outputs, ThreadPool* pool);

// The read bandwidth (GB/s) that a bench on `device` compares against: the CPU's DRAM (a probe
// of 512 MiB over the pool) or the device memory's (gpu::MeasureReadBandwidth). 0 on failure.
double BenchBandwidthGBs(const gpu::DeviceSpec& device, ThreadPool* pool);

// The same over an engine::HostOnlyForward (no model computed): a cache of block tables only.
StatusOr<std::unique_ptr<BenchForward>> MakeHostOnlyForward(const model::Model& model, int64_t ctx,
                                                            int64_t max_batch, int64_t max_outputs);

// One line for a table's header: where the forward runs (the device's name and memory, "cpu",
// or "none" for the host-only forward).
std::string BenchDeviceLine(const BenchForward& f);

}  // namespace uf::cli
