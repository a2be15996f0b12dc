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
// Thread safety: each is called once, from main().
#pragma once

namespace deuteron::cli {

// argv[0] is the command's name. Return the process exit status: 0 after a
// clean shutdown, 1 on a runtime error (printed), 2 on bad usage.
int RunServeCommand(int argc, char** argv);
int RunTcCommand(int argc, char** argv);

}  // namespace deuteron::cli
