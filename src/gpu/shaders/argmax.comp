// The greedy token of each row of logits, on the device so that a greedy decode step copies one
// word back instead of the row: the first index holding the row's maximum (NaN never wins; a row
// with no value above -inf gives 0), as sampling::ArgMax picks it. Two passes, because one
// workgroup per row left a 128k-token row to 64 invocations of one GPU core: ~2,000 dependent
// loop trips each, tens of microseconds a step by load latency alone (an estimate; no GPU has run
// it), against one more dependent dispatch (~1.9 us):
//   pass 0: a workgroup of 64 per (chunk of `chunk` values, row) writes the chunk's maximum and
//           its first index to part[(row * n_chunks + c) * 2 ..] (index ~0u: none above -inf);
//   pass 1: a workgroup per row merges its chunks' pairs into o[row].
// Each invocation scans its strided share in index order keeping the first of equal values,
// subgroups keep the larger value (the smaller index of equal ones) with subgroup operations,
// then the first invocation merges the subgroups, so any chunking picks the same index.
// With p.feed (a chained greedy decode, GpuForward::ForwardGreedyChain; one row), pass 1 also
// feeds the token to the next step: the step's token slot tok[0..3] (token, position, cache
// row, sequence) moves to the next position with this token, its cache row from the block table
// bt, and ring[position % ring_size] keeps the token for the host, which reads it after the
// step's fence while the next step runs.
#version 450
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer L { float l[]; };
layout(std430, binding = 1) writeonly buffer O { uint o[]; };
layout(std430, binding = 2) buffer Part { uint part[]; };
layout(std430, binding = 3) buffer Tok { uint tok[]; };
layout(std430, binding = 4) readonly buffer Bt { int bt[]; };
layout(std430, binding = 5) writeonly buffer Ring { uint ring[]; };
layout(push_constant) uniform P {
  uint n_vocab, chunk, n_chunks, pass, feed, block_size, max_blocks, ring_size;
} p;

shared float sub_v[64];
shared uint sub_i[64];

// The workgroup's best (value, first index) from each invocation's; valid in invocation 0.
void Merge(float bv, uint bi, out float v, out uint idx) {
  const float m = subgroupMax(bv);
  const uint mi = subgroupMin(bv == m ? bi : 0xFFFFFFFFu);
  if (subgroupElect()) {
    sub_v[gl_SubgroupID] = m;
    sub_i[gl_SubgroupID] = mi;
  }
  barrier();
  v = sub_v[0];
  idx = sub_i[0];
  for (uint s = 1; s < gl_NumSubgroups; ++s) {
    if (sub_v[s] > v || (sub_v[s] == v && sub_i[s] < idx)) {
      v = sub_v[s];
      idx = sub_i[s];
    }
  }
}

void main() {
  const uint lid = gl_LocalInvocationID.x;
  float bv = -1.0 / 0.0;
  uint bi = 0xFFFFFFFFu;
  if (p.pass == 0) {
    const uint c = gl_WorkGroupID.x, row = gl_WorkGroupID.y;
    const uint base = row * p.n_vocab, end = min((c + 1) * p.chunk, p.n_vocab);
    for (uint i = c * p.chunk + lid; i < end; i += 64) {
      const float v = l[base + i];
      if (v > bv) {
        bv = v;
        bi = i;
      }
    }
    float v;
    uint idx;
    Merge(bv, bi, v, idx);
    if (lid == 0) {
      part[(row * p.n_chunks + c) * 2] = floatBitsToUint(v);
      part[(row * p.n_chunks + c) * 2 + 1] = idx;
    }
    return;
  }
  const uint row = gl_WorkGroupID.x;
  for (uint c = lid; c < p.n_chunks; c += 64) {  // chunks in order: a later equal one loses
    const float v = uintBitsToFloat(part[(row * p.n_chunks + c) * 2]);
    if (v > bv) {
      bv = v;
      bi = part[(row * p.n_chunks + c) * 2 + 1];
    }
  }
  float v;
  uint idx;
  Merge(bv, bi, v, idx);
  if (lid != 0) return;
  const uint t = idx == 0xFFFFFFFFu ? 0u : idx;
  o[row] = t;
  if (p.feed != 0) {
    const uint pos = tok[1] + 1, seq = tok[3], b = pos / p.block_size;
    // Past the last reserved block (the chain's last step has no next one) the row is not used.
    const int block = b < p.max_blocks ? bt[seq * p.max_blocks + b] : -1;
    tok[0] = t;
    tok[1] = pos;
    tok[2] = block >= 0 ? uint(block) * p.block_size + pos % p.block_size : 0u;
    ring[pos % p.ring_size] = t;
  }
}
