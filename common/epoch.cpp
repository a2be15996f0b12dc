// Epoch-based reclamation; the invariants I1..I6 and the memory orders are at
// the top of common/epoch.h, the rules in prose in common/epoch.md.
#include "common/epoch.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace deuteron {
namespace internal {
namespace {

constexpr uint64_t kQuiescent = UINT64_MAX;  // published epoch outside guards (I1)
constexpr uint64_t kUntagged = UINT64_MAX;   // deferral not yet tagged (I2)

// A full (seq_cst) fence. GCC warns that TSan does not model fences; that is
// why the happens-before TSan needs goes through the slot's release store and
// the scan's acquire load instead (see epoch.h), and the fence stays for the
// store-buffering argument of I4, which TSan cannot check either way.
#if defined(__SANITIZE_THREAD__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#endif
inline void FullFence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
#if defined(__SANITIZE_THREAD__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Process-wide source of manager ids; 0 is never handed out.
std::atomic<uint64_t> g_next_manager_id{1};

}  // namespace

struct Deferral {
  EpochManager::DeferFn fn;
  void* a;
  uint64_t b;
  size_t bytes;
  uint64_t epoch;  // tag, or kUntagged
};

// Deferrals in tag order: a tagged prefix, then untagged ones (I2), so the
// runnable ones are popped from the front and a reclaim costs O(new + run).
class DeferralList {
 public:
  void Add(EpochManager::DeferFn fn, void* a, uint64_t b, size_t bytes) {
    items_.push_back(Deferral{fn, a, b, bytes, kUntagged});
    bytes_ += bytes;
  }

  // Tags every untagged deferral with `epoch`, which must be >= every tag
  // already given (I2).
  void TagAll(uint64_t epoch) {
    for (size_t i = tagged_; i < items_.size(); ++i) items_[i].epoch = epoch;
    tagged_ = items_.size();
  }

  // Removes the oldest deferral if its tag is below `min_active` (I4).
  bool PopReady(uint64_t min_active, Deferral* out) {
    if (tagged_ == 0 || items_.front().epoch >= min_active) return false;
    *out = items_.front();
    items_.pop_front();
    --tagged_;
    bytes_ -= out->bytes;
    return true;
  }

  // Moves every deferral of `other` to the back of this list, untagged: a
  // later tag is always safe (only stricter), and keeps I2.
  void AppendUntagged(DeferralList* other) {
    for (Deferral& d : other->items_) Add(d.fn, d.a, d.b, d.bytes);
    other->Clear();
  }

  void TakeAll(std::vector<Deferral>* out) {
    out->insert(out->end(), items_.begin(), items_.end());
    Clear();
  }

  void Clear() {
    items_.clear();
    tagged_ = 0;
    bytes_ = 0;
  }

  size_t bytes() const { return bytes_; }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }

 private:
  std::deque<Deferral> items_;
  size_t tagged_ = 0;
  size_t bytes_ = 0;
};

// One per (thread, manager). The first cache line is what reclaimers read;
// the rest is the owner's (I5) plus statistics mirrors.
struct alignas(64) EpochSlot {
  explicit EpochSlot(size_t bound) : next_forced_at(bound) {}

  // Published epoch (I1). Written by the owner, read by every scan.
  std::atomic<uint64_t> epoch{kQuiescent};

  // Statistics: written by the owner only (plain load+store, no RMW needed),
  // or under the registry mutex once the owner is gone; read by GetStats.
  alignas(64) std::atomic<uint64_t> pending_bytes{0};
  std::atomic<uint64_t> deferred{0};
  std::atomic<uint64_t> reclaimed{0};
  std::atomic<uint64_t> forced{0};

  // Owner-only (I5).
  uint32_t depth = 0;         // guards held by the owner
  bool reclaiming = false;    // owner is inside ReclaimOwn (no recursion)
  size_t defers_since_reclaim = 0;
  size_t next_forced_at;      // pending bytes that trigger a forced reclaim
  DeferralList pending;

  bool claimed = false;       // guarded by EpochRegistry::mu
  EpochSlot* next = nullptr;  // immutable once the slot is published
};

static_assert(alignof(EpochSlot) == 64, "slots must not share cache lines");

struct EpochRegistry {
  explicit EpochRegistry(EpochManager::Options o) : options(o) {
    options.reclaim_interval = std::max<size_t>(options.reclaim_interval, 1);
  }

