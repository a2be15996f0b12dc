// Stress: many threads run random transactions (point reads, transfers with
// upgrades, scans over random ranges) against one LockManager. Two checks can
// fail: a shadow table of granted locks, updated after each grant and before
// each release, must never hold two conflicting locks of different
// transactions; and the accounts, plain integers touched only under locks,
// must keep their total in every full scan (TSan also sees any unordered
// access to them). No wait may time out: a lost wakeup or a missed cycle would.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/random.h"
#include "tc/lock/lock_manager.h"

namespace deuteron::tc {
namespace {

constexpr int kAccounts = 24;
constexpr int64_t kInitial = 100;

std::string AccountKey(int i) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "acct%02d", i);
  return buf;
}

// What the lock manager has granted, as the test saw it.
class Shadow {
 public:
  void AddKey(TxnId txn, const std::string& key, LockMode mode) {
    std::lock_guard<std::mutex> guard(mu_);
    for (const Held& h : held_) {
      if (h.txn == txn) continue;
      const bool overlap = h.range ? h.range->Contains(key) : h.key == key;
      const bool conflict = h.range ? mode == LockMode::kExclusive
                                    : (mode == LockMode::kExclusive ||
                                       h.mode == LockMode::kExclusive);
      if (overlap && conflict) violations_++;
    }
    held_.push_back(Held{txn, key, mode, std::nullopt});
  }
  void AddRange(TxnId txn, const KeyRange& range) {
    std::lock_guard<std::mutex> guard(mu_);
    for (const Held& h : held_) {
      if (h.txn != txn && !h.range && h.mode == LockMode::kExclusive && range.Contains(h.key)) {
        violations_++;
      }
    }
    held_.push_back(Held{txn, "", LockMode::kShared, range});
  }
  void Remove(TxnId txn) {
    std::lock_guard<std::mutex> guard(mu_);
    std::erase_if(held_, [&](const Held& h) { return h.txn == txn; });
  }
  uint64_t violations() {
    std::lock_guard<std::mutex> guard(mu_);
    return violations_;
  }

 private:
  struct Held {
    TxnId txn;
    std::string key;
    LockMode mode;
    std::optional<KeyRange> range;
  };
  std::mutex mu_;
  std::vector<Held> held_;
  uint64_t violations_ = 0;
};

struct Outcome {
  uint64_t commits = 0, deadlocks = 0, timeouts = 0, bad_totals = 0, negative = 0, unexpected = 0;
};

void RunStress(int threads, std::chrono::milliseconds duration) {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  LockManager::Options options;
  // Long enough that no wait ends by timeout: every cycle must be found by
  // detection and every release must wake its waiters.
  options.lock_timeout = std::chrono::seconds(5);
  LockManager lm(options);
  Shadow shadow;
  std::vector<int64_t> balance(kAccounts, kInitial);  // guarded by the locks
  std::atomic<TxnId> next_txn{1};
  std::atomic<bool> stop{false};
  std::vector<Outcome> outcomes(threads);

  auto worker = [&](int t) {
    Random64 rnd(seed + t);
    Outcome& out = outcomes[t];
    while (!stop.load()) {
      const TxnId txn = next_txn.fetch_add(1);
      Status s = Status::OK();
      auto lock_key = [&](int i, LockMode mode) {
        s = lm.LockKey(txn, AccountKey(i), mode);
        if (s.ok()) shadow.AddKey(txn, AccountKey(i), mode);
        return s.ok();
      };
      const uint64_t kind = rnd.Uniform(10);
      if (kind < 5) {
        // Transfer: read both (S), then upgrade; random order makes cycles.
        const int a = static_cast<int>(rnd.Uniform(kAccounts));
        const int b = static_cast<int>(rnd.Uniform(kAccounts));
        if (lock_key(a, LockMode::kShared) && lock_key(b, LockMode::kShared) &&
            lock_key(a, LockMode::kExclusive) && lock_key(b, LockMode::kExclusive)) {
          const int64_t amount = std::min<int64_t>(balance[a], rnd.Uniform(10));
          balance[a] -= amount;
          std::this_thread::yield();
          balance[b] += amount;
        }
      } else if (kind < 7) {
        const int a = static_cast<int>(rnd.Uniform(kAccounts));
        if (lock_key(a, LockMode::kShared) && balance[a] < 0) out.negative++;
      } else {
        // Scan: the whole table (checks the total) or a random subrange.
        KeyRange range;
        const bool full = rnd.OneIn(2);
        if (!full) {
          const int lo = static_cast<int>(rnd.Uniform(kAccounts));
          const int hi = lo + 1 + static_cast<int>(rnd.Uniform(6));
          if (!rnd.OneIn(4)) range.lo = AccountKey(lo);
          if (!rnd.OneIn(4)) range.hi = AccountKey(hi);
        }
        s = lm.LockRange(txn, range);
        if (s.ok()) {
          shadow.AddRange(txn, range);
          int64_t total = 0;
          for (int i = 0; i < kAccounts; i++) {
            if (range.Contains(AccountKey(i))) total += balance[i];
          }
          if (full && total != kInitial * kAccounts) out.bad_totals++;
        }
      }
      if (s.ok()) {
        out.commits++;
      } else if (s.code() == Code::kDeadlock) {
        out.deadlocks++;
      } else if (s.code() == Code::kTimedOut) {
        out.timeouts++;
      } else {
        out.unexpected++;
      }
      shadow.Remove(txn);  // before the release: the shadow never over-reports
      lm.ReleaseAll(txn);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; t++) pool.emplace_back(worker, t);
  std::this_thread::sleep_for(duration);
  stop.store(true);
  for (std::thread& th : pool) th.join();

  Outcome sum;
  for (const Outcome& o : outcomes) {
    sum.commits += o.commits;
    sum.deadlocks += o.deadlocks;
    sum.timeouts += o.timeouts;
    sum.bad_totals += o.bad_totals;
    sum.negative += o.negative;
    sum.unexpected += o.unexpected;
  }
  int64_t total = 0;
  for (int64_t b : balance) total += b;
  INFO("commits " << sum.commits << " deadlocks " << sum.deadlocks << " timeouts "
                  << sum.timeouts);
  CHECK(shadow.violations() == 0);
  CHECK(sum.bad_totals == 0);
  CHECK(sum.negative == 0);
  CHECK(sum.unexpected == 0);
  CHECK(sum.timeouts == 0);
  CHECK(total == kInitial * kAccounts);
  CHECK(sum.commits > 0);
  CHECK(sum.deadlocks > 0);  // the workload does make cycles
  CHECK(lm.NumWaiting() == 0);
}

TEST_CASE("stress: random transactions never hold conflicting locks", "[tc][lock][stress]") {
  RunStress(8, std::chrono::milliseconds(2000));
}

TEST_CASE("soak: random transactions never hold conflicting locks", "[.][tc][lock][soak]") {
  RunStress(16, std::chrono::seconds(60));
}

}  // namespace
}  // namespace deuteron::tc
