// AVX-512 loops of the arithmetic peak probe (peak.h): FMA, VNNI int8 dots and, where the CPU
// has AVX512_BF16, bf16 pair dots. One asm statement per iteration, as in peak_avx2.cc.
#include <immintrin.h>

#include "kernels/peak.h"

namespace uf::kernels {

static_assert(kPeakChains == 10);

#define UF_PEAK_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9)
#define UF_OPERAND(i) [a##i] "+v"(a##i),

float PeakLoopAvx512(PeakOp op, long iters) {
  if (op == PeakOp::kInt8Dot) {
    __m512i w = _mm512_set1_epi8(3), x = _mm512_set1_epi8(5);
#define UF_INIT(i) __m512i a##i = _mm512_set1_epi32(i);
    UF_PEAK_CHAINS(UF_INIT)
#undef UF_INIT
    for (long it = 0; it < iters; ++it) {
#define UF_STEP(i) "vpdpbusd %[x], %[w], %[a" #i "]\n\t"
      asm(UF_PEAK_CHAINS(UF_STEP) : UF_PEAK_CHAINS(UF_OPERAND)[w] "+v"(w), [x] "+v"(x));
#undef UF_STEP
    }
    __m512i s = _mm512_setzero_si512();
#define UF_SUM(i) s = _mm512_add_epi32(s, a##i);
    UF_PEAK_CHAINS(UF_SUM)
#undef UF_SUM
    return _mm512_cvtss_f32(_mm512_castsi512_ps(s));  // the bits only keep the work live
  }
#define UF_INIT(i) __m512 a##i = _mm512_set1_ps(i);
  UF_PEAK_CHAINS(UF_INIT)
#undef UF_INIT
  if (op == PeakOp::kBf16Dot) {
    // bf16 1.0 and 2^-24: the sums stay finite.
    __m512i w = _mm512_set1_epi16(0x3F80), x = _mm512_set1_epi16(0x3380);
    for (long it = 0; it < iters; ++it) {
#define UF_STEP(i) "vdpbf16ps %[x], %[w], %[a" #i "]\n\t"
      asm(UF_PEAK_CHAINS(UF_STEP) : UF_PEAK_CHAINS(UF_OPERAND)[w] "+v"(w), [x] "+v"(x));
#undef UF_STEP
    }
  } else {
    __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (long it = 0; it < iters; ++it) {
#define UF_STEP(i) "vfmadd132ps %[b], %[c], %[a" #i "]\n\t"
      asm(UF_PEAK_CHAINS(UF_STEP) : UF_PEAK_CHAINS(UF_OPERAND)[b] "+v"(b), [c] "+v"(c));
#undef UF_STEP
    }
  }
  __m512 s = _mm512_setzero_ps();
#define UF_SUM(i) s = _mm512_add_ps(s, a##i);
  UF_PEAK_CHAINS(UF_SUM)
#undef UF_SUM
  return _mm512_cvtss_f32(s);
}

#undef UF_OPERAND
#undef UF_PEAK_CHAINS

}  // namespace uf::kernels