  EpochManager::Options options;
  std::atomic<uint64_t> global_epoch{1};
  std::atomic<EpochSlot*> head{nullptr};  // lock-free list of all slots
  // Set once the manager is destroyed. Relaxed: only a hint for pruning
  // thread caches; Release() re-checks `closed` under mu.
  std::atomic<bool> closed_hint{false};
  // Statistics and hints, relaxed: never used to decide what is safe to run.
  std::atomic<uint64_t> orphan_bytes{0};
  std::atomic<uint64_t> orphan_count{0};
  std::atomic<uint64_t> reclaimed_elsewhere{0};  // orphans + destructor

  std::mutex mu;
  std::vector<std::unique_ptr<EpochSlot>> slots;  // guarded by mu; owns slots
  DeferralList orphans;                            // guarded by mu
  bool closed = false;                             // guarded by mu
  // Set by the destructor before it runs deferrals, so that a deferral that
  // defers again goes straight to the orphan list instead of a thread cache
  // (which may already be gone when a static manager dies at exit). A plain
  // bool: every other use of the manager happens-before the destructor.
  bool destroying = false;

  EpochSlot* Claim() {
    std::lock_guard<std::mutex> lock(mu);
    assert(!closed && "EpochManager used during or after its destruction");
    for (auto& s : slots) {
      if (!s->claimed) {
        s->claimed = true;
        return s.get();
      }
    }
    auto slot = std::make_unique<EpochSlot>(options.max_pending_bytes_per_thread);
    slot->claimed = true;
    // relaxed: head is only written under mu, which we hold.
    slot->next = head.load(std::memory_order_relaxed);
    // release: a scan that acquires head sees the slot fully built.
    head.store(slot.get(), std::memory_order_release);
    slots.push_back(std::move(slot));
    return slots.back().get();
  }

  // The owner thread is exiting (or dropping a closed manager): its pending
  // deferrals become orphans and the slot becomes free for another thread.
  void Release(EpochSlot* s) {
    std::lock_guard<std::mutex> lock(mu);
    assert(s->depth == 0 && "thread exited inside an epoch guard");
    if (!closed) {
      orphans.AppendUntagged(&s->pending);
      PublishOrphanStats();
    }
    assert(s->pending.empty());
    // relaxed: statistics mirror (I5: we hold mu, the owner is leaving).
    s->pending_bytes.store(0, std::memory_order_relaxed);
    s->reclaiming = false;
    s->defers_since_reclaim = 0;
    s->next_forced_at = options.max_pending_bytes_per_thread;
    s->claimed = false;
  }

  // Advances the global epoch; returns the epoch it moved from, the tag for
  // every deferral whose Defer happened before this call (I3).
  uint64_t Advance() {
    FullFence();  // I4: orders earlier unlinks before the scan that follows
    return global_epoch.fetch_add(1, std::memory_order_seq_cst);
  }

  // Smallest epoch published by a thread inside a guard, kQuiescent if none.
  // REQUIRES: called after Advance() (its fence) in the same reclaim.
  uint64_t MinActive() const {
    uint64_t min_epoch = kQuiescent;
    // acquire: pairs with the release store in Claim().
    for (EpochSlot* s = head.load(std::memory_order_acquire); s != nullptr; s = s->next) {
      // acquire: pairs with the owner's release stores on enter/exit, so all
      // the owner's reads in a finished guard happen-before what we free.
      min_epoch = std::min(min_epoch, s->epoch.load(std::memory_order_acquire));
    }
    return min_epoch;
  }

  void PublishOrphanStats() {  // REQUIRES: mu held
    // relaxed: statistics and a hint; mu orders the list itself.
    orphan_bytes.store(orphans.bytes(), std::memory_order_relaxed);
    orphan_count.store(orphans.size(), std::memory_order_relaxed);
  }

  // Runs the orphans that are safe now; returns bytes freed.
  size_t ReclaimOrphans() {
    std::vector<Deferral> ready;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (orphans.empty()) return 0;
      // Advance under mu: every orphan was added under mu before, so its
      // Defer happened before this advance (I3).
      orphans.TagAll(Advance());
      const uint64_t min_active = MinActive();
      Deferral d{};
      while (orphans.PopReady(min_active, &d)) ready.push_back(d);
      PublishOrphanStats();
    }
    size_t freed = 0;
    for (const Deferral& d : ready) {  // outside mu: fn may Defer again
      d.fn(d.a, d.b);
      freed += d.bytes;
    }
    // relaxed: statistics.
    reclaimed_elsewhere.fetch_add(ready.size(), std::memory_order_relaxed);
    return freed;
  }
};

namespace {

// The calling thread's slots, one per manager it has used. The destructor
// (thread exit) releases every slot; the shared_ptr keeps a registry alive
// until both its manager and every thread that used it are gone.
struct ThreadCache {
  struct Entry {
    uint64_t id;
    std::shared_ptr<EpochRegistry> registry;
    EpochSlot* slot;
  };

