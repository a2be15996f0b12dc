// EpochManager: epoch-based reclamation for Deuteron's latch-free structures
// (LLAMA mapping-table page states and delta chains, Bw-tree nodes, recycled
// page ids). The rules in prose are in common/epoch.md.
//
// A reader brackets every access to shared latch-free memory with a Guard. A
// writer that unlinks an object hands its free to Defer()/Retire(); the free
// runs once no thread that might have loaded a pointer to the object is still
// inside the guard it loaded it in.
//
// Thread safety: every method may be called concurrently from any thread,
// except the destructor. Enter/exit touch only the calling thread's own slot
// (one cache line per thread per manager) plus a read of the global epoch; no
// shared counter is written on that path. Several managers may live at once;
// threads may come and go, and a thread may outlive a manager or vice versa.
//
// Numbered invariants (referred to as I1..I6 in epoch.cpp):
//  I1. A slot's published epoch is kQuiescent while its owner is outside every
//      guard of this manager; otherwise it is the global epoch the owner read
//      when its outermost guard began. Nested guards only count depth.
//  I2. The global epoch only grows (fetch_add by reclaimers). A pending list
//      is a prefix of tagged deferrals with non-decreasing tags followed by
//      untagged ones, so the runnable deferrals are always a prefix.
//  I3. A deferral is tagged E by the reclaim whose fetch_add moved the global
//      epoch from E to E+1, and its Defer call happened before that reclaim.
//      So a guard that published an epoch > E read the global epoch after the
//      object was unlinked, and cannot reach it.
//  I4. A deferral tagged E runs only after a scan, made after a seq_cst fence
//      that follows its tagging, saw every slot quiescent or > E. A guard the
//      scan saw quiescent but which was about to begin cannot reach the object:
//      its fence follows the publication of its epoch, the reclaimer's fence
//      precedes the scan (store-buffering pattern, fences on both sides).
//  I5. A slot's owner-only state (depth, pending list, counters' writer side)
//      is used by its owner thread only, or under the registry mutex once the
//      owner thread is exiting or the manager is being destroyed.
//  I6. Every deferral is in exactly one place (a slot's list, the orphan list,
//      or a batch being run) and runs exactly once.
//
// Memory orders (each non-seq_cst atomic also carries a reason at its use):
//  - Enter: global.load(acquire) pairs with the reclaimer's fetch_add (I3);
//    slot.store(e, release) then a seq_cst fence: the fence keeps the guard's
//    later pointer loads after the publication (I4); release because a scan
//    that reads this value must also see the thread's earlier guards' reads.
//  - Exit (outermost): slot.store(kQuiescent, release), paired with the
//    scan's acquire load: every read made inside the guard happens-before the
//    free. This is the happens-before TSan sees (it does not model fences).
//  - Reclaim: seq_cst fence, global.fetch_add(seq_cst), slot loads (acquire).
//  - Counters used only for statistics are relaxed.
//
// Tagging is lazy: Defer only appends to the caller's list; the next reclaim
// tags it (I3). So a guard that begins between Defer and that reclaim also
// holds the deferral back: conservative, and Defer stays free of fences.
//
// The bound on garbage: each thread's pending bytes are checked on Defer; once
// over Options::max_pending_bytes_per_thread the thread advances the epoch and
// reclaims at once (Stats::forced_reclaims). While no guard is held across a
// thread's reclaims, each of them runs everything the thread deferred, so its
// pending bytes never exceed the bound plus one deferral. Only a thread inside
// a guard (any thread's, the caller's own included) can make garbage pile up
// beyond the bound; while that lasts, forced attempts repeat every bound/4
// further bytes (not on every Defer), and Stats::oldest_active_lag shows how
// many epochs behind the oldest guard is. Note that a reader descheduled by
// the OS inside its guard counts as stuck for as long as it is off the CPU.
//
// Garbage of a thread that stops deferring waits for its next Defer or
// TryReclaim, for its exit (it moves to an orphan list that any reclaim
// drains), or for the manager's destructor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace deuteron {

namespace internal {
struct EpochSlot;      // one per (thread, manager); defined in epoch.cpp
struct EpochRegistry;  // shared by a manager and threads' caches; epoch.cpp
}  // namespace internal

