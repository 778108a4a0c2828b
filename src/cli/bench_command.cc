// `ultrafast bench`: prefill and decode speed of a model, set against the DRAM read bandwidth
// measured in the same run with the same threads (the decode roofline), plus aggregate decode
// throughput of several sequences decoding together (--batch).
//
// Decode at batch 1 streams every weight once per token, so tok/s can be at most
// bandwidth / bytes_per_token; roofline_fraction says how close the run came. The probe runs
// between the decode reps because the machine is shared and its bandwidth drifts.
//
// Prefill multiplies every weight by many tokens and is bound by arithmetic instead: it is set
// against the multiply-add peak of the kernels' instructions, measured in the same run
// (pp_peak_fraction).
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/thread_pool.h"
#include "cli/bench_gpu.h"
#include "cli/bench_grammar.h"
#include "cli/bench_serve.h"
#include "cli/bench_spec.h"
#include "cli/common.h"
#include "engine/kv_cache.h"
#include "kernels/matmul.h"
#include "kernels/membw.h"
#include "kernels/peak.h"
#include "model/batch.h"
#include "model/decoder.h"
#include "sampling/sampler.h"

namespace uf::cli {
namespace {

// The bandwidth probe's buffer: several times any last-level cache, small enough to fault in
// quickly (~0.1 s).
constexpr size_t kProbeBytes = size_t{512} << 20;
constexpr int kProbePasses = 5;
// Passes of the arithmetic peak probe per instruction (each a few ms; the best is kept).
constexpr int kPeakPasses = 5;
// Decode steps between single probe passes in the interleaved roofline: ~0.2 s of a 1B model's
// decode against a ~25 ms pass, so both sample the host's bandwidth over similar windows.
constexpr int64_t kInterleaveSteps = 4;

struct BenchOptions {
  std::string model;
  int64_t n_prompt = 512;
  int64_t n_gen = 128;
  int64_t batch_steps = 32;
  int threads = 0;
  int reps = 3;
  bool json = false;
  bool profile = false;    // --device vulkan: GPU time per kernel of a decode step
  std::string batch;       // "1,2,4,8"
  bool serve = false;      // bench_serve.cc instead
  bool host_only = false;  // --serve: engine::HostOnlyForward instead of the model
  bool spec = false;       // bench_spec.cc instead
  std::string grammar;     // bench_grammar.cc instead
  int spec_k = 8;
  std::string spec_draft;
  std::string spec_text;
  std::string kv_type;
  std::string device;
  int64_t depth = 0;  // tokens already in the cache before prefill and decode (llama-bench -d)
};

struct BenchResult {
  double pp_tok_s = 0, tg_tok_s = 0;
  kernels::ComputePeak peak;
  // Seconds for the prompt if every matrix ran at the peak of its kernels' instruction, and the
  // multiply-add ops/s prefill reached (PrefillFloor).
  double pp_floor_s = 0, pp_gops = 0;
  double bw_before = 0, bw_after = 0;  // probes before the first and after the last decode rep
  // Median over decode reps of the mean of the probes on either side of the rep, and of the rep's
  // streamed bytes/s over that mean.
  double bw_adjacent = 0, roofline = 0;
  // Median over segments of kInterleaveSteps decode steps of the segment's streamed bytes/s
  // over the mean of the single probe passes just before and after it, and the segment count.
  double roofline_interleaved = 0;
  int interleaved_segments = 0;
  // CPU seconds this process got during the decode runs / (wall seconds x threads): near 1 on
  // a quiet machine, well below it when other processes took the cores (the figures then
  // understate the engine).
  double tg_cpu_share = 0;
  size_t bytes_per_token = 0;                       // weights + K/V read per decode token
  size_t kv_bytes_per_token = 0;                    // of which K/V
  size_t kv_cache_bytes = 0;                        // the K/V pools (KvCache::bytes)
  size_t kv_window_bytes = 0;                       // of which the sliding-window layers'
  std::vector<std::pair<int, double>> batch_tok_s;  // (sequences, aggregate tok/s)
  // Tokens per CPU-second of the process (all threads): on a shared machine the cores are not
  // all ours, and this ratio between batch sizes is steadier than the wall-clock one.
  std::vector<std::pair<int, double>> batch_tok_per_cpu_s;
  // Bytes a batched step reads (the weights once, a mixture of experts' those its sequences are
  // expected to select together, model::BytesPerStep; each sequence's embedding row and K/V),
  // and the roofline fraction at the aggregate rate against the decode runs' bandwidth.
  std::vector<std::pair<int, double>> batch_step_bytes, batch_roofline;
};

StatusOr<std::vector<int>> ParseBatchList(const std::string& s) {
  std::vector<int> out;
  if (s.empty()) return out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 256) {
      return InvalidArgumentError("--batch: '" + item +
                                  "' is not a sequence count in [1, 256] (use e.g. 1,2,4,8)");
    }
    out.push_back(static_cast<int>(v));
  }
  return out;
}

