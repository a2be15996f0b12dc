// MappingTable: LLAMA's indirection from page id (PID) to page state.
//
// Each entry is one 64-bit word, changed only by CAS, holding one of:
//   0                      free (never allocated, or freed; reusable after an epoch)
//   kEmptyPage (0b11)      allocated, no state yet
//   pointer, low bits 00   in-memory page state (a PageNode*, 8-byte aligned)
//   (addr << 2) | 0b01     page wholly in the LSS, its newest piece at addr
//   (pid << 2) | 0b10      internal: link in the free-PID stack (never seen by
//                          callers: Load and a failed Cas report it as 0)
//
// Invariants:
//  1. A PID is handed out by Allocate only while its entry is 0 and it sits on
//     the free stack or above the high-water mark; Allocate sets it to
//     kEmptyPage before returning.
//  2. Free(pid) stores 0 at once (so a concurrent CAS on the old state fails and
//     a checkpoint sees it free), but the PID is pushed on the free stack only
//     through EpochManager::Defer: no thread that could still hold the PID from
//     before the free sees it reused.
//  3. The table grows without a pause: it reserves virtual address space for
//     max_pages entries up front (MAP_NORESERVE) and the OS backs pages on first
//     touch; the high-water mark only grows (fetch_add).
//  4. The free stack head packs (tag << 40 | pid); the tag changes on every pop
//     so a stale head never matches (ABA). The tag has 24 bits: a pop would
//     have to stall across 2^24 other pops, ending on the same PID, to be
//     fooled.
//  5. A PID is on the free stack at most once: it is pushed only by the
//     deferred push of its Free (or by RebuildFreeList), and Free requires an
//     allocated PID. While on the stack its entry holds the link to the next
//     one, written before the push's CAS on the head publishes it.
// Memory orders: Load is acquire and Cas acq_rel, so a page state published by
// CAS is fully visible to whoever loads its pointer. The free-stack head is
// CASed acq_rel (a push releases the link it wrote into the entry; a pop
// acquires it). Every other non-seq_cst atomic carries its reason in
// mapping_table.cpp.
//
// Thread safety: every method is thread-safe except those marked RECOVERY,
// which require that no other thread uses the table.
//
// Destruction: a Free leaves a deferred push, pointing at this table, in the
// EpochManager until reclamation runs. REQUIRES before destroying the table:
// no such push is pending (pending_frees() == 0; asserted). The owner drains
// them by joining the threads that freed PIDs and calling
// EpochManager::TryReclaim() with no guard held (threads that exited leave
// their deferrals on the manager's orphan list, which TryReclaim runs), or by
// destroying the EpochManager first.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "common/epoch.h"
#include "common/status.h"
#include "dc/llama/lss_format.h"

namespace deuteron::llama {

class MappingTable {
 public:
  static constexpr uint64_t kFree = 0;
  static constexpr uint64_t kEmptyPage = 0b11;
  static constexpr uint64_t kMaxPid = (1ull << 40) - 1;

  static bool IsFree(uint64_t e) { return e == kFree; }
  static bool IsEmptyPage(uint64_t e) { return e == kEmptyPage; }
  static bool IsMemory(uint64_t e) { return e != kFree && (e & 0b11) == 0; }
  static bool IsLss(uint64_t e) { return (e & 0b11) == 0b01; }
  static uint64_t FromLss(LssAddress a) { return (a << 2) | 0b01; }
  static LssAddress ToLss(uint64_t e) { return e >> 2; }
  template <typename T>
  static uint64_t FromPointer(const T* p) { return reinterpret_cast<uint64_t>(p); }
  template <typename T>
  static T* ToPointer(uint64_t e) { return reinterpret_cast<T*>(e); }

  struct Options {
    uint64_t max_pages = 1ull << 28;  // virtual reservation: max_pages * 8 bytes
  };

  // REQUIRES: epochs outlives every use of the table (see "Destruction" for
  // the destructor). max_pages is clamped to [1, kMaxPid + 1]; PIDs 1 ..
  // max_pages - 1 are usable. If the address space cannot be reserved,
  // capacity() is 0 and Allocate fails (NoSpace).
  MappingTable(EpochManager* epochs, Options options);
  // REQUIRES: pending_frees() == 0 (see "Destruction" above).
  ~MappingTable();
  MappingTable(const MappingTable&) = delete;
  MappingTable& operator=(const MappingTable&) = delete;

