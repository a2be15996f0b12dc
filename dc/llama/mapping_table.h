// MappingTable: LLAMA's indirection from page id (PID) to page state.
//
// Each entry is one 64-bit word, changed only by CAS, holding one of:
//   0                      free (never allocated, or freed; reusable after an epoch)
//   kEmptyPage (0b11)      allocated, no state yet
//   pointer, low bits 00   in-memory page state (a PageNode*, 8-byte aligned)
//   (addr << 2) | 0b01     page wholly in the LSS, its newest piece at addr
//   (pid << 2) | 0b10      internal: link in the free-PID stack (never seen by callers)
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
//     so a stale head never matches (ABA).
// Memory orders: Load is acquire and Cas acq_rel, so a page state published by
// CAS is fully visible to whoever loads its pointer.
//
// Thread safety: every method is thread-safe except those marked RECOVERY,
// which require that no other thread uses the table.
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

  // REQUIRES: epochs outlives the table.
  MappingTable(EpochManager* epochs, Options options);
  ~MappingTable();
  MappingTable(const MappingTable&) = delete;
  MappingTable& operator=(const MappingTable&) = delete;

  // REQUIRES: 0 < pid < capacity().
  uint64_t Load(PageId pid) const { return entries_[pid].load(std::memory_order_acquire); }
  // On failure `expected` holds the current value.
  bool Cas(PageId pid, uint64_t& expected, uint64_t desired) {
    return entries_[pid].compare_exchange_strong(expected, desired, std::memory_order_acq_rel,
                                                 std::memory_order_acquire);
  }

  // A PID whose entry is kEmptyPage. TooLarge when max_pages are in use.
  Result<PageId> Allocate();
  // REQUIRES: pid allocated. Sets the entry to 0; the PID is reused only after
  // every thread now inside an epoch guard has left it.
  void Free(PageId pid);

  // One past the highest PID ever allocated (PIDs start at 1).
  PageId high_water() const;
  // Resident bytes of the table (touched entries), for the memory budget.
  size_t MemoryUsage() const;
  uint64_t capacity() const { return capacity_; }

  // RECOVERY: set an entry and the high-water mark directly.
  void RecoverySet(PageId pid, uint64_t entry);
  void RecoverySetHighWater(PageId high_water);
  // RECOVERY: put every free entry below the high-water mark on the free stack
  // so that the lowest PIDs are reused first.
  void RebuildFreeList();

  struct Stats { uint64_t allocated; uint64_t freed; uint64_t reused; uint64_t high_water; };
  Stats GetStats() const;

 private:
  void PushFree(PageId pid);
  static void DeferredPush(void* table, uint64_t pid);

  EpochManager* const epochs_;
  uint64_t capacity_;                       // entries reserved
  std::atomic<uint64_t>* entries_;          // mmap'ed, capacity_ entries
  std::atomic<uint64_t> high_water_{1};     // PID 0 is never used
  std::atomic<uint64_t> free_head_{0};      // (tag << 40) | pid, pid 0 = empty
  std::atomic<uint64_t> allocated_{0}, freed_{0}, reused_{0};
};

}  // namespace deuteron::llama
