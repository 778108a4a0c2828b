// Before a sampling step's top-k (topk.comp), for the rows whose requests follow a grammar (JSON
// schemas, tools): every token the grammar does not allow next is set to -inf, so the row's best
// tokens and log-sum-exp are those of the masked row the host's sampler would draw from
// (grammar::TokenConstraint::Apply's row), and only they come back instead of the whole row.
// allow[j * (words + 1)] is row j's flag (0: no mask, the row is left alone), then its mask:
// bit i % 32 of word i / 32 set where token i may come next (TokenConstraint::Mask's 64-bit words
// as little-endian halves). One invocation per token; the grid's y is j.
#version 450
layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer L { float l[]; };
layout(std430, binding = 1) readonly buffer A { uint allow[]; };
layout(push_constant) uniform P {
  uint n_vocab;
  uint words;  // (n_vocab + 63) / 64 * 2
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x, j = gl_WorkGroupID.y;
  const uint base = j * (p.words + 1u);
  if (allow[base] == 0u || i >= p.n_vocab) return;
  if ((allow[base + 1u + i / 32u] & (1u << (i % 32u))) == 0u) {
    l[j * p.n_vocab + i] = uintBitsToFloat(0xFF800000u);
  }
}
