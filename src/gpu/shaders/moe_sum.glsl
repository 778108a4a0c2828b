// The weighted sum of one token's k expert outputs at value i (model::Decoder::MoeFfn's last
// step: rank order, as the CPU adds them), the one expression moe_sum.comp and the experts'
// down GEMM's sum tail (gemm.glsl) both compute, so both give the same bits. The includer
// defines `float MoeOut(uint s, uint i)` (slot s's output i, plus its expert's down bias where
// the model has one) and `float MoeWeight(uint s)`.
float MoeSlotSum(uint s0, uint k, uint i) {
  float acc = MoeWeight(s0) * MoeOut(s0, i);
  for (uint r = 1; r < k; ++r) acc += MoeWeight(s0 + r) * MoeOut(s0 + r, i);
  return acc;
}
