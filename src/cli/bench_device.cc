#include "cli/bench_device.h"

#include <string>

#include "base/log.h"
#include "cli/common.h"
#include "engine/host_only_forward.h"
#include "kernels/membw.h"

namespace uf::cli {

decltype(engine::ServiceOptions::make_forward) GpuForwardFactory(const model::Model& model,
                                                                 const gpu::DeviceSpec& device,
                                                                 std::string_view who) {
  return [&model, device, who = std::string(who)](
             engine::KvCache* cache,
             const model::DecoderOptions& d) -> StatusOr<std::unique_ptr<model::BatchForward>> {
    UF_ASSIGN_OR_RETURN(
        std::unique_ptr<gpu::GpuForward> f,
        gpu::GpuForward::Create(model, device, cache,
                                {.max_batch = d.max_batch, .max_outputs = d.max_outputs}));
    UF_LOG(INFO) << who << ": forward on " << f->device().name << " ("
                 << f->device_bytes() / (1 << 20) << " MiB of device memory)";
    return std::unique_ptr<model::BatchForward>(std::move(f));
  };
}

StatusOr<std::unique_ptr<BenchForward>> MakeBenchForward(const model::Model& model,
                                                         const gpu::DeviceSpec& device, int64_t ctx,
                                                         engine::KvType kv_type, int64_t max_batch,
                                                         int64_t max_outputs, ThreadPool* pool) {
  auto f = std::make_unique<BenchForward>();
  engine::KvCacheOptions co = CacheOptionsFor(model.config(), ctx, kv_type);
  co.host_storage = !device.vulkan;
  UF_ASSIGN_OR_RETURN(f->cache, engine::KvCache::Create(co));
  engine::GenerateTarget& t = f->target;
  if (device.vulkan) {
    UF_ASSIGN_OR_RETURN(
        f->gpu, gpu::GpuForward::Create(model, device, f->cache.get(),
                                        {.max_batch = max_batch, .max_outputs = max_outputs}));
    t.forward = f->gpu.get();
  } else {
    model::DecoderOptions d;
    d.max_batch = max_batch;
    d.max_outputs = max_outputs;
    UF_ASSIGN_OR_RETURN(f->cpu, model::Decoder::Create(model, f->cache.get(), d, pool));
    t.forward = f->cpu.get();
  }
  t.cache = f->cache.get();
  t.n_vocab = model.config().n_vocab;
  t.max_batch = max_batch;
  t.max_outputs = max_outputs;
  t.pool = pool;
  return f;
}

StatusOr<std::unique_ptr<BenchForward>> MakeHostOnlyForward(const model::Model& model, int64_t ctx,
                                                            int64_t max_batch,
                                                            int64_t max_outputs) {
  auto f = std::make_unique<BenchForward>();
  engine::KvCacheOptions co = CacheOptionsFor(model.config(), ctx, engine::KvType::kF16);
  co.host_storage = false;
  UF_ASSIGN_OR_RETURN(f->cache, engine::KvCache::Create(co));
  f->host_only = std::make_unique<engine::HostOnlyForward>(model.config().n_vocab, max_outputs);
  engine::GenerateTarget& t = f->target;
  t.forward = f->host_only.get();
  t.cache = f->cache.get();
  t.n_vocab = model.config().n_vocab;
  t.max_batch = max_batch;
  t.max_outputs = max_outputs;
  return f;
}

double BenchBandwidthGBs(const gpu::DeviceSpec& device, ThreadPool* pool) {
  if (device.vulkan) {
    auto bw = gpu::MeasureReadBandwidth(device, uint64_t{256} << 20, 8);
    return bw.ok() ? *bw / 1e9 : 0.0;
  }
  kernels::ReadBandwidthProbe probe(size_t{512} << 20);
  return probe.BestGBs(pool, 3);
}

std::string BenchDeviceLine(const BenchForward& f) {
  if (f.host_only) return "none: made-up rows, reduced to their best 64 as on a GPU (host-only)";
  if (!f.gpu) return "cpu";
  const gpu::DeviceInfo& d = f.gpu->device();
  return "vulkan: " + d.name + " (" + d.type + ", " + std::to_string(f.gpu->device_bytes() >> 20) +
         " MiB held)";
}

}  // namespace uf::cli
