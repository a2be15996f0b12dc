// history_check FILE: checks a list-append history saved by History::Save
// (tc/crash/history/history.md) for isolation anomalies, offline. Prints the
// report as one JSON object; exit 0: none, 1: anomalies, 2: bad usage or an
// unreadable history.
#include <cstdio>

#include "tc/crash/history/history_check.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: history_check FILE\n");
    return 2;
  }
  return deuteron::crash::CheckHistoryFile(argv[1], stdout, stderr);
}
