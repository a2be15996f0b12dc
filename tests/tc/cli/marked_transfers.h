// Marked bank transfers against a `deuteron tc` process, for the tests that
// kill, restart or split the servers under load (tests/tc/cli/
// split_kill_test.cpp, tests/tc/crash/proxy/proxy_split_test.cpp).
//
// The bank: kTransferAccounts accounts (Account(i)) that start with
// kInitialBalance each. A transfer, made through the client library, reads
// two balances, moves one unit and writes a marker key (Marker(client, n))
// whose value names it ("a>b@balance_a,balance_b"). Each of kTransferClients
// client threads numbers its transfers and records what became of each:
// acknowledged (Commit returned OK), in doubt (Commit failed: it may have
// committed), or neither (it failed before its commit was asked for, so
// nothing of it may be there). A failed call ends the transfer and the
// client goes on with the next one; after Unavailable it connects again (the
// TC may be a new process, or on a new port after Start).
//
// VerifyTransfers then checks a store against the records: every
// acknowledged transfer is there with its marker, none that never reached
// its commit is, and the balances sum to the start's. (The crash harness's
// bank workload, tc/crash/bank_load.h, checks balances against an oracle
// instead: it has no per-transfer markers to check.)
//
// Thread safety: a MarkedTransfers is driven by one thread (Start, Stop,
// the waits, Errors); its client threads share its records under its mutex.
// records() only while stopped.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/random.h"
#include "tc/client/client.h"
#include "tests/tc/cli/cli_util.h"

namespace deuteron::test {

inline constexpr int kTransferAccounts = 16;
inline constexpr int kInitialBalance = 1000;
inline constexpr int kTransferClients = 4;

inline std::string Account(int i) { return "acct/" + std::to_string(100 + i); }
inline std::string Marker(int client, int n) { return "xfer/" + std::to_string(client) + "/" + std::to_string(n); }

// Per client: the transfers it numbered, and what became of them.
struct TransferRecord {
  int next = 0;                      // transfers numbered so far
  std::set<int> acked;               // Commit returned OK
  std::set<int> in_doubt;            // Commit failed: may have committed
  std::vector<std::string> markers;  // the marker value of transfer n
  int acked_since_mark = 0;          // acknowledged since the last ResetProgress or wait
};

// Puts every account with the initial balance, through the TC at `tc_port`.
inline void InitializeBank(uint16_t tc_port) {
  auto c = client::Client::Connect(LoopbackAddress(tc_port));
  REQUIRE(c.ok());
  const Status s = (*c)->Run([](client::Transaction& t) -> Status {
    for (int i = 0; i < kTransferAccounts; ++i) RETURN_IF_ERROR(t.Put(Account(i), std::to_string(kInitialBalance)));
    return Status::OK();
  });
  INFO(s.ToString());
  REQUIRE(s.ok());
  REQUIRE((*c)->Close().ok());
}

// Client threads making transfers until Stop; errors tallied by code.
class MarkedTransfers {
 public:
  // `seed` picks the transfers; a client gives up a connection attempt
  // after `connect_timeout_ms`.
  MarkedTransfers(uint64_t seed, int connect_timeout_ms)
      : seed_(seed), connect_timeout_ms_(connect_timeout_ms), records_(kTransferClients) {}
  ~MarkedTransfers() { Stop(); }

