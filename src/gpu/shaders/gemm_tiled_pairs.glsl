// The tiled GEMM's loads for 16-bit weights ([rows][cols] as in GGUF) and their pairs
// (quantize_pairs.comp, [n][x_stride] words): 16-byte loads, W one an invocation (32 rows x 4), x
// two (64 tokens x 4), each word stored as AsF16Pair(word), which the includer defines (F16: the
// word itself; BF16: its two values converted).
layout(std430, binding = 0) readonly buffer W { uvec4 w[]; };  // [rows][cols / 8]
layout(std430, binding = 1) readonly buffer X { uvec4 x[]; };  // [n][x_stride / 4]

uvec4 a_reg, b_reg[2];

void FetchA(uint k0) {
  const uint row = g_row0 + gl_LocalInvocationIndex / 4;
  a_reg = row < p.rows ? w[row * (p.cols / 8) + k0 / 8 + gl_LocalInvocationIndex % 4] : uvec4(0);
}

void StoreA() {
  const uint id = gl_LocalInvocationIndex;
  [[unroll]] for (uint c = 0; c < 4; ++c) {
    sh[(id / 4) * kStride + 4 * (id % 4) + c] = AsF16Pair(a_reg[c]);
  }
}

void FetchB(uint k0) {
  const uint id = gl_LocalInvocationIndex;
  [[unroll]] for (uint j = 0; j < 2; ++j) {
    const uint t = g_t0 + id / 4 + 32 * j;
    b_reg[j] = t < p.n ? x[t * (p.x_stride / 4) + k0 / 8 + id % 4] : uvec4(0);
  }
}

void StoreB() {
  const uint id = gl_LocalInvocationIndex;
  [[unroll]] for (uint j = 0; j < 2; ++j) {
    [[unroll]] for (uint c = 0; c < 4; ++c) {
      sh[kBOff + (id / 4 + 32 * j) * kStride + 4 * (id % 4) + c] = AsF16Pair(b_reg[j][c]);
    }
  }
}