// CPU seconds of all this process's threads so far (precise, unlike getrusage's tick-based
// accounting, which read 2% for a 10 ms decode run).
double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// Multiply-add ops (2 per weight) of a prefill of n_prompt tokens, and the seconds they take at
// the peak of the instruction each matrix's kernels are built on. Every layer matrix runs for
// every prompt token, the output matrix for the last one only (the prefill asks for one row of
// logits). Attention's own products are left out: under 2% of a 1B-shape token at 512
// positions.
void PrefillFloor(const model::ModelWeights& w, const kernels::ComputePeak& p, int64_t n_prompt,
                  int64_t n_expert_used, double* ops, double* seconds) {
  *ops = 0;
  *seconds = 0;
  auto add = [&](const kernels::Matrix& m, int64_t tokens) {
    const double n = 2.0 * static_cast<double>(m.rows()) * static_cast<double>(m.cols()) *
                     static_cast<double>(tokens);
    double gops = p.int8_gops;
    if (m.type() == GgmlType::kF32 || m.type() == GgmlType::kF16) gops = p.f32_gflops;
    if (m.type() == GgmlType::kBF16) gops = p.bf16_gflops;
    *ops += n;
    *seconds += gops > 0 ? n / (gops * 1e9) : 0.0;
  };
  for (const model::LayerWeights& l : w.layers) {
    for (const kernels::Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down}) {
      add(*m, n_prompt);
    }
    // Experts: each token runs k of them; a prompt's tokens spread over the experts.
    if (!l.exp_gate.empty()) {
      add(l.router, n_prompt);
      const int64_t k = n_expert_used;
      for (const kernels::Matrix* m : {&l.exp_gate[0], &l.exp_up[0], &l.exp_down[0]}) {
        add(*m, n_prompt * k);
      }
    }
  }
  add(w.output, 1);
}

// Deterministic prompt token ids (content does not change the cost of a forward pass).
std::vector<int32_t> PromptTokens(int64_t n, int64_t n_vocab) {
  std::vector<int32_t> t(n);
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (auto& x : t) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(n_vocab));
  }
  return t;
}

class BenchRunner {
 public:
  // depth: tokens each sequence holds before every measured prefill or decode.
  BenchRunner(const model::Model& m, engine::KvCache* cache, model::Decoder* d, int64_t depth)
      : m_(m), cache_(cache), d_(d), depth_(depth) {}

  // Brings sequence s back to `depth` cached tokens: computed once (untimed, in chunks of the
  // decoder's batch), then only truncated back to it.
  Status ResetToDepth(int s) {
    if (filled_.size() <= static_cast<size_t>(s)) filled_.resize(s + 1, false);
    if (depth_ == 0 || !filled_[s]) cache_->Remove(s);
    if (depth_ == 0) return OkStatus();
    if (filled_[s]) {
      cache_->Truncate(s, depth_);
      return OkStatus();
    }
    const std::vector<int32_t> fill = PromptTokens(depth_, m_.config().n_vocab);
    const int64_t chunk = d_->options().max_batch;
    for (int64_t i = 0; i < depth_; i += chunk) {
      batch_.Clear();
      for (int64_t j = i; j < std::min(depth_, i + chunk); ++j) {
        batch_.Add(fill[j], static_cast<int32_t>(j), s, false);
      }
      UF_RETURN_IF_ERROR(d_->Forward(batch_));
    }
    filled_[s] = true;
    return OkStatus();
  }

