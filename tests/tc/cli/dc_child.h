// StartDc: the port a `deuteron dc` child process serves on, from its first
// line. The child process itself (Child) and TempDir: cli_util.h.
//
// Thread safety: a Child is used by one thread.
#pragma once

#include <cstdint>

#include "tests/tc/cli/cli_util.h"

namespace deuteron {

using test::Child;
using test::TempDir;

// Reads the `deuteron dc` child's first line ("deuteron dc: serving DIR on
// HOST:PORT (rssp ...)") and returns the port it serves on.
inline uint16_t StartDc(Child* child) { return test::ServingPort(child->ReadLine()); }

}  // namespace deuteron
