#include "kernels/huge_alloc.h"

#include <cstdlib>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "base/check.h"

namespace uf::kernels {

void HugeFree::operator()(uint8_t* p) const { std::free(p); }

HugeBuffer TryAllocateHuge(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  if (bytes > SIZE_MAX - kHuge) return nullptr;
  const size_t rounded = bytes == 0 ? kHuge : (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, rounded);
  if (p == nullptr) return nullptr;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  madvise(p, rounded, MADV_HUGEPAGE);  // best effort: fine if THP is off
#endif
  return HugeBuffer(static_cast<uint8_t*>(p));
}

HugeBuffer AllocateHuge(size_t bytes) {
  HugeBuffer p = TryAllocateHuge(bytes);
  UF_CHECK(p != nullptr) << "out of memory allocating " << bytes << " bytes";
  return p;
}

}  // namespace uf::kernels
