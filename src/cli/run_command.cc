// `ultrafast run`: generate text from a prompt, streaming it to stdout; timings go to stderr.
#include <algorithm>
#include <cstdio>
#include <random>

#include "base/clock.h"
#include "base/thread_pool.h"
#include "cli/common.h"
#include "cli/run_gpu.h"
#include "engine/generate.h"
#include "engine/kv_cache.h"
#include "engine/speculative.h"
#include "kernels/matmul.h"
#include "model/decoder.h"

namespace uf::cli {
namespace {

constexpr char kDemoPrompt[] = "ROMEO:";

struct RunOptions {
  std::string model;
  std::string prompt;
  int64_t n_predict = 128;
  int threads = 0;
  int64_t ctx = 0;
  int64_t batch = 512;
  int64_t seed = -1;
  bool no_special = false;
  bool ignore_eos = false;
  std::string spec = "off";  // off | ngram | draft:PATH
  int spec_k = 8;
  float spec_p_min = 0.6f;
  std::string kv_type;
  std::string device;
  sampling::SamplingParams sampling;
};

void PrintStats(const engine::GenerateStats& st) {
  const auto rate = [](double n, double sec) { return sec > 0 ? n / sec : 0.0; };
  std::fprintf(stderr, "prompt: %lld tokens in %.2f ms (%.1f tok/s)\n",
               static_cast<long long>(st.n_prompt), st.prefill_seconds * 1e3,
               rate(st.n_prompt, st.prefill_seconds));
  const int64_t n_decoded = std::max<int64_t>(st.n_generated - 1, 0);
  std::fprintf(stderr, "decode: %lld tokens in %.2f ms (%.1f tok/s, %.1f us/token)\n",
               static_cast<long long>(n_decoded), st.decode_seconds * 1e3,
               rate(n_decoded, st.decode_seconds),
               n_decoded ? st.decode_seconds * 1e6 / n_decoded : 0.0);
}

void PrintFinish(const engine::GenerateStats& st) {
  std::fprintf(stderr, "time to first token: %.2f ms; generated %lld tokens, stop: %s\n",
               st.first_token_seconds * 1e3, static_cast<long long>(st.n_generated),
               std::string(engine::StopReasonName(st.stop_reason)).c_str());
}

bool WriteText(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  return std::ferror(stdout) == 0;
}

// `run --device vulkan`: one token per step through the GPU decoder (docs/gpu.md).
void RunOnGpu(const RunOptions& o, const gpu::DeviceSpec& device, const LoadedModel& loaded,
              const std::string& path, const std::string& prompt,
              const std::vector<int32_t>& tokens, int64_t ctx) {
  if (o.spec != "off") {
    Fail("run", UnimplementedError("--spec with --device vulkan is not implemented yet"));
  }
  const double t0 = NowSeconds();
  engine::GenerateOptions g;
  g.max_tokens = o.n_predict;
  g.sampling = o.sampling;
  g.ignore_eos = o.ignore_eos;
  g.sampling.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();
  g.chain = gpu::ChainSteps();  // UF_GPU_CHAIN=off: one step at a time
  if (!g.sampling.greedy() || g.sampling.penalties()) {
    // Sampling, or greedy with penalties: engine::Generate on a device forward, whose rows come
    // back as their 64 best tokens (fetched whole only when the sampler's draw needs it) instead
    // of n_vocab floats, its steps chained on the device with the penalties applied there
    // (GenerateOptions::chain; greedy drawn as top-k 1).
    const model::ModelConfig& c = loaded.model->config();
    engine::KvCacheOptions co;
    co.n_layer = c.n_layer;
    co.n_head_kv = c.n_head_kv;
    co.head_dim = c.head_dim;
    co.max_seqs = 1;
    co.max_seq_len = ctx;
    co.n_blocks = engine::KvCacheOptions::BlocksFor(ctx, 1, co.block_size);
    co.type = KvTypeOrDie("run", o.kv_type);
    co.host_storage = false;
    auto cache = engine::KvCache::Create(co);
    if (!cache.ok()) Fail("run", cache.status());
    auto fwd = gpu::GpuForward::Create(*loaded.model, device, cache->get(),
                                       {.max_batch = 64, .max_outputs = 1});
    if (!fwd.ok()) Fail("run", fwd.status());
    std::fprintf(stderr,
                 "load: %.1f ms (%s, %s) + %.1f ms to the GPU (Vulkan device %d: %s, %.1f MiB "
                 "of device memory; seed %llu)\n",
                 loaded.load_seconds * 1e3, path.c_str(), c.architecture_name.c_str(),
                 (NowSeconds() - t0) * 1e3, (*fwd)->device().index, (*fwd)->device().name.c_str(),
                 static_cast<double>((*fwd)->device_bytes()) / (1 << 20),
                 static_cast<unsigned long long>(g.sampling.seed));
    std::fputs(prompt.c_str(), stdout);
    std::fflush(stdout);
    engine::GenerateTarget t{.forward = fwd->get(),
                             .cache = cache->get(),
                             .n_vocab = c.n_vocab,
                             .max_batch = 64,
                             .max_outputs = 1};
    engine::GenerateStats st;
    const Status s = engine::Generate(t, *loaded.tokenizer, tokens, g, WriteText, &st);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (!s.ok()) Fail("run", s);
    PrintStats(st);
    std::fprintf(stderr,
                 "device rows: %lld reduced to the best 64, %lld of them fetched whole; %lld of "
                 "%lld decode steps chained on the device\n",
                 static_cast<long long>((*fwd)->rows_reduced()),
                 static_cast<long long>((*fwd)->rows_fetched()),
                 static_cast<long long>(st.chained_steps),
                 static_cast<long long>(st.n_decode_steps));
    PrintFinish(st);
    return;
  }
  // f32 K/V is refused there (the device cache is f16 or q8_0).
  auto decoder = gpu::GpuDecoder::Create(*loaded.model, device, ctx, /*max_batch=*/64,
                                         KvTypeOrDie("run", o.kv_type));
  if (!decoder.ok()) Fail("run", decoder.status());
  std::fprintf(stderr,
               "load: %.1f ms (%s, %s) + %.1f ms to the GPU (Vulkan device %d: %s, %.1f MiB "
               "of device memory; seed %llu)\n",
               loaded.load_seconds * 1e3, path.c_str(),
               loaded.model->config().architecture_name.c_str(), (NowSeconds() - t0) * 1e3,
               (*decoder)->device().index, (*decoder)->device().name.c_str(),
               static_cast<double>((*decoder)->device_bytes()) / (1 << 20),
               static_cast<unsigned long long>(g.sampling.seed));
  std::fputs(prompt.c_str(), stdout);
  std::fflush(stdout);
  engine::GenerateStats st;
  const Status s = GenerateOnGpu(**decoder, *loaded.tokenizer, tokens, g, WriteText, &st);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!s.ok()) Fail("run", s);
  PrintStats(st);
  PrintFinish(st);
}

void Run(const RunOptions& o) {
  std::string path = o.model;
  std::string prompt = o.prompt;
  if (path.empty()) {
    auto demo = FindDemoModel();
    if (!demo.ok()) Fail("run", demo.status());
    path = *demo;
    if (prompt.empty()) prompt = kDemoPrompt;
  }
  if (prompt.empty()) Fail("run", InvalidArgumentError("-p PROMPT is required with -m"));

  auto loaded = LoadModel(path);
  if (!loaded.ok()) Fail("run", loaded.status());
  const model::Model& m = *loaded->model;
  const Tokenizer& tok = *loaded->tokenizer;
  const int threads = ResolveThreads(o.threads);

  const std::vector<int32_t> tokens =
      tok.Encode(prompt, /*add_bos=*/true, /*parse_special=*/!o.no_special);
  const int64_t ctx = o.ctx > 0 ? o.ctx : std::min<int64_t>(m.config().n_ctx_train, 4096);
  if (o.n_predict >= 0 && static_cast<int64_t>(tokens.size()) + o.n_predict > ctx) {
    Fail("run", OutOfRangeError("prompt (" + std::to_string(tokens.size()) + " tokens) + -n " +
                                std::to_string(o.n_predict) + " exceeds the context of " +
                                std::to_string(ctx) + " tokens; raise --ctx or lower -n"));
  }
  if (ctx > m.config().n_ctx_train) {
    std::fprintf(stderr, "warning: --ctx %lld exceeds the model's training context %lld\n",
                 static_cast<long long>(ctx), static_cast<long long>(m.config().n_ctx_train));
  }

  const gpu::DeviceSpec device = DeviceOrDie("run", o.device);
  if (device.vulkan) {
    RunOnGpu(o, device, *loaded, path, prompt, tokens, ctx);
    return;
  }

  // Speculative decoding: the drafter, and the draft model it may run.
  std::unique_ptr<engine::Drafter> drafter;
  LoadedModel draft_model;
  const bool speculate = o.spec != "off";
  if (o.spec_k < 1 || o.spec_k > engine::kMaxSpecK) {
    Fail("run", InvalidArgumentError("--spec-k must be in [1, " +
                                     std::to_string(engine::kMaxSpecK) + "]"));
  }
  if (o.spec.rfind("draft:", 0) == 0) {
    auto d = LoadModel(o.spec.substr(6));
    if (!d.ok()) Fail("run", d.status());
    draft_model = std::move(*d);
  } else if (speculate && o.spec != "ngram") {
    Fail("run",
         InvalidArgumentError("--spec must be off, ngram or draft:PATH, not '" + o.spec + "'"));
  }

  model::DecoderOptions dopts;
  dopts.max_batch = std::clamp<int64_t>(o.batch, 1, ctx);
  dopts.max_outputs = speculate ? 1 + o.spec_k : 1;
  dopts.max_batch = std::max<int64_t>(dopts.max_batch, dopts.max_outputs);
  engine::KvCacheOptions co = CacheOptionsFor(m.config(), ctx, KvTypeOrDie("run", o.kv_type));
  // A forward appends at most max_batch positions; rejected drafts roll back up to spec_k + 1.
  model::UseSlidingWindowPool(m.config(), dopts.max_batch + engine::kMaxSpecK + 1, &co);
  auto cache = engine::KvCache::Create(co);
  if (!cache.ok()) Fail("run", cache.status());
  ThreadPool pool(threads);
  auto decoder = model::Decoder::Create(m, cache->get(), dopts, &pool);
  if (!decoder.ok()) Fail("run", decoder.status());
  if (draft_model.model) {
    auto d = engine::DraftModelDrafter::Create(*draft_model.model, m.config().n_vocab, ctx, &pool,
                                               o.spec_p_min);
    if (!d.ok()) Fail("run", d.status());
    drafter = std::move(*d);
  } else if (speculate) {
    drafter = std::make_unique<engine::NgramDrafter>();
  }

  engine::GenerateOptions g;
  g.max_tokens = o.n_predict;
  g.sampling = o.sampling;
  g.ignore_eos = o.ignore_eos;
  g.drafter = drafter.get();
  g.spec_k = o.spec_k;
  g.sampling.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();
  std::fprintf(stderr, "load: %.1f ms (%s, %s, %d threads, %s kernels, seed %llu)\n",
               loaded->load_seconds * 1e3, path.c_str(), m.config().architecture_name.c_str(),
               threads, kernels::IsaName(kernels::ActiveIsa()).c_str(),
               static_cast<unsigned long long>(g.sampling.seed));

  std::fputs(prompt.c_str(), stdout);
  std::fflush(stdout);
  engine::GenerateStats st;
  const Status s = engine::Generate(
      **decoder, tok, tokens, g,
      [](std::string_view text) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
        return std::ferror(stdout) == 0;
      },
      &st);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!s.ok()) Fail("run", s);

  PrintStats(st);
  if (speculate) {
    const int64_t n_decoded = std::max<int64_t>(st.n_generated - 1, 0);
    std::fprintf(stderr,
                 "speculation (%s, k <= %d): %lld forwards for %lld tokens; %lld drafts verified, "
                 "%lld accepted (%.0f%%), mean accepted length %.2f; drafting %.2f ms\n",
                 o.spec.c_str(), o.spec_k, static_cast<long long>(st.n_decode_steps),
                 static_cast<long long>(n_decoded), static_cast<long long>(st.spec.drafted),
                 static_cast<long long>(st.spec.accepted),
                 st.spec.drafted ? 100.0 * st.spec.accepted / st.spec.drafted : 0.0,
                 st.spec.mean_accepted_length(), st.draft_seconds * 1e3);
  }
  PrintFinish(st);
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt (streams to stdout)");
  cmd->add_option("-m,--model", o->model, "GGUF model (default: the embedded demo model)");
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text (default with the demo model: ROMEO:)");
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate (-1: until end or full)")
      ->capture_default_str();
  cmd->add_option("--temp", o->sampling.temperature, "Temperature (0: greedy)")
      ->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "Top-k (0: off)")->capture_default_str();
  cmd->add_option("--top-p", o->sampling.top_p, "Top-p (1: off)")->capture_default_str();
  cmd->add_option("--min-p", o->sampling.min_p, "Min-p (0: off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", o->sampling.repeat_penalty, "Repetition penalty (1: off)")
      ->capture_default_str();
  cmd->add_option("--presence-penalty", o->sampling.presence_penalty, "Presence penalty")
      ->capture_default_str();
  cmd->add_option("--frequency-penalty", o->sampling.frequency_penalty, "Frequency penalty")
      ->capture_default_str();
  cmd->add_option("--repeat-last-n", o->sampling.penalty_last_n,
                  "Recent tokens the penalties look at")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "RNG seed (-1: random)")->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "Threads (0: all cores)")->capture_default_str();
  cmd->add_option("--ctx", o->ctx, "Context size in tokens (0: min(model's, 4096))")
      ->capture_default_str();
  AddKvTypeOption(cmd, &o->kv_type);
  AddDeviceOption(cmd, &o->device);
  cmd->add_option("-b,--batch", o->batch, "Prompt tokens per forward pass")->capture_default_str();
  cmd->add_option("--spec", o->spec,
                  "Speculative decoding: off, ngram (prompt lookup) or draft:PATH (a smaller "
                  "model with the same vocabulary); output is unchanged")
      ->capture_default_str();
  cmd->add_option("--spec-k", o->spec_k, "Drafts per step at most (adaptive below it)")
      ->capture_default_str();
  cmd->add_option("--spec-p-min", o->spec_p_min,
                  "Draft model: stop drafting when its top probability falls below this")
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", o->ignore_eos,
                "Never sample end-of-generation tokens (exactly -n tokens, for timing)");
  cmd->add_flag("--no-special", o->no_special,
                "Tokenize special-token text in the prompt as plain text");
  cmd->callback([o] {
    const Status s = o->sampling.Validate();
    if (!s.ok()) Fail("run", s);
    Run(*o);
  });
}

}  // namespace uf::cli
