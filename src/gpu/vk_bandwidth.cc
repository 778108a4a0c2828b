// MeasureReadBandwidth (gpu/backend.h): the roofline `bench --device vulkan` compares decode with.
#include <algorithm>

#include "base/clock.h"
#include "gpu/backend.h"
#include "gpu/vk_context.h"

namespace uf::gpu {

StatusOr<double> MeasureReadBandwidth(const DeviceSpec& device, uint64_t bytes, int passes) {
  UF_ASSIGN_OR_RETURN(std::unique_ptr<Context> ctx, Context::Create(device.index));
  // The buffer is bound whole, so no larger than the device lets a shader bind (4 GiB - 1 on
  // NVIDIA and AMD; 128 MiB on lavapipe, still past any cache).
  bytes = std::min<uint64_t>({bytes, ctx->info().device_local_bytes / 4, uint64_t{1} << 32,
                              ctx->info().max_binding_bytes});
  bytes &= ~uint64_t{15};
  if (bytes < (1 << 20)) return FailedPreconditionError("read bandwidth: too little memory");
  passes = std::max(passes, 1);
  UF_ASSIGN_OR_RETURN(const Pipeline* p, ctx->GetPipeline("read_bw", 2));
  UF_ASSIGN_OR_RETURN(Buffer b, ctx->CreateBuffer(bytes, Memory::kDevice));
  constexpr uint32_t kGroups = 4096;
  UF_ASSIGN_OR_RETURN(Buffer out, ctx->CreateBuffer(kGroups * 256 * 4, Memory::kDevice));
  Recorder rec(ctx.get());
  const auto n = static_cast<uint32_t>(bytes / 16);
  for (int i = 0; i < passes; ++i) rec.Dispatch(*p, {b, out}, n, kGroups);
  UF_RETURN_IF_ERROR(rec.Finish());
  UF_RETURN_IF_ERROR(rec.Run());  // warm-up: first touch of the memory, pipeline compile
  double best = 0.0;
  for (int rep = 0; rep < 3; ++rep) {
    const double t0 = NowSeconds();
    UF_RETURN_IF_ERROR(rec.Run());
    const double dt = NowSeconds() - t0;
    if (dt > 0) best = std::max(best, static_cast<double>(bytes) * passes / dt);
  }
  return best;
}

}  // namespace uf::gpu
