// deuteron: the command-line program (DESIGN.md, "Interfaces people will
// use"). Every subcommand is a CLI11 subcommand of one CLI::App, so all share
// one help layout, validation and error handling (tc/cli/cli_options.h).
//
// The pattern, for adding a subcommand `foo`:
//  1. tc/cli/foo_command.{h,cpp} declares and defines
//       void AddFooCommand(CLI::App& app, Runner& runner);
//     which calls app.add_subcommand("foo", "what it does"), adds its options
//     (bound to a std::shared_ptr<FooArgs>; sizes, durations and addresses
//     through AddSizeOption, AddDurationOption, AddAddressOption), and sets
//       cmd->callback([a, &runner] { /* cross-option checks: UsageError */
//                                    runner.Set([a] { return RunFoo(*a); }); });
//  2. main() below calls AddFooCommand(app, runner) (keep the list in the
//     order `deuteron --help` should show).
//  3. tc/CMakeLists.txt lists foo_command.cpp in the deuteron executable.
// RunFoo returns the exit status: 0 done, 1 runtime error (printed), 2 bad
// usage found only at run time. Parse errors exit 2 with a one-line reason
// (ParseAndRun); --help and --version exit 0.
#include "tc/cli/bench_command.h"
#include "tc/cli/check_command.h"
#include "tc/cli/cli_options.h"
#include "tc/cli/crashtest_command.h"
#include "tc/cli/dc_command.h"
#include "tc/cli/demo_command.h"
#include "tc/cli/shell_command.h"
#include "tc/cli/stats_command.h"
#include "tc/cli/tc_command.h"

int main(int argc, char** argv) {
  using namespace deuteron::cli;
  CLI::App app(
      "Deuteron is a transactional key-value store built the Deuteronomy way: a transactional\n"
      "component (locks, log, commit, recovery) over a data component (a latch-free Bw-tree on\n"
      "the LLAMA log-structured cache). Each command has --help.",
      "deuteron");
  ConfigureApp(app, DEUTERON_VERSION);
  app.require_subcommand(0, 1);
  Runner runner;
  AddServeCommand(app, runner);
  AddDcCommand(app, runner);
  AddTcCommand(app, runner);
  AddShellCommand(app, runner);
  AddStatsCommand(app, runner);
  AddCheckCommand(app, runner);
  AddDemoCommand(app, runner);
  AddBenchCommand(app, runner);
  AddCrashtestCommand(app, runner);
  return ParseAndRun(app, runner, argc, argv);
}
