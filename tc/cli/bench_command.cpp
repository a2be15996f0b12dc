#include "tc/cli/bench_command.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace deuteron::cli {
namespace {

// The programs of bench/ (bench/CMakeLists.txt), in bench/README.md's order.
constexpr const char* kPrograms[] = {"llama_bench", "bwtree_bench",   "dc_protocol_bench",
                                     "dc_server_load", "log_bench", "txn_bench",
                                     "dc_bench",    "loadtest"};

std::string ProgramList() {
  std::string list;
  for (const char* p : kPrograms) list += std::string(list.empty() ? "" : ", ") + p;
  return list;
}

int RunBench(const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) {
    std::fprintf(stderr, "deuteron bench: cannot find the deuteron program's directory: %s\n",
                 ec.message().c_str());
    return 1;
  }
  const fs::path program = self.parent_path() / args[0];
  if (!fs::exists(program, ec)) {
    std::fprintf(stderr,
                 "deuteron bench: %s is not built next to deuteron (%s); build it with "
                 "`cmake --build --preset release --target %s` or `scripts/bench %s`\n",
                 args[0].c_str(), self.parent_path().c_str(), args[0].c_str(), args[0].c_str());
    return 1;
  }
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(nullptr);
  execv(program.c_str(), argv.data());
  std::fprintf(stderr, "deuteron bench: cannot run %s: %s\n", program.c_str(), std::strerror(errno));
  return 1;
}

}  // namespace

void AddBenchCommand(CLI::App& app, Runner& runner) {
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Runs a benchmark program of bench/ (bench/README.md), found next to this program: "
      "deuteron bench PROGRAM [ARGS...], ARGS passed through (PROGRAM --help lists them). "
      "Programs: " + ProgramList() + ".");
  cmd->prefix_command();
  cmd->callback([cmd, &runner] {
    std::vector<std::string> args = cmd->remaining();
    if (args.empty()) UsageError("give a benchmark program: " + ProgramList());
    bool known = false;
    for (const char* p : kPrograms) known = known || args[0] == p;
    if (!known) UsageError("no benchmark program '" + args[0] + "': " + ProgramList());
    runner.Set([args = std::move(args)] { return RunBench(args); });
  });
}

}  // namespace deuteron::cli
