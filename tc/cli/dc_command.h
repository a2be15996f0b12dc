// `deuteron dc`: runs a data component server (DESIGN.md, "Interfaces people
// will use"): opens (recovering) the DC in --dir, serves the DC protocol on
// --listen, and on SIGINT or SIGTERM shuts down cleanly: stops accepting,
// closes connections, then closes the DC (flush what the ESL allows,
// checkpoint, close).
//
// Thread safety: called once, from main().
#pragma once

namespace deuteron::cli {

// argv[0] is "dc". Returns the process exit status: 0 after a clean
// shutdown, 1 on a runtime error (printed), 2 on bad usage.
int RunDcCommand(int argc, char** argv);

}  // namespace deuteron::cli
