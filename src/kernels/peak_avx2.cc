// AVX2 loops of the arithmetic peak probe (peak.h). Each iteration is one asm statement over
// register operands: with intrinsics GCC stored some chains to the stack inside the loop, and the
// probe then timed the stores (3-4 instead of 5 vpmaddubsw per ns on Zen 3).
#include <immintrin.h>

#include "kernels/peak.h"

namespace uf::kernels {

static_assert(kPeakChains == 10);

#define UF_PEAK_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9)

float PeakLoopAvx2(PeakOp op, long iters) {
  if (op == PeakOp::kInt8Dot) {
    // Each chain feeds its i16 result back as the next u8 operand: the chains cover
    // vpmaddubsw's latency, and nothing can be hoisted out of the loop.
    __m256i x = _mm256_set1_epi8(3);
#define UF_INIT(i) __m256i a##i = _mm256_set1_epi8(i + 1);
    UF_PEAK_CHAINS(UF_INIT)
#undef UF_INIT
    for (long it = 0; it < iters; ++it) {
#define UF_STEP(i) "vpmaddubsw %[x], %[a" #i "], %[a" #i "]\n\t"
#define UF_OPERAND(i) [a##i] "+x"(a##i),
      asm(UF_PEAK_CHAINS(UF_STEP) : UF_PEAK_CHAINS(UF_OPERAND)[x] "+x"(x));
#undef UF_STEP
    }
    __m256i s = _mm256_setzero_si256();
#define UF_SUM(i) s = _mm256_add_epi16(s, a##i);
    UF_PEAK_CHAINS(UF_SUM)
#undef UF_SUM
    return static_cast<float>(_mm256_extract_epi16(s, 0));
  }
  __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
#define UF_INIT(i) __m256 a##i = _mm256_set1_ps(i);
  UF_PEAK_CHAINS(UF_INIT)
#undef UF_INIT
  for (long it = 0; it < iters; ++it) {
#define UF_STEP(i) "vfmadd132ps %[b], %[c], %[a" #i "]\n\t"
    asm(UF_PEAK_CHAINS(UF_STEP) : UF_PEAK_CHAINS(UF_OPERAND)[b] "+x"(b), [c] "+x"(c));
#undef UF_STEP
#undef UF_OPERAND
  }
  __m256 s = _mm256_setzero_ps();
#define UF_SUM(i) s = _mm256_add_ps(s, a##i);
  UF_PEAK_CHAINS(UF_SUM)
#undef UF_SUM
  return _mm256_cvtss_f32(s);
}

#undef UF_PEAK_CHAINS

}  // namespace uf::kernels
