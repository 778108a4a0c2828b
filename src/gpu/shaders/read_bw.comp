// The device's read bandwidth probe: every invocation streams uvec4 loads over its grid-stride
// share of the buffer and writes one word (so the loads cannot be dropped).
#version 450
layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer B { uvec4 b[]; };
layout(std430, binding = 1) writeonly buffer O { uint o[]; };
layout(push_constant) uniform P { uint n; } p;

void main() {
  const uint stride = gl_NumWorkGroups.x * 256;
  uvec4 acc = uvec4(0);
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) acc ^= b[i];
  o[gl_GlobalInvocationID.x] = acc.x ^ acc.y ^ acc.z ^ acc.w;
}
