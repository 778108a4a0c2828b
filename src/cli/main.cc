// `ultrafast <command>`: run, logits, tokenize, info, synth, bench, serve, keys, plan, history,
// pull, devices.
#include <CLI/CLI.hpp>
#include <string>

#include "cli/common.h"
#include "cli/plan_command.h"
#include "cli/serve.h"
#include "cli/version.h"
#include "kernels/matmul.h"

namespace {

// What a bug report needs first: which build, and which kernels it runs on this CPU.
std::string VersionText() {
  return std::string("ultrafast ") + uf::cli::kVersion + " (commit " + uf::cli::kGitCommit +
         ")\nCPU kernel tier: " + uf::kernels::IsaName(uf::kernels::ActiveIsa()) +
         " (UF_ISA=scalar|avx2|avx512 caps it)";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ultrafast: a fast CPU inference engine for GGUF language models"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every command");
  app.set_version_flag("--version", VersionText,
                       "Print the version, git commit and CPU kernel tier");
  uf::cli::AddRunCommand(app);
  uf::cli::AddLogitsCommand(app);
  uf::cli::AddTokenizeCommand(app);
  uf::cli::AddInfoCommand(app);
  uf::cli::AddSynthCommand(app);
  uf::cli::AddBenchCommand(app);
  uf::cli::AddServeCommands(app);  // serve, keys
  uf::cli::AddPlanCommand(app);
  uf::cli::AddHistoryCommand(app);
  uf::cli::AddPullCommand(app);
  uf::cli::AddDevicesCommand(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
