// Before a sampling step's top-k (topk.comp): for each row j, the tokens whose logits the
// request's sampler edits (logit bias, banned tokens, repetition / presence / frequency
// penalties) are read out and set to -inf. The row's best tokens then come from the tokens the
// sampler leaves alone, and the host applies the edits to the raw values read out here with the
// CPU sampler's own arithmetic (sampling::Sampler::SampleTop), so the edited row's top-k, and
// the drawn token, are the full-row sampler's bit for bit. known[j * (cap + 1)] holds row j's
// count, then its ids (distinct, < n_vocab); raw[j * cap + i] receives id i's logit.
// One invocation per listed token; the grid's y is j.
#version 450
layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer L { float l[]; };
layout(std430, binding = 1) readonly buffer K { uint known[]; };
layout(std430, binding = 2) writeonly buffer R { float raw[]; };
layout(push_constant) uniform P {
  uint n_vocab;
  uint cap;
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x, j = gl_WorkGroupID.y;
  const uint kb = j * (p.cap + 1u);
  if (i >= min(known[kb], p.cap)) return;
  const uint id = known[kb + 1u + i];
  if (id >= p.n_vocab) return;
  const uint at = j * p.n_vocab + id;
  raw[j * p.cap + i] = l[at];
  l[at] = uintBitsToFloat(0xFF800000u);
}
