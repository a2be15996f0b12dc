// `deuteron crashtest`: the crash-and-recover harness (tc/crash/crash.md).
// Runs N cycles of workload, fault, restart and verification against a
// `deuteron dc` + `deuteron tc` pair on loopback, all from one printed seed,
// and prints one JSON object (--json) or a summary at the end; progress
// lines go to standard error.
//
// Thread safety: called once, from main().
#pragma once

#include "tc/cli/cli_options.h"

namespace deuteron::cli {

// Adds `crashtest` to the program (tc/cli/main.cpp's pattern). Exit status:
// 0 only when no violation was found; 1 on violations or when the harness
// could not run; 2 on bad usage (including a fault kind this build cannot
// inject).
void AddCrashtestCommand(CLI::App& app, Runner& runner);

}  // namespace deuteron::cli