class EpochManager {
 public:
  struct Options {
    // Every N defers, the deferring thread advances the epoch and reclaims
    // (its own list and the orphan list). 0 is treated as 1.
    size_t reclaim_interval = 64;
    // Over this many pending bytes, the deferring thread advances and
    // reclaims at once (a forced reclaim).
    size_t max_pending_bytes_per_thread = 1 << 20;
  };

  // Two constructors rather than `Options options = {}`: GCC rejects a
  // default argument of a nested type with member initializers inside the
  // enclosing class. Callers write the same thing either way.
  EpochManager();
  explicit EpochManager(Options options);
  // REQUIRES: no thread is inside a Guard of this manager, and every use of
  // this manager by any thread happens-before the destructor begins.
  // Runs every pending deferral (including any that those deferrals defer).
  ~EpochManager();

  EpochManager(const EpochManager&) = delete;
  EpochManager& operator=(const EpochManager&) = delete;

  // RAII epoch protection: while a Guard lives, nothing its thread could load
  // from a latch-free structure is freed. Nestable (depth is counted per
  // thread). Movable, not copyable.
  // REQUIRES: destroyed on the thread that created it, before the manager.
  class Guard {
   public:
    Guard(Guard&& other) noexcept : slot_(other.slot_) { other.slot_ = nullptr; }
    Guard& operator=(Guard&& other) noexcept;
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    ~Guard() { Release(); }

   private:
    friend class EpochManager;
    explicit Guard(internal::EpochSlot* slot) : slot_(slot) {}
    void Release();

    internal::EpochSlot* slot_;  // null once moved from
  };

  [[nodiscard]] Guard Enter();

  using DeferFn = void (*)(void* a, uint64_t b);
  // Runs fn(a, b) once no thread that was inside a guard when Defer was called
  // is still in that guard. `bytes` is what it will free, for accounting. May
  // be called inside or outside a guard; fn may itself call Defer.
  // REQUIRES: the object is already unreachable for threads that enter a
  // guard from now on (it was unlinked before this call).
  void Defer(DeferFn fn, void* a, uint64_t b, size_t bytes);

  // Deferred `delete p` (the one documented place for raw delete).
  template <typename T>
  void Retire(T* p) {
    Defer([](void* q, uint64_t) { delete static_cast<T*>(q); }, p, 0, sizeof(T));
  }

  // Advances the global epoch and runs what is safe now: this thread's list
  // and the orphan list. Returns the bytes freed. A no-op (0) when called from
  // inside a deferral that this thread is running.
  size_t TryReclaim();

  // Waits until every guard that any thread was inside when the call began
  // has ended (a grace period, as RCU's synchronize). For what readers keep
  // outside memory, which cannot be deferred as an object: a store's file
  // space that a reader inside an older guard may still read (LLAMA releases
  // cleaned segments after this). Guards that begin during the wait do not
  // hold it back (I3, I4: they read the global epoch after the advance, so
  // after whatever the caller unlinked before the call). Sleeps between
  // scans; as long as the longest such guard.
  // REQUIRES: the calling thread holds no guard of this manager (it would
  // wait for itself).
  void Synchronize();

  // Whether the calling thread is inside a guard of this manager.
  bool InGuard();

  // Deferred and not yet run, summed over threads (approximate while threads
  // run).
  size_t PendingBytes() const;

  uint64_t current_epoch() const;

  struct Stats {
    uint64_t epoch;              // the global epoch
    uint64_t deferred;           // Defer calls so far
    uint64_t reclaimed;          // deferrals run so far
    uint64_t pending_bytes;      // as PendingBytes()
    uint64_t forced_reclaims;    // reclaims forced by the per-thread bound
    uint64_t oldest_active_lag;  // global epoch - oldest active guard's; 0 if none
  };
  Stats GetStats() const;

 private:
  using Slot = internal::EpochSlot;
  Slot* LocalSlot();
  size_t ReclaimOwn(Slot* slot, bool check_orphans_always);

  // Shared, so a thread that outlives the manager can still release its slot.
  std::shared_ptr<internal::EpochRegistry> registry_;
  uint64_t id_;  // unique over the process lifetime; keys thread caches
};

}  // namespace deuteron
