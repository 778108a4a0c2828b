// `ultrafast serve` (the OpenAI-compatible server) and `ultrafast keys` (API key admin).
#pragma once

#include <string>

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
  int64_t max_tokens_limit = 0;
  size_t max_body_bytes = 8u << 20;
  std::string api_key;
  std::string keys_db;
  int threads = 0;
};

// Runs the server until SIGINT/SIGTERM; returns the process exit code.
int RunServe(const ServeArgs& args);

// `keys --db PATH add NAME | list | revoke ID_OR_NAME`; returns the process exit code.
int RunKeys(const std::string& db, const std::string& action, const std::string& arg);

// Adds the `serve` and `keys` subcommands to app; a failing command throws
// CLI::RuntimeError(exit code), as the other subcommands do.
void AddServeCommands(CLI::App& app);

}  // namespace uf::cli
