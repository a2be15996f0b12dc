// `deuteron check --dir D`: an offline integrity check of a stopped store
// (a `serve` directory: log/ and dc/; a `tc` directory: log/; a `dc`
// directory). It takes the directory locks first, so it refuses a
// directory a running server holds (and no server starts meanwhile); then
// checks the log and the DC's files (tc/cli/store_check.h), the store
// identity across them, and the Bw-tree's Check on a scratch copy of the
// DC (opening the DC recovers, which writes: never the original). Prints
// what it checked and each problem with its file and offset; exits 0 only
// when clean, 1 otherwise (or when it cannot check), 2 on bad usage.
//
// Thread safety: called once, from main().
#pragma once

#include "tc/cli/cli_options.h"

namespace deuteron::cli {

void AddCheckCommand(CLI::App& app, Runner& runner);

}  // namespace deuteron::cli
