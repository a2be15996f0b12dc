// CheckHistoryFile (history_check.h).
#include "tc/crash/history/history_check.h"

#include "tc/crash/history/history.h"
#include "tc/crash/history/isolation_checker.h"

namespace deuteron::crash {

int CheckHistoryFile(const std::string& path, std::FILE* out, std::FILE* err) {
  Result<std::unique_ptr<History>> history = History::Load(path);
  if (!history.ok()) {
    std::fprintf(err, "history check: %s\n", history.status().ToString().c_str());
    return 2;
  }
  const IsolationReport report = CheckHistory(**history);
  std::fprintf(out, "%s\n", ReportToJson(report).c_str());
  return report.ok() ? 0 : 1;
}

}  // namespace deuteron::crash
