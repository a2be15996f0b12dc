// `deuteron bench PROGRAM [ARGS...]`: runs one of the benchmark programs of
// bench/ (bench/README.md), found next to the deuteron program itself
// (build/<preset>/bin/), with ARGS passed through unchanged; the program
// replaces this process (exec), so its output and exit status are the
// command's. Without a program, or with one that is not a benchmark, it
// names the programs and exits 2; a benchmark that was not built exits 1
// saying which target builds it.
//
// Thread safety: called once, from main().
#pragma once

#include "tc/cli/cli_options.h"

namespace deuteron::cli {

// Registers the `bench` subcommand (tc/cli/main.cpp has the pattern).
void AddBenchCommand(CLI::App& app, Runner& runner);

}  // namespace deuteron::cli