  // Seconds for one prefill of `tokens` into sequence 0 after `depth` tokens (logits of the
  // last token).
  StatusOr<double> Prefill(const std::vector<int32_t>& tokens) {
    UF_RETURN_IF_ERROR(ResetToDepth(0));
    batch_.Clear();
    for (size_t i = 0; i < tokens.size(); ++i) {
      batch_.Add(tokens[i], static_cast<int32_t>(depth_ + i), 0, i + 1 == tokens.size());
    }
    const double t0 = NowSeconds();
    UF_RETURN_IF_ERROR(d_->Forward(batch_));
    return NowSeconds() - t0;
  }

  // Seconds for n greedy decode steps of n_seqs sequences starting from empty caches (as
  // llama-bench's tg does), each step feeding every sequence its previous argmax. The first
  // step is untimed warm-up (it pays page faults of the scratch buffers). *cpu_seconds gets
  // the process CPU time of the timed steps. `before_step`, when set, runs before each timed
  // step 1..n and once more after the last with n + 1, inside the timed span.
  StatusOr<double> Decode(int n_seqs, int64_t n, double* cpu_seconds,
                          const std::function<void(int64_t)>& before_step = {}) {
    for (int s = 0; s < n_seqs; ++s) UF_RETURN_IF_ERROR(ResetToDepth(s));
    std::vector<int32_t> next(n_seqs, 1);
    double t0 = 0, cpu0 = 0;
    for (int64_t step = 0; step <= n; ++step) {
      if (step == 1) {
        t0 = NowSeconds();
        cpu0 = ProcessCpuSeconds();
      }
      if (step >= 1 && before_step) before_step(step);
      batch_.Clear();
      for (int s = 0; s < n_seqs; ++s) {
        batch_.Add(next[s], static_cast<int32_t>(depth_ + step), s, true);
      }
      UF_RETURN_IF_ERROR(d_->Forward(batch_));
      for (int s = 0; s < n_seqs; ++s) {
        next[s] = sampling::ArgMax(d_->logits(s), m_.config().n_vocab);
      }
    }
    if (n >= 1 && before_step) before_step(n + 1);
    *cpu_seconds = ProcessCpuSeconds() - cpu0;
    return NowSeconds() - t0;
  }

 private:
  const model::Model& m_;
  engine::KvCache* cache_;
  model::Decoder* d_;
  int64_t depth_;
  std::vector<bool> filled_;  // [seq] holds the depth tokens
  model::Batch batch_;
};

