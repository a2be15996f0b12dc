// CheckHistoryFile: the offline check of a saved list-append history, shared
// by the `history_check FILE` tool and `deuteron crashtest --check-history
// FILE`: loads the file (history.h), checks it (isolation_checker.h), prints
// the report as one JSON object on `out`, or a one-line error on `err`.
//
// Thread safety: a function of its arguments (and the file).
#pragma once

#include <cstdio>
#include <string>

namespace deuteron::crash {

// The exit status: 0 no anomaly, 1 anomalies, 2 the file cannot be read or
// is not a history.
int CheckHistoryFile(const std::string& path, std::FILE* out, std::FILE* err);

}  // namespace deuteron::crash
