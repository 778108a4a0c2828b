// The planner (src/planner/): model costs against hand-counted parameters, the step formula on a
// toy profile, the price multiplier, the published anchors it must reproduce, the tier
// simulator's determinism and targets, and the `plan` command's exit codes.
#include "planner/planner.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "gguf/gguf.h"
#include "planner/hardware.h"
#include "planner/model_shape.h"
#include "planner/tier_sim.h"
#include "shared_data.h"

namespace uf::planner {
namespace {

namespace fs = std::filesystem;

ModelCost Cost(const std::string& preset, const std::string& type = "bf16") {
  auto shape = FindPlannerPreset(preset);
  EXPECT_TRUE(shape.ok()) << shape.status().message();
  auto cost = CostFromShape(*shape, type, "f16");
  EXPECT_TRUE(cost.ok()) << cost.status().message();
  return *cost;
}

HardwareProfile Hw(const std::string& name) {
  auto hw = FindHardware(name);
  EXPECT_TRUE(hw.ok()) << hw.status().message();
  return *hw;
}

// Llama-3.2-1B (16 layers, width 2048, 32 heads of 64, 8 K/V heads, FFN 8192, vocabulary 128256,
// tied): per layer q,o 2 x 2048 x 2048 = 8,388,608, k,v 2 x 2048 x 512 = 2,097,152, FFN
// 3 x 2048 x 8192 = 50,331,648, so 60,817,408 x 16 = 973,078,528; the table 262,668,288; total
// 1,235,746,816 (the published 1.24B). In BF16 a decode step reads every matrix (the table as
// the output matrix), the f32 norms (2 x 2048 x 4 per layer + 2048 x 4) and one embedding row
// (4096): 2,471,763,968 + 4,096. K/V per position in f16: 2 x 16 x 512 x 2 = 32,768 bytes.
TEST(PlannerModelTest, Llama1BCostMatchesHandCount) {
  const ModelCost c = Cost("llama-3.2-1b");
  EXPECT_DOUBLE_EQ(c.total_params, 1235746816.0);
  EXPECT_DOUBLE_EQ(c.held_bytes, 2.0 * 1235746816.0);
  EXPECT_DOUBLE_EQ(c.active_params, 1235746816.0);
  EXPECT_DOUBLE_EQ(c.StepWeightBytes(1), 2471763968.0 + 4096.0);
  EXPECT_DOUBLE_EQ(c.StepWeightBytes(3), 2471763968.0 + 3 * 4096.0);
  EXPECT_DOUBLE_EQ(c.kv_bytes_per_position, 32768.0);
  EXPECT_FALSE(c.quantized);
  EXPECT_TRUE(Cost("llama-3.2-1b", "q4_0").quantized);
  // Q4_0 is 4.5 bits: 9/32 of the BF16 bytes for the matrices.
  EXPECT_NEAR(Cost("llama-3.2-1b", "q4_0").held_bytes, 1235746816.0 * 4.5 / 8, 1.0);
}

// gpt-oss-20b: 24 layers of 8 K/V heads of 64; the 12 even ones see the last 128 positions and
// the engine keeps only that window for them. K/V per position in f16 counts the 12 others:
// 2 x 12 x 512 x 2 = 24,576 bytes; the windowed layers hold 2 x 12 x 128 x 512 x 2 = 3,145,728
// bytes per sequence whatever the context, and a step's attention there covers the window only.
TEST(PlannerModelTest, SlidingWindowLayersHoldTheirWindow) {
  const ModelCost c = Cost("gpt-oss-20b");
  EXPECT_DOUBLE_EQ(c.kv_bytes_per_position, 24576.0);
  EXPECT_DOUBLE_EQ(c.kv_window_bytes, 3145728.0);
  EXPECT_EQ(c.windowed_layers, 12);
  EXPECT_EQ(c.n_swa, 128);
  const ModelCost dense = Cost("llama-3.2-1b");
  EXPECT_EQ(dense.kv_window_bytes, 0.0);
  EXPECT_EQ(dense.windowed_layers, 0);
}

// Llama-3.1-70B: per layer q,o 2 x 8192^2 = 134,217,728, k,v 2 x 8192 x 1024 = 16,777,216, FFN
// 3 x 8192 x 28672 = 704,643,072: 855,638,016 x 80 = 68,451,041,280, plus an untied embedding
// and output of 1,050,673,152 each: 70,552,387,584.
// Mixtral-8x7B: per layer attention 2 x 4096^2 + 2 x 4096 x 1024 = 41,943,040 and 8 experts of
// 3 x 4096 x 14336 = 176,160,768: held 32 x (41,943,040 + 8 x 176,160,768) + 2 x 32000 x 4096 =
// 46,701,477,888 (the published 46.7B); active 32 x (41,943,040 + 2 x 176,160,768) + 131,072,000
// (output) = 12,747,538,432.
TEST(PlannerModelTest, LargeAndMoEPresets) {
  EXPECT_DOUBLE_EQ(Cost("llama-3.1-70b").total_params, 70552387584.0);
  const ModelCost moe = Cost("mixtral-8x7b");
  EXPECT_DOUBLE_EQ(moe.total_params, 46701477888.0);
  EXPECT_DOUBLE_EQ(moe.active_params, 12747538432.0);
  // One token touches 8 x (1 - 6/8) = 2 experts per layer; two tokens 8 x (1 - (6/8)^2) = 3.5.
  const double expert = 176160768.0 * 2;  // bytes in BF16
  EXPECT_DOUBLE_EQ(moe.expert_bytes, expert);
  EXPECT_NEAR(moe.StepWeightBytes(2) - moe.StepWeightBytes(1), 32 * 1.5 * expert + 4096 * 2, 1.0);
  // A large batch touches all 8: the step reads what the model holds, less the embedding table.
  EXPECT_NEAR(moe.StepWeightBytes(10000),
              moe.held_bytes - 131072000.0 * 2 + 10000 * 8192.0 + 32 * 2 * 4096 * 4 + 4096 * 4,
              1e3);
  EXPECT_FALSE(FindPlannerPreset("llama-9b").ok());
  EXPECT_FALSE(CostFromShape(*FindPlannerPreset("llama-3.1-8b"), "q3", "f16").ok());
}

// The tensor table of a real file: held bytes are every tensor's bytes, and a step reads all but
// the embedding table (which it reads whole too when the output is tied to it).
TEST(PlannerModelTest, GgufCostFromTensorTable) {
  UF_REQUIRE_SHARED();
  const std::string path = "../shared/models/tiny-llama-f32.gguf";
  auto file = gguf::GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  double sum = 0;
  for (const gguf::TensorInfo& t : (*file)->tensors()) sum += static_cast<double>(t.n_bytes);
  const gguf::TensorInfo* embd = (*file)->FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  const bool tied = (*file)->FindTensor("output.weight") == nullptr;
  auto c = CostFromGguf(path, "f16");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_DOUBLE_EQ(c->held_bytes, sum);
  EXPECT_DOUBLE_EQ(c->always_bytes, tied ? sum : sum - static_cast<double>(embd->n_bytes));
  EXPECT_EQ(c->weight_type, "f32");
  EXPECT_FALSE(c->quantized);
  EXPECT_FALSE(CostFromGguf("../shared/golden/tiny-llama-f32.jsonl", "f16").ok());
}

// A mixture-of-experts file of an architecture the engine does not run (the planner reads only
// metadata and the tensor table): 2 layers of width 64, 4 heads of 16 (2 for K/V), 4 experts of
// FFN width 32 with 2 used, untied output over 100 tokens, all f32. Per layer attention
// 2 x 64 x 64 + 2 x 64 x 32 = 12,288 params and a 64-wide norm; experts 3 x 64 x 32 x 4 = 24,576.
// Always read: 2 x 12,352 + the 6,400 output params = 31,104 (124,416 bytes); one expert in one
// layer is 6,144 params (24,576 bytes); active 31,104 + 2 x 24,576 x 2/4 = 55,680; held
// (31,104 + 49,152 + 6,400 embedding) x 4 = 346,624 bytes. One token reads the always bytes, a
// 256-byte embedding row and 2 layers x 2 experts. K/V per position in f16: 2 x 2 x 32 x 2 = 256.
TEST(PlannerModelTest, MoEGgufFromTensorTable) {
  gguf::GgufWriter w;
  w.Set("general.architecture", gguf::Value::String("qwen3moe"));
  w.Set("qwen3moe.block_count", gguf::Value::U32(2));
  w.Set("qwen3moe.embedding_length", gguf::Value::U32(64));
  w.Set("qwen3moe.attention.head_count", gguf::Value::U32(4));
  w.Set("qwen3moe.attention.head_count_kv", gguf::Value::U32(2));
  w.Set("qwen3moe.expert_count", gguf::Value::U32(4));
  w.Set("qwen3moe.expert_used_count", gguf::Value::U32(2));
  auto zeros = [](uint8_t* dst, size_t n) { std::memset(dst, 0, n); };
  auto add = [&](const std::string& name, std::vector<int64_t> ne) {
    ASSERT_TRUE(w.AddTensor(name, GgmlType::kF32, std::move(ne), zeros).ok()) << name;
  };
  add("token_embd.weight", {64, 100});
  add("output.weight", {64, 100});
  for (int l = 0; l < 2; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", {64});
    add(b + "attn_q.weight", {64, 64});
    add(b + "attn_k.weight", {64, 32});
    add(b + "attn_v.weight", {64, 32});
    add(b + "attn_output.weight", {64, 64});
    add(b + "ffn_gate_exps.weight", {64, 32, 4});
    add(b + "ffn_up_exps.weight", {64, 32, 4});
    add(b + "ffn_down_exps.weight", {32, 64, 4});
  }
  const std::string path =
      (fs::temp_directory_path() / ("uf_planner_moe_" + std::to_string(::getpid()) + ".gguf"))
          .string();
  ASSERT_TRUE(w.WriteToFile(path).ok());
  auto c = CostFromGguf(path, "f16");
  fs::remove(path);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->n_expert, 4);
  EXPECT_EQ(c->n_expert_used, 2);
  EXPECT_DOUBLE_EQ(c->always_bytes, 124416.0);
  EXPECT_DOUBLE_EQ(c->expert_bytes, 24576.0);
  EXPECT_DOUBLE_EQ(c->active_params, 55680.0);
  EXPECT_DOUBLE_EQ(c->held_bytes, 346624.0);
  EXPECT_DOUBLE_EQ(c->StepWeightBytes(1), 124416.0 + 256 + 2 * 2 * 24576.0);
  EXPECT_DOUBLE_EQ(c->kv_bytes_per_position, 256.0);
  EXPECT_EQ(c->weight_type, "f32");
}

// A toy profile where every term is visible: with overlap exponent 1 the step is m + c + latency.
// Model: 1000 bytes always read, 10 bytes of K/V per position, 100 active params, 2 layers,
// q_dim 1. Batch 4 at context 5: bytes 1000 + 4 x 5 x 10 = 1200 at 1000 B/s x 0.5 -> m = 2.4 s;
// flops 2 x 100 x 4 + 4 x 2 x 1 x 20 = 960 at 480 x 0.5 -> c = 4.0 s; latency 2 x 0.05 = 0.1 s;
// t = 6.5 s. One device (memory 1e6): $3.60/h is $0.001/s, over 4 / 6.5 tok/s -> 1625 $/Mtok.
TEST(PlannerStepTest, ToyProfileArithmetic) {
  ModelCost m;
  m.always_bytes = 1000;
  m.held_bytes = 1000;
  m.kv_bytes_per_position = 10;
  m.active_params = 100;
  m.n_layer = 2;
  m.q_dim = 1;
  HardwareProfile hw;
  hw.memory_bytes = 1e6;
  hw.bandwidth_bytes_s = 1000;
  hw.bandwidth_efficiency = 0.5;
  hw.bf16_flops = 480;
  hw.quantized_ops_s = 1;  // unused: the toy model is not quantized
  hw.compute_efficiency = 0.5;
  hw.layer_latency_s = 0.05;
  hw.overlap_exponent = 1.0;
  const PlanRow r = EstimateStep(m, hw, 4, 5, 3.6);
  EXPECT_EQ(r.devices, 1);
  EXPECT_DOUBLE_EQ(r.memory_seconds, 2.4);
  EXPECT_DOUBLE_EQ(r.compute_seconds, 4.0);
  EXPECT_DOUBLE_EQ(r.overhead_seconds, 0.1);
  EXPECT_DOUBLE_EQ(r.step_seconds, 6.5);
  EXPECT_DOUBLE_EQ(r.aggregate_tok_s, 4 / 6.5);
  EXPECT_EQ(r.bound, "compute");
  EXPECT_NEAR(r.usd_per_mtok, 1625.0, 1e-9);
  // Memory 700 x 0.9 = 630 usable: 1200 bytes need 2 devices, which split m and c in half and
  // add two all-reduces per layer (link latency 0.01 s): 1.2 + 2.0 + 0.1 + 4 x 0.01 = 3.34 s.
  hw.memory_bytes = 700;
  hw.link_latency_s = 0.01;
  const PlanRow two = EstimateStep(m, hw, 4, 5, 3.6);
  EXPECT_EQ(two.devices, 2);
  EXPECT_DOUBLE_EQ(two.step_seconds, 1.2 + 2.0 + 0.1 + 0.04);
  // As a pipeline the same 2 devices each carry one of 2 micro-batches of 2: bytes 1000 + 2 x 5 x
  // 10 = 1100 -> 2.2 s, flops 400 + 80 = 480 -> 2.0 s, latency 0.1 + one hop 0.01.
  hw.parallelism = Parallelism::kPipeline;
  const PlanRow pipe = EstimateStep(m, hw, 4, 5, 3.6);
  EXPECT_EQ(pipe.devices, 2);
  EXPECT_DOUBLE_EQ(pipe.step_seconds, 2.2 + 2.0 + 0.11);
  EXPECT_DOUBLE_EQ(pipe.aggregate_tok_s, 4 / 4.31);
}

// Memory time 1 s whatever the batch (1000 bytes at 1000 B/s) and compute 0.25 s per token
// (2 x 1 param / 8 flops/s), joined by a near-max (p = 64): t(1) = t(2) = t(3) = 1,
// t(4) = 2^(1/64), t(8) = 2. Per device: 1, 2, 4 / 2^(1/64), 4 tok/s: batch 8 is best, and the
// ultrafast stream (1 tok/s) must charge 4x. With 5% slack, t(1 + k) <= 1.05 allows k = 3
// (t(5) = 1.25), so it earns (m + 3) / 2^(1/64) = 4: m = 4 x 2^(1/64) - 3.
TEST(PlannerStepTest, UltrafastMultiplier) {
  ModelCost m;
  m.always_bytes = 1000;
  m.held_bytes = 1000;
  m.active_params = 1;
  m.n_layer = 1;
  HardwareProfile hw;
  hw.name = "toy";
  hw.memory_bytes = 1e9;
  hw.bandwidth_bytes_s = 1000;
  hw.bandwidth_efficiency = 1;
  hw.bf16_flops = 8;
  hw.compute_efficiency = 1;
  hw.overlap_exponent = 64;
  hw.price_per_hour = 1;
  PlanOptions o;
  o.batches = {1, 2, 4, 8};
  o.context = 1;
  auto report = Plan(m, {hw}, o);
  ASSERT_TRUE(report.ok()) << report.status().message();
  const HardwarePlan& h = report->hardware[0];
  EXPECT_EQ(h.rows[h.best].batch, 8);
  EXPECT_NEAR(h.ultrafast_multiplier, 4.0, 1e-9);
  EXPECT_EQ(h.slack_defaults, 3);
  EXPECT_NEAR(h.ultrafast_multiplier_with_slack, 4 * std::pow(2.0, 1.0 / 64) - 3, 1e-9);
  o.batches = {1, 0};
  EXPECT_FALSE(Plan(m, {hw}, o).ok());
  o.batches = {1};
  o.price_per_hour = -2;
  EXPECT_FALSE(Plan(m, {hw}, o).ok());
}

// The local profile on the Q4_0 preset (4.5 bits everywhere), batch 1 at context 1: a step reads
// 16 x (60,817,408 x 0.5625 + 16,384 norm bytes) + 8,192 + 262,668,288 x 0.5625 (the tied
// output) = 695,377,920 bytes, one 1,152-byte embedding row and 32,768 bytes of K/V: at 25 GB/s
// x 0.82, m = 695,411,840 / 20.5e9 s. It multiplies 2 x 1,235,746,816 + 4 x 16 x 2048 =
// 2,471,624,704 int8 ops at 400 GOP/s x 0.25: c = 0.024716 s. Then (m^6 + c^6)^(1/6) plus 16
// layers x 20 us.
TEST(PlannerStepTest, LocalProfileOnQ4_0) {
  auto local = LocalProfile(25, 100, 400, 8e9);
  ASSERT_TRUE(local.ok());
  const PlanRow r = EstimateStep(Cost("llama-3.2-1b", "q4_0"), *local, 1, 1, 0.1);
  const double m = 695411840.0 / 20.5e9, c = 2471624704.0 / 100e9;
  EXPECT_NEAR(r.memory_seconds, m, 1e-12);
  EXPECT_NEAR(r.compute_seconds, c, 1e-12);
  EXPECT_NEAR(r.step_seconds, std::pow(std::pow(m, 6) + std::pow(c, 6), 1.0 / 6) + 16 * 20e-6,
              1e-12);
  EXPECT_EQ(r.bound, "memory");
}

double Within(double model, double anchor) { return std::abs(model / anchor - 1.0); }

// The published anchors of docs/planner.md, each within 30%.
TEST(PlannerAnchorTest, PublishedFiguresWithin30Percent) {
  // BF16 roofline of Llama-3.2-1B on an H200: 4.8e12 / (2,471,768,064 + 32,768 at context 1)
  // = 1941.9 tok/s.
  const PlanRow h200 = EstimateStep(Cost("llama-3.2-1b"), Hw("h200"), 1, 1, 1);
  EXPECT_NEAR(h200.roofline_tok_s, 4.8e12 / (2471768064.0 + 32768.0), 1e-6);
  EXPECT_LT(Within(h200.roofline_tok_s, 1940), 0.3);
  EXPECT_LT(Within(h200.per_user_tok_s, 1940), 0.3);
  // Llama-3.2-1B at batch 1 on an H100 under 1 ms per token (a megakernel: no launch gaps, so
  // the profile's layer latency is left out here).
  HardwareProfile mega = Hw("h100");
  mega.layer_latency_s = 0;
  const PlanRow h100_1b = EstimateStep(Cost("llama-3.2-1b"), mega, 1, 128, 1);
  EXPECT_LT(h100_1b.step_seconds, 1e-3);
  EXPECT_GT(h100_1b.step_seconds, 0.7e-3);  // not below the bandwidth roofline (0.74 ms)
  // SGLang: Llama-3.1-8B at 158 tok/s, batch 1, H100.
  EXPECT_LT(Within(EstimateStep(Cost("llama-3.1-8b"), Hw("h100"), 1, 128, 1).per_user_tok_s, 158),
            0.3);
  // Cerebras: Llama-3.1-70B at ~450 tok/s on 4 WSE-3 (a fit: docs/planner.md).
  const PlanRow wse = EstimateStep(Cost("llama-3.1-70b"), Hw("wse3"), 1, 1024, 1);
  EXPECT_EQ(wse.devices, 4);  // 141.1 GB over 39.6 GB usable per wafer
  EXPECT_LT(Within(wse.per_user_tok_s, 450), 0.3);
  EXPECT_EQ(wse.bound, "latency");
  // Llama-3.1-70B in BF16 on H100s: 141.1 GB over 72 GB usable -> 2 GPUs.
  EXPECT_EQ(EstimateStep(Cost("llama-3.1-70b"), Hw("h100"), 1, 1024, 1).devices, 2);
}

TEST(PlannerHardwareTest, NamesAndLocalProfile) {
  EXPECT_EQ(Hw("H200").name, "h200");
  EXPECT_EQ(Hw("cerebras").name, "wse3");
  EXPECT_FALSE(FindHardware("tpu-v9").ok());
  EXPECT_FALSE(FindHardware("local").ok());  // needs the probe
  auto list = ParseHardwareList("local,h100,H100,groq");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(*list, (std::vector<std::string>{"local", "h100", "groq"}));
  EXPECT_EQ(ParseHardwareList("h200,all")->size(), HardwareProfiles().size());
  EXPECT_EQ(ParseHardwareList("h200,all")->front(), "h200");
  EXPECT_FALSE(ParseHardwareList("h100,,h200").ok());
  EXPECT_FALSE(ParseHardwareList("h100,abacus").ok());
  auto local = LocalProfile(25, 100, 400, 8e9);
  ASSERT_TRUE(local.ok());
  EXPECT_DOUBLE_EQ(local->bandwidth_bytes_s, 25e9);
  EXPECT_FALSE(LocalProfile(0, 100, 400, 8e9).ok());
}

// Step curves for the simulator: this project's 2-core VM as measured (tiers_bench run E: batch
// 2/3/4/6/8 at 1.00/1.10/1.23/1.70/2.38 x batch 1, fitted by a soft knee, 0.4 us per attended
// position), and the planner's model of Llama-3.2-1B BF16 on an H200.
double LocalVmSeconds(int64_t tokens, int64_t context_tokens) {
  const double x = 0.3 * static_cast<double>(tokens);
  return 0.040 * std::pow(1.0 + std::pow(x, 6.0), 1.0 / 6.0) +
         4e-7 * static_cast<double>(context_tokens);
}

StepCurve H200Curve() {
  const ModelCost m = Cost("llama-3.2-1b");
  const HardwareProfile hw = Hw("h200");
  return [m, hw](int64_t t, int64_t c) { return CurveStepSeconds(m, hw, t, c); };
}

TEST(TierSimTest, DeterministicAndSeeded) {
  TierSimOptions o;
  o.ultrafast_tokens = 600;
  o.measure_after_tokens = 300;
  auto a = SimulateTiers(LocalVmSeconds, o);
  auto b = SimulateTiers(LocalVmSeconds, o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->itl_p50_over_solo, b->itl_p50_over_solo);
  EXPECT_EQ(a->itl_p99_over_solo, b->itl_p99_over_solo);
  EXPECT_EQ(a->default_tok_s, b->default_tok_s);
  o.noise = 0.05;
  o.seed = 3;
  auto n1 = SimulateTiers(LocalVmSeconds, o);
  auto n2 = SimulateTiers(LocalVmSeconds, o);
  o.seed = 4;
  auto n3 = SimulateTiers(LocalVmSeconds, o);
  ASSERT_TRUE(n1.ok() && n2.ok() && n3.ok());
  EXPECT_EQ(n1->default_tok_s, n2->default_tok_s);
  EXPECT_EQ(n1->itl_p99_over_solo, n2->itl_p99_over_solo);
  EXPECT_NE(n1->default_tok_s, n3->default_tok_s);  // the seed is used
  o.slack = -1;
  EXPECT_FALSE(SimulateTiers(LocalVmSeconds, o).ok());
}

// The targets on the local and H200 curves at slack 5, 10 and 25%: ultrafast ITL p50 at
// most (1 + slack) x solo; p99 too, within half a point (measured: 1.1015 on the local curve at
// 10%, where one default sits right at the bound as contexts grow and the hinge fit of a soft knee
// admits it for stretches; every other case is under); default throughput at least 90% of the
// ideal for the scheduler's oldest-first order (the shortest-first ideal is reported, not held
// to: docs/planner.md). Admission takes the stream, turns the `auto` request into a default one
// and refuses the explicit one (429). First-come batching would slow the stream past the bound.
TEST(TierSimTest, MeetsTheTargetsOnLocalAndH200Curves) {
  const std::pair<const char*, StepCurve> curves[] = {{"local", LocalVmSeconds},
                                                      {"h200", H200Curve()}};
  for (const auto& [name, curve] : curves) {
    for (double slack : {0.05, 0.10, 0.25}) {
      SCOPED_TRACE(testing::Message() << name << " slack " << slack);
      TierSimOptions o;
      o.slack = slack;
      auto r = SimulateTiers(curve, o);
      ASSERT_TRUE(r.ok()) << r.status().message();
      EXPECT_EQ(r->measured_tokens, o.ultrafast_tokens - o.measure_after_tokens - 1);
      EXPECT_LE(r->itl_p50_over_solo, 1 + slack);
      EXPECT_LE(r->itl_p99_over_solo, 1 + slack + 0.005);
      EXPECT_GE(r->default_fraction_of_ideal, 0.9);
      EXPECT_GE(r->any_order_default_tok_s, r->ideal_default_tok_s * (1 - 1e-9));
      EXPECT_GT(r->default_tok_s, 0);
      EXPECT_EQ(r->admitted, 1);
      EXPECT_EQ(r->fallbacks, 1);
      EXPECT_EQ(r->rejected_429, 1);
      EXPECT_GE(r->retry_after_seconds, 1);
      EXPECT_GT(r->fcfs_p50_over_solo, 1 + slack);
    }
  }
}

TEST(TierSimTest, MeasuredCurveInterpolates) {
  // Batch 1 at 25 tok/s (0.04 s), 2 at 40 (0.05 s), 4 at 50 (0.08 s): 3 -> 0.065 s, 6 -> 0.11 s
  // (last slope 0.015 s per token), plus 1e-6 s per position.
  auto c = MeasuredCurve({{4, 50.0}, {1, 25.0}, {2, 40.0}}, 1e-6);
  ASSERT_TRUE(c.ok());
  EXPECT_NEAR((*c)(1, 0), 0.04, 1e-12);
  EXPECT_NEAR((*c)(3, 0), 0.065, 1e-12);
  EXPECT_NEAR((*c)(6, 1000), 0.11 + 1e-3, 1e-12);
  // The prior read off it: base 0.04 s; 2 tokens (0.05 s) are past 1% so the knee is 1; the slope
  // (t(9) - t(1)) / 8 = (0.08 + 5 x 0.015 - 0.04) / 8 = 0.014375 s; 1e-6 s per position.
  const scheduler::StepCostCoefficients k = PriorFromCurve(*c);
  EXPECT_NEAR(k.base_seconds, 0.04, 1e-12);
  EXPECT_EQ(k.knee_tokens, 1.0);
  EXPECT_NEAR(k.per_seq_seconds, 0.014375, 1e-12);
  EXPECT_NEAR(k.per_context_token_seconds, 1e-6, 1e-12);
  EXPECT_FALSE(MeasuredCurve({}, 0).ok());
  EXPECT_FALSE(MeasuredCurve({{0, 5.0}}, 0).ok());
}

// The `ultrafast` binary (built beside this test).
struct Result {
  int code = -1;
  std::string out, err;
};

class PlanCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    binary_ = fs::read_symlink("/proc/self/exe").parent_path() / "ultrafast";
    if (!fs::exists(binary_)) GTEST_SKIP() << "ultrafast binary not built at " << binary_;
    dir_ = fs::temp_directory_path() / ("uf_plan_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  Result Run(const std::string& args) {
    const fs::path out = dir_ / "stdout", err = dir_ / "stderr";
    const std::string cmd =
        binary_.string() + " plan " + args + " > " + out.string() + " 2> " + err.string();
    const int status = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream o(out), e(err);
    std::stringstream so, se;
    so << o.rdbuf();
    se << e.rdbuf();
    r.out = so.str();
    r.err = se.str();
    return r;
  }
  fs::path binary_, dir_;
};

