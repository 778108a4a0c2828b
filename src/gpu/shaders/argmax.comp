// The greedy token of each row of logits, on the device so that a greedy decode step copies one
// word back instead of the row: the first index holding the row's maximum (NaN never wins; a row
// with no value above -inf gives 0), as sampling::ArgMax picks it. One workgroup of 64 per row:
// each invocation scans its strided share in index order, subgroups keep the larger value (the
// smaller index of equal ones) with subgroup operations, then the first invocation merges the
// subgroups (one barrier: barriers are what a CPU driver pays for).
#version 450
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer L { float l[]; };
layout(std430, binding = 1) writeonly buffer O { uint o[]; };
layout(push_constant) uniform P { uint n_vocab; } p;

shared float sub_v[64];
shared uint sub_i[64];

void main() {
  const uint row = gl_WorkGroupID.x, lid = gl_LocalInvocationID.x;
  const uint base = row * p.n_vocab;
  float bv = -1.0 / 0.0;
  uint bi = 0xFFFFFFFFu;
  for (uint i = lid; i < p.n_vocab; i += 64) {
    const float v = l[base + i];
    if (v > bv) {
      bv = v;
      bi = i;
    }
  }
  const float m = subgroupMax(bv);
  const uint mi = subgroupMin(bv == m ? bi : 0xFFFFFFFFu);
  if (subgroupElect()) {
    sub_v[gl_SubgroupID] = m;
    sub_i[gl_SubgroupID] = mi;
  }
  barrier();
  if (lid == 0) {
    float v = sub_v[0];
    uint idx = sub_i[0];
    for (uint s = 1; s < gl_NumSubgroups; ++s) {
      if (sub_v[s] > v || (sub_v[s] == v && sub_i[s] < idx)) {
        v = sub_v[s];
        idx = sub_i[s];
      }
    }
    o[row] = idx == 0xFFFFFFFFu ? 0u : idx;
  }
}
