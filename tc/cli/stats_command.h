// `deuteron stats --connect HOST:PORT`: a readable snapshot of a running
// server. Against a TC server (`serve` or `tc`): commits/s and aborts by
// cause, commit latency percentiles, the ESL and RSSP and the lag between
// them, the log's size, and the DC's figures as the TC sees them. Against a
// `deuteron dc` server: the DC's figures alone: memory in use against its
// budget, pages, flushes, cleaning, the LSS size and space amplification.
// Rates (commits/s) come from two snapshots --interval apart. --json prints
// one JSON object per snapshot (for machines); --watch keeps refreshing.
//
// Thread safety: called once, from main().
#pragma once

#include "tc/cli/cli_options.h"

namespace deuteron::cli {

void AddStatsCommand(CLI::App& app, Runner& runner);

}  // namespace deuteron::cli
