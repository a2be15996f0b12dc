// `deuteron dc`: runs a data component server (DESIGN.md, "Interfaces people
// will use"): opens (recovering) the DC in --dir, serves the DC protocol on
// --listen, and on SIGINT or SIGTERM shuts down cleanly: stops accepting,
// closes connections, then closes the DC (flush what the ESL allows,
// checkpoint, close).
//
// Thread safety: called once, from main().
#pragma once

#include "tc/cli/cli_options.h"

namespace deuteron::cli {

// Registers the `dc` subcommand (tc/cli/main.cpp has the pattern). Its run
// returns 0 after a clean shutdown, 1 on a runtime error (printed).
void AddDcCommand(CLI::App& app, Runner& runner);

}  // namespace deuteron::cli
