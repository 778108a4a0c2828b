// The integer dot of four int8 lanes packed in a word each: sum_j a_j * b_j, exact. With DOT4
// (the *_dot4 kernels, built for devices with shaderIntegerDotProduct; Kernels::Create picks
// them) it is one OpSDotKHR, NVIDIA's dp4a: issue 28's probe found a per-nibble Q4_0 GEMV
// compute-bound at 500-700 GB/s on an H200, and a byte's extract-multiply-add is ~3
// instructions, so four products cost ~12 where this costs one. Without DOT4 the same sum by
// byte extracts. Integer sums are exact in any order, so both give the same bits (tested:
// gpu_integer_gemm_test's IntegerDotKernelsEqualPlainOnes).
#ifdef DOT4
#extension GL_EXT_spirv_intrinsics : require
// OpSDotKHR (4450) with PackedVectorFormat4x8Bit (0); capabilities DotProductInput4x8BitPacked
// (6018) and DotProduct (6019) of SPV_KHR_integer_dot_product. Debian 12's glslang (11.13) has
// no GLSL built-in for it, so the instruction is declared through GL_EXT_spirv_intrinsics.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6018, 6019],
                  id = 4450) int SDotPacked(uint a, uint b, spirv_literal int format);
int SDot4(uint a, uint b) { return SDotPacked(a, b, 0); }
#else
int SDot4(uint a, uint b) {
  int s = 0;
  [[unroll]] for (int j = 0; j < 32; j += 8) {
    s += bitfieldExtract(int(a), j, 8) * bitfieldExtract(int(b), j, 8);
  }
  return s;
}
#endif

// Four 4-bit values at bit `shift` of each byte of v (so 0-15 each), as int8 lanes minus 8:
// byte-wise (n | 0x80) - 8 cannot borrow across bytes, and ^ 0x80 then leaves n - 8 in two's
// complement (0x78 + n ^ 0x80: n = 0 -> 0xF8 = -8, n = 15 -> 0x07).
uint NibblesMinus8(uint v, uint shift) {
  return ((((v >> shift) & 0x0F0F0F0Fu) | 0x80808080u) - 0x08080808u) ^ 0x80808080u;
}
