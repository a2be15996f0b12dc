// history_check FILE: checks a list-append history saved by History::Save
// (tc/crash/history/history.md) for isolation anomalies, offline. Prints the
// report as one JSON object; exit 0: none, 1: anomalies, 2: bad usage or an
// unreadable history.
#include <cstdio>
#include <string>

#include "tc/crash/history/history.h"
#include "tc/crash/history/isolation_checker.h"

int main(int argc, char** argv) {
  using namespace deuteron::crash;
  if (argc != 2) {
    std::fprintf(stderr, "usage: history_check FILE\n");
    return 2;
  }
  auto history = History::Load(argv[1]);
  if (!history.ok()) {
    std::fprintf(stderr, "history_check: %s\n", history.status().ToString().c_str());
    return 2;
  }
  const IsolationReport report = CheckHistory(**history);
  std::printf("%s\n", ReportToJson(report).c_str());
  return report.ok() ? 0 : 1;
}
