// `ultrafast bench --spec`: what speculative decoding buys one greedy stream, per workload.
//
// Workloads, built from a passage of --spec-text (default ../shared/data/tinyshakespeare.txt, the
// held-out tail the demo model never saw; a built-in passage when the file is missing):
//   edit     the passage, then its first line again: the output reproduces the passage, with
//            whatever changes the model makes (input-grounded: prompt lookup shines);
//   extract  the passage, then the name of one of its speakers: the output quotes or summarises;
//   open     the passage's first line alone: free generation, where drafts rarely help and
//            speculation must cost nothing.
// Modes, alternated within each repetition so that all see the same machine: plain decoding,
// n-gram drafts (adaptive k), a draft model (--spec-draft), and an oracle whose drafts are the
// plain run's own output (k fixed, every draft right): it isolates what verifying k + 1
// positions costs from how good the drafts are. Every mode must produce the plain run's tokens;
// the table says so.
//
// tok/s counts tokens after the first (as `run` reports decode); "roofline" is the weight bytes
// per token times tok/s over the DRAM read bandwidth measured in the same run: above 1.0, a
// stream is faster than reading every weight once per token allows.
#include "cli/bench_spec.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/thread_pool.h"
#include "cli/bench_device.h"
#include "cli/common.h"
#include "engine/generate.h"
#include "engine/kv_cache.h"
#include "engine/speculative.h"
#include "kernels/matmul.h"
#include "kernels/membw.h"
#include "model/decoder.h"

