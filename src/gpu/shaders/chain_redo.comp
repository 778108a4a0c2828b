// The first pass of a step of a batch of sampled chains (GpuForward::ForwardSampledChains with
// two or more streams): the rows whose token the host overruled two steps back start again from
// the host's token. The step behind that one was queued with the device's draw and is dropped;
// this step computes that position again, so a stream whose draw the host overrules loses one
// step and the others lose none. The host writes redo[row] (for the slot whose recording reads
// it) before it queues the step, while the step before runs, and clears it once this step ends.
//
// redo, 4 words a row: [flag][token][position][draws]: the token and its position replace the
// row's input (its cache slot from the block table, as the feed finds it) and the row's draw
// counter (sample.comp's draw header word 4) goes back to the host's count of drawn uniforms.
#version 450
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Redo { uint redo[]; };
layout(std430, binding = 1) buffer Tok { uint tok[]; };
layout(std430, binding = 2) readonly buffer Bt { int bt[]; };
layout(std430, binding = 3) buffer Draw { uint dw[]; };
layout(push_constant) uniform P { uint rows, block_size, max_blocks, draw_words; } p;

void main() {
  const uint row = gl_GlobalInvocationID.x;
  if (row >= p.rows || redo[4u * row] == 0u) return;
  const uint pos = redo[4u * row + 2u], seq = tok[4u * row + 3u];
  const int block = bt[seq * p.max_blocks + pos / p.block_size];
  tok[4u * row] = redo[4u * row + 1u];
  tok[4u * row + 1u] = pos;
  tok[4u * row + 2u] = uint(block) * p.block_size + pos % p.block_size;
  dw[row * p.draw_words + 4u] = redo[4u * row + 3u];
}