Status RunBench(const BenchOptions& o, const LoadedModel& loaded, ThreadPool* pool,
                BenchResult* r) {
  const model::Model& m = *loaded.model;
  const model::ModelConfig& c = m.config();
  UF_ASSIGN_OR_RETURN(std::vector<int> batches, ParseBatchList(o.batch));
  if (o.n_prompt < 0 || o.n_gen < 0 || o.batch_steps < 1 || o.reps < 1 || o.depth < 0) {
    return InvalidArgumentError("-p, -n, --depth must be >= 0; --batch-steps, --reps >= 1");
  }
  const int max_seqs =
      std::max(1, batches.empty() ? 1 : *std::max_element(batches.begin(), batches.end()));
  const int64_t seq_len =
      o.depth + std::max({o.n_prompt, o.n_gen + 1, o.batch_steps + 1, int64_t{1}});
  if (seq_len > c.n_ctx_train) {
    return InvalidArgumentError("bench: " + std::to_string(seq_len) +
                                " positions exceed the model's context of " +
                                std::to_string(c.n_ctx_train));
  }
  model::DecoderOptions dopts;
  // The depth is filled in chunks of up to 512 tokens.
  dopts.max_batch = std::max<int64_t>({o.n_prompt, max_seqs, o.depth > 0 ? 512 : 1});
  engine::KvCacheOptions co =
      CacheOptionsFor(c, seq_len, KvTypeOrDie("bench", o.kv_type), max_seqs);
  // Every rep is rewound to the depth: the windowed layers keep what lies past it.
  model::UseSlidingWindowPool(c, dopts.max_batch + seq_len - o.depth, &co);
  UF_ASSIGN_OR_RETURN(std::unique_ptr<engine::KvCache> cache, engine::KvCache::Create(co));
  dopts.max_outputs = max_seqs;
  UF_ASSIGN_OR_RETURN(std::unique_ptr<model::Decoder> decoder,
                      model::Decoder::Create(m, cache.get(), dopts, pool));
  BenchRunner bench(m, cache.get(), decoder.get(), o.depth);

  if (o.n_prompt > 0) {
    // The peak is probed before and after the prefill reps and the higher figure kept: a pass
    // that shares its core with another tenant reads half the peak, and that would flatter the
    // fraction.
    const kernels::ComputePeak before =
        kernels::MeasureComputePeak(pool, kernels::ActiveIsa(), kPeakPasses);
    const std::vector<int32_t> prompt = PromptTokens(o.n_prompt, c.n_vocab);
    UF_RETURN_IF_ERROR(bench.Prefill(prompt).status());  // warm-up
    std::vector<double> rates;
    for (int i = 0; i < o.reps; ++i) {
      UF_ASSIGN_OR_RETURN(double s, bench.Prefill(prompt));
      rates.push_back(o.n_prompt / s);
    }
    r->pp_tok_s = Median(rates);
    r->peak = kernels::MeasureComputePeak(pool, kernels::ActiveIsa(), kPeakPasses);
    r->peak.f32_gflops = std::max(r->peak.f32_gflops, before.f32_gflops);
    r->peak.bf16_gflops = std::max(r->peak.bf16_gflops, before.bf16_gflops);
    r->peak.int8_gops = std::max(r->peak.int8_gops, before.int8_gops);
    double ops = 0;
    PrefillFloor(m.weights(), r->peak, o.n_prompt, m.config().n_expert_used, &ops, &r->pp_floor_s);
    r->pp_gops = r->pp_tok_s / o.n_prompt * ops / 1e9;
  }

  // Weights of every matrix, one embedding row, and the K/V rows attention reads (a decode step
  // at position p reads p + 1 of them per layer, in the cache's type; averaged over the decode
  // run, after the depth).
  // Sliding-window layers read at most their window (in their own pool or not).
  const double kv_row = static_cast<double>(cache->bytes_per_token());
  const double swa_row = static_cast<double>(cache->swa_bytes_per_token());
  const double avg_pos = static_cast<double>(o.depth) + (o.n_gen + 1) / 2.0;
  const double avg_kv =
      kv_row * avg_pos + swa_row * std::min(avg_pos, static_cast<double>(c.n_swa));
  r->kv_bytes_per_token = static_cast<size_t>(o.n_gen > 0 ? avg_kv : 0.0);
  r->kv_cache_bytes = cache->bytes();
  r->kv_window_bytes = cache->swa_bytes();
  r->bytes_per_token = m.bytes_per_token() + m.weights().token_embd_row_bytes +
                       static_cast<size_t>(o.n_gen > 0 ? avg_kv : 0.0);

  // The probe runs before the first decode rep and after every rep, and each rep is set against
  // the mean of the probes on either side of it: on a host whose bandwidth moves by +-30% within
  // minutes (other tenants), probes taken only before and after the whole run put the fraction
  // anywhere between 0.6 and 1.3 for the same binary.
  kernels::ReadBandwidthProbe probe(kProbeBytes);
  r->bw_before = probe.BestGBs(pool, kProbePasses);
  if (o.n_gen > 0) {
    std::vector<double> rates, adjacent_bw, fractions;
    double wall = 0, cpu = 0, previous_bw = r->bw_before;
    for (int i = 0; i < o.reps; ++i) {
      double c_s = 0;
      UF_ASSIGN_OR_RETURN(double s, bench.Decode(1, o.n_gen, &c_s));
      const double rate = o.n_gen / s;
      rates.push_back(rate);
      wall += s;
      cpu += c_s;
      const double next_bw = probe.BestGBs(pool, 2);
      const double bw = 0.5 * (previous_bw + next_bw);
      adjacent_bw.push_back(bw);
      fractions.push_back(bw > 0 ? r->bytes_per_token * rate / (bw * 1e9) : 0.0);
      previous_bw = next_bw;
    }
    r->tg_tok_s = Median(rates);
    r->tg_cpu_share = cpu / (wall * pool->size());
    r->bw_adjacent = Median(adjacent_bw);
    r->roofline = Median(fractions);
    r->bw_after = previous_bw;
    // The interleaved estimate: one more run, a single probe pass before every kInterleaveSteps
    // steps and after the last; each segment's streamed bytes/s over the mean of the passes
    // around it.
    std::vector<double> segments;
    double segment_bw = 0, segment_t0 = 0;
    int64_t segment_first = 1;
    auto at_step = [&](int64_t step) {
      if ((step - 1) % kInterleaveSteps != 0 && step != o.n_gen + 1) return;
      const double now = NowSeconds();
      const double bw = probe.BestGBs(pool, 1);
      if (step > 1) {
        const double mean_bw = 0.5 * (segment_bw + bw);
        segments.push_back(r->bytes_per_token * (step - segment_first) / (now - segment_t0) /
                           (mean_bw * 1e9));
      }
      segment_bw = bw;
      segment_first = step;
      segment_t0 = NowSeconds();
    };
    double ignored_cpu = 0;
    UF_RETURN_IF_ERROR(bench.Decode(1, o.n_gen, &ignored_cpu, at_step).status());
    r->roofline_interleaved = Median(segments);
    r->interleaved_segments = static_cast<int>(segments.size());
  } else {
    r->bw_after = r->bw_before;
    r->bw_adjacent = r->bw_before;
  }

  for (int b : batches) {
    std::vector<double> rates;
    double cpu = 0;
    for (int i = 0; i < o.reps; ++i) {
      double c_s = 0;
      UF_ASSIGN_OR_RETURN(double s, bench.Decode(b, o.batch_steps, &c_s));
      rates.push_back(b * o.batch_steps / s);
      cpu += c_s;
    }
    r->batch_tok_s.emplace_back(b, Median(rates));
    // Positions depth + 1 .. depth + batch_steps are timed; each reads its K/V rows up to it.
    const double pos = static_cast<double>(o.depth) + (o.batch_steps + 1) / 2.0;
    const double per_seq = static_cast<double>(m.weights().token_embd_row_bytes) + kv_row * pos +
                           swa_row * std::min(pos, static_cast<double>(c.n_swa));
    const double step_bytes = model::BytesPerStep(m.weights(), c, b) + b * per_seq;
    r->batch_step_bytes.emplace_back(b, step_bytes);
    r->batch_roofline.emplace_back(
        b, r->bw_adjacent > 0 ? Median(rates) / b * step_bytes / (r->bw_adjacent * 1e9) : 0.0);
    r->batch_tok_per_cpu_s.emplace_back(
        b, cpu > 0 ? static_cast<double>(b) * o.batch_steps * o.reps / cpu : 0.0);
  }
  for (int s = 0; s < max_seqs; ++s) cache->Remove(s);
  return OkStatus();
}

