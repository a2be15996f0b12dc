// CheckHistory: an Elle-style isolation checker for list-append histories
// (history.h). From the lists that reads return it infers each key's version
// order, then the write-write (ww), write-read (wr) and read-write (rw)
// dependencies between committed transactions, and reports:
//   G0        a cycle of ww edges only (dirty write)
//   G1a       aborted read: a read saw an element a failed transaction appended
//   G1b       intermediate read: a read ended at an element its writer later
//             followed with another append to the same key
//   G1c       a cycle of ww and wr edges (circular information flow)
//   G-single  a cycle with exactly one rw edge (read skew)
//   G2        a cycle with two or more rw edges (write skew)
//   incompatible-order  two reads of a key that are not prefixes of one another
//   duplicate-elements  a read holding one element twice
//   garbage-read        a read saw an element no transaction appended
//   lost-append         an acknowledged append missing from a read that
//                       began after the append's commit was acknowledged
//   internal            a transaction's read disagrees with its own earlier
//                       reads and appends of that key
//   duplicate-append    one element appended twice (the history itself is bad)
// The inference rules are in tc/crash/history/history.md.
//
// Thread safety: a pure function of its argument.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tc/crash/history/history.h"

namespace deuteron::crash {

struct IsolationReport {
  size_t ops_checked = 0;   // micro-operations in the history
  size_t txns_checked = 0;  // transactions in the history
  // One line per anomaly found, "<kind>: <detail>" (kinds above); at most
  // kMaxListedPerKind per kind are listed. Empty: serializable (and no
  // acknowledged append lost).
  std::vector<std::string> anomalies;
  // Every anomaly found, listed or not, by kind.
  std::map<std::string, size_t> counts;

  static constexpr size_t kMaxListedPerKind = 8;
  bool ok() const { return anomalies.empty(); }
  size_t count(std::string_view kind) const;
};

IsolationReport CheckHistory(const History& history);
IsolationReport CheckHistory(const std::vector<HistoryTxn>& txns);

// The report as one JSON object: {"ops_checked":N,"txns_checked":N,
// "counts":{...},"anomalies":[...]}.
std::string ReportToJson(const IsolationReport& report);

}  // namespace deuteron::crash
