// y[j] = x[j] for the rows j (of `cols` floats) whose flag is set: the logits rows that a
// sampling step still needs whole (a grammar mask, penalties, logprobs), copied from device-local
// memory to the host-visible rows; the other rows come back as topk.comp's candidates only.
// One invocation per value; the grid's y is j.
#version 450
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(std430, binding = 2) readonly buffer F { uint f[]; };
layout(push_constant) uniform P { uint cols; } p;

void main() {
  const uint c = gl_GlobalInvocationID.x, j = gl_WorkGroupID.y;
  if (c >= p.cols || f[j] == 0u) return;
  y[j * p.cols + c] = x[j * p.cols + c];
}
