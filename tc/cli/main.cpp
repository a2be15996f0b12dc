// deuteron: the command-line program. Commands arrive with the issues that
// build them (serve, dc, tc, shell, bench, crashtest, stats, check); each has
// --help.
#include <cstdio>
#include <cstring>
#include <string_view>

#include "tc/cli/dc_command.h"
#include "tc/cli/demo_command.h"
#include "tc/cli/shell_command.h"
#include "tc/cli/tc_command.h"

namespace {

constexpr const char* kUsage =
    "usage: deuteron [--help] [--version] <command> [args]\n"
    "\n"
    "Deuteron is a transactional key-value store built the Deuteronomy way:\n"
    "a transactional component (locks, log, commit, recovery) over a data\n"
    "component (a latch-free Bw-tree on the LLAMA log-structured cache).\n"
    "\n"
    "options:\n"
    "  --help      show this help and exit\n"
    "  --version   print the version and exit\n"
    "\n"
    "commands:\n"
    "  dc          run a data component server (deuteron dc --help)\n"
    "  serve       run the TC and DC in one process, serving clients (deuteron serve --help)\n"
    "  tc          run a TC server over a `deuteron dc` server (deuteron tc --help)\n"
    "  shell       an interactive prompt for transactions (deuteron shell --help)\n"
    "  demo        the whole system in a minute: a bank, crashed and recovered (deuteron demo --help)\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const std::string_view arg = argv[1];
  if (arg == "--help" || arg == "-h" || arg == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (arg == "--version" || arg == "version") {
    std::printf("deuteron %s\n", DEUTERON_VERSION);
    return 0;
  }
  if (arg == "dc") return deuteron::cli::RunDcCommand(argc - 1, argv + 1);
  if (arg == "serve") return deuteron::cli::RunServeCommand(argc - 1, argv + 1);
  if (arg == "tc") return deuteron::cli::RunTcCommand(argc - 1, argv + 1);
  if (arg == "shell") return deuteron::cli::ShellMain(argc - 1, argv + 1);
  if (arg == "demo") return deuteron::cli::DemoMain(argc - 1, argv + 1);
  std::fprintf(stderr, "deuteron: unknown command or option '%s'\n\n%s", argv[1], kUsage);
  return 2;
}
