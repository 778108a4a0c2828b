// `ultrafast serve` (the OpenAI-compatible server), `ultrafast keys` (API keys and plans) and
// `ultrafast usage` (the usage ledger).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace CLI {
class App;
}

namespace uf::cli {

struct ServeArgs {
  std::string model;
  std::string model_id;  // "" = the model file's name without .gguf
  std::string host = "127.0.0.1";
  int port = 8080;
  int64_t ctx = 0;  // 0 = min(4096, the model's training context)
  int max_seqs = 8;
  int max_queue = 64;
  int64_t prefill_chunk = 256;
  int64_t kv_tokens = 0;
  int64_t block_size = 16;
  bool no_prefix_cache = false;
  std::string kv_type = "f16";  // K/V cache element type
  std::string device = "cpu";   // --device cpu|vulkan[:N]
  bool no_ultrafast_spec = false;  // ultrafast requests do not speculate unless they ask
  int spec_k = 8;                  // drafts per step of a speculating request that does not say
  int64_t max_tokens_limit = 0;
  size_t max_body_bytes = 8u << 20;
  std::string api_key;
  std::string keys_db;          // also turns metering on (the ledger lives in the same file)
  std::string metering_config;  // JSON prices and plans; "" = built-in defaults
  int threads = 0;
  // Service tiers (docs/tiers.md).
  double ultrafast_slack = 0.05;    // allowed slowdown of ultrafast tokens vs. running alone
  double flex_max_wait = 10.0;      // seconds a flex request may wait before it is served
  int ultrafast_capacity = 1;       // concurrent ultrafast streams; 0 disables the tier
  std::string default_tier = "default";  // what `auto` and absent service_tier mean
  std::string history_dir;  // Computer History folder for POST /v1/history/ask; "" = off
  // A Jinja chat template used instead of the model's tokenizer.chat_template; "" = the model's.
  std::string chat_template_file;
  // Tests: the engine sleeps this long before every step, so a stream lasts at least
  // pace_ms per step however fast the model is (0 = off).
  int pace_ms = 0;
  // Tests: speculation controllers assume fixed verify costs instead of measuring them, so how
  // many drafts they verify does not depend on the machine's load.
  bool spec_fixed_cost = false;
  size_t responses_store = 1000;  // stored Responses API responses at most (0 = none kept)
  double responses_ttl_s = 3600;  // how long each is kept
};

// Runs the server until SIGINT/SIGTERM; returns the process exit code.
int RunServe(const ServeArgs& args);

struct KeysArgs {
  std::string db;
  std::string action;           // create (alias add), list, revoke, plan
  std::string name;             // create: the new key's name; revoke, plan: id or name
  std::string plan;             // create, plan: "" = the default plan
  std::string metering_config;  // plans --plan is checked against; "" = built-in
};
// `keys --db PATH create NAME [--plan P] | list | revoke ID_OR_NAME | plan ID_OR_NAME --plan P`;
// returns the process exit code.
int RunKeys(const KeysArgs& args);

struct UsageArgs {
  std::string keys_db;
  std::string key;    // id or name; "" = every key
  std::string since;  // see ParseSince; "" = all time
  bool json = false;
};
// `usage --keys-db PATH [--key K] [--since WHEN] [--json]`: per-key, per-tier totals.
int RunUsage(const UsageArgs& args);

// --since: unix seconds, "YYYY-MM-DD[THH:MM[:SS]]" (UTC), or a duration before now ("90s", "30m",
// "2h", "7d"); "" = 0 (all time).
StatusOr<double> ParseSince(std::string_view text, double now);

// Adds the `serve`, `keys` and `usage` subcommands to app; a failing command throws
// CLI::RuntimeError(exit code), as the other subcommands do.
void AddServeCommands(CLI::App& app);
// `keys` and `usage` (keys_command.cc); called by AddServeCommands.
void AddAdminCommands(CLI::App& app);

}  // namespace uf::cli
