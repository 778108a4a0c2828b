// DRAM read bandwidth probe: the ceiling decode matmuls are measured against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "base/thread_pool.h"
#include "kernels/huge_alloc.h"

namespace uf::kernels {

// A buffer read end to end by every thread of a pool, each summing a contiguous share with the
// widest loads the CPU has, as matmul threads stream their rows. Make it several times the
// last-level cache.
class ReadBandwidthProbe {
 public:
  explicit ReadBandwidthProbe(size_t bytes);  // allocates and faults in the pages
  size_t bytes() const { return bytes_; }
  // One pass over the buffer (pool may be nullptr: the calling thread alone).
  void Read(ThreadPool* pool);
  // `passes` passes; the best in GB/s (1e9 bytes/s): on a shared machine the fastest pass is the
  // least disturbed one.
  double BestGBs(ThreadPool* pool, int passes);

 private:
  size_t bytes_;
  HugeBuffer buf_;
  uint64_t sink_ = 0;
};

}  // namespace uf::kernels
