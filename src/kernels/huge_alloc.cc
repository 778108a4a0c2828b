#include "kernels/huge_alloc.h"

#include <cstdlib>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "base/check.h"

namespace uf::kernels {

void HugeFree::operator()(uint8_t* p) const { std::free(p); }

HugeBuffer AllocateHuge(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, rounded == 0 ? kHuge : rounded);
  UF_CHECK(p != nullptr) << "out of memory allocating " << bytes << " bytes";
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  madvise(p, rounded, MADV_HUGEPAGE);  // best effort: fine if THP is off
#endif
  return HugeBuffer(static_cast<uint8_t*>(p));
}

}  // namespace uf::kernels