  // REQUIRES: 0 < pid < capacity().
  uint64_t Load(PageId pid) const {
    return HideLink(entries_[pid].load(std::memory_order_acquire));
  }
  // On failure `expected` holds the current value.
  // REQUIRES: pid allocated (a free PID's entry may be a link; it reads as 0).
  bool Cas(PageId pid, uint64_t& expected, uint64_t desired) {
    const bool ok = entries_[pid].compare_exchange_strong(
        expected, desired, std::memory_order_acq_rel, std::memory_order_acquire);
    if (!ok) expected = HideLink(expected);
    return ok;
  }

  // A PID whose entry is kEmptyPage. TooLarge when max_pages are in use.
  Result<PageId> Allocate();
  // REQUIRES: pid allocated. Sets the entry to 0; the PID is reused only after
  // every thread now inside an epoch guard has left it. Returns the entry it
  // replaced, in the one atomic step: the caller retires that state, not one
  // it loaded earlier (a flush or swap-out may have CASed in between).
  uint64_t Free(PageId pid);

  // One past the highest PID ever allocated (PIDs start at 1); at most
  // capacity().
  PageId high_water() const;
  // Resident bytes of the table, for the memory budget. An estimate: the OS
  // pages the entries below the high-water mark span, round_up(high_water * 8,
  // 4096). Entries are never returned to the OS, so it never shrinks.
  size_t MemoryUsage() const;
  uint64_t capacity() const { return capacity_; }

  // RECOVERY: set an entry and the high-water mark directly.
  void RecoverySet(PageId pid, uint64_t entry);
  void RecoverySetHighWater(PageId high_water);
  // RECOVERY: put every free entry below the high-water mark on the free stack
  // so that the lowest PIDs are reused first, and count the others as the
  // pages recovery brought back (Stats::recovered).
  void RebuildFreeList();

  // allocated and freed count since open; recovered is the pages allocated
  // when the table was recovered, so recovered + allocated - freed is the
  // pages allocated now.
  struct Stats {
    uint64_t allocated;
    uint64_t freed;
    uint64_t reused;
    uint64_t high_water;
    uint64_t recovered;
  };
  Stats GetStats() const;

  // Frees whose deferred push has not run yet (approximate while threads run).
  uint64_t pending_frees() const;

  // Test hook, called in debug builds only (compiled out with NDEBUG): by
  // Allocate between reading the top of the free stack and CASing it off, so a
  // test can interleave other operations there. nullptr turns it off.
  // REQUIRES: no other thread uses the table while the hook is set or cleared.
  void TEST_SetPopHook(void (*hook)(void* arg), void* arg) {
    pop_hook_ = hook;
    pop_hook_arg_ = arg;
  }

 private:
  static constexpr uint64_t kTagBits = 0b11;
  static constexpr uint64_t kLinkTag = 0b10;
  static constexpr int kHeadTagShift = 40;
  static uint64_t HideLink(uint64_t e) { return (e & kTagBits) == kLinkTag ? kFree : e; }

  void PushFree(PageId pid);
  static void DeferredPush(void* table, uint64_t pid);

  EpochManager* const epochs_;
  uint64_t capacity_;                       // entries reserved
  std::atomic<uint64_t>* entries_;          // mmap'ed, capacity_ entries
  std::atomic<uint64_t> high_water_{1};     // PID 0 is never used
  std::atomic<uint64_t> free_head_{0};      // (tag << 40) | pid, pid 0 = empty
  std::atomic<uint64_t> allocated_{0}, freed_{0}, reused_{0}, recovered_{0};
  std::atomic<uint64_t> pending_pushes_{0};  // Free calls whose push has not run
  int reserve_errno_ = 0;                    // mmap's errno when capacity_ == 0
  void (*pop_hook_)(void*) = nullptr;        // TEST_SetPopHook
  void* pop_hook_arg_ = nullptr;
};

}  // namespace deuteron::llama
