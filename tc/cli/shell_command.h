// `deuteron shell`: an interactive prompt (tc/cli/shell.h's interpreter)
// against a remote TC server (--connect HOST:PORT) or an embedded store in a
// directory (--dir DIR).
//  - Standard input a terminal: a banner, a prompt that names the open
//    transaction, line editing and history (libedit's readline interface;
//    history kept in $DEUTERON_HISTORY, else ~/.deuteron_history).
//  - Otherwise (a script on standard input): no banner, no prompts; each
//    line's output in order; exit status 1 when any command failed.
// Results go to standard output, errors ("error: ...") to standard error.
//
// Thread safety: called once, from main().
#pragma once

#include "tc/cli/cli_options.h"

namespace deuteron::cli {

// Adds `shell` to the program (tc/cli/main.cpp's pattern). Its exit status:
// 0, 1 (could not connect or open; or, reading a script, a command failed),
// 2 (bad usage).
void AddShellCommand(CLI::App& app, Runner& runner);

}  // namespace deuteron::cli