TEST_F(PlanCliTest, BadInputIsOneLineAndExitCode2) {
  const fs::path not_gguf = dir_ / "notes.gguf";
  std::ofstream(not_gguf) << "not a model\n";
  const fs::path array = dir_ / "array.json", text = dir_ / "text.json";
  std::ofstream(array) << "[1, 2]\n";
  std::ofstream(text) << "{\"bandwidth_gb_s\": \"fast\", \"batch_tok_s\": {\"1\": \"x\"}}\n";
  for (const std::string& args :
       {std::string("-m llama-3.2-1b --hw tpu9"), std::string("-m llama-9b --hw h100"),
        "-m " + not_gguf.string() + " --hw h100", std::string("-m llama-3.2-1b --batch 1,0"),
        std::string("-m llama-3.2-1b --price-per-hour=-3"),
        std::string("-m llama-3.2-1b --price-per-hour -3"), std::string("-m llama-3.2-1b --ctx 0"),
        std::string("-m llama-3.2-1b --type q3"),
        std::string("-m llama-3.2-1b --hw local --local-from /nonexistent/bench.json"),
        "-m llama-3.2-1b --hw local --local-from " + array.string(),
        "-m llama-3.2-1b --hw local --local-from " + text.string(),
        "-m llama-3.2-1b --hw h200 --simulate-tiers --curve " + array.string(),
        "-m llama-3.2-1b --hw h200 --simulate-tiers --curve " + text.string(),
        std::string("-m llama-3.2-1b --hw h200 --simulate-tiers --sim-tokens 1"),
        std::string("-m llama-3.2-1b --hw h200 --simulate-tiers --sim-slack 0.05,-1")}) {
    SCOPED_TRACE(args);
    const Result r = Run(args);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("ultrafast plan: ", 0), 0u) << r.err;
    EXPECT_TRUE(r.out.empty());
  }
}

