// The K-quant GEMMs (gemm_q4_k.glsl, gemm_q6_k.glsl) take several blocks of a row at once: a
// cluster of kCluster lanes per block of 256, so a subgroup of S lanes takes S / kCluster blocks
// an iteration. A block's integer sum is two shuffle-xor steps (exact), its f32 term is formed by
// the cluster's lanes, and every lane then adds the iteration's terms to its sum in block order
// (the CPU scalar kernel's order) from shuffles: a shuffled value is opaque to the compiler, so
// the add cannot be fused with the product that formed it (which lavapipe did to `precise`
// expressions). Needs subgroup shuffles (Context checks; clustered operations would do the sum,
// but lavapipe lacks them) and S >= 4.
#extension GL_KHR_shader_subgroup_shuffle : require

const uint kCluster = 4;

// The sum of v over this lane's cluster (lanes with the same id / kCluster), in every lane of it.
int ClusterAdd(int v) {
  v += subgroupShuffleXor(v, 1);
  return v + subgroupShuffleXor(v, 2);
}
ivec2 ClusterAdd(ivec2 v) {
  v += subgroupShuffleXor(v, 1);
  return v + subgroupShuffleXor(v, 2);
}

// Blocks a subgroup takes per iteration.
uint ClusterBlocks() { return gl_SubgroupSize / kCluster; }

// acc += the term of each block b0, b0 + 1, ... (< blocks) of this iteration, in order; term is
// the value the lanes of block b0 + c's cluster (lanes c * kCluster ...) hold.
void AddBlocksInOrder(inout precise float acc, float term, uint b0, uint blocks) {
  const uint n = min(ClusterBlocks(), blocks - b0);
  for (uint c = 0; c < ClusterBlocks(); ++c) {  // every lane runs every shuffle
    const float v = subgroupShuffle(term, c * kCluster);
    if (c < n) acc += v;
  }
}
