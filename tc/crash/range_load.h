// The range workload of `deuteron crashtest` (tc/crash/crash.md, "Range
// workload"): what shows a phantom. Groups of keys "rg/<g>/<n>" hold at
// most `cap` keys each, by a rule every transaction keeps: it scans one
// group's range and, when the group holds fewer than cap keys, inserts one
// fresh key (after a short think, holding what the scan locked); when it
// holds cap or more, it deletes them all. Under serializable isolation no
// committed transaction's scan, and no state after a recovery, shows more
// than cap keys in a group. Two transactions that both scan a group short
// of cap and both insert into it, because neither scan's range lock kept
// the other's insert out, break the rule: a phantom (contract 6). The
// check after a recovery also compares each group with what was committed
// (CheckAll): an acknowledged insert or delete lost is reported even where
// the group stays within its cap.
//
// Thread safety: RunOne may be called from several threads at once (each
// with its own Random64); CheckAll and TakeViolations by one thread while no
// RunOne runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/random.h"
#include "common/status.h"
#include "tc/client/client.h"

namespace deuteron::crash {

struct RangeOptions {
  uint32_t groups = 2;    // "rg/0/" .. (at most 10)
  uint32_t cap = 1;       // keys a group may hold
  uint32_t think_ms = 5;  // an insert waits up to this long after its scan
  std::string prefix = "rg/";
};

class RangeWorkload {
 public:
  // REQUIRES: 1 <= groups <= 10, cap >= 1.
  explicit RangeWorkload(RangeOptions o);

  // One transaction on a random group. OK when it committed; otherwise why
  // not. A committed transaction whose scan saw more than cap keys is a
  // violation (TakeViolations).
  Status RunOne(client::Client& client, Random64& rng);

  // Reads every group in one transaction: a group over cap is a violation,
  // and its keys are then deleted (in a second transaction), so that a
  // later check does not report the same phantom again. The keys read are
  // also compared with what was committed since the last check: a key an
  // acknowledged transaction deleted, or that nothing inserted, must not be
  // there; a key the last check found or an acknowledged transaction
  // inserted must be, unless a transaction that committed or is in doubt
  // deleted it. Errors: what the reads or the repair returned.
  Status CheckAll(client::Client& client);

  // The violations found since the last call.
  std::vector<std::string> TakeViolations();

  uint64_t committed() const { return committed_.load(std::memory_order_relaxed); }
  const RangeOptions& options() const { return o_; }

 private:
  client::ScanOptions GroupRange(uint32_t g) const;
  std::string GroupPrefix(uint32_t g) const;
  // CheckAll's comparison of the keys read (per group) with the commits.
  void CompareWithCommitted(const std::vector<std::vector<std::string>>& groups);

  const RangeOptions o_;
  std::atomic<uint64_t> next_key_{0};
  std::atomic<uint64_t> committed_{0};
  std::mutex mu_;
  std::vector<std::string> violations_;  // guarded by mu_
  uint64_t phantom_scans_ = 0;           // guarded by mu_: since the last TakeViolations
  std::string first_phantom_;            // guarded by mu_: the first of those
  // Guarded by mu_: the keys the last CheckAll read, and since then the keys
  // inserted and deleted by acknowledged and by in-doubt transactions (a
  // commit that returned an error).
  std::set<std::string> base_;
  std::set<std::string> inserted_acked_, inserted_maybe_;
  std::set<std::string> deleted_acked_, deleted_maybe_;
};

}  // namespace deuteron::crash