namespace uf::cli {
namespace {

using json = nlohmann::json;

// Used when --spec-text cannot be read: prose with repeated structure, as a document a user
// asks to edit.
constexpr char kBuiltinPassage[] =
    "Release notes.\n"
    "The server now streams tokens as soon as they are sampled. The server now reports the time "
    "to first token for every request. The engine now reads each weight once per step for every "
    "sequence in the batch. The engine now keeps the key and value cache in fixed-size blocks.\n"
    "Known issues.\n"
    "The planner does not yet model mixture-of-experts layers. The planner does not yet read the "
    "interconnect bandwidth of multi-chip systems.\n";

std::string ReadPassageSource(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  // The held-out tail: from the first blank line after 90% of the text.
  const size_t at = text.find("\n\n", text.size() * 9 / 10);
  return at == std::string::npos ? text : text.substr(at + 2);
}

constexpr int64_t kMaxPassageTokens = 400;

struct Workload {
  std::string name;
  std::vector<int32_t> prompt;
};

// Builds the three prompts so that each leaves room for n_gen tokens and a verify step.
std::vector<Workload> MakeWorkloads(const Tokenizer& tok, const std::string& source,
                                    int64_t budget) {
  // Whole lines of the source up to 3/4 of the budget (the cue is a short line) and at most
  // kMaxPassageTokens: a page of text or a source file, as one edits or quotes it.
  const int64_t limit = std::min<int64_t>(budget * 3 / 4, kMaxPassageTokens);
  std::vector<std::string> lines;
  std::stringstream ss(source);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  std::string passage, first_line, speaker;
  for (const std::string& line : lines) {
    const std::string next = passage + line + "\n";
    if (static_cast<int64_t>(tok.Encode(next, true, false).size()) > limit) break;
    passage = next;
    if (first_line.empty() && !line.empty()) first_line = line;
    if (!line.empty() && line.back() == ':' && line.size() < 40) speaker = line;
  }
  if (speaker.empty()) speaker = first_line;
  std::vector<Workload> w;
  w.push_back({"edit", tok.Encode(passage + "\n" + first_line + "\n", true, false)});
  w.push_back({"extract", tok.Encode(passage + "\n" + speaker + "\n", true, false)});
  w.push_back({"open", tok.Encode(first_line + "\n", true, false)});
  for (Workload& x : w) {
    if (static_cast<int64_t>(x.prompt.size()) > budget) x.prompt.resize(budget);
  }
  return w;
}

struct ModeResult {
  std::vector<double> tok_s;
  engine::SpecStats spec;  // summed over repetitions
  int64_t steps = 0;       // forwards after the prefill, summed
  bool identical = true;   // every repetition produced the plain run's tokens
};

}  // namespace

int SpecBench(const SpecBenchOptions& o) {
  auto loaded = LoadModel(o.model);
  if (!loaded.ok()) Fail("bench", loaded.status());
  const model::Model& m = *loaded->model;
  const Tokenizer& tok = *loaded->tokenizer;
  if (o.spec_k < 1 || o.spec_k > engine::kMaxSpecK) {
    Fail("bench", InvalidArgumentError("--spec-k must be in [1, " +
                                       std::to_string(engine::kMaxSpecK) + "]"));
  }
  LoadedModel draft;
  if (!o.draft.empty()) {
    auto d = LoadModel(o.draft);
    if (!d.ok()) Fail("bench", d.status());
    draft = std::move(*d);
  }
  const int threads = ResolveThreads(o.threads);
  ThreadPool pool(threads);
  const int64_t ctx = std::min<int64_t>(m.config().n_ctx_train, 4096);
  const int64_t budget = ctx - o.n_gen - engine::kMaxSpecK - 1;
  if (budget < 8) {
    Fail("bench", OutOfRangeError("-n " + std::to_string(o.n_gen) + " leaves no room for a " +
                                  "prompt in the model's context of " + std::to_string(ctx)));
  }
  std::string source = ReadPassageSource(o.text);
  const bool builtin = source.empty();
  if (builtin) source = kBuiltinPassage;
  const std::vector<Workload> workloads = MakeWorkloads(tok, source, budget);

  constexpr int64_t kMaxBatch = 512;
  auto fwd = MakeBenchForward(m, o.device, ctx, o.kv_type, kMaxBatch, engine::kMaxSpecK + 1, &pool);
  if (!fwd.ok()) Fail("bench", fwd.status());
  BenchForward& target = **fwd;
  std::unique_ptr<engine::DraftModelDrafter> draft_drafter;
  if (draft.model) {
    auto d = engine::DraftModelDrafter::Create(*draft.model, m.config().n_vocab, ctx, &pool);
    if (!d.ok()) Fail("bench", d.status());
    draft_drafter = std::move(*d);
  }

  // GB/s, probed between repetitions: the CPU's DRAM, or the device memory's.
  std::vector<double> bandwidth;
  bandwidth.push_back(BenchBandwidthGBs(o.device, &pool));
  const double bytes_per_token =
      static_cast<double>(m.bytes_per_token() + m.weights().token_embd_row_bytes);

  std::vector<std::string> modes = {"plain", "ngram"};
  if (draft_drafter) modes.push_back("draft");
  modes.push_back("oracle");
  // [workload][mode]
  std::vector<std::map<std::string, ModeResult>> results(workloads.size());
  std::vector<std::vector<int32_t>> plain_tokens(workloads.size());

  auto run = [&](const Workload& w, engine::Drafter* drafter, bool adaptive,
                 std::vector<int32_t>* tokens, engine::GenerateStats* st) {
    engine::GenerateOptions g;
    g.max_tokens = o.n_gen;
    g.sampling.temperature = 0.0f;
    g.ignore_eos = true;
    g.drafter = drafter;
    g.spec_k = o.spec_k;
    g.spec_adaptive = adaptive;
    tokens->clear();
    const Status s = engine::Generate(
        target.target, tok, w.prompt, g, [](std::string_view) { return true; }, st,
        [tokens](int32_t t) { tokens->push_back(t); });
    if (!s.ok()) Fail("bench", s);
  };

  for (int rep = 0; rep < o.reps; ++rep) {
    for (size_t wi = 0; wi < workloads.size(); ++wi) {
      const Workload& w = workloads[wi];
      for (const std::string& mode : modes) {
        std::unique_ptr<engine::Drafter> owned;
        engine::Drafter* drafter = nullptr;
        bool adaptive = true;
        if (mode == "ngram") {
          owned = std::make_unique<engine::NgramDrafter>();
          drafter = owned.get();
        } else if (mode == "draft") {
          drafter = draft_drafter.get();
        } else if (mode == "oracle") {
          if (plain_tokens[wi].empty()) continue;
          std::vector<int32_t> seq = w.prompt;
          seq.insert(seq.end(), plain_tokens[wi].begin(), plain_tokens[wi].end());
          owned = std::make_unique<engine::OracleDrafter>(std::move(seq));
          drafter = owned.get();
          adaptive = false;
        }
        std::vector<int32_t> tokens;
        engine::GenerateStats st;
        run(w, drafter, adaptive, &tokens, &st);
        ModeResult& r = results[wi][mode];
        if (mode == "plain" && plain_tokens[wi].empty()) plain_tokens[wi] = tokens;
        r.identical = r.identical && tokens == plain_tokens[wi];
        r.tok_s.push_back(st.decode_tokens_per_second());
        r.steps += st.n_decode_steps;
        r.spec.drafted += st.spec.drafted;
        r.spec.accepted += st.spec.accepted;
        r.spec.verify_steps += st.spec.verify_steps;
      }
    }
    bandwidth.push_back(BenchBandwidthGBs(o.device, &pool));
  }

  // What a verify step of n positions costs against a decode step, at the edit prompt's end:
  // the ceiling on what speculation can give is n / (t(n) / t(1)) with every draft right.
  const std::vector<int> verify_sizes = {1, 2, 3, 5, 9, 17};
  std::vector<double> verify_seconds;
  {
    const Workload& w = workloads[0];
    model::Batch b;
    const int64_t np = static_cast<int64_t>(w.prompt.size());
    for (int n : verify_sizes) {
      // The prompt once, then the n positions after it again and again (each run's K/V
      // dropped before the next).
      target.cache->Remove(0);
      for (int64_t i = 0; i < np; i += kMaxBatch) {
        b.Clear();
        for (int64_t j = i; j < std::min(np, i + kMaxBatch); ++j) {
          b.Add(w.prompt[j], static_cast<int32_t>(j), 0, false);
        }
        if (const Status s = target.forward().Forward(b); !s.ok()) Fail("bench", s);
      }
      std::vector<double> times;
      for (int rep = 0; rep < 15; ++rep) {
        target.cache->Truncate(0, np);
        b.Clear();
        for (int i = 0; i < n; ++i) {
          b.Add(w.prompt[i % np], static_cast<int32_t>(np + i), 0, true);
        }
        const double t0 = NowSeconds();
        if (const Status s = target.forward().Forward(b); !s.ok()) Fail("bench", s);
        times.push_back(NowSeconds() - t0);
      }
      verify_seconds.push_back(Median(times));
    }
  }

  const double bw = Median(bandwidth);
  json out;
  out["model"] = o.model;
  out["threads"] = threads;
  out["device"] = BenchDeviceLine(target);
  out["draft_forward"] = draft_drafter ? "cpu" : "none";
  out["isa"] = kernels::IsaName(kernels::ActiveIsa());
  out["spec_k"] = o.spec_k;
  out["n_gen"] = o.n_gen;
  out["reps"] = o.reps;
  out["bandwidth_gb_s"] = bw;
  out["bytes_per_token"] = bytes_per_token;
  out["text"] = builtin ? "built-in" : o.text;
  for (size_t i = 0; i < verify_sizes.size(); ++i) {
    out["verify_step_seconds"][std::to_string(verify_sizes[i])] = verify_seconds[i];
  }
  for (size_t wi = 0; wi < workloads.size(); ++wi) {
    json& jw = out["workloads"][workloads[wi].name];
    jw["prompt_tokens"] = workloads[wi].prompt.size();
    const double plain = Median(results[wi]["plain"].tok_s);
    for (const std::string& mode : modes) {
      const ModeResult& r = results[wi][mode];
      if (r.tok_s.empty()) continue;
      const double rate = Median(r.tok_s);
      json& jm = jw[mode];
      jm["tok_s"] = rate;
      jm["speedup"] = plain > 0 ? rate / plain : 0.0;
      jm["roofline"] = bw > 0 ? bytes_per_token * rate / (bw * 1e9) : 0.0;
      jm["identical"] = r.identical;
      jm["forwards_per_token"] =
          static_cast<double>(r.steps) / std::max<int64_t>(1, o.reps * (o.n_gen - 1));
      if (mode != "plain") {
        jm["drafted"] = r.spec.drafted;
        jm["accepted"] = r.spec.accepted;
        jm["acceptance"] =
            r.spec.drafted ? static_cast<double>(r.spec.accepted) / r.spec.drafted : 0.0;
        jm["mean_accepted_length"] = r.spec.mean_accepted_length();
      }
    }
  }
  if (o.json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("model      %s (%s kernels, %d threads)\n", o.model.c_str(),
              kernels::IsaName(kernels::ActiveIsa()).c_str(), threads);
  std::printf("forward    %s%s\n", BenchDeviceLine(target).c_str(),
              draft_drafter && target.gpu ? "; the draft model's forward runs on the CPU" : "");
  std::printf("bandwidth  %.1f GB/s (%s, median of %zu probes); %.1f MB of weights per token\n", bw,
              target.gpu ? "device memory" : "DRAM", bandwidth.size(), bytes_per_token / 1e6);
  std::printf("verify step of n positions / decode step:");
  for (size_t i = 0; i < verify_sizes.size(); ++i) {
    std::printf(" n=%d %.2fx", verify_sizes[i], verify_seconds[i] / verify_seconds[0]);
  }
  std::printf(" (decode step %.3f ms)\n", verify_seconds[0] * 1e3);
  std::printf("greedy, %lld tokens, k <= %d, median of %d; text: %s\n\n",
              static_cast<long long>(o.n_gen), o.spec_k, o.reps,
              builtin ? "built-in" : o.text.c_str());
  std::printf("%-8s %6s  %-7s %9s %8s %9s %8s %8s %9s\n", "workload", "prompt", "mode", "tok/s",
              "speedup", "roofline", "accept", "mean len", "identical");
  for (size_t wi = 0; wi < workloads.size(); ++wi) {
    const json& jw = out["workloads"][workloads[wi].name];
    for (const std::string& mode : modes) {
      if (!jw.contains(mode)) continue;
      const json& jm = jw[mode];
      char accept[32] = "-", len[32] = "-";
      if (mode != "plain") {
        std::snprintf(accept, sizeof(accept), "%.0f%%", 100.0 * jm["acceptance"].get<double>());
        std::snprintf(len, sizeof(len), "%.2f", jm["mean_accepted_length"].get<double>());
      }
      std::printf("%-8s %6lld  %-7s %9.1f %7.2fx %9.2f %8s %8s %9s\n", workloads[wi].name.c_str(),
                  static_cast<long long>(jw["prompt_tokens"].get<int64_t>()), mode.c_str(),
                  jm["tok_s"].get<double>(), jm["speedup"].get<double>(),
                  jm["roofline"].get<double>(), accept, len,
                  jm["identical"].get<bool>() ? "yes" : "NO");
    }
  }
  return 0;
}

}  // namespace uf::cli
