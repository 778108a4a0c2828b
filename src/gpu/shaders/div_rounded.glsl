// DivRounded: common.glsl's, and kv_store.comp's (which has no workgroup reductions).
#ifndef UF_DIV_ROUNDED_GLSL
#define UF_DIV_ROUNDED_GLSL

// a / b rounded to nearest even, as the CPU's division rounds it. A shader's `/` need not be
// (Vulkan allows 2.5 ulp; lavapipe's differed from the CPU's by one ulp in some blocks), and
// the activation quantizers' scales must be the CPU's bits. For normal a, b and a normal quotient
// (anything else falls back to `/`): the mantissas' quotient q = floor(ma 2^24 / mb) (25 bits:
// 24 and the rounding bit) is estimated with `/` (within a few units) and corrected with its
// exact remainder, ma 2^24 - q mb, which is small, so its low 32 bits (uint arithmetic wraps)
// are the whole of it. ~30 instructions where a bit-by-bit long division took ~150.
float DivRounded(float a, float b) {
  const uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
  const int ea = int((ua >> 23) & 255u), eb = int((ub >> 23) & 255u);
  if (ea == 0 || ea == 255 || eb == 0 || eb == 255) return a / b;
  uint ma = (ua & 0x7FFFFFu) | 0x800000u, mb = (ub & 0x7FFFFFu) | 0x800000u;
  int e = ea - eb + 127;
  if (ma < mb) {  // the quotient of the mantissas in [1, 2)
    ma <<= 1;
    e -= 1;
  }
  // ma / mb in [1, 2) to within a few ulp, times 2^24: q within a few units of the floor.
  uint q = uint(float(ma) / float(mb) * 16777216.0);
  int r = int((ma << 24) - q * mb);
  for (int i = 0; i < 16 && r < 0; ++i) {
    q -= 1u;
    r += int(mb);
  }
  for (int i = 0; i < 16 && r >= int(mb); ++i) {
    q += 1u;
    r -= int(mb);
  }
  uint m = q >> 1;
  if ((q & 1u) != 0u && (r != 0 || (m & 1u) != 0u)) m += 1u;
  if (m == 0x1000000u) {
    m >>= 1;
    e += 1;
  }
  if (e <= 0 || e >= 255) return a / b;
  return uintBitsToFloat(((ua ^ ub) & 0x80000000u) | (uint(e) << 23) | (m & 0x7FFFFFu));
}

#endif  // UF_DIV_ROUNDED_GLSL
