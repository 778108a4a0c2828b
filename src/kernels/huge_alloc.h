// Large buffers streamed by the kernels (repacked weights, the bandwidth probe): 2 MiB aligned
// and advised for transparent huge pages, which cuts page faults at load time ~500x and TLB
// misses while streaming.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace uf::kernels {

struct HugeFree {
  void operator()(uint8_t* p) const;
};
using HugeBuffer = std::unique_ptr<uint8_t[], HugeFree>;

// Aborts when out of memory (callers are sized by model files that already fit in memory).
HugeBuffer AllocateHuge(size_t bytes);
// The same, but null when the memory cannot be had (callers sized by user settings: KV pools).
HugeBuffer TryAllocateHuge(size_t bytes);

}  // namespace uf::kernels
