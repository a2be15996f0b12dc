// `deuteron demo`: the whole system shown in under a minute (what
// `scripts/run` does with no arguments; tc/cli/demo.md says what it shows
// and how it checks itself).
//  1. In a fresh directory, starts a `deuteron dc` and a `deuteron tc`
//     server as two child processes on loopback (ephemeral ports).
//  2. Loads bank accounts, then drives transfers among them from several
//     client threads through the client library, with a progress line.
//  3. Kills both servers with SIGKILL mid-run, restarts them, and reports
//     the recovery: how long each took, what the DC had made durable, how
//     much log the TC replayed.
//  4. Reads every account back and checks it against an expected-state
//     oracle (tc/cli/bank_oracle.h): every acknowledged transfer survived,
//     every in-doubt one is wholly there or wholly absent, and the total
//     balance is unchanged.
//  5. Stops the servers cleanly and prints a summary of what it measured.
//
// Thread safety: called once, from main().
#pragma once

#include "tc/cli/cli_options.h"

namespace deuteron::cli {

// Adds `demo` to the program (tc/cli/main.cpp's pattern). Its exit status:
// 0 only when the verification holds; 1 when it fails or the demo could not
// run; 2 on bad usage.
void AddDemoCommand(CLI::App& app, Runner& runner);

}  // namespace deuteron::cli
