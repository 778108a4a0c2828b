#include "cli/bench_gpu.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <tuple>
#include <vector>

#include "base/clock.h"
#include "cli/common.h"
#include "engine/kv_cache.h"
#include "engine/seq_sampler.h"
#include "model/batch.h"
#include "model/weights.h"

namespace uf::cli {

namespace {

// run's default filters (T 0.8, top-k 40, top-p 0.95, min-p 0.05) with a seed: the bench's
// sampled chains draw with them (a random-weight model's flat rows would leave a sampler
// without top-k undecided).
sampling::SamplingParams RunDefaults(uint64_t seed) {
  sampling::SamplingParams sp;
  sp.temperature = 0.8f;
  sp.top_k = 40;
  sp.top_p = 0.95f;
  sp.min_p = 0.05f;
  sp.seed = seed;
  return sp;
}

// Aggregate tok/s of `streams` sampled streams (sequences 0 .. streams - 1, each holding
// n_prompt positions) chained as one decode batch (ForwardSampledChains) for n_gen tokens each,
// with run's default filters (T 0.8, top-k 40, top-p 0.95, min-p 0.05: a random-weight model's
// flat rows would leave a sampler without top-k undecided) and a seed per stream. An overruled
// draw costs its stream a step and the chain goes on; each chain runs until the stream furthest
// along has n_gen tokens, and the next starts where each stream is.
double BatchChainTokS(gpu::GpuForward& d, const model::Model& m, int streams, int64_t n_prompt,
                      int64_t n_gen, const std::function<int32_t(int64_t)>& token) {
  std::vector<sampling::Sampler> samplers;
  for (int s = 0; s < streams; ++s) {
    samplers.emplace_back(RunDefaults(1000 + static_cast<uint64_t>(s)),
                          static_cast<int32_t>(m.config().n_vocab));
  }
  std::vector<int32_t> next(streams);
  std::vector<int64_t> done(streams, 0);
  for (int s = 0; s < streams; ++s) next[s] = token(n_prompt + s);
  std::vector<std::vector<float>> uniforms(streams);
  std::vector<model::ChainStream> cs(streams);
  std::vector<int64_t> draws(streams);  // each sampler's draws as the chain starts
  int64_t total = 0;
  const double t0 = NowSeconds();
  for (;;) {
    const int64_t most = *std::max_element(done.begin(), done.end());
    const int64_t left = std::min(n_gen - most, model::kMaxSampledChainSteps);
    if (left <= 0) break;
    for (int s = 0; s < streams; ++s) {
      cs[s].seq = s;
      cs[s].token = next[s];
      cs[s].pos = static_cast<int32_t>(n_prompt + done[s]);
      cs[s].draw = engine::ChainDrawFor(samplers[s], left, &uniforms[s]);
      draws[s] = samplers[s].draws();
    }
    // Top-k rows are always decided (no -1).
    auto taken = d.ForwardSampledChains(
        cs, left,
        [&](int64_t i, const model::TopRow& row, const float*, int32_t, model::ChainTurn* turn) {
          next[i] = engine::SampleFromTop(samplers[i], row);
          samplers[i].Accept(next[i]);
          ++done[i];
          turn->draws = samplers[i].draws() - draws[i];
          return next[i];
        });
    if (!taken.ok()) Fail("bench", taken.status());
    int64_t steps = 0;
    for (int64_t t : *taken) steps += t;
    if (steps == 0) break;  // not expected with top-k
    total += steps;
  }
  return static_cast<double>(total) / (NowSeconds() - t0);
}

}  // namespace

int GpuBench(const GpuBenchOptions& o) {
  auto loaded = LoadModel(o.model);
  if (!loaded.ok()) Fail("bench", loaded.status());
  const model::Model& m = *loaded->model;
  const int64_t n_vocab = m.config().n_vocab;
  int max_streams = 1;
  for (int b : o.batch) max_streams = std::max(max_streams, b);
  const int64_t ctx = std::max<int64_t>(
      o.depth + o.n_prompt + std::max(o.n_gen, o.batch.empty() ? 0 : o.batch_steps), 1);
  // One cache (block tables only; K/V on the device) for every stream of the batched runs;
  // stream 0 runs the single-stream figures.
  engine::KvCacheOptions co;
  co.n_layer = m.config().n_layer;
  co.n_head_kv = m.config().n_head_kv;
  co.head_dim = m.config().head_dim;
  co.max_seqs = max_streams;
  co.max_seq_len = ctx;
  co.n_blocks = engine::KvCacheOptions::BlocksFor(ctx * max_streams, max_streams, co.block_size);
  co.type = engine::KvType::kF16;
  co.host_storage = false;
  auto cache = engine::KvCache::Create(co);
  if (!cache.ok()) Fail("bench", cache.status());
  const int64_t chunk = std::clamp<int64_t>(std::max(o.n_prompt, o.depth), 1, 512);
  const double t_up = NowSeconds();
  const gpu::GpuForwardOptions fo{.max_batch = std::max<int64_t>(chunk, max_streams),
                                  .max_outputs = max_streams};
  auto fwd = gpu::GpuForward::Create(m, o.device, cache->get(), fo);
  if (!fwd.ok()) Fail("bench", fwd.status());
  const double upload_s = NowSeconds() - t_up;
  gpu::GpuForward* d = fwd->get();  // the profiled forward replaces it at the end (--profile)

  // Tokens: a fixed pseudo-random walk over the vocabulary (the content does not change the
  // work of a step).
  const auto token = [&](int64_t i) {
    return static_cast<int32_t>((i * 7919 + 13) % std::max<int64_t>(n_vocab - 1, 1) + 1);
  };
  model::Batch batch;
  bool trial = false;  // a step since the flag was cleared was a tuner's trial
  const auto run = [&] {
    if (Status s = d->Forward(batch); !s.ok()) Fail("bench", s);
    trial = trial || d->last_step_trial();
  };
  // Runs `pass` untimed until a pass has no tuner trial in it (GpuForward::last_step_trial; at
  // most kSettlePasses), so that the timed passes after it run what the tuners chose: a prefill
  // of one 512-token batch is one step a pass, and a class takes 2 x 3 trial steps.
  constexpr int kSettlePasses = 16;
  const auto settle = [&](const std::function<void()>& pass) {
    for (int i = 0; i < kSettlePasses; ++i) {
      trial = false;
      pass();
      if (!trial) return;
    }
  };
  // Positions [from, from + n) of stream seq, in batches of `chunk`, logits for the last.
  const auto prefill = [&](int seq, int64_t from, int64_t n) {
    for (int64_t i = from; i < from + n; i += chunk) {
      batch.Clear();
      const int64_t end = std::min(from + n, i + chunk);
      for (int64_t p = i; p < end; ++p) {
        batch.Add(token(p), static_cast<int32_t>(p), seq, p + 1 == end);
      }
      run();
    }
  };
  prefill(0, 0, o.depth);
  // tok/s: wall clock; GPU time alone (timestamps); wall clock with the arg-max on the device
  std::vector<double> pp, tg, tg_gpu, tg_argmax, tg_chain, tg_sampled, tg_penalized;
  int step_dispatches = 0, step_barriers = 0;  // of a one-token decode step (logits back)
  // The n_gen one-token steps after the prompt, their GPU time added to *gpu_s.
  const auto decode = [&](double* gpu_s) {
    for (int64_t i = o.depth + o.n_prompt; i < o.depth + o.n_prompt + o.n_gen; ++i) {
      batch.Clear();
      batch.Add(token(i), static_cast<int32_t>(i), 0, true);
      run();
      *gpu_s += d->last_step_gpu_seconds();
    }
  };
  if (o.n_prompt > 0) settle([&] { prefill(0, o.depth, o.n_prompt); });
  double untimed_s = 0.0;
  if (o.n_gen > 0) settle([&] { decode(&untimed_s); });
  for (int rep = 0; rep < std::max(o.reps, 1); ++rep) {
    if (o.n_prompt > 0) {
      const double t0 = NowSeconds();
      prefill(0, o.depth, o.n_prompt);
      pp.push_back(o.n_prompt / (NowSeconds() - t0));
    }
    if (o.n_gen > 0) {
      double gpu_s = 0.0;
      const double t0 = NowSeconds();
      decode(&gpu_s);
      tg.push_back(o.n_gen / (NowSeconds() - t0));
      step_dispatches = d->last_step_dispatches();
      step_barriers = d->last_step_barriers();
      tg_gpu.push_back(gpu_s > 0 ? o.n_gen / gpu_s : 0.0);
      // The same positions again, greedy with the arg-max on the device (no logits copied).
      const double t1 = NowSeconds();
      for (int64_t i = o.depth + o.n_prompt; i < o.depth + o.n_prompt + o.n_gen; ++i) {
        batch.Clear();
        batch.Add(token(i), static_cast<int32_t>(i), 0, true);
        int32_t next = 0;
        if (Status s = d->ForwardGreedy(batch, &next); !s.ok()) Fail("bench", s);
      }
      tg_argmax.push_back(o.n_gen / (NowSeconds() - t1));
      // Again, chained: each step's arg-max fed to the next on the device, the next step queued
      // while one runs (no host round trip between steps; the tokens are the model's greedy
      // ones rather than the walk, the same work a step).
      const auto first = static_cast<int32_t>(o.depth + o.n_prompt);
      const double t2 = NowSeconds();
      auto steps =
          d->ForwardGreedyChain(0, token(first), first, o.n_gen, [](int32_t) { return true; });
      if (!steps.ok()) Fail("bench", steps.status());
      tg_chain.push_back(o.n_gen / (NowSeconds() - t2));
      // Again, sampled and chained with run's default filters (T 0.8, top-k 40, top-p 0.95,
      // min-p 0.05; a random-weight model's flat rows would leave a sampler without top-k
      // undecided): each token drawn from the row's best 64 on the device and checked by the
      // host's sampler, as `run --temp 0.8` and a served stream take them. A draw the sampler
      // overrules ends a chain; the next starts where it did.
      // Again with OpenAI's presence and frequency penalties (0.5, 0.5; the window every
      // generated token, as the server sets it): each row edited on the device first
      // (edit_rows.comp), the edited tokens merged into the draw.
      for (const bool penalized : {false, true}) {
        sampling::SamplingParams sp = RunDefaults(static_cast<uint64_t>(rep));
        if (penalized) {
          sp.presence_penalty = 0.5f;
          sp.frequency_penalty = 0.5f;
          sp.penalty_last_n = static_cast<int32_t>(std::min<int64_t>(o.n_gen, 1 << 20));
        }
        sampling::Sampler sampler(sp, static_cast<int32_t>(m.config().n_vocab));
        std::vector<float> uniforms;
        engine::ChainEditsHeld held;
        int64_t done = 0;
        int32_t next = token(first);
        const double t3 = NowSeconds();
        while (d->chains_sampled() && done < o.n_gen) {
          int64_t n = std::min(o.n_gen - done, model::kMaxSampledChainSteps);
          n = std::min(n, engine::ChainKnownRoom(sampler, d->chain_known_capacity()));
          if (n < 1) break;  // the window's distinct tokens fill the device's list
          const model::ChainDraw draw = engine::ChainDrawFor(sampler, n, &uniforms);
          // Top-k rows are always decided (no -1).
          const auto decide = [&](const model::TopRow& row, const float*, int32_t, bool*) {
            next = engine::SampleFromTop(sampler, row);
            sampler.Accept(next);
            return next;
          };
          auto taken = d->ForwardSampledChain(0, next, static_cast<int32_t>(first + done), n, draw,
                                              decide, {}, engine::ChainEditsFor(sampler, &held));
          if (!taken.ok()) Fail("bench", taken.status());
          if (*taken == 0) break;  // not expected with top-k
          done += *taken;
        }
        (penalized ? tg_penalized : tg_sampled).push_back(done / (NowSeconds() - t3));
      }
    }
  }
  // Batched decode: B streams, each with an n_prompt-token prompt, then batch_steps steps of one
  // token per stream (--batch-steps, as the CPU bench);
  // aggregate tok/s (wall clock) and GPU time alone. Then the same steps as the serving engine
  // chains a batch of sampled streams (ForwardSampledChains, run's default filters, a seed per
  // stream): each row's draw fed to its row of the next step on the device.
  std::vector<std::tuple<int, double, double>> batched;
  std::vector<double> batched_sampled;  // [batched] aggregate tok/s chained; 0: not run
  for (int streams : o.batch) {
    for (int s = 0; s < max_streams; ++s) (*cache)->Remove(s);
    for (int s = 0; s < streams; ++s) prefill(s, 0, o.n_prompt);
    settle([&] {
      for (int64_t i = o.n_prompt; i < o.n_prompt + o.batch_steps; ++i) {
        batch.Clear();
        for (int s = 0; s < streams; ++s) batch.Add(token(i + s), static_cast<int32_t>(i), s, true);
        run();
      }
    });
    double gpu_s = 0.0;
    const double t0 = NowSeconds();
    for (int64_t i = o.n_prompt; i < o.n_prompt + o.batch_steps; ++i) {
      batch.Clear();
      for (int s = 0; s < streams; ++s) batch.Add(token(i + s), static_cast<int32_t>(i), s, true);
      run();
      gpu_s += d->last_step_gpu_seconds();
    }
    const double tokens = static_cast<double>(streams) * o.batch_steps;
    batched.emplace_back(streams, tokens / (NowSeconds() - t0), gpu_s > 0 ? tokens / gpu_s : 0.0);
    batched_sampled.push_back(streams <= d->chain_streams()
                                  ? BatchChainTokS(*d, m, streams, o.n_prompt, o.batch_steps, token)
                                  : 0.0);
  }
  const gpu::DeviceInfo dev = d->device();
  const uint64_t dev_bytes = d->device_bytes();
  // What the tuners (UF_GPU_ATTENTION=tune, UF_GPU_NORM_TAIL=tune) measured and chose, per class
  // of step (before --profile's forward replaces this one).
  const std::vector<std::string> tuning = d->step_tuning();
  // --profile: a second forward with a timestamp after every dispatch (the first is freed first,
  // so the weights are held once), stream 0 prefilled again to the decode position, then up to
  // 16 one-token steps: each kernel's GPU time per step, averaged.
  std::vector<gpu::KernelTime> profile;
  double profile_step_s = 0.0;
  if (o.profile) {
    fwd->reset();
    gpu::GpuForwardOptions po = fo;
    po.profile = true;
    auto pf = gpu::GpuForward::Create(m, o.device, cache->get(), po);
    if (!pf.ok()) Fail("bench", pf.status());
    d = pf->get();
    for (int s = 0; s < max_streams; ++s) (*cache)->Remove(s);
    const int64_t at = o.depth + o.n_prompt;
    if (at > 0) prefill(0, 0, at);
    const int64_t steps = std::clamp<int64_t>(o.n_gen, 1, 16);
    settle([&] {
      for (int64_t i = at; i < at + steps; ++i) {
        batch.Clear();
        batch.Add(token(i), static_cast<int32_t>(i), 0, true);
        run();
      }
    });
    for (int64_t i = at; i < at + steps; ++i) {
      batch.Clear();
      batch.Add(token(i), static_cast<int32_t>(i), 0, true);
      run();
      profile_step_s += d->last_step_gpu_seconds() / steps;
      for (const gpu::KernelTime& k : d->last_step_profile()) {
        auto it = std::find_if(profile.begin(), profile.end(),
                               [&](const gpu::KernelTime& p) { return p.name == k.name; });
        if (it == profile.end()) it = profile.insert(profile.end(), {k.name, k.dispatches, 0.0});
        it->seconds += k.seconds / steps;
      }
    }
    std::stable_sort(
        profile.begin(), profile.end(),
        [](const gpu::KernelTime& a, const gpu::KernelTime& b) { return a.seconds > b.seconds; });
    *fwd = std::move(*pf);
  }
  auto bw = gpu::MeasureReadBandwidth(o.device, uint64_t{1} << 30, 8);
  const double bw_bytes = bw.ok() ? *bw : 0.0;
  const double pp_tok_s = Median(pp), tg_tok_s = Median(tg), tg_gpu_tok_s = Median(tg_gpu);
  const double tg_argmax_tok_s = Median(tg_argmax), tg_chain_tok_s = Median(tg_chain);
  const double tg_sampled_tok_s = Median(tg_sampled), tg_penalized_tok_s = Median(tg_penalized);
  // Bytes a decode step reads: the weights as the file holds them (the device holds about the
  // same bytes, quants and scales split apart) plus the f16 K/V up to the mean decode position.
  const double kv_bytes =
      2.0 * 2 * m.config().n_layer * m.config().kv_dim() * (o.depth + o.n_prompt + o.n_gen / 2.0);
  const double bytes_per_token = static_cast<double>(m.bytes_per_token()) + kv_bytes;
  const double roofline = bw_bytes > 0 ? tg_tok_s * bytes_per_token / bw_bytes : 0.0;
  // A batched step reads the weights once (a mixture of experts: the experts its streams are
  // expected to select together, model::BytesPerStep) and each stream's K/V (from position 0:
  // the batched runs have no --depth) up to its mean decode position.
  const auto step_bytes = [&](int streams) {
    return model::BytesPerStep(m.weights(), m.config(), streams) +
           streams * 2.0 * 2 * m.config().n_layer * m.config().kv_dim() *
               (o.n_prompt + o.batch_steps / 2.0);
  };
  const auto batch_roofline = [&](int streams, double tok_s) {
    return bw_bytes > 0 ? tok_s / streams * step_bytes(streams) / bw_bytes : 0.0;
  };
  // The tiled GEMM as the forward resolved it (UF_GPU_MATMUL; coopmat needs the matrix units,
  // else the plain tiled kernel runs, as a warning said).
  gpu::MatMul matmul = gpu::ResolveMatMul(gpu::MatMul::kDefault);
  if (matmul == gpu::MatMul::kCoopMat && !dev.coopmat) matmul = gpu::MatMul::kTiled;
  if (o.json) {
    nlohmann::json j;
    j["model"] = o.model;
    j["device"] = dev.name;
    j["device_type"] = dev.type;
    j["integer_dot"] = gpu::IntegerDotByDefault(dev);
    j["norm_tail"] = gpu::NormTailName(gpu::ResolveNormTail(gpu::NormTail::kDefault));
    j["matmul"] = gpu::MatMulName(matmul);
    j["attention"] =
        gpu::AttentionTilesName(gpu::ResolveAttentionTiles(gpu::AttentionTiles::kDefault));
    j["upload_s"] = upload_s;
    j["device_bytes"] = dev_bytes;
    j["depth"] = o.depth;
    j["pp_tok_s"] = pp_tok_s;
    j["tg_tok_s"] = tg_tok_s;
    j["tg_gpu_tok_s"] = tg_gpu_tok_s;
    j["tg_argmax_tok_s"] = tg_argmax_tok_s;
    j["tg_chain_tok_s"] = tg_chain_tok_s;
    j["chain_roofline"] = bw_bytes > 0 ? tg_chain_tok_s * bytes_per_token / bw_bytes : 0.0;
    j["tg_sampled_tok_s"] = tg_sampled_tok_s;
    j["tg_penalized_tok_s"] = tg_penalized_tok_s;
    j["step_dispatches"] = step_dispatches;
    j["step_barriers"] = step_barriers;
    j["bytes_per_token"] = bytes_per_token;
    j["read_bw_gb_s"] = bw_bytes / 1e9;
    j["roofline"] = roofline;
    for (const gpu::KernelTime& k : profile) {
      j["profile"].push_back(
          {{"kernel", k.name}, {"dispatches", k.dispatches}, {"us", k.seconds * 1e6}});
    }
    if (o.profile) j["profile_step_us"] = profile_step_s * 1e6;
    j["step_tuning"] = tuning;
    if (!batched.empty()) j["batch_steps"] = o.batch_steps;
    for (size_t bi = 0; bi < batched.size(); ++bi) {
      const auto& [streams, tok_s, gpu_tok_s] = batched[bi];
      j["batch"].push_back({{"streams", streams},
                            {"tok_s", tok_s},
                            {"sampled_tok_s", batched_sampled[bi]},
                            {"gpu_tok_s", gpu_tok_s},
                            {"step_bytes", step_bytes(streams)},
                            {"roofline", batch_roofline(streams, tok_s)}});
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf(
      "device: Vulkan %d, %s (%s), %.0f MiB held, weights uploaded in %.2f s, packed int8 dot "
      "%s, norm tail %s, tiled GEMM %s, tiled attention %s\n",
      dev.index, dev.name.c_str(), dev.type.c_str(), static_cast<double>(dev_bytes) / (1 << 20),
      upload_s, gpu::IntegerDotByDefault(dev) ? "on" : "off",
      gpu::NormTailName(gpu::ResolveNormTail(gpu::NormTail::kDefault)), gpu::MatMulName(matmul),
      gpu::AttentionTilesName(gpu::ResolveAttentionTiles(gpu::AttentionTiles::kDefault)));
  if (!bw.ok()) std::printf("read bandwidth: not measured (%s)\n", bw.status().ToString().c_str());
  std::printf("%-8s %-12s %14s %16s %12s %10s\n", "depth", "test", "tok/s", "bytes/token",
              "GB/s read", "roofline");
  if (o.n_prompt > 0) {
    std::printf("%-8lld %-12s %14.1f %16s %12s %10s\n", static_cast<long long>(o.depth),
                ("pp" + std::to_string(o.n_prompt)).c_str(), pp_tok_s, "", "", "");
  }
  if (o.n_gen > 0) {
    std::printf("%-8lld %-12s %14.1f %16.0f %12.1f %9.1f%%\n", static_cast<long long>(o.depth),
                ("tg" + std::to_string(o.n_gen)).c_str(), tg_tok_s, bytes_per_token, bw_bytes / 1e9,
                100.0 * roofline);
  }
  if (o.n_gen > 0 && tg_gpu_tok_s > 0) {
    std::printf("%-8lld %-12s %14.1f   (GPU time alone, from timestamps: %.1f us/token)\n",
                static_cast<long long>(o.depth), ("tg" + std::to_string(o.n_gen) + " gpu").c_str(),
                tg_gpu_tok_s, 1e6 / tg_gpu_tok_s);
  }
  if (o.n_gen > 0) {
    std::printf("%-8lld %-12s %14.1f   (greedy, the arg-max on the device: no logits copied)\n",
                static_cast<long long>(o.depth),
                ("tg" + std::to_string(o.n_gen) + " argmax").c_str(), tg_argmax_tok_s);
    // A decode figure with its bytes, read bandwidth and roofline fraction.
    const auto row = [&](const char* test, double tok_s, const char* note) {
      std::printf(
          "%-8lld %-12s %14.1f %16.0f %12.1f %9.1f%%   (%s)\n", static_cast<long long>(o.depth),
          ("tg" + std::to_string(o.n_gen) + " " + test).c_str(), tok_s, bytes_per_token,
          bw_bytes / 1e9, bw_bytes > 0 ? 100.0 * tok_s * bytes_per_token / bw_bytes : 0.0, note);
    };
    row("chain", tg_chain_tok_s, "greedy, chained: each token fed to the next step on the device");
    row("sampled", tg_sampled_tok_s,
        "sampled, chained: T 0.8, top-k 40, drawn on the device, checked by the host");
    row("penal", tg_penalized_tok_s,
        "the same with presence and frequency penalties 0.5, applied on the device");
  }
  if (o.n_gen > 0) {
    std::printf("%-8lld %-12s %14d   dispatches/step, %d barriers/step (one-token decode step)\n",
                static_cast<long long>(o.depth), ("tg" + std::to_string(o.n_gen) + " step").c_str(),
                step_dispatches, step_barriers);
  }
  for (size_t bi = 0; bi < batched.size(); ++bi) {
    const auto& [streams, tok_s, gpu_tok_s] = batched[bi];
    const std::string test = "tg" + std::to_string(o.batch_steps) + " x" + std::to_string(streams);
    std::printf(
        "%-8d %-12s %14.1f %16.0f %12.1f %9.1f%%   (aggregate of %d streams after "
        "%lld-token prompts, bytes per step%s; GPU time alone %.1f)\n",
        0, test.c_str(), tok_s, step_bytes(streams), bw_bytes / 1e9,
        100.0 * batch_roofline(streams, tok_s), streams, static_cast<long long>(o.n_prompt),
        m.config().is_moe() ? " with the experts uniform routing would select" : "", gpu_tok_s);
    if (batched_sampled[bi] > 0) {
      std::printf(
          "%-8d %-12s %14.1f %16.0f %12.1f %9.1f%%   (the same sampled and chained: T 0.8, "
          "top-k 40, each row drawn on the device, checked by its stream's sampler)\n",
          0, (test + " smp").c_str(), batched_sampled[bi], step_bytes(streams), bw_bytes / 1e9,
          100.0 * batch_roofline(streams, batched_sampled[bi]));
    }
  }
  std::printf(
      "pp runs the prompt in batches of up to 512 tokens; tok/s is wall clock around each "
      "step's submit and wait; the roofline uses it.\n");
  if (!tuning.empty()) {
    std::printf(
        "choices measured per class of step (UF_GPU_ATTENTION=tune, UF_GPU_NORM_TAIL=tune; the "
        "timed passes ran after the trials):\n");
    for (const std::string& line : tuning) std::printf("  %s\n", line.c_str());
  }
  if (o.profile) {
    double total = 0.0;
    for (const gpu::KernelTime& k : profile) total += k.seconds;
    std::printf(
        "\nprofile: a one-token decode step at position %lld, GPU time per kernel (a timestamp "
        "after every dispatch, which slows the step: %.1f us so; dispatches of a group overlap, "
        "so their split is approximate)\n",
        static_cast<long long>(o.depth + o.n_prompt), profile_step_s * 1e6);
    std::printf("%-24s %10s %12s %8s\n", "kernel", "dispatches", "us/step", "share");
    for (const gpu::KernelTime& k : profile) {
      std::printf("%-24s %10d %12.1f %7.1f%%\n", k.name.c_str(), k.dispatches, k.seconds * 1e6,
                  total > 0 ? 100.0 * k.seconds / total : 0.0);
    }
    if (profile.empty()) std::printf("(no timestamps on this device)\n");
  }
  return 0;
}

}  // namespace uf::cli
