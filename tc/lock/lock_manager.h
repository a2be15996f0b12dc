// LockManager: the TC's record and key-range locks (strict two-phase locking).
// Design note: tc/lock/lock.md.
//
// Modes: shared (S) and exclusive (X) record locks on keys (byte strings), and
// shared range locks on [lo, hi) for scans (either bound may be open; both scan
// directions lock the same range). Compatibility, for different transactions:
//
//              S rec   X rec   S range
//   S rec       yes     no      yes
//   X rec       no      no      no  (if the key is inside the range)
//   S range     yes     no*     yes
//   (*) conflicts with an X record lock on any key in [lo, hi); inserts and
//       deletes take X record locks, so they are covered by the same rule.
//
// A transaction never conflicts with itself: re-acquiring a held lock (or a
// weaker one) is a no-op, S -> X on a key it holds is an upgrade, and a range
// contained in one it holds is a no-op.
//
// Fairness: requests are ordered by one global arrival sequence. A waiting
// request is granted once no other transaction holds a conflicting lock and
// no conflicting request of another transaction arrived before it (FIFO among
// conflicting requests, per key and between ranges and the keys inside them),
// so a stream of readers cannot starve a writer, nor writers a scan. An upgrade
// waits only for the other holders of the key, and blocks later requests.
//
// Deadlock: before a request waits, its blockers (conflicting holders and
// earlier conflicting waiters) become edges of a wait-for graph, and a cycle
// through the new waiter is searched. The victim is the YOUNGEST transaction
// in the cycle (the largest TxnId; the TC hands out ids in begin order): its
// waiting call returns Deadlock, and its caller must then ReleaseAll(). A lock
// wait also ends with TimedOut after Options::lock_timeout, as a backstop.
//
// Sharding: record locks live in kShards ordered maps picked by key hash, each
// under its own mutex; unrelated keys do not share a mutex. Range locks live in
// one list under range_mu_, with an atomic count of held and waiting range
// requests: while it is zero (read under the shard mutex), record requests
// touch only their shard. While range locks exist, X record requests (and
// releases) also take range_mu_. The graph mutex is taken only by requests
// about to wait, by grants of waiting requests, and by ReleaseAll while some
// request waits.
//
// Lock order: range_mu_ -> one shard mutex -> graph_mu_ (never two shard
// mutexes at once).
//
// Thread safety: all methods may be called concurrently from any threads.
// REQUIRES: calls for one transaction are not concurrent with each other
// (a transaction is driven by one thread at a time).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/slice.h"
#include "common/status.h"

namespace deuteron::tc {

// Transactions are named by ids given in begin order: larger is younger.
using TxnId = uint64_t;

enum class LockMode : uint8_t { kShared, kExclusive };

// A key range [lo, hi); an absent bound is open (-inf or +inf).
struct KeyRange {
  std::optional<std::string> lo;
  std::optional<std::string> hi;

  bool Contains(std::string_view key) const {
    return (!lo || key >= std::string_view(*lo)) && (!hi || key < std::string_view(*hi));
  }
  // True when every key of `other` is in this range.
  bool Covers(const KeyRange& other) const;
};

struct LockStats {
  uint64_t waits = 0;
  uint64_t deadlocks = 0;
  uint64_t timeouts = 0;
};

class LockManager {
 public:
  struct Options {
    std::chrono::milliseconds lock_timeout{10000};
  };

  explicit LockManager(Options options);
  LockManager() : LockManager(Options{}) {}
  // REQUIRES: no transaction holds or waits for a lock.
  ~LockManager();

  LockManager(const LockManager&) = delete;
  LockManager& operator=(const LockManager&) = delete;

  // Locks `key` in `mode` for `txn`, waiting as long as a conflicting lock is
  // held or requested earlier. Returns OK when granted, Deadlock when `txn` was
  // chosen as a deadlock victim, TimedOut after the lock timeout. On failure
  // `txn` keeps the locks it held before the call.
  Status LockKey(TxnId txn, Slice key, LockMode mode);

  // Locks `range` shared for `txn` (a scan). Same results as LockKey, and
  // InvalidArgument when lo > hi (lo == hi is an empty range: granted).
  Status LockRange(TxnId txn, const KeyRange& range);

  // Releases every lock of `txn` and wakes the waiters this unblocks.
  // REQUIRES: `txn` is not waiting.
  void ReleaseAll(TxnId txn);

  // For tests and stats: whether `txn` holds `key` in at least `mode`.
  bool HoldsKey(TxnId txn, Slice key, LockMode mode) const;
  // Number of requests currently waiting.
  size_t NumWaiting() const;
  LockStats stats() const;

  static constexpr size_t kShards = 64;

