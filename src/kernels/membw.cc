#include "kernels/membw.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "base/check.h"
#include "base/clock.h"
#include "kernels/dispatch.h"

namespace uf::kernels {

ReadBandwidthProbe::ReadBandwidthProbe(size_t bytes)
    : bytes_(std::max<size_t>(4096, bytes / 4096 * 4096)), buf_(AllocateHuge(bytes_)) {
  std::memset(buf_.get(), 1, bytes_);
}

void ReadBandwidthProbe::Read(ThreadPool* pool) {
  const CpuFeatures& f = GetCpuFeatures();
  auto sum = f.avx512 ? SumBytesAvx512 : f.avx2 ? SumBytesAvx2 : SumBytesScalar;
  std::atomic<uint64_t> total{0};
  auto pass = [&](int ti, int nt) {
    // Page-aligned shares, as a matmul's row ranges would be.
    const size_t pages = bytes_ / 4096;
    const size_t p0 = pages * ti / nt, p1 = pages * (ti + 1) / nt;
    total.fetch_add(sum(buf_.get() + p0 * 4096, (p1 - p0) * 4096), std::memory_order_relaxed);
  };
  if (pool != nullptr) {
    pool->Run(pass);
  } else {
    pass(0, 1);
  }
  sink_ += total.load();
  UF_CHECK(sink_ != 0);  // keeps the reads from being optimised away
}

double ReadBandwidthProbe::BestGBs(ThreadPool* pool, int passes) {
  double best = 0.0;
  for (int r = 0; r < std::max(1, passes); ++r) {
    const double t0 = NowSeconds();
    Read(pool);
    best = std::max(best, static_cast<double>(bytes_) / (NowSeconds() - t0) / 1e9);
  }
  return best;
}

}  // namespace uf::kernels