  ~ThreadCache() {
    for (Entry& e : entries) e.registry->Release(e.slot);
  }

  uint64_t last_id = 0;  // fast path: the manager used last
  EpochSlot* last_slot = nullptr;
  std::vector<Entry> entries;
};

thread_local ThreadCache t_cache;

}  // namespace
}  // namespace internal

using internal::Deferral;
using internal::EpochSlot;
using internal::kQuiescent;

EpochManager::EpochManager() : EpochManager(Options()) {}

EpochManager::EpochManager(Options options)
    : registry_(std::make_shared<internal::EpochRegistry>(options)),
      // relaxed: only uniqueness matters.
      id_(internal::g_next_manager_id.fetch_add(1, std::memory_order_relaxed)) {}

EpochManager::~EpochManager() {
  internal::EpochRegistry& r = *registry_;
  r.destroying = true;
  for (;;) {
    std::vector<Deferral> batch;
    {
      std::lock_guard<std::mutex> lock(r.mu);
      for (auto& s : r.slots) {
        // relaxed: the caller guarantees every use happened-before us.
        assert(s->epoch.load(std::memory_order_relaxed) == kQuiescent &&
               "EpochManager destroyed while a thread is inside a guard");
        s->pending.TakeAll(&batch);
        s->pending_bytes.store(0, std::memory_order_relaxed);  // relaxed: stats
      }
      r.orphans.TakeAll(&batch);
      r.PublishOrphanStats();
      if (batch.empty()) {
        r.closed = true;
        r.closed_hint.store(true, std::memory_order_relaxed);  // relaxed: hint
        break;
      }
    }
    // Outside mu: a deferral may defer more, which the next round collects.
    for (const Deferral& d : batch) d.fn(d.a, d.b);
    r.reclaimed_elsewhere.fetch_add(batch.size(), std::memory_order_relaxed);
  }
}

EpochManager::Slot* EpochManager::LocalSlot() {
  internal::ThreadCache& c = internal::t_cache;
  if (c.last_id == id_) return c.last_slot;
  for (const auto& e : c.entries) {
    if (e.id == id_) {
      c.last_id = id_;
      c.last_slot = e.slot;
      return e.slot;
    }
  }
  // First use by this thread: drop entries of destroyed managers, claim a slot.
  std::erase_if(c.entries, [](const internal::ThreadCache::Entry& e) {
    // relaxed: a hint; Release() decides under the registry mutex.
    if (!e.registry->closed_hint.load(std::memory_order_relaxed)) return false;
    e.registry->Release(e.slot);
    return true;
  });
  EpochSlot* slot = registry_->Claim();
  c.entries.push_back({id_, registry_, slot});
  c.last_id = id_;
  c.last_slot = slot;
  return slot;
}

EpochManager::Guard EpochManager::Enter() {
  EpochSlot* s = LocalSlot();
  if (s->depth++ == 0) {
    // acquire: pairs with Advance()'s fetch_add, so deferrals tagged below
    // the value read were unlinked before this guard's loads (I3).
    const uint64_t e = registry_->global_epoch.load(std::memory_order_acquire);
    // release: a scan that reads this value also sees the reads of this
    // thread's earlier guards (their exit stores come before it).
    s->epoch.store(e, std::memory_order_release);
    internal::FullFence();  // I4: publication before the guard's loads
  }
  return Guard(s);
}

void EpochManager::Guard::Release() {
  if (slot_ == nullptr) return;
  assert(slot_->depth > 0);
  if (--slot_->depth == 0) {
    // release: pairs with MinActive()'s acquire; the guard's reads
    // happen-before any free that this scan allows.
    slot_->epoch.store(kQuiescent, std::memory_order_release);
  }
  slot_ = nullptr;
}

EpochManager::Guard& EpochManager::Guard::operator=(Guard&& other) noexcept {
  if (this != &other) {
    Release();
    slot_ = other.slot_;
    other.slot_ = nullptr;
  }
  return *this;
}

void EpochManager::Defer(DeferFn fn, void* a, uint64_t b, size_t bytes) {
  if (registry_->destroying) {  // called by a deferral the destructor runs
    std::lock_guard<std::mutex> lock(registry_->mu);
    registry_->orphans.Add(fn, a, b, bytes);
    registry_->PublishOrphanStats();
    return;
  }
  EpochSlot* s = LocalSlot();
  s->pending.Add(fn, a, b, bytes);
  // relaxed (both): statistics mirrors written by the owner only (I5).
  s->pending_bytes.store(s->pending.bytes(), std::memory_order_relaxed);
  s->deferred.store(s->deferred.load(std::memory_order_relaxed) + 1,
                    std::memory_order_relaxed);
  if (s->reclaiming) return;  // the running reclaim leaves it for the next one
  if (s->pending.bytes() > s->next_forced_at) {
    s->forced.store(s->forced.load(std::memory_order_relaxed) + 1,
                    std::memory_order_relaxed);  // relaxed: statistics
    ReclaimOwn(s, /*check_orphans_always=*/false);
  } else if (++s->defers_since_reclaim >= registry_->options.reclaim_interval) {
    ReclaimOwn(s, /*check_orphans_always=*/false);
  }
}