 private:
  // One waiting request: the waiter sleeps on `cv` under `*mu` (its shard's
  // mutex or range_mu_); whoever grants it, or picks it as a deadlock victim,
  // notifies it under that mutex.
  struct Waiter {
    explicit Waiter(std::mutex* m) : mu(m) {}
    std::mutex* const mu;
    std::condition_variable cv;
    std::atomic<bool> victim{false};  // set under graph_mu_, read under *mu
  };
  // A transaction's request on one key (at most one per transaction and key).
  struct Request {
    TxnId txn;
    LockMode mode;     // the granted mode, or the wanted one while waiting
    bool granted;
    bool upgrading;    // granted S and waiting for X
    uint64_t seq;      // arrival of the request (of the upgrade, if upgrading)
    std::shared_ptr<Waiter> waiter;  // while waiting
    bool WantsX() const { return upgrading || (!granted && mode == LockMode::kExclusive); }
  };
  struct Entry {
    std::vector<Request> requests;  // arrival order
  };
  struct alignas(64) Shard {
    std::mutex mu;
    std::map<std::string, Entry, std::less<>> entries;  // GUARDED_BY(mu)
  };
  struct RangeRequest {
    TxnId txn;
    KeyRange range;
    uint64_t seq;
    bool granted;
    std::shared_ptr<Waiter> waiter;  // while waiting
  };
  // What one transaction holds; touched only by that transaction's calls.
  struct TxnLocks {
    std::vector<std::string> keys;
    std::vector<std::list<RangeRequest>::iterator> ranges;
  };
  struct alignas(64) TxnShard {
    std::mutex mu;
    std::unordered_map<TxnId, std::unique_ptr<TxnLocks>> txns;  // GUARDED_BY(mu)
  };
  struct WaitNode {
    std::shared_ptr<Waiter> waiter;
    std::vector<TxnId> blockers;  // may be stale (a superset), never missing one
  };

  Shard& ShardFor(std::string_view key) const;
  // Locks `shard`; when range requests exist, first takes range_mu_ into
  // *range_lock (kept once taken). Range checks are needed exactly when
  // range_lock->owns_lock() afterwards.
  std::unique_lock<std::mutex> LockShard(Shard& shard, std::unique_lock<std::mutex>* range_lock);

  // The transactions that keep `req` from being granted (empty: grant it).
  // REQUIRES: the shard mutex held; check_ranges iff range_mu_ held.
  void RecordBlockers(const Entry& entry, const Request& req, std::string_view key,
                      bool check_ranges, std::vector<TxnId>* blockers) const;
  // REQUIRES: range_mu_ held; takes the shard mutexes one at a time.
  void RangeBlockers(const RangeRequest& req, std::vector<TxnId>* blockers) const;

  // Grants what can be granted among the waiters of `entry`.
  // REQUIRES: the shard mutex held; check_ranges iff range_mu_ held.
  void GrantEntry(Entry& entry, std::string_view key, bool check_ranges);
  // REQUIRES: range_mu_ held, no shard mutex held.
  void GrantRanges();
  // Re-examines the waiters on keys inside `range`.
  // REQUIRES: range_mu_ held, no shard mutex held.
  void GrantKeysIn(const KeyRange& range);

  // Records that `txn` waits for `blockers` and searches a cycle through it.
  // Returns true when `txn` is the victim; otherwise *wake gets the victims
  // (of other cycles through txn) to wake with WakeVictim once no mutex is held.
  bool RegisterWait(TxnId txn, const std::shared_ptr<Waiter>& waiter, std::vector<TxnId> blockers,
                    std::vector<std::shared_ptr<Waiter>>* wake);
  void UnregisterWait(TxnId txn);
  static void WakeVictim(const std::shared_ptr<Waiter>& victim);
  // Wakes `victims` (without holding `lock`), then sleeps under `lock` until
  // granted() holds (OK), `waiter` is a victim or self_victim (Deadlock), or
  // the lock timeout passes (TimedOut). The caller withdraws a failed request.
  Status Await(std::unique_lock<std::mutex>& lock, Waiter& waiter, bool self_victim,
               const std::vector<std::shared_ptr<Waiter>>& victims,
               const std::function<bool()>& granted);

  TxnLocks& LocksOf(TxnId txn);

  const Options options_;
  std::atomic<uint64_t> next_seq_{1};
  std::unique_ptr<Shard[]> shards_;
  std::unique_ptr<TxnShard[]> txn_shards_;

  std::mutex range_mu_;
  std::list<RangeRequest> ranges_;       // GUARDED_BY(range_mu_), arrival order
  // Held and waiting range requests: incremented before a range request takes
  // its sequence number, decremented after it leaves ranges_. Read under a
  // shard mutex, zero means no range can block the record requests there.
  std::atomic<int64_t> range_count_{0};

  std::mutex graph_mu_;
  std::unordered_map<TxnId, WaitNode> graph_;  // GUARDED_BY(graph_mu_), waiting txns

  std::atomic<uint64_t> waiting_{0};
  std::atomic<uint64_t> waits_{0};
  std::atomic<uint64_t> deadlocks_{0};
  std::atomic<uint64_t> timeouts_{0};
};

}  // namespace deuteron::tc
