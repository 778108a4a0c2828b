// The dot loop of the 16-bit GEMMs: statements, included inside a function body (gemm_pairs.glsl's
// main, and gemm_qkv.glsl's once per matrix; no include guard). The includer defines PAIRS_W (the
// weight buffer's word array) and has in scope Unpack, kTile, kRows, the activation pairs x[],
// InBatch / XTok, p.x_stride (words a token), pairs (words a row), t0 (the tile's first token),
// base[kRows] (each row's first word) and float acc[kRows][kTile] (zeroed here). Statements
// rather than a function: a function's array out-parameter left glslc's output with a copy of
// acc, where this keeps the GEMMs' SPIR-V as it was.
// acc[j][t] = row j's partial sum for token t0 + t: lane l takes the row's words l, l + S, l + 2 S,
// ... (S: subgroup size) as w.x * a.x + w.y * a.y, so a row's sum (after subgroupAdd) is the
// same bits whatever kTile and kRows.
[[unroll]] for (uint j = 0; j < kRows; ++j) {
  [[unroll]] for (uint t = 0; t < kTile; ++t) acc[j][t] = 0.0;
}
for (uint i = gl_SubgroupInvocationID; i < pairs; i += gl_SubgroupSize) {
  vec2 wv[kRows];
  [[unroll]] for (uint j = 0; j < kRows; ++j) wv[j] = Unpack(PAIRS_W[base[j] + i]);
  [[unroll]] for (uint t = 0; t < kTile; ++t) {
    if (InBatch(t0 + t)) {
      const vec2 a = Unpack(x[XTok(t0 + t) * p.x_stride + i]);
      [[unroll]] for (uint j = 0; j < kRows; ++j) acc[j][t] += wv[j].x * a.x + wv[j].y * a.y;
    }
  }
}
