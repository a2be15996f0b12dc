#include "tc/lock/lock_manager.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <unordered_set>
#include <utility>

namespace deuteron::tc {

namespace {

bool Granted(bool granted, bool upgrading) { return granted && !upgrading; }

void AddBlocker(std::vector<TxnId>* blockers, TxnId txn) {
  if (std::find(blockers->begin(), blockers->end(), txn) == blockers->end()) {
    blockers->push_back(txn);
  }
}

}  // namespace

bool KeyRange::Covers(const KeyRange& other) const {
  const bool lo_ok = !lo || (other.lo && *other.lo >= *lo);
  const bool hi_ok = !hi || (other.hi && *other.hi <= *hi);
  return lo_ok && hi_ok;
}

LockManager::LockManager(Options options)
    : options_(options),
      shards_(std::make_unique<Shard[]>(kShards)),
      txn_shards_(std::make_unique<TxnShard[]>(kShards)) {}

LockManager::~LockManager() {
  assert(ranges_.empty() && graph_.empty() && "LockManager destroyed with locks held or waited");
}

LockManager::Shard& LockManager::ShardFor(std::string_view key) const {
  return shards_[std::hash<std::string_view>{}(key) % kShards];
}

LockManager::TxnLocks& LockManager::LocksOf(TxnId txn) {
  TxnShard& ts = txn_shards_[txn % kShards];
  std::lock_guard<std::mutex> guard(ts.mu);
  std::unique_ptr<TxnLocks>& slot = ts.txns[txn];
  if (!slot) slot = std::make_unique<TxnLocks>();
  return *slot;  // stable: only ReleaseAll(txn) erases it
}

std::unique_lock<std::mutex> LockManager::LockShard(Shard& shard,
                                                    std::unique_lock<std::mutex>* range_lock) {
  for (;;) {
    if (!range_lock->owns_lock() && range_count_.load() > 0) range_lock->lock();
    std::unique_lock<std::mutex> lock(shard.mu);
    // Read under the shard mutex: a range request that registers after this
    // read scans this shard after we release it, and takes a later sequence
    // number than every request here (see range_count_).
    if (range_lock->owns_lock() || range_count_.load() == 0) return lock;
  }
}

void LockManager::RecordBlockers(const Entry& entry, const Request& req, std::string_view key,
                                 bool check_ranges, std::vector<TxnId>* blockers) const {
  const bool want_x = req.WantsX();
  for (const Request& other : entry.requests) {
    if (other.txn == req.txn) continue;
    if (other.granted) {
      // A held lock conflicts unless both are S; an earlier upgrade also
      // blocks S requests that arrived after it (no upgrade starvation).
      if (want_x || other.mode == LockMode::kExclusive ||
          (other.upgrading && other.seq < req.seq)) {
        AddBlocker(blockers, other.txn);
      }
    } else if (other.seq < req.seq && (want_x || other.mode == LockMode::kExclusive)) {
      // FIFO among conflicting waiters. An upgrade skips earlier X waiters
      // (they cannot be granted while it holds S) but not earlier S waiters,
      // which could be granted first and then block it: so its blockers
      // never grow while it waits.
      if (req.upgrading && other.mode == LockMode::kExclusive) continue;
      AddBlocker(blockers, other.txn);
    }
  }
  if (want_x && check_ranges) {
    for (const RangeRequest& range : ranges_) {
      if (range.txn != req.txn && range.range.Contains(key) &&
          (range.granted || range.seq < req.seq)) {
        AddBlocker(blockers, range.txn);
      }
    }
  }
}

void LockManager::RangeBlockers(const RangeRequest& req, std::vector<TxnId>* blockers) const {
  for (size_t i = 0; i < kShards; i++) {
    Shard& shard = shards_[i];
    std::lock_guard<std::mutex> guard(shard.mu);
    auto it = req.range.lo ? shard.entries.lower_bound(*req.range.lo) : shard.entries.begin();
    for (; it != shard.entries.end() && (!req.range.hi || it->first < *req.range.hi); ++it) {
      for (const Request& other : it->second.requests) {
        if (other.txn == req.txn) continue;
        if ((other.granted && other.mode == LockMode::kExclusive) ||
            (other.WantsX() && other.seq < req.seq)) {
          AddBlocker(blockers, other.txn);
        }
      }
    }
  }
}

void LockManager::GrantEntry(Entry& entry, std::string_view key, bool check_ranges) {
  std::vector<TxnId> blockers;
  for (Request& req : entry.requests) {
    if (Granted(req.granted, req.upgrading)) continue;
    blockers.clear();
    RecordBlockers(entry, req, key, check_ranges, &blockers);
    if (!blockers.empty()) continue;
    if (req.upgrading) {
      req.upgrading = false;
      req.mode = LockMode::kExclusive;
    } else {
      req.granted = true;
    }
    UnregisterWait(req.txn);
    req.waiter->cv.notify_all();
    req.waiter.reset();
  }
}

void LockManager::GrantRanges() {
  std::vector<TxnId> blockers;
  for (RangeRequest& req : ranges_) {
    if (req.granted) continue;
    blockers.clear();
    RangeBlockers(req, &blockers);
    if (!blockers.empty()) continue;
    req.granted = true;
    UnregisterWait(req.txn);
    req.waiter->cv.notify_all();
    req.waiter.reset();
  }
}

void LockManager::GrantKeysIn(const KeyRange& range) {
  for (size_t i = 0; i < kShards; i++) {
    Shard& shard = shards_[i];
    std::lock_guard<std::mutex> guard(shard.mu);
    auto it = range.lo ? shard.entries.lower_bound(*range.lo) : shard.entries.begin();
    for (; it != shard.entries.end() && (!range.hi || it->first < *range.hi); ++it) {
      GrantEntry(it->second, it->first, /*check_ranges=*/true);
    }
  }
}

bool LockManager::RegisterWait(TxnId txn, const std::shared_ptr<Waiter>& waiter,
                               std::vector<TxnId> blockers,
                               std::vector<std::shared_ptr<Waiter>>* wake) {
  std::lock_guard<std::mutex> guard(graph_mu_);
  graph_[txn] = WaitNode{waiter, std::move(blockers)};
  // Any new cycle passes through the edges just added: search from txn. A
  // victim other than txn breaks only the cycle found, so search again until
  // no cycle through txn is left.
  std::vector<TxnId> path;
  std::unordered_set<TxnId> visited;
  std::function<bool(TxnId)> dfs = [&](TxnId node) {
    auto it = graph_.find(node);
    if (it == graph_.end()) return false;
    for (TxnId next : it->second.blockers) {
      if (next == txn) return true;
      if (!visited.insert(next).second) continue;
      path.push_back(next);
      if (dfs(next)) return true;
      path.pop_back();
    }
    return false;
  };
  for (;;) {
    path.assign(1, txn);
    visited = {txn};
    if (!dfs(txn)) return false;
    const TxnId victim = *std::max_element(path.begin(), path.end());
    deadlocks_.fetch_add(1, std::memory_order_relaxed);  // a statistic
    if (victim == txn) {
      graph_.erase(txn);
      return true;
    }
    WaitNode& node = graph_.at(victim);
    node.blockers.clear();  // it is leaving: no second victim for this cycle
    node.waiter->victim.store(true);
    wake->push_back(node.waiter);
  }
}

void LockManager::UnregisterWait(TxnId txn) {
  std::lock_guard<std::mutex> guard(graph_mu_);
  graph_.erase(txn);
}

void LockManager::WakeVictim(const std::shared_ptr<Waiter>& victim) {
  // Taking the victim's mutex orders the flag before its next predicate check.
  std::lock_guard<std::mutex> guard(*victim->mu);
  victim->cv.notify_all();
}

Status LockManager::Await(std::unique_lock<std::mutex>& lock, Waiter& waiter, bool self_victim,
                          const std::vector<std::shared_ptr<Waiter>>& victims,
                          const std::function<bool()>& granted) {
  if (!victims.empty()) {
    lock.unlock();
    for (const auto& victim : victims) WakeVictim(victim);
    lock.lock();
  }
  if (self_victim) return Status::Deadlock("lock wait would close a cycle; youngest in it");
  const auto deadline = std::chrono::steady_clock::now() + options_.lock_timeout;
  for (;;) {
    if (granted()) return Status::OK();
    if (waiter.victim.load()) {
      return Status::Deadlock("chosen as the youngest transaction in a wait-for cycle");
    }
    if (waiter.cv.wait_until(lock, deadline) == std::cv_status::timeout && !granted()) {
      return Status::TimedOut("lock wait exceeded lock_timeout");
    }
  }
}

Status LockManager::LockKey(TxnId txn, Slice key_slice, LockMode mode) {
  const std::string_view key(key_slice.data(), key_slice.size());
  TxnLocks& mine = LocksOf(txn);
  Shard& shard = ShardFor(key);
  std::unique_lock<std::mutex> range_lock(range_mu_, std::defer_lock);
  std::unique_lock<std::mutex> lock;
  uint64_t seq = 0;
  for (;;) {
    if (mode == LockMode::kExclusive && range_count_.load() > 0 && !range_lock.owns_lock()) {
      range_lock.lock();
    }
    lock = std::unique_lock<std::mutex>(shard.mu);
    seq = next_seq_.fetch_add(1);
    // S record requests never conflict with ranges. For X, a count read as
    // zero after taking seq means any range registering later gets a later
    // seq and scans this shard after us.
    if (mode == LockMode::kShared || range_lock.owns_lock() || range_count_.load() == 0) break;
    lock.unlock();
  }
  const bool check_ranges = range_lock.owns_lock();

  auto entry_it = shard.entries.find(key);
  if (entry_it == shard.entries.end()) entry_it = shard.entries.emplace(key, Entry{}).first;
  Entry& entry = entry_it->second;  // stable while our request is in it
  auto find_mine = [&]() -> Request* {
    for (Request& r : entry.requests) {
      if (r.txn == txn) return &r;
    }
    return nullptr;
  };

  Request* req = find_mine();
  bool upgrade = false;
  if (req != nullptr) {
    assert(Granted(req->granted, req->upgrading) && "one call per transaction at a time");
    if (req->mode == LockMode::kExclusive || mode == LockMode::kShared) return Status::OK();
    upgrade = true;
    req->upgrading = true;
    req->seq = seq;
  } else {
    entry.requests.push_back(Request{txn, mode, false, false, seq, nullptr});
    mine.keys.emplace_back(key);
    req = &entry.requests.back();
  }

  std::vector<TxnId> blockers;
  RecordBlockers(entry, *req, key, check_ranges, &blockers);
  if (blockers.empty()) {
    if (upgrade) {
      req->upgrading = false;
      req->mode = LockMode::kExclusive;
    } else {
      req->granted = true;
    }
    return Status::OK();
  }

  waits_.fetch_add(1, std::memory_order_relaxed);  // a statistic
  auto waiter = std::make_shared<Waiter>(&shard.mu);
  req->waiter = waiter;
  std::vector<std::shared_ptr<Waiter>> victims;
  const bool self_victim = RegisterWait(txn, waiter, std::move(blockers), &victims);
  waiting_.fetch_add(1);
  if (range_lock.owns_lock()) range_lock.unlock();  // wait under the shard mutex only
  Status result = Await(lock, *waiter, self_victim, victims, [&] {
    const Request* r = find_mine();
    return Granted(r->granted, r->upgrading);
  });
  if (!result.ok()) {
    // Withdraw the request; later requests it held back may now be granted.
    lock.unlock();
    lock = LockShard(shard, &range_lock);
    req = find_mine();
    if (Granted(req->granted, req->upgrading)) {
      result.PermitUncheckedError();
      result = Status::OK();  // granted meanwhile: the cycle is broken anyway
    } else {
      UnregisterWait(txn);
      if (upgrade) {
        req->upgrading = false;
        req->waiter.reset();
      } else {
        entry.requests.erase(entry.requests.begin() + (req - entry.requests.data()));
        mine.keys.pop_back();
      }
      GrantEntry(entry, key, range_lock.owns_lock());
      if (entry.requests.empty()) shard.entries.erase(entry_it);
      if (result.code() == Code::kTimedOut) timeouts_.fetch_add(1, std::memory_order_relaxed);
      lock.unlock();
      // A withdrawn X request may have held back a range request.
      if (mode == LockMode::kExclusive && range_lock.owns_lock()) GrantRanges();
    }
  }
  waiting_.fetch_sub(1);
  return result;
}

Status LockManager::LockRange(TxnId txn, const KeyRange& range) {
  if (range.lo && range.hi && *range.lo > *range.hi) {
    return Status::InvalidArgument("range lock with lo above hi");
  }
  TxnLocks& mine = LocksOf(txn);
  std::unique_lock<std::mutex> lock(range_mu_);
  for (const auto& held : mine.ranges) {
    if (held->range.Covers(range)) return Status::OK();
  }
  range_count_.fetch_add(1);  // before taking seq: see range_count_
  const uint64_t seq = next_seq_.fetch_add(1);
  ranges_.push_back(RangeRequest{txn, range, seq, false, nullptr});
  auto it = std::prev(ranges_.end());

  std::vector<TxnId> blockers;
  RangeBlockers(*it, &blockers);
  if (blockers.empty()) {
    it->granted = true;
    mine.ranges.push_back(it);
    return Status::OK();
  }

  waits_.fetch_add(1, std::memory_order_relaxed);  // a statistic
  auto waiter = std::make_shared<Waiter>(&range_mu_);
  it->waiter = waiter;
  std::vector<std::shared_ptr<Waiter>> victims;
  const bool self_victim = RegisterWait(txn, waiter, std::move(blockers), &victims);
  waiting_.fetch_add(1);
  Status result = Await(lock, *waiter, self_victim, victims, [&] { return it->granted; });
  if (!result.ok()) {
    UnregisterWait(txn);
    ranges_.erase(it);
    range_count_.fetch_sub(1);
    if (result.code() == Code::kTimedOut) timeouts_.fetch_add(1, std::memory_order_relaxed);
    GrantKeysIn(range);  // X requests behind this one may go now
  } else {
    mine.ranges.push_back(it);
  }
  waiting_.fetch_sub(1);
  return result;
}

void LockManager::ReleaseAll(TxnId txn) {
  std::unique_ptr<TxnLocks> mine;
  {
    TxnShard& ts = txn_shards_[txn % kShards];
    std::lock_guard<std::mutex> guard(ts.mu);
    auto it = ts.txns.find(txn);
    if (it == ts.txns.end()) return;
    mine = std::move(it->second);
    ts.txns.erase(it);
  }
  std::unique_lock<std::mutex> range_lock(range_mu_, std::defer_lock);
  if (!mine->ranges.empty()) range_lock.lock();
  bool released_x = false;
  for (const std::string& key : mine->keys) {
    Shard& shard = ShardFor(key);
    std::unique_lock<std::mutex> lock = LockShard(shard, &range_lock);
    auto entry_it = shard.entries.find(key);
    assert(entry_it != shard.entries.end());
    std::vector<Request>& requests = entry_it->second.requests;
    auto req = std::find_if(requests.begin(), requests.end(),
                            [&](const Request& r) { return r.txn == txn; });
    assert(req != requests.end() && Granted(req->granted, req->upgrading));
    released_x |= req->mode == LockMode::kExclusive;
    requests.erase(req);
    if (requests.empty()) {
      shard.entries.erase(entry_it);
    } else {
      GrantEntry(entry_it->second, key, range_lock.owns_lock());
    }
  }
  std::vector<KeyRange> released_ranges;
  for (auto it : mine->ranges) {
    released_ranges.push_back(std::move(it->range));
    ranges_.erase(it);
    range_count_.fetch_sub(1);
  }
  for (const KeyRange& range : released_ranges) GrantKeysIn(range);
  // Range requests may have waited for the X locks released here. A range
  // that registered after their release did not see them.
  if (released_x && (range_lock.owns_lock() || range_count_.load() > 0)) {
    if (!range_lock.owns_lock()) range_lock.lock();
    GrantRanges();
  }
  if (range_lock.owns_lock()) range_lock.unlock();
  // Drop the edges into txn. A waiter counts itself in waiting_ before it
  // leaves the mutex under which it saw txn's request (which txn's thread
  // took since, to release or withdraw that request) and uncounts itself only
  // after its node is gone: reading zero means no edge leads to txn.
  if (waiting_.load() == 0) return;
  std::lock_guard<std::mutex> guard(graph_mu_);
  for (auto& [waiting, node] : graph_) {
    std::erase(node.blockers, txn);
  }
}

bool LockManager::HoldsKey(TxnId txn, Slice key_slice, LockMode mode) const {
  const std::string_view key(key_slice.data(), key_slice.size());
  Shard& shard = ShardFor(key);
  std::lock_guard<std::mutex> guard(shard.mu);
  auto it = shard.entries.find(key);
  if (it == shard.entries.end()) return false;
  for (const Request& r : it->second.requests) {
    if (r.txn == txn && r.granted) {
      return mode == LockMode::kShared || (r.mode == LockMode::kExclusive && !r.upgrading);
    }
  }
  return false;
}

size_t LockManager::NumWaiting() const { return waiting_.load(); }

LockStats LockManager::stats() const {
  return LockStats{waits_.load(), deadlocks_.load(), timeouts_.load()};
}

}  // namespace deuteron::tc
