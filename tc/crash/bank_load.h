// The bank workload of `deuteron crashtest` (tc/crash/crash.md): accounts
// "bank/NNNNN" holding decimal balances, client threads making transfers
// (read both balances, move 1 to 100 when the payer has it, commit) that
// they record in a cli::BankOracle as acknowledged or in doubt, and the read
// back of the whole store after a recovery.
//
// Thread safety: a TransferLoad is started and stopped by one thread; its
// client threads share the Client (thread-safe) and the oracle
// (thread-safe). The free functions are used by one thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"
#include "tc/cli/bank_oracle.h"
#include "tc/client/client.h"

namespace deuteron::crash {

struct BankOptions {
  uint32_t accounts = 32;
  int64_t initial_balance = 1000;
  uint32_t threads = 3;
  // A transfer waits up to this long (uniform) between its writes and its
  // commit, so that uncommitted writes sit in the DC and above the log's
  // stable end for a while (0: none).
  uint32_t think_ms = 0;
};

std::string AccountKey(uint32_t i);

// Puts every account with the initial balance in one transaction.
Status LoadAccounts(client::Client& client, const BankOptions& o);

// The whole store as read back in one transaction (a scan of every key).
struct StoreContents {
  std::vector<int64_t> balances;  // one per account, in order
  size_t keys = 0;                // keys read, of any kind
  // What must not be there: a missing or extra account, a balance that is
  // not a number or negative, a key outside the bank and outside
  // `other_prefix`. Empty when the store is well formed.
  std::vector<std::string> problems;
};
// Keys starting with one of `other_prefixes` (other workloads', e.g.
// "la/") are counted and left to their own checks; empty: none allowed.
Result<StoreContents> ReadStore(client::Client& client, const BankOptions& o,
                                const std::vector<std::string>& other_prefixes);

// Client threads making transfers until Stop().
class TransferLoad {
 public:
  TransferLoad(client::Client* client, cli::BankOracle* oracle, BankOptions o, uint64_t seed);
  ~TransferLoad();  // Stop()
  void Start();
  void Stop();  // joins the threads

  uint64_t acknowledged() const { return acknowledged_.load(); }
  uint64_t in_doubt() const { return in_doubt_.load(); }
  uint64_t failures() const { return failures_.load(); }

 private:
  void Run(uint32_t thread);

  client::Client* const client_;
  cli::BankOracle* const oracle_;
  const BankOptions o_;
  const uint64_t seed_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> acknowledged_{0}, in_doubt_{0}, failures_{0};
  std::vector<std::thread> threads_;
};

}  // namespace deuteron::crash
