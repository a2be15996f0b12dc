// The LSN probe of `deuteron crashtest` (tc/crash/crash.md, "Records from
// the future"): contract 1 (WAL before data) checked from outside both
// servers. Every operation a DC holds came from a record of the TC's log,
// which lies below the log's tail; after a TC crash the tail starts again at
// the recovered log's end. So a key the DC holds at an LSN at or above the
// TC's log tail comes from a log tail that was lost: an operation the DC
// made durable before its log record was (the ESL check at flush skipped).
//
// The probe scans the DC directly (unfenced reads, as any client may) and
// reads the TC's log tail afterwards (its tcStats), so a commit racing the
// probe can only raise the tail it compares against: no false alarm.
//
// Thread safety: a free function; each call uses its own connections.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace deuteron::crash {

struct FutureRecords {
  uint64_t log_tail = 0;      // the TC's, read after the scan
  uint64_t keys_scanned = 0;  // keys the DC holds (tombstones excluded)
  uint64_t count = 0;         // keys at an LSN >= log_tail
  std::vector<std::string> examples;  // the first few: "KEY at LSN L"
};

// Scans every key of the DC at dc_host:dc_port, then reads the log tail of
// the TC at tc_host:tc_port. Errors: what either call returned.
Result<FutureRecords> FindFutureRecords(const std::string& tc_host, uint16_t tc_port,
                                        const std::string& dc_host, uint16_t dc_port);

}  // namespace deuteron::crash