size_t EpochManager::ReclaimOwn(Slot* s, bool check_orphans_always) {
  if (s->reclaiming) return 0;
  s->reclaiming = true;
  internal::EpochRegistry& r = *registry_;
  // Every deferral in our list was added before this advance (I3).
  s->pending.TagAll(r.Advance());
  const uint64_t min_active = r.MinActive();
  size_t freed = 0;
  uint64_t count = 0;
  Deferral d{};
  // fn may Defer: that appends untagged deferrals behind the tagged prefix,
  // which PopReady never passes.
  while (s->pending.PopReady(min_active, &d)) {
    d.fn(d.a, d.b);
    freed += d.bytes;
    ++count;
  }
  // relaxed: a hint; a stale zero only delays orphans to a later reclaim.
  if (check_orphans_always || r.orphan_count.load(std::memory_order_relaxed) != 0) {
    freed += r.ReclaimOrphans();
  }
  const size_t bound = r.options.max_pending_bytes_per_thread;
  const size_t left = s->pending.bytes();
  // Over the bound only while guards block us: retry every bound/4 bytes.
  s->next_forced_at = left > bound - bound / 4 ? left + bound / 4 : bound;
  s->defers_since_reclaim = 0;
  // relaxed (both): statistics mirrors written by the owner only (I5).
  s->pending_bytes.store(left, std::memory_order_relaxed);
  s->reclaimed.store(s->reclaimed.load(std::memory_order_relaxed) + count,
                     std::memory_order_relaxed);
  s->reclaiming = false;
  return freed;
}

size_t EpochManager::TryReclaim() { return ReclaimOwn(LocalSlot(), /*check_orphans_always=*/true); }

void EpochManager::Synchronize() {
  assert(!InGuard());
  internal::EpochRegistry& r = *registry_;
  // Whatever the caller unlinked before this call is behind the advance's
  // fence (I3): a guard that publishes an epoch above `e` cannot find it.
  const uint64_t e = r.Advance();
  auto pause = std::chrono::microseconds(10);
  // MinActive's acquire loads pair with the exits' release stores: every
  // read an older guard made happens-before the caller's next step.
  while (r.MinActive() <= e) {
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(2 * pause, std::chrono::milliseconds(1));
  }
}

bool EpochManager::InGuard() { return LocalSlot()->depth > 0; }

size_t EpochManager::PendingBytes() const {
  const internal::EpochRegistry& r = *registry_;
  // relaxed (all): an approximate sum for statistics.
  uint64_t total = r.orphan_bytes.load(std::memory_order_relaxed);
  for (EpochSlot* s = r.head.load(std::memory_order_acquire); s != nullptr; s = s->next) {
    total += s->pending_bytes.load(std::memory_order_relaxed);
  }
  return total;
}

uint64_t EpochManager::current_epoch() const {
  // relaxed: informational; readers that rely on it go through Enter().
  return registry_->global_epoch.load(std::memory_order_relaxed);
}

EpochManager::Stats EpochManager::GetStats() const {
  const internal::EpochRegistry& r = *registry_;
  Stats st{};
  uint64_t min_active = kQuiescent;
  // relaxed (all): statistics. head is acquire, as in MinActive().
  for (EpochSlot* s = r.head.load(std::memory_order_acquire); s != nullptr; s = s->next) {
    st.deferred += s->deferred.load(std::memory_order_relaxed);
    st.reclaimed += s->reclaimed.load(std::memory_order_relaxed);
    st.forced_reclaims += s->forced.load(std::memory_order_relaxed);
    st.pending_bytes += s->pending_bytes.load(std::memory_order_relaxed);
    min_active = std::min(min_active, s->epoch.load(std::memory_order_relaxed));
  }
  st.reclaimed += r.reclaimed_elsewhere.load(std::memory_order_relaxed);
  st.pending_bytes += r.orphan_bytes.load(std::memory_order_relaxed);
  st.epoch = r.global_epoch.load(std::memory_order_relaxed);
  st.oldest_active_lag =
      min_active == kQuiescent || min_active > st.epoch ? 0 : st.epoch - min_active;
  return st;
}

}  // namespace deuteron