std::string WeightType(const model::Model& m) {
  // The type of most of the bytes: the FFN matrices (Q4_K_M files mix Q4_K and Q6_K).
  const auto& l = m.weights().layers;
  if (l.empty()) return "?";
  return std::string(
      GgmlTypeName(l[0].exp_gate.empty() ? l[0].gate.type() : l[0].exp_gate[0].type()));
}

void BenchCommand(const BenchOptions& o) {
  auto loaded = LoadModel(o.model);
  if (!loaded.ok()) Fail("bench", loaded.status());
  const int threads = ResolveThreads(o.threads);
  ThreadPool pool(threads);
  BenchResult r;
  if (Status s = RunBench(o, *loaded, &pool, &r); !s.ok()) Fail("bench", s);

  const double bw = r.bw_adjacent;
  const double roofline = r.roofline;
  const model::Model& m = *loaded->model;
  const std::string isa = kernels::IsaName(kernels::ActiveIsa());
  if (o.json) {
    nlohmann::json j;
    j["model"] = o.model;
    j["architecture"] = m.config().architecture_name;
    j["type"] = WeightType(m);
    j["threads"] = threads;
    j["isa"] = isa;
    j["load_seconds"] = loaded->load_seconds;
    j["n_prompt"] = o.n_prompt;
    j["n_gen"] = o.n_gen;
    j["depth"] = o.depth;
    j["kv_type"] = o.kv_type;
    j["kv_bytes_per_token"] = r.kv_bytes_per_token;
    j["kv_cache_bytes"] = r.kv_cache_bytes;
    j["kv_window_bytes"] = r.kv_window_bytes;
    j["reps"] = o.reps;
    j["pp_tok_s"] = r.pp_tok_s;
    j["pp_gops"] = r.pp_gops;
    j["pp_peak_fraction"] = r.pp_tok_s / o.n_prompt * r.pp_floor_s;
    j["peak_f32_gflops"] = r.peak.f32_gflops;
    j["peak_bf16_gflops"] = r.peak.bf16_gflops;
    j["peak_int8_gops"] = r.peak.int8_gops;
    j["peak_int8_op"] = r.peak.int8_op;
    j["tg_tok_s"] = r.tg_tok_s;
    j["us_per_token"] = r.tg_tok_s > 0 ? 1e6 / r.tg_tok_s : 0.0;
    j["bytes_per_token"] = r.bytes_per_token;
    j["bandwidth_gb_s"] = bw;
    j["bandwidth_before_gb_s"] = r.bw_before;
    j["bandwidth_after_gb_s"] = r.bw_after;
    j["roofline_fraction"] = roofline;
    j["roofline_fraction_interleaved"] = r.roofline_interleaved;
    j["interleaved_segments"] = r.interleaved_segments;
    j["tg_cpu_share"] = r.tg_cpu_share;
    nlohmann::json batch = nlohmann::json::object();
    for (const auto& [b, v] : r.batch_tok_s) batch[std::to_string(b)] = v;
    j["batch_steps"] = o.batch_steps;
    j["batch_tok_s"] = batch;
    nlohmann::json per_cpu = nlohmann::json::object();
    for (const auto& [b, v] : r.batch_tok_per_cpu_s) per_cpu[std::to_string(b)] = v;
    j["batch_tok_per_cpu_s"] = per_cpu;
    nlohmann::json step_bytes = nlohmann::json::object(), batch_roofline = nlohmann::json::object();
    for (const auto& [b, v] : r.batch_step_bytes) step_bytes[std::to_string(b)] = v;
    for (const auto& [b, v] : r.batch_roofline) batch_roofline[std::to_string(b)] = v;
    j["batch_step_bytes"] = step_bytes;
    j["batch_roofline"] = batch_roofline;
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("model      %s (%s, %s weights)\n", o.model.c_str(),
              m.config().architecture_name.c_str(), WeightType(m).c_str());
  std::printf("threads    %d, %s kernels, load %.2f s\n", threads, isa.c_str(),
              loaded->load_seconds);
  std::printf("depth      %lld tokens in the cache before each measurement (%s K/V)\n",
              static_cast<long long>(o.depth), o.kv_type.c_str());
  std::printf("kv cache   %.1f MiB", r.kv_cache_bytes / (1024.0 * 1024.0));
  if (r.kv_window_bytes > 0) {
    std::printf(" (sliding-window layers: %.2f MiB of it)", r.kv_window_bytes / (1024.0 * 1024.0));
  }
  std::printf("\n");
  if (o.n_prompt > 0) {
    std::printf("prefill    %8.1f tok/s  (%lld-token prompt, median of %d)\n", r.pp_tok_s,
                static_cast<long long>(o.n_prompt), o.reps);
    std::printf("           %.2f  of the arithmetic peak (%.0f G multiply-add ops/s)\n",
                r.pp_tok_s / o.n_prompt * r.pp_floor_s, r.pp_gops);
    std::printf("peak       %.0f GFLOP/s f32 (%s), %.0f bf16 (%s), %.0f GOP/s int8 (%s)\n",
                r.peak.f32_gflops, r.peak.f32_op.c_str(), r.peak.bf16_gflops,
                r.peak.bf16_op.c_str(), r.peak.int8_gops, r.peak.int8_op.c_str());
  }
  if (o.n_gen > 0) {
    std::printf("decode     %8.1f tok/s  (%.1f us/token, %lld tokens, median of %d)\n", r.tg_tok_s,
                1e6 / r.tg_tok_s, static_cast<long long>(o.n_gen), o.reps);
    std::printf("cpu share  %.2f  (CPU time / (wall x threads) while decoding; < 1: contended)\n",
                r.tg_cpu_share);
  }
  std::printf("bytes/tok  %.1f MB (of which K/V %.1f MB)\n", r.bytes_per_token / 1e6,
              r.kv_bytes_per_token / 1e6);
  std::printf("bandwidth  %.1f GB/s  (median beside the decode reps; first %.1f, last %.1f)\n", bw,
              r.bw_before, r.bw_after);
  if (o.n_gen > 0) {
    std::printf("roofline   %.2f  (decode %.1f GB/s of weights)\n", roofline,
                r.bytes_per_token * r.tg_tok_s / 1e9);
    std::printf(
        "           %.2f  interleaved: median of %d segments of %lld steps, each against "
        "single probe passes on either side\n",
        r.roofline_interleaved, r.interleaved_segments, static_cast<long long>(kInterleaveSteps));
  }
  if (!r.batch_tok_s.empty()) {
    // Speed-up against one sequence measured in the same --batch sweep (not the decode
    // figure above, which ran at another moment of a possibly shared machine).
    double base = 0;
    for (const auto& [b, v] : r.batch_tok_s) {
      if (b == 1) base = v;
    }
    std::printf("\n%6s %14s %10s %16s %14s %9s\n", "seqs", "agg tok/s", "vs 1 seq",
                "tok/CPU-second", "MB per step", "roofline");
    for (size_t i = 0; i < r.batch_tok_s.size(); ++i) {
      const auto [b, v] = r.batch_tok_s[i];
      const double per_cpu = r.batch_tok_per_cpu_s[i].second;
      char vs[32] = "-";
      if (base > 0) std::snprintf(vs, sizeof(vs), "%.2fx", v / base);
      std::printf("%6d %14.1f %10s %16.1f %14.1f %8.1f%%\n", b, v, vs, per_cpu,
                  r.batch_step_bytes[i].second / 1e6, 100.0 * r.batch_roofline[i].second);
    }
  }
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Measure prefill/decode speed against the same-run DRAM read bandwidth");
  cmd->add_option("-m,--model", o->model, "GGUF file")->required();
  cmd->add_option("-p,--prompt-tokens", o->n_prompt, "Prompt length for prefill (0: skip)")
      ->capture_default_str();
  cmd->add_option("-n,--gen-tokens", o->n_gen, "Tokens to decode (0: skip)")->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "Threads (0: all CPUs)")->capture_default_str();
  AddKvTypeOption(cmd, &o->kv_type);
  AddDeviceOption(cmd, &o->device);
  cmd->add_option("-d,--depth", o->depth,
                  "Tokens already in the cache before prefill and decode (as llama-bench -d); "
                  "bytes/token and the roofline count their K/V")
      ->capture_default_str();
  cmd->add_option("--batch", o->batch,
                  "Sequence counts decoding together, e.g. 1,2,4,8,16 (aggregate tok/s each)");
  cmd->add_option("--batch-steps", o->batch_steps, "Decode steps per --batch measurement")
      ->capture_default_str();
  cmd->add_option("--reps", o->reps, "Repetitions of each measurement (the median is printed)")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object instead of the table");
  cmd->add_flag("--profile", o->profile,
                "--device vulkan: also the GPU time of each kernel in a one-token decode step "
                "(a separate run with a timestamp after every dispatch)");
  cmd->add_flag("--serve", o->serve,
                "One stream through the serving engine and HTTP against the engine alone, at "
                "temperature 0 and 1 (-p default 32, --reps default 5)");
  cmd->add_flag("--host-only", o->host_only,
                "--serve: every path stepped on a forward that computes nothing (made-up rows, "
                "reduced as a GPU reduces them): what the serving path itself costs per token");
  cmd->add_flag("--spec", o->spec,
                "Greedy decode with and without speculative decoding on three workloads (edit, "
                "extract, open) plus oracle drafts (-n default 128)");
  cmd->add_option("--spec-k", o->spec_k, "--spec: drafts per step at most")->capture_default_str();
  cmd->add_option("--spec-draft", o->spec_draft, "--spec: also measure this draft model");
  cmd->add_option("--spec-text", o->spec_text,
                  "--spec: passages for the prompts (default ../shared/data/tinyshakespeare.txt)");
  cmd->add_option("--grammar", o->grammar,
                  "Decode with and without the token mask of this JSON schema file "
                  "({\"type\": \"json_object\"} for JSON mode), temperature 1 (-n default 128)");
  cmd->callback([o, cmd] {
    const gpu::DeviceSpec device = DeviceOrDie("bench", o->device);
    if (device.vulkan && o->grammar.empty() && !o->spec && !o->serve) {
      GpuBenchOptions go;
      go.model = o->model;
      go.device = device;
      go.n_prompt = o->n_prompt;
      go.n_gen = o->n_gen;
      go.depth = o->depth;
      go.reps = o->reps;
      go.json = o->json;
      go.profile = o->profile;
      auto batch = ParseBatchList(o->batch);
      if (!batch.ok()) Fail("bench", batch.status());
      go.batch = *batch;
      go.batch_steps = o->batch_steps;
      std::exit(GpuBench(go));
    }
    if (!o->grammar.empty()) {
      GrammarBenchOptions go;
      go.model = o->model;
      go.grammar_file = o->grammar;
      go.n_gen = o->n_gen;
      go.threads = o->threads;
      go.reps = o->reps;
      go.json = o->json;
      go.kv_type = KvTypeOrDie("bench", o->kv_type);
      go.device = device;
      std::exit(GrammarBench(go));
    }
    if (o->spec) {
      SpecBenchOptions so;
      so.model = o->model;
      so.draft = o->spec_draft;
      if (!o->spec_text.empty()) so.text = o->spec_text;
      so.n_gen = o->n_gen;
      so.spec_k = o->spec_k;
      so.threads = o->threads;
      so.reps = o->reps;
      so.json = o->json;
      so.kv_type = KvTypeOrDie("bench", o->kv_type);
      so.device = device;
      std::exit(SpecBench(so));
    }
    if (!o->serve) return BenchCommand(*o);
    ServeBenchOptions so;
    so.model = o->model;
    so.n_prompt = cmd->count("-p") ? o->n_prompt : so.n_prompt;
    so.n_gen = o->n_gen;
    so.threads = o->threads;
    so.reps = cmd->count("--reps") ? o->reps : so.reps;
    so.json = o->json;
    so.kv_type = KvTypeOrDie("bench", o->kv_type);
    so.device = device;
    so.host_only = o->host_only;
    std::exit(ServeBench(so));
  });
}

}  // namespace uf::cli
