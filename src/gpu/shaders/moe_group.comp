// The slots of a mixture-of-experts batch grouped by expert for gemmg_*: order = the slots
// sorted by expert (token order within an expert), and tiles of up to 8 slots of one expert:
// tiles[3 i] = expert, tiles[3 i + 1] = first index into order, tiles[3 i + 2] = count; the
// tiles past the last used get count 0. One invocation: a batch has at most a few thousand
// slots, and which tile a slot lands in does not change its result (gemm.glsl), only how many
// times an expert's rows are read.
#version 450
layout(local_size_x = 1) in;

layout(std430, binding = 0) readonly buffer Ids { uint ids[]; };
layout(std430, binding = 1) writeonly buffer Order { uint order[]; };
layout(std430, binding = 2) writeonly buffer Tiles { uint tiles[]; };
layout(push_constant) uniform P { uint n_slots, n_expert, max_tiles; } p;

const uint kMaxExperts = 512;  // checked by the host

void main() {
  uint next[kMaxExperts];
  for (uint e = 0; e < p.n_expert; ++e) next[e] = 0;
  for (uint s = 0; s < p.n_slots; ++s) ++next[ids[s]];
  uint first = 0, tile = 0;
  for (uint e = 0; e < p.n_expert; ++e) {
    const uint c = next[e];
    for (uint j = 0; j < c; j += 8) {
      tiles[3 * tile] = e;
      tiles[3 * tile + 1] = first + j;
      tiles[3 * tile + 2] = min(8u, c - j);
      ++tile;
    }
    next[e] = first;  // now where expert e's next slot goes
    first += c;
  }
  for (; tile < p.max_tiles; ++tile) tiles[3 * tile + 2] = 0;
  for (uint s = 0; s < p.n_slots; ++s) order[next[ids[s]]++] = s;
}
