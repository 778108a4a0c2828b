// The activation quantizers' block code, shared by quantize_q8_0.comp, quantize_q8_k.comp and
// the fused kernels that quantize what they compute (rmsnorm_q.comp, swiglu_q.comp,
// attention.comp, attention_combine.comp), so a fused kernel's blocks are the separate
// quantizer's bits. The includer defines `float QIn(uint i)`, value i of the activation
// (recomputed on each call: the same operations give the same bits), and a writable `uint q[]`,
// and calls QuantLanes() once in uniform control flow before the first Quantize*.
//
// A subgroup quantizes a block cooperatively, each lane taking whole words of 4 values (the int8
// values are stored four to a word, and packing a word from 4 lanes would need shuffles). Every
// cross-lane step is exact in any order: a max of floats, a min of integer keys, an integer sum.
// So the blocks are the CPU's bits whatever the subgroup size (lavapipe 8, NVIDIA 32, AMD 32/64,
// Intel 8-32; any size works, the lanes of a 64-wide workgroup being at most 64).

uint g_lanes = 1;  // the active lanes of this invocation's subgroup (<= 64)
uint g_lane = 0;   // this invocation's rank among them

void QuantLanes() {
  // Counted rather than read from gl_SubgroupSize: a subgroup wider than the workgroup is only
  // partly filled, and this does not assume which of its invocations are the active ones.
  g_lanes = subgroupAdd(1u);
  g_lane = subgroupExclusiveAdd(1u);
}

// Q8_0 blocks a subgroup quantizes at once: min(lanes, 8) lanes a block (8 words), at most 4
// blocks (one vec4 subgroupMax carries their maxima; a segmented max would need clustered
// operations). 1 block for 4 or 8 lanes, 2 for 16, 4 for 32 and 64.
uint Q8_0BlocksPerPass() { return min(g_lanes / min(g_lanes, 8u), 4u); }

// Q8_0 blocks b0 .. b0 + Q8_0BlocksPerPass() - 1 (those below end): the scale is amax / 127
// rounded to f16, each value round-half-even(x * (127 / amax)), both divisions correctly rounded
// (DivRounded: a GPU's `/` may be x * rcp(y), and one ulp off in 127 / amax moves a value at a
// half-way point). The int8 values four per word at
// q[8 b ..], the scale as f32 bits at q[d_off + b]; the CPU's QuantizeRow(kQ8_0). Called by the
// whole subgroup (uniform control flow).
void QuantizePassQ8_0(uint b0, uint end, uint d_off) {
  const uint per = min(g_lanes, 8u), g = g_lane / per;
  const uint b = b0 + g;
  const bool mine = g < Q8_0BlocksPerPass() && b < end;
  float amax = 0.0;
  if (mine) {
    for (uint k = g_lane % per; k < 8; k += per) {
      for (uint j = 0; j < 4; ++j) amax = max(amax, abs(QIn(32 * b + 4 * k + j)));
    }
  }
  const vec4 all = subgroupMax(vec4(g == 0 ? amax : 0.0, g == 1 ? amax : 0.0,
                                    g == 2 ? amax : 0.0, g == 3 ? amax : 0.0));
  if (!mine) return;
  amax = all[g];
  const float d = unpackHalf2x16(packHalf2x16(vec2(DivRounded(amax, 127.0), 0.0))).x;
  const float id = amax != 0.0 ? DivRounded(127.0, amax) : 0.0;
  for (uint k = g_lane % per; k < 8; k += per) {
    uint word = 0;
    for (uint j = 0; j < 4; ++j) {
      const float v = clamp(roundEven(QIn(32 * b + 4 * k + j) * id), -128.0, 127.0);
      word |= (uint(int(v)) & 0xFFu) << (8 * j);
    }
    q[b * 8 + k] = word;
  }
  if (g_lane % per == 0) q[d_off + b] = floatBitsToUint(d);
}

