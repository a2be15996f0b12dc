// What `deuteron crashtest` found (tc/crash/crash.md, "Report"): counts,
// recovery times and violations, printed at the end as one JSON object.
//
// Thread safety: a value type used by one thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tc/crash/faults.h"
#include "tc/crash/proxy/rpc_proxy.h"

namespace deuteron::crash {

struct CrashReport {
  uint64_t seed = 0;
  uint64_t cycles = 0;  // cycles run to the end
  FaultCounts faults{};  // faults injected, per kind
  uint64_t kill_points_hit = 0;
  std::map<std::string, uint64_t> kill_point_names;  // hits per kill point
  ProxyCounts rpc;  // with rpc: what the proxy did over the whole run
  uint64_t io_faults_survived = 0;
  uint64_t tc_fail_stops = 0;  // enospc/eio on the DC made the TC stop itself; restarted  // enospc/eio cycles where the server kept running
  uint64_t acknowledged = 0;  // transfers acknowledged to a client
  uint64_t verified = 0;      // of those, found with their effects after a recovery
  uint64_t unknown = 0;       // commits in doubt (reply lost), resolved either way
  uint64_t keys_checked = 0;  // keys read back and checked after recoveries
  uint64_t history_ops_checked = 0;
  uint64_t bitflips_detected = 0;  // a flip reported as an error (at start or when read)
  uint64_t bitflips_harmless = 0;  // a flip in dead bytes: the store recovered and verified
  uint64_t bitflips_found_by_check = 0;  // `deuteron check` on the flipped store failed
  uint64_t crashed_store_checks = 0;          // --check-crashed runs
  uint64_t crashed_store_check_failures = 0;  // of those, not clean
  uint64_t store_checks = 0;       // `deuteron check` runs on the stopped store
  uint64_t lsn_probes = 0;         // LSN probes run (lsn_probe.h), one per verification
  uint64_t range_txns = 0;       // range workload transactions acknowledged (range_load.h)
  std::vector<double> recovery_ms;  // restart to first transaction served, per recovery
  std::vector<std::string> violations;
  uint64_t first_violation_cycle = 0;  // 0: none
  std::string break_contract;           // DEUTERON_BREAK of the run, if any

  // `enabled`: the fault kinds asked for (each appears in "faults", even
  // when 0).
  std::string ToJson(const std::vector<FaultKind>& enabled) const;
};

// The p-quantile (0..1, nearest rank) of `values`; 0 when empty.
double Percentile(std::vector<double> values, double p);

}  // namespace deuteron::crash