  // Starts the clients against the TC at `tc_port` (again after a Stop, to
  // another port if need be); counts progress from here.
  void Start(uint16_t tc_port) {
    ResetProgress();
    stop_ = false;
    const uint64_t start = starts_++;
    for (int c = 0; c < kTransferClients; ++c) {
      threads_.emplace_back([this, c, tc_port, start] {
        Run(c, tc_port, seed_ + start * kTransferClients + static_cast<uint64_t>(c));
      });
    }
  }
  void Stop() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }
  // Counts acknowledgements from now on, for WaitForProgress.
  void ResetProgress() {
    std::lock_guard<std::mutex> l(mu_);
    for (TransferRecord& r : records_) r.acked_since_mark = 0;
  }
  // Waits until every client has had `n` transfers acknowledged since
  // Start, ResetProgress or the last such wait; false after `timeout`.
  bool WaitForProgress(int n, std::chrono::seconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      {
        std::lock_guard<std::mutex> l(mu_);
        bool all = true;
        for (const TransferRecord& r : records_) all = all && r.acked_since_mark >= n;
        if (all) {
          for (TransferRecord& r : records_) r.acked_since_mark = 0;
          return true;
        }
      }
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  // REQUIRES: stopped.
  const std::vector<TransferRecord>& records() const { return records_; }
  // "Code: count" for every error seen, and the last one not retryable
  // (client::IsRetryable), for messages.
  std::string Errors() {
    std::lock_guard<std::mutex> l(mu_);
    std::string s;
    for (const auto& [code, n] : errors_) s += std::string(CodeName(code)) + ": " + std::to_string(n) + "; ";
    return s + "last other: " + last_other_;
  }
  // Errors other than the retryable ones (Deadlock, TimedOut, Unavailable).
  int other_errors() const { return other_errors_.load(); }

 private:
  void Note(const Status& s) {
    if (s.ok()) return;
    std::lock_guard<std::mutex> l(mu_);
    ++errors_[s.code()];
    if (!client::IsRetryable(s)) {
      ++other_errors_;
      last_other_ = s.ToString();
    }
  }

  void Run(int c, uint16_t tc_port, uint64_t seed) {
    Random64 rng(seed);
    std::unique_ptr<client::Client> client;
    while (!stop_.load()) {
      if (client == nullptr) {
        client::RemoteOptions o;
        o.connect_timeout_ms = connect_timeout_ms_;
        auto cl = client::Client::Connect(LoopbackAddress(tc_port), o);
        if (!cl.ok()) {
          Note(cl.status());
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          continue;
        }
        client = std::move(cl).value();
      }
      auto t = client->Begin();
      if (!t.ok()) {
        Note(t.status());
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      const int a = static_cast<int>(rng.Uniform(kTransferAccounts));
      const int b = (a + 1 + static_cast<int>(rng.Uniform(kTransferAccounts - 1))) % kTransferAccounts;
      auto va = (*t)->Get(Account(a));
      if (!va.ok()) {
        Note(va.status());
        continue;
      }
      auto vb = (*t)->Get(Account(b));
      if (!vb.ok()) {
        Note(vb.status());
        continue;
      }
      int n = 0;
      const std::string marker = std::to_string(a) + ">" + std::to_string(b) + "@" + *va + "," + *vb;
      {
        std::lock_guard<std::mutex> l(mu_);
        TransferRecord& r = records_[static_cast<size_t>(c)];
        n = r.next++;
        r.markers.push_back(marker);
      }
      Status s = (*t)->Put(Account(a), std::to_string(std::stoi(*va) - 1));
      if (s.ok()) s = (*t)->Put(Account(b), std::to_string(std::stoi(*vb) + 1));
      if (s.ok()) s = (*t)->Put(Marker(c, n), marker);
      if (!s.ok()) {  // no commit was asked for: nothing of n may be there
        Note(s);
        continue;
      }
      s = (*t)->Commit();
      Note(s);
      {
        std::lock_guard<std::mutex> l(mu_);
        TransferRecord& r = records_[static_cast<size_t>(c)];
        if (s.ok()) {
          r.acked.insert(n);
          ++r.acked_since_mark;
        } else {
          r.in_doubt.insert(n);
        }
      }
      t->reset();
      if (s.IsUnavailable()) client.reset();  // a new connection (the TC may be a new one)
    }
    // Transactions hold a pointer to their client: none is left here.
  }

  const uint64_t seed_;
  const int connect_timeout_ms_;
  uint64_t starts_ = 0;
  std::vector<TransferRecord> records_;  // GUARDED_BY(mu_) while running
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<int> other_errors_{0};
  std::mutex mu_;
  std::map<Code, int> errors_;  // GUARDED_BY(mu_)
  std::string last_other_;      // GUARDED_BY(mu_)
};

// Every acknowledged transfer of `records` is in the store behind the TC at
// `tc_port` with its marker, none that was never committed is, no balance is
// negative and the balances sum to the start's; and some were acknowledged.
inline void VerifyTransfers(uint16_t tc_port, const std::vector<TransferRecord>& records) {
  auto c = client::Client::Connect(LoopbackAddress(tc_port));
  REQUIRE(c.ok());
  size_t acked = 0, doubtful_present = 0, doubtful = 0;
  const Status s = (*c)->Run([&](client::Transaction& t) -> Status {
    acked = doubtful_present = doubtful = 0;
    long total = 0;
    for (int i = 0; i < kTransferAccounts; ++i) {
      auto v = t.Get(Account(i));
      if (!v.ok()) return v.status();
      CHECK(std::stol(*v) >= 0);
      total += std::stol(*v);
    }
    CHECK(total == long{kTransferAccounts} * kInitialBalance);
    for (size_t cl = 0; cl < records.size(); ++cl) {
      const TransferRecord& r = records[cl];
      for (int n = 0; n < r.next; ++n) {
        auto v = t.Get(Marker(static_cast<int>(cl), n));
        if (!v.ok() && !v.status().IsNotFound()) return v.status();
        const bool present = v.ok();
        const bool was_acked = r.acked.count(n) != 0;
        const bool in_doubt = r.in_doubt.count(n) != 0;
        INFO("client " << cl << " transfer " << n << " acked " << was_acked << " in doubt " << in_doubt);
        if (was_acked) {
          ++acked;
          CHECK(present);
        }
        if (!was_acked && !in_doubt) CHECK_FALSE(present);
        if (in_doubt) ++doubtful;
        if (present) {
          CHECK(*v == r.markers[static_cast<size_t>(n)]);
          if (in_doubt) ++doubtful_present;
        }
      }
    }
    return Status::OK();
  });
  INFO("verify: " << s.ToString());
  REQUIRE(s.ok());
  UNSCOPED_INFO("acknowledged " << acked << ", in doubt " << doubtful << " (present " << doubtful_present << ")");
  CHECK(acked > 0);
  REQUIRE((*c)->Close().ok());
}

}  // namespace deuteron::test
