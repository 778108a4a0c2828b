// Shared by the compute shaders: 64 invocations per workgroup, a workgroup sum through shared
// memory, the row a workgroup owns when rows are spread over a 2-D grid (a dimension holds at
// most 65535 groups), and for the GEMVs the row a subgroup owns (one row per subgroup, summed
// with subgroupAdd: no barriers, which on lavapipe made the lm_head 10x slower).
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 64) in;

shared float uf_red[64];

float WorkgroupSum(float v) {
  const uint lid = gl_LocalInvocationID.x;
  uf_red[lid] = v;
  barrier();
  for (uint s = 32; s > 0; s >>= 1) {
    if (lid < s) uf_red[lid] += uf_red[lid + s];
    barrier();
  }
  const float r = uf_red[0];
  barrier();
  return r;
}

float WorkgroupMax(float v) {
  const uint lid = gl_LocalInvocationID.x;
  uf_red[lid] = v;
  barrier();
  for (uint s = 32; s > 0; s >>= 1) {
    if (lid < s) uf_red[lid] = max(uf_red[lid], uf_red[lid + s]);
    barrier();
  }
  const float r = uf_red[0];
  barrier();
  return r;
}

uint GroupIndex() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }

// f32 -> f16 -> f32: the rounding the CPU kernels apply to activations before an F16 product.
float RoundF16(float x) { return unpackHalf2x16(packHalf2x16(vec2(x, 0.0))).x; }

// The row of a GEMV this subgroup computes: gl_NumSubgroups rows per workgroup (the host
// dispatches rows / (64 / subgroup size) workgroups; a 64-wide workgroup holds full subgroups).
uint SubgroupRow() { return GroupIndex() * gl_NumSubgroups + gl_SubgroupID; }

// The index of an elementwise item when the host spreads groups of 64 over a 2-D grid.
uint ItemIndex() { return GroupIndex() * 64 + gl_LocalInvocationID.x; }