TEST_F(PlanCliTest, JsonAndSvg) {
  const fs::path svg = dir_ / "chart.svg";
  const Result r =
      Run("-m llama-3.2-1b --hw h200,wse3 --batch 1,8 --ctx 1 --json --svg " + svg.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["hardware"].size(), 2u);
  EXPECT_EQ(j["hardware"][0]["name"], "h200");
  EXPECT_NEAR(j["hardware"][0]["rows"][0]["roofline_tok_s"].get<double>(), 1941.9, 0.1);
  EXPECT_EQ(j["hardware"][0]["rows"][1]["batch"], 8);
  std::ifstream in(svg);
  std::stringstream s;
  s << in.rdbuf();
  EXPECT_EQ(s.str().rfind("<svg", 0), 0u);
  EXPECT_NE(s.str().find("wse3"), std::string::npos);
}

// The simulator through the CLI: JSON per curve and slack, the same bytes on a second run, and
// the measured curve of docs/data (tests run from the repository root).
TEST_F(PlanCliTest, SimulateTiersJsonIsDeterministic) {
  const std::string args =
      "-m llama-3.2-1b --hw h200 --batch 1 --simulate-tiers --sim-slack 0.05,0.25 --json "
      "--curve docs/data/tiers-run-e-curve.json";
  const Result a = Run(args), b = Run(args);
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  const nlohmann::json j = nlohmann::json::parse(a.out);
  const nlohmann::json& runs = j["tier_simulation"];
  ASSERT_EQ(runs.size(), 4u);  // {h200, measured} x {5%, 25%}
  EXPECT_EQ(runs[0]["curve"], "h200");
  EXPECT_EQ(runs[3]["curve"], "measured");
  for (const nlohmann::json& r : runs) {
    EXPECT_EQ(r["admitted"], 1);
    EXPECT_EQ(r["fallbacks"], 1);
    EXPECT_EQ(r["rejected_429"], 1);
    EXPECT_LE(r["itl_p50_over_solo"].get<double>(), 1 + r["slack"].get<double>());
  }
  const Result bad = Run("-m llama-3.2-1b --hw h200 --simulate-tiers --curve /nonexistent.json");
  EXPECT_EQ(bad.code, 2);
}

}  // namespace
}  // namespace uf::planner
