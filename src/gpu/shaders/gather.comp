// y[j] = x[idx[j]] for rows of `cols` floats: the rows of a batch that want logits, in batch
// order, ahead of the final norm and the lm_head. One invocation per value; the grid's y is j.
#version 450
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(std430, binding = 2) readonly buffer Idx { uint idx[]; };
layout(push_constant) uniform P { uint cols; } p;

void main() {
  const uint c = gl_GlobalInvocationID.x;
  if (c >= p.cols) return;
  const uint j = gl_WorkGroupID.y;
  y[j * p.cols + c] = x[idx[j] * p.cols + c];
}