// Q8_0 blocks first .. end - 1 over the workgroup's subgroups (workgroup-uniform control flow).
void QuantizeRangeQ8_0(uint first, uint end, uint d_off) {
  const uint g = Q8_0BlocksPerPass();
  for (uint b = first + gl_SubgroupID * g; b < end; b += gl_NumSubgroups * g) {
    QuantizePassQ8_0(b, end, d_off);
  }
}

// Q8_K block b (values 256 b ..), as kernels::QuantizeQ8_K rounds it: max is the first value of
// the largest magnitude, iscale = -127 / max, each value round-half-even(iscale * x) capped at
// 127, d = 1 / iscale (both divisions correctly rounded: DivRounded). 72 words at q[72 b ..]:
// the int8 values four per word (64 words) and the sums of the 8 sub-blocks of 32 as ints; d as
// f32 bits at q[d_off + b]. Lane l takes words l, l + lanes, ...: the largest magnitude by
// subgroupMax, its first index (and sign) by a subgroupMin of (index, sign) keys, iscale and d
// uniform, the sub-block sums by one integer subgroupAdd of an ivec4 (two sums of at most
// 32 x 128 in magnitude in each component: low 16 bits and the rest, exact in any order).
// Called by the whole subgroup (uniform control flow).
void QuantizeBlockQ8_K(uint b, uint d_off) {
  const uint base = b * 256;
  float amax = 0.0;
  uint key = 0xFFFFFFFFu;  // 2 x (the lane's first index of its largest magnitude) + its sign
  for (uint w = g_lane; w < 64; w += g_lanes) {
    for (uint j = 0; j < 4; ++j) {
      const float v = QIn(base + 4 * w + j);
      if (abs(v) > amax) {
        amax = abs(v);
        key = 2 * (4 * w + j) + (v < 0.0 ? 1u : 0u);
      }
    }
  }
  const float bmax = subgroupMax(amax);
  if (bmax == 0.0) {
    for (uint k = g_lane; k < 72; k += g_lanes) q[b * 72 + k] = 0;
    if (g_lane == 0) q[d_off + b] = 0;
    return;
  }
  key = subgroupMin(amax == bmax ? key : 0xFFFFFFFFu);
  const float mx = (key & 1u) != 0u ? -bmax : bmax;
  const float iscale = DivRounded(-127.0, mx);
  ivec4 sums = ivec4(0);  // sub-block 2c in the low 16 bits of c, 2c + 1 times 65536
  for (uint w = g_lane; w < 64; w += g_lanes) {
    uint word = 0;
    int sum = 0;
    for (uint j = 0; j < 4; ++j) {
      precise const float t = iscale * QIn(base + 4 * w + j);
      const int v = min(127, int(roundEven(t)));
      sum += v;
      word |= (uint(v) & 0xFFu) << (8 * j);
    }
    q[b * 72 + w] = word;
    const uint s = w / 8;  // a select, not a dynamic index (which may go through local memory)
    sums += ivec4(equal(uvec4(s / 2), uvec4(0, 1, 2, 3))) * ((s % 2 == 0) ? sum : sum * 65536);
  }
  sums = subgroupAdd(sums);
  for (uint s = g_lane; s < 8; s += g_lanes) {
    const int c = sums[s / 2], lo = bitfieldExtract(c, 0, 16);
    q[b * 72 + 64 + s] = uint(s % 2 == 0 ? lo : (c - lo) >> 16);
  }
  if (g_lane == 0) q[d_off + b] = floatBitsToUint(DivRounded(1.0, iscale));
}

// Q8_K blocks first .. end - 1 over the workgroup's subgroups (workgroup-uniform control flow).
void QuantizeRangeQ8_K(uint first, uint end, uint d_off) {
  for (uint b = first + gl_SubgroupID; b < end; b += gl_NumSubgroups) QuantizeBlockQ8_K(b, d_off);
}
