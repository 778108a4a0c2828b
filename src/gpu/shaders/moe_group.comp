// The slots of a mixture-of-experts batch grouped by expert for gemmg_*: order = the slots
// sorted by expert (slot order within an expert), and tiles of up to p.tile (8, 16 or 32) slots
// of one expert:
// tiles[3 i] = expert, tiles[3 i + 1] = first index into order, tiles[3 i + 2] = count; the
// tiles past the last used get count 0. Which tile a slot lands in does not change its result
// (gemm.glsl), only how many times an expert's rows are read; the output is still fixed (a
// stable counting sort), so a step records the same work every time.
//
// One workgroup of 256 (a single invocation walked the slots three times with its counts in
// private memory: on a GPU, latency-bound loads at a few hundred cycles each, ~0.5 ms for the
// 4,096 slots of a 512-token prefill of a top-8 model, per MoE layer). Here: the counts by
// shared atomics, the experts' offsets by a shared-memory scan, and each slot's place by its rank
// among the earlier slots of its chunk of 256 that chose the same expert (<= 255 shared reads).
#version 450
layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer Ids { uint ids[]; };
layout(std430, binding = 1) writeonly buffer Order { uint order[]; };
layout(std430, binding = 2) writeonly buffer Tiles { uint tiles[]; };
layout(push_constant) uniform P { uint n_slots, n_expert, max_tiles, tile; } p;

const uint kThreads = 256;
const uint kMaxExperts = 512;  // checked by the host: 2 experts an invocation

shared uint next[kMaxExperts];  // the slots of each expert, then where its next slot goes
shared uint scan_slots[kThreads];  // the invocations' slots, then their inclusive prefix sums
shared uint scan_tiles[kThreads];  // the same for tiles
shared uint chunk[kThreads];       // the experts of the current chunk's slots

void main() {
  const uint lid = gl_LocalInvocationID.x;
  for (uint e = lid; e < kMaxExperts; e += kThreads) next[e] = 0;
  barrier();
  for (uint s = lid; s < p.n_slots; s += kThreads) atomicAdd(next[ids[s]], 1u);
  barrier();

  // Exclusive prefix sums over the experts, in expert order: invocation lid owns experts 2 lid
  // and 2 lid + 1 (0 past n_expert).
  const uint e0 = 2 * lid, e1 = e0 + 1;
  const uint c0 = e0 < p.n_expert ? next[e0] : 0, c1 = e1 < p.n_expert ? next[e1] : 0;
  const uint t0 = (c0 + p.tile - 1) / p.tile, t1 = (c1 + p.tile - 1) / p.tile;
  scan_slots[lid] = c0 + c1;
  scan_tiles[lid] = t0 + t1;
  barrier();
  for (uint d = 1; d < kThreads; d *= 2) {  // inclusive scans, Hillis-Steele: 8 steps
    const uint s = lid >= d ? scan_slots[lid - d] : 0;
    const uint t = lid >= d ? scan_tiles[lid - d] : 0;
    barrier();
    scan_slots[lid] += s;
    scan_tiles[lid] += t;
    barrier();
  }
  const uint first0 = scan_slots[lid] - (c0 + c1);
  const uint tile0 = scan_tiles[lid] - (t0 + t1);
  const uint used_tiles = scan_tiles[kThreads - 1];
  // Each invocation reads and writes only its own two experts' counts; the barrier below
  // publishes the places before the chunks read them.
  if (e0 < p.n_expert) next[e0] = first0;
  if (e1 < p.n_expert) next[e1] = first0 + c0;
  for (uint j = 0; j < t0; ++j) {
    tiles[3 * (tile0 + j)] = e0;
    tiles[3 * (tile0 + j) + 1] = first0 + p.tile * j;
    tiles[3 * (tile0 + j) + 2] = min(p.tile, c0 - p.tile * j);
  }
  for (uint j = 0; j < t1; ++j) {
    tiles[3 * (tile0 + t0 + j)] = e1;
    tiles[3 * (tile0 + t0 + j) + 1] = first0 + c0 + p.tile * j;
    tiles[3 * (tile0 + t0 + j) + 2] = min(p.tile, c1 - p.tile * j);
  }
  barrier();
  for (uint t = used_tiles + lid; t < p.max_tiles; t += kThreads) tiles[3 * t + 2] = 0;

  // The slots in chunks of 256, in slot order: a slot's place is its expert's next place plus
  // the number of earlier slots of the chunk with the same expert.
  for (uint c = 0; c < p.n_slots; c += kThreads) {  // uniform: every invocation runs each chunk
    const uint s = c + lid;
    const uint e = s < p.n_slots ? ids[s] : 0xFFFFFFFFu;
    chunk[lid] = e;
    barrier();
    if (s < p.n_slots) {
      uint rank = 0;
      for (uint j = 0; j < lid; ++j) rank += chunk[j] == e ? 1u : 0u;
      order[next[e] + rank] = s;
    }
    barrier();
    if (s < p.n_slots) atomicAdd(next[e], 1u);
    barrier();
  }
}
