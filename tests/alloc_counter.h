// Counts the heap allocations of a test binary (include it from exactly one file of the test:
// it replaces the global operator new), so tests can assert that a hot path allocates nothing,
// or nothing in proportion to the vocabulary: a per-token copy of the logits is what once made
// the server 20x slower than `run`. Counting work is exact where timing on a shared machine is
// not.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace uf::testing_alloc {
inline std::atomic<int64_t> allocations{0};  // operator new calls
inline std::atomic<int64_t> bytes{0};        // bytes they asked for
}  // namespace uf::testing_alloc

// AddressSanitizer owns the allocator and reports this malloc/free pair as mismatched against its
// own operator new: counting tests skip under it (UF_SANITIZE builds only).
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kCountsAllocations = false;
#else
inline constexpr bool kCountsAllocations = true;
// GCC 12 flags the free() in a replaced operator delete once it inlines both sides
// (-Wmismatched-new-delete); every allocation of the binary goes through this malloc.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t n) {
  uf::testing_alloc::allocations.fetch_add(1, std::memory_order_relaxed);
  uf::testing_alloc::bytes.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#endif
