// Each repetition runs one unconstrained request (end-of-generation banned, exactly n tokens) and
// one constrained request (it ends when the document is complete, or is closed within n tokens)
// through engine::Service, alternating, at temperature 1 with the same seed. The decode rate is
// tokens after the first over the time after the first, as `run` reports it. The first
// constrained request finds the mask cache empty (every state's trie walk happens then); the
// later ones show the steady state a server reaches for a schema it has seen.
#include "cli/bench_grammar.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "cli/bench_device.h"
#include "cli/common.h"
#include "engine/service.h"
#include "grammar/json_schema.h"
#include "kernels/matmul.h"

namespace uf::cli {
namespace {

using json = nlohmann::json;

struct GrammarRun {
  double first = 0, end = 0;
  int64_t n = 0;
  std::string text;
  std::vector<int32_t> tokens;  // when logprobs were asked
  double decode_tok_s() const { return end > first && n > 1 ? (n - 1) / (end - first) : 0.0; }
};

StatusOr<std::shared_ptr<const grammar::Grammar>> LoadGrammar(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  const auto j = nlohmann::ordered_json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) return InvalidArgumentError(path + " is not JSON");
  if (j == nlohmann::ordered_json{{"type", "json_object"}}) return grammar::JsonObjectGrammar();
  std::string where;
  auto g = grammar::JsonSchemaGrammar(j, &where);
  if (!g.ok()) return g.status().WithContext(path);
  return *g;
}

StatusOr<GrammarRun> RunOne(engine::Service& service, const std::vector<int32_t>& prompt,
                            int64_t n_gen, uint64_t seed, std::shared_ptr<const grammar::Grammar> g,
                            bool want_tokens = false) {
  engine::GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = n_gen;
  r.ignore_eos = g == nullptr;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = seed;
  r.grammar = std::move(g);
  r.top_logprobs = want_tokens ? 0 : -1;
  const double t0 = NowSeconds();
  UF_ASSIGN_OR_RETURN(std::shared_ptr<engine::RequestChannel> channel,
                      service.Submit(std::move(r)));
  GrammarRun s;
  std::vector<engine::GenerationEvent> events;
  for (;;) {
    if (!channel->Pop(&events, 120.0)) return UnavailableError("bench: no event in 120 s");
    for (const engine::GenerationEvent& ev : events) {
      if (ev.n_tokens > 0 && s.n == 0) s.first = ev.time - t0;
      s.n += ev.n_tokens;
      s.text += ev.text;
      for (const engine::TokenLogprob& lp : ev.logprobs) s.tokens.push_back(lp.token);
      if (ev.finish == engine::FinishReason::kError) return ev.error;
      if (ev.finish != engine::FinishReason::kNone) {
        s.end = ev.time - t0;
        return s;
      }
    }
  }
}

// The engine's counters once the last request's step has published them (they follow its
// final event; 10 s at most).
engine::EngineStats Settled(const engine::Service& service) {
  engine::EngineStats st = service.Stats();
  for (int i = 0; i < 10000 && (st.running > 0 || st.kv_blocks_used > 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    st = service.Stats();
  }
  return st;
}

// The mask's own cost per token, replayed outside the engine (no noise from the forward pass):
// for each token of a constrained output, the mask lookup (or trie walk), applying it to a logits
// row, and advancing the automaton. Returns seconds per token.
double ReplaySeconds(grammar::TokenConstraint& c, const std::vector<int32_t>& tokens,
                     int64_t n_gen) {
  const int32_t n_vocab = c.trie().n_vocab();
  std::vector<float> logits(n_vocab, 0.5f), out(n_vocab);
  std::vector<uint64_t> mask;
  grammar::StateId state = c.start();
  const double t0 = NowSeconds();
  for (size_t i = 0; i < tokens.size(); ++i) {
    c.Mask(state, n_gen - static_cast<int64_t>(i), &mask);
    grammar::TokenConstraint::Apply(mask.data(), logits.data(), n_vocab, out.data());
    const grammar::StateId next = c.Advance(state, tokens[i]);
    if (next == grammar::kDead) break;
    state = next;
  }
  return tokens.empty() ? 0.0 : (NowSeconds() - t0) / static_cast<double>(tokens.size());
}

}  // namespace

int GrammarBench(const GrammarBenchOptions& o) {
  auto g = LoadGrammar(o.grammar_file);
  if (!g.ok()) Fail("bench --grammar", g.status());
  auto loaded = LoadModel(o.model);
  if (!loaded.ok()) Fail("bench --grammar", loaded.status());
  const std::vector<int32_t> prompt = BenchPrompt(32, loaded->model->config().n_vocab);
  engine::ServiceOptions so;
  so.ctx = static_cast<int64_t>(prompt.size()) + o.n_gen + 16;
  so.max_seqs = 1;
  so.prefix_cache = false;
  so.kv_type = o.kv_type;
  so.n_threads = ResolveThreads(o.threads);
  if (o.device.vulkan) {
    so.make_forward = GpuForwardFactory(*loaded->model, o.device, "bench --grammar");
  }
  auto service = engine::Service::Create(*loaded->model, *loaded->tokenizer, so);
  if (!service.ok()) Fail("bench --grammar", service.status());

  std::vector<double> plain, cold, warm;
  std::vector<int32_t> replay_tokens;
  int64_t constrained_tokens = 0, valid = 0;
  // The timed constrained runs' chained steps (a device's), overruled draws and whole rows.
  int64_t chained = 0, overruled = 0, fetched = 0;
  for (int rep = -1; rep < o.reps; ++rep) {  // rep -1 warms the engine; its grammar run is cold
    auto p = RunOne(**service, prompt, o.n_gen, 100 + rep, nullptr);
    if (!p.ok()) Fail("bench --grammar", p.status());
    // The warm-up run also records its tokens for the replay (logprobs are not free: only the
    // untimed run asks for them).
    const engine::EngineStats before = Settled(**service);
    auto c = RunOne(**service, prompt, o.n_gen, 100 + rep, *g, /*want_tokens=*/rep < 0);
    if (!c.ok()) Fail("bench --grammar", c.status());
    if (rep >= 0) {
      const engine::EngineStats after = Settled(**service);
      chained += after.chained_steps - before.chained_steps;
      overruled += after.chain_overruled - before.chain_overruled;
      fetched += after.rows_fetched - before.rows_fetched;
    }
    if (rep < 0) {
      cold.push_back(c->decode_tok_s());
      replay_tokens = c->tokens;
      continue;
    }
    plain.push_back(p->decode_tok_s());
    warm.push_back(c->decode_tok_s());
    constrained_tokens += c->n;
    valid += json::accept(c->text) ? 1 : 0;
  }
  const double plain_tok_s = Median(plain), warm_tok_s = Median(warm);
  auto trie = grammar::TokenTrie::Build(*loaded->tokenizer,
                                        static_cast<int32_t>(loaded->model->config().n_vocab));
  grammar::TokenConstraint replay(*g, trie);
  const double cold_us = ReplaySeconds(replay, replay_tokens, o.n_gen) * 1e6;
  const double warm_us = ReplaySeconds(replay, replay_tokens, o.n_gen) * 1e6;
  const double step_us = plain_tok_s > 0 ? 1e6 / plain_tok_s : 0.0;
  json out = {{"model", o.model},
              {"grammar", o.grammar_file},
              {"threads", so.n_threads},
              {"isa", kernels::IsaName(kernels::ActiveIsa())},
              {"device", o.device.vulkan ? o.device.ToString() : "cpu"},
              {"gen_tokens", o.n_gen},
              {"reps", o.reps},
              {"plain_tok_s", plain_tok_s},
              {"grammar_tok_s", warm_tok_s},
              {"grammar_cold_tok_s", cold.empty() ? 0.0 : cold[0]},
              {"ratio", plain_tok_s > 0 ? warm_tok_s / plain_tok_s : 0.0},
              {"grammar_mean_tokens", o.reps > 0 ? double(constrained_tokens) / o.reps : 0.0},
              {"grammar_outputs_parsing", valid},
              {"grammar_chained_steps", chained},
              {"grammar_chain_overruled", overruled},
              {"grammar_rows_fetched", fetched},
              {"mask_us_per_token_warm", warm_us},
              {"mask_us_per_token_cold", cold_us},
              {"mask_fraction_of_step_warm", step_us > 0 ? warm_us / step_us : 0.0},
              {"mask_fraction_of_step_cold", step_us > 0 ? cold_us / step_us : 0.0}};
  if (o.json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("model %s, grammar %s, %d threads, %s, temperature 1, %d reps (medians)\n",
              o.model.c_str(), o.grammar_file.c_str(), so.n_threads,
              kernels::IsaName(kernels::ActiveIsa()).c_str(), o.reps);
  if (o.device.vulkan) {
    std::printf(
        "  forward on %s: a plain step's mask applied on the device, a chained step's by the host "
        "to the row's best 64\n",
        o.device.ToString().c_str());
  }
  std::printf("  without mask         %8.2f tok/s (%lld tokens)\n", plain_tok_s,
              static_cast<long long>(o.n_gen));
  std::printf("  with mask (warm)     %8.2f tok/s (%.1f tokens on average), %.3fx\n", warm_tok_s,
              out["grammar_mean_tokens"].get<double>(), out["ratio"].get<double>());
  std::printf("  with mask (cold)     %8.2f tok/s (first request: every mask computed)\n",
              out["grammar_cold_tok_s"].get<double>());
  std::printf("  outputs that parse   %lld / %d\n", static_cast<long long>(valid), o.reps);
  if (o.device.vulkan) {
    std::printf(
        "  chained              %lld of %lld constrained tokens, %lld draws overruled by the "
        "grammar, %lld rows copied whole\n",
        static_cast<long long>(chained), static_cast<long long>(constrained_tokens),
        static_cast<long long>(overruled), static_cast<long long>(fetched));
  }
  std::printf(
      "  mask cost replayed   %.1f us/token warm (%.2f%% of a %.0f us step), %.1f us/token cold "
      "(%.2f%%), %zu tokens\n",
      warm_us, 100.0 * out["mask_fraction_of_step_warm"].get<double>(), step_us, cold_us,
      100.0 * out["mask_fraction_of_step_cold"].get<double>(), replay_tokens.size());
  return 0;
}

}  // namespace uf::cli
