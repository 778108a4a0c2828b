// `ultrafast plan`: the deployment planner and tier simulator (src/planner/, docs/planner.md).
#pragma once

#include <CLI/CLI.hpp>

namespace uf::cli {

void AddPlanCommand(CLI::App& app);

}  // namespace uf::cli
