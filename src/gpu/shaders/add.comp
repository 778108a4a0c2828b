// y[y_off + i] += x[x_off + i] for i < n, with x repeating every x_period values (a bias added
// to each of several rows) when x_period > 0.
#version 450
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform P { uint n, x_off, y_off, x_period; } p;

void main() {
  const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64;
  if (i >= p.n) return;
  const uint xi = p.x_period > 0 ? i % p.x_period : i;
  y[p.y_off + i] += x[p.x_off + xi];
}
