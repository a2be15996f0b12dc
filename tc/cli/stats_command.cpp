#include "tc/cli/stats_command.h"

namespace deuteron::cli {

void AddStatsCommand(CLI::App& app, Runner& runner) {
  CLI::App* cmd = app.add_subcommand("stats", "stats");
  cmd->callback([&runner] { runner.Set([] { return 2; }); });
}

}  // namespace deuteron::cli
