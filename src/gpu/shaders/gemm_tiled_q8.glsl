// The tiled GEMM's activation side for the weight types that take Q8_0 activations
// (quantize_q8_0.comp: the quants [n][cols / 32][8 words], their f32 scales [n][cols / 32] at word
// x_d_off): a step's 32 columns are one block a token. With ACT_Q8K, for the K-quants' Q8_K
// activations (quantize_q8_k.comp: per block of 256 the quants in 64 words and the sub-block
// sums in 8, [n][cols / 256][72 words]; the f32 d [n][cols / 256] at x_d_off): a step's 32
// columns are 8 words of a block. Invocation i takes half a step of token i / 2: 4 words (16 int8
// values), stored as q x d in 8 f16-pair words.
layout(std430, binding = 1) readonly buffer X { uint x[]; };

uvec4 b_q;
float b_d;

// Four int8 values (one word) times d as two f16-pair words.
uvec2 PairsOfQ8(uint v, float d) {
  const ivec4 q = ivec4(bitfieldExtract(int(v), 0, 8), bitfieldExtract(int(v), 8, 8),
                        bitfieldExtract(int(v), 16, 8), bitfieldExtract(int(v), 24, 8));
  return uvec2(packHalf2x16(vec2(q.xy) * d), packHalf2x16(vec2(q.zw) * d));
}

#ifdef ACT_Q8K
#define kActBlock 256u
#define kActBlockWords 72u
#else
#define kActBlock 32u
#define kActBlockWords 8u
#endif

void FetchB(uint k0) {
  const uint id = gl_LocalInvocationIndex, t = g_t0 + id / 2, b = k0 / kActBlock;
  const uint blocks = p.cols / kActBlock;
  if (t >= p.n) {
    b_q = uvec4(0);
    b_d = 0.0;
    return;
  }
  const uint at = t * p.x_stride + b * kActBlockWords + (k0 % kActBlock) / 4 + (id % 2) * 4;
  b_q = uvec4(x[at], x[at + 1], x[at + 2], x[at + 3]);
  b_d = uintBitsToFloat(x[p.x_d_off + t * blocks + b]);
}

void StoreB() {
  const uint id = gl_LocalInvocationIndex;
  const uint at = kBOff + (id / 2) * kStride + (id % 2) * 8;
  [[unroll]] for (uint c = 0; c < 4; ++c) {
    const uvec2 pw = PairsOfQ8(b_q[c], b_d);
    sh[at + 2 * c] = pw.x;
    sh[at + 2 * c + 1] = pw.y;
  }
}
