// The fault kinds `deuteron crashtest` injects (tc/crash/crash.md, "Faults"),
// their names on the command line and in the JSON report, and which of them
// need a server built with fault hooks (DEUTERON_FAULT_HOOKS, crash_spec).
//
// Thread safety: free functions over constant tables.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace deuteron::crash {

enum class FaultKind {
  kKill = 0,       // SIGKILL to the TC, the DC or both at a seeded random moment
  kKillPoint = 1,  // the server kills itself at a named kill point (hooks)
  kPowerLoss = 2,  // unsynced writes lost at the crash (hooks: fault Env)
  kTorn = 3,       // the last unsynced write torn at the crash (hooks)
  kBitflip = 4,    // one bit flipped in a log or LSS file of the stopped store
  kEnospc = 5,     // the Nth write or sync fails with ENOSPC (hooks)
  kEio = 6,        // the Nth write or sync fails with EIO (hooks)
  kRpc = 7,        // a proxy between TC and DC delays, drops, resets, duplicates
  kStall = 8,      // the disk stops taking writes for a while, then power loss (hooks)
};
inline constexpr size_t kFaultKinds = 9;

// "kill", "killpoint", "powerloss", "torn", "bitflip", "enospc", "eio", "rpc",
// "stall".
std::string_view FaultName(FaultKind kind);

// Whether the kind works only against servers built with fault hooks.
bool NeedsHooks(FaultKind kind);

// Parses a comma-separated list of names (no duplicates, at least one), in
// the order given. InvalidArgument naming the unknown or repeated name.
Result<std::vector<FaultKind>> ParseFaults(std::string_view list);

// Counts per kind, indexed by the kind's value.
using FaultCounts = std::array<uint64_t, kFaultKinds>;

}  // namespace deuteron::crash
