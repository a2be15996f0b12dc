// The TC server commands (DESIGN.md, "Interfaces people will use"), both
// serving the TransactionService (tc/server/tc_server.h) on --listen:
//  - `deuteron serve`: the TC and DC in one process over one directory
//    (tc::Database: dir/log, dir/dc, dir/LOCK);
//  - `deuteron tc`: a TC whose log lives in --dir and whose DC is a
//    `deuteron dc` server at --dc.
// SIGINT or SIGTERM shuts either down cleanly: stop serving (open
// transactions are aborted), close the TC (final ESL), then the log and, for
// serve, the DC.
//
// Thread safety: called once, from main().
#pragma once

#include "tc/cli/cli_options.h"

namespace deuteron::cli {

// Register the subcommands (tc/cli/main.cpp has the pattern). Their runs
// return 0 after a clean shutdown, 1 on a runtime error (printed).
void AddServeCommand(CLI::App& app, Runner& runner);
void AddTcCommand(CLI::App& app, Runner& runner);

}  // namespace deuteron::cli
