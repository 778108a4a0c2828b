// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + e^-g). out may alias gate.
#version 450
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer G { float g[]; };
layout(std430, binding = 1) readonly buffer U { float u[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint n; } p;

void main() {
  const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64;
  if (i >= p.n) return;
  const float v = g[i];
  o[i] = v / (1.0 + exp(-v)) * u[i];
}
