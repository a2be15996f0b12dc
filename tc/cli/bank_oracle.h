// The expected state of `deuteron demo`'s bank (tc/cli/demo_command.h): what
// the store must hold after a crash and recovery, given what the clients
// were told.
//
// Accounts 0..n-1 start with the same balance. A transfer moves `amount`
// from one account to another in one transaction. Every transfer whose
// commit was acknowledged must be in the recovered store (a commit that
// returned OK is durable); a transfer whose commit failed (the connection
// broke while it was in flight, e.g. at the crash) is in doubt: it must be
// there wholly or not at all. Transfers commute (each adds a delta), so the
// order the clients saw does not matter: the store must equal the start
// plus the acknowledged transfers plus some subset of the in-doubt ones, and
// the total balance never changes.
//
// Thread safety: Acknowledged and InDoubt may be called from any threads at
// once; Verify and the accessors while no thread records.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace deuteron::cli {

struct Transfer {
  uint32_t from = 0, to = 0;
  int64_t amount = 0;
};

struct BankVerdict {
  bool ok = false;
  // What held, or the first thing that did not (account and balances).
  std::string detail;
  // Of the in-doubt transfers, how many the store holds (when ok).
  size_t in_doubt_committed = 0;
};

class BankOracle {
 public:
  // The in-doubt transfers Verify can resolve (it tries every subset).
  static constexpr size_t kMaxInDoubt = 20;

  BankOracle(size_t accounts, int64_t initial_balance);
  // Starts from these balances (e.g. as verified after an earlier crash).
  explicit BankOracle(std::vector<int64_t> balances);

  void Acknowledged(const Transfer& t);
  void InDoubt(const Transfer& t);

  // Checks `balances` (one per account, as read back from the store).
  BankVerdict Verify(const std::vector<int64_t>& balances) const;

  size_t accounts() const { return expected_.size(); }
  int64_t total() const { return total_; }
  size_t acknowledged() const;
  size_t in_doubt() const;

 private:
  mutable std::mutex mu_;
  std::vector<int64_t> expected_;  // GUARDED_BY(mu_): start + acknowledged
  std::vector<Transfer> in_doubt_;  // GUARDED_BY(mu_)
  size_t acknowledged_ = 0;         // GUARDED_BY(mu_)
  const int64_t total_;
};

}  // namespace deuteron::cli
