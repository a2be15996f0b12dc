// The crash-and-recover driver behind `deuteron crashtest` (tc/crash/crash.md):
// runs cycles against a `deuteron dc` + `deuteron tc` pair on loopback; each
// cycle runs the bank workload, injects one fault (chosen by the seed),
// restarts what died, measures the time until a transaction is served
// again, and checks the recovered store against the expected-state oracle
// (tc/cli/bank_oracle.h) and the bank invariant. Every `check_every` cycles
// and at the end it stops both servers cleanly and runs `deuteron check` on
// their directories. All choices (fault order, targets, moments, bits,
// client randomness) come from the one seed.
//
// Thread safety: a CrashTest is run once, by one thread (it starts its own
// client threads).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/random.h"
#include "common/status.h"
#include "tc/cli/bank_oracle.h"
#include "tc/client/client.h"
#include "tc/crash/bank_load.h"
#include "tc/crash/cluster.h"
#include "tc/crash/crash_report.h"
#include "tc/crash/faults.h"
#include "tc/crash/history/history.h"
#include "tc/crash/history/list_append.h"
#include "tc/crash/proxy/rpc_proxy.h"
#include "tc/crash/range_load.h"

namespace deuteron::crash {

struct CrashOptions {
  uint64_t cycles = 10;
  uint64_t seed = 1;
  std::vector<FaultKind> faults = {FaultKind::kKill};
  std::string program;  // the deuteron executable the servers run
  std::string dir;      // the run directory (must exist and be empty)
  BankOptions bank;
  // The workload runs a uniform random time in [min_window, max_window]
  // before the fault.
  std::chrono::milliseconds min_window{30};
  std::chrono::milliseconds max_window{300};
  // Stop cleanly and run `deuteron check` every this many cycles (0: only
  // after the last).
  uint64_t check_every = 10;
  // How long a restarted pair may take to serve a transaction again.
  std::chrono::milliseconds recovery_timeout{60000};
  // Client threads running the list-append workload next to the bank
  // (0: none); its history is checked for isolation anomalies after every
  // recovery and saved as history.jsonl in the run directory.
  uint32_t list_append_threads = 1;
  // Client threads running the range workload (range_load.h) next to the
  // bank (0: none); its groups are checked after every recovery.
  uint32_t range_threads = 0;
  RangeOptions range;
  // After each kill of both servers, run `deuteron check` on the crashed
  // store too (counted in crashed_store_check_failures, not a violation:
  // crash.md).
  bool check_crashed = false;
  // killpoint: the probability of dying at each hit of any kill point
  // (DEUTERON_KILL_POINT=*:P:SEED).
  std::string kill_point_probability = "0.05";
  // enospc, eio: the Nth counted write or sync fails, N uniform in [1, this].
  uint64_t io_fault_max_n = 40;
  // rpc: the per-frame fault probabilities of an rpc cycle (each cycle
  // draws each uniformly in [0, this]); the seed comes from the run's.
  ProxyFaults rpc_faults{.delay_p = 0.2, .max_delay = std::chrono::milliseconds(20), .drop_p = 0.02,
                         .reset_p = 0.02, .duplicate_p = 0.05};
  // Servers started with DEUTERON_BREAK=this (a contract broken on purpose,
  // to show the harness finds it); empty: none.
  std::string break_contract;
  // End the run after the first cycle with a violation.
  bool until_violation = false;
  FILE* progress = stderr;  // one line per cycle; nullptr: silent
};

class CrashTest {
 public:
  explicit CrashTest(CrashOptions o);
  ~CrashTest();

  // Runs the cycles. The report holds every violation found; a setup
  // failure (the servers do not start at all) is the returned error.
  Result<CrashReport> Run();

 private:
  struct LoadResult;

  // One cycle per fault kind. An error ends the run (recorded as a
  // violation by the caller): the pair could not be brought back.
  Status KillCycle(Random64& rng, uint64_t cycle);
  Status BitflipCycle(Random64& rng, uint64_t cycle);
  // killpoint, powerloss, torn, enospc, eio: the target restarted with the
  // fault armed through the hooks' environment variables (crash_spec).
  Status HookCycle(FaultKind kind, Random64& rng, uint64_t cycle);
  // rpc: the proxy between TC and DC injects faults for the window, then
  // forwards faithfully again.
  Status RpcCycle(Random64& rng, uint64_t cycle);
  // Counts a "deuteron: kill point NAME" line found in `text`; whether one was.
  bool CountKillPoint(const std::string& text);

  // Runs the bank workload for a random window, then calls `fault` while
  // the clients are still running, then stops them.
  Status RunLoad(Random64& rng, uint64_t cycle, const std::function<void()>& fault);
  // Connects to the TC until a transaction succeeds; the client, or
  // Unavailable after recovery_timeout.
  Result<std::unique_ptr<client::Client>> AwaitReady(std::chrono::milliseconds timeout);
  // Reads the store back and checks it against the oracle, then starts the
  // oracle afresh from what was read. `what` names the cycle in violations.
  // Errors: what reading returned (the caller decides whether an error is
  // a detection or a failure).
  Status Verify(client::Client& client, const std::string& what);
  // The LSN probe (lsn_probe.h): a key the DC holds at or above the TC's
  // log tail is a violation. Errors: the probe's calls failed.
  Status CheckFutureRecords(const std::string& what);
  // Reads every list, checks the whole history so far; anomalies not seen
  // before are violations.
  Status CheckLists(client::Client& client, const std::string& what);
  // Stops both servers cleanly and runs `deuteron check` on each directory.
  Status StopAndCheck(const std::string& what);
  Status StartBoth();
  void Violation(const std::string& what);
  void Progress(const char* format, ...) __attribute__((format(printf, 2, 3)));

  const CrashOptions o_;
  Cluster cluster_;
  std::unique_ptr<cli::BankOracle> oracle_;
  CrashReport report_;
  std::unique_ptr<RpcProxy> proxy_;  // with rpc: the TC's way to the DC
  std::unique_ptr<History> history_;
  std::unique_ptr<ListAppendWorkload> lists_;
  std::unique_ptr<RangeWorkload> ranges_;
  std::set<std::string> anomalies_seen_;
};

}  // namespace deuteron::crash
