// MappingTable; the invariants (1..5) and memory orders are at the top of
// dc/llama/mapping_table.h.
#include "dc/llama/mapping_table.h"

#include <sys/mman.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <string>

namespace deuteron::llama {

// The entries live in raw mmap'ed memory that the kernel zero-fills: a zero
// word must be a valid std::atomic<uint64_t> holding 0 (true for GCC on every
// target we build for: the atomic is the bare, lock-free word).
static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t));
static_assert(alignof(std::atomic<uint64_t>) == alignof(uint64_t));
static_assert(std::atomic<uint64_t>::is_always_lock_free);

namespace {

constexpr size_t kOsPage = 4096;

uint64_t PidOf(uint64_t head) { return head & MappingTable::kMaxPid; }

}  // namespace

MappingTable::MappingTable(EpochManager* epochs, Options options)
    : epochs_(epochs),
      capacity_(std::clamp<uint64_t>(options.max_pages, 1, kMaxPid + 1)),
      entries_(nullptr) {
  void* p = mmap(nullptr, capacity_ * sizeof(uint64_t), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    reserve_errno_ = errno;
    capacity_ = 0;
    return;
  }
  entries_ = static_cast<std::atomic<uint64_t>*>(p);
}

MappingTable::~MappingTable() {
  // relaxed: the owner ordered every use of the table before the destructor.
  assert(pending_pushes_.load(std::memory_order_relaxed) == 0 &&
         "MappingTable destroyed with deferred pushes pending: drain the EpochManager first");
  if (entries_ != nullptr) munmap(entries_, capacity_ * sizeof(uint64_t));
}

Result<PageId> MappingTable::Allocate() {
  if (entries_ == nullptr) {
    return Status::NoSpace("mapping table: reserving address space failed: " +
                           std::string(std::strerror(reserve_errno_)));
  }
  // First the free stack (invariants 4, 5).
  // acquire: pairs with the acq_rel head CAS of the push that put this PID on
  // top, so the link it wrote into the entry is visible below.
  uint64_t head = free_head_.load(std::memory_order_acquire);
  while (PidOf(head) != 0) {
    const PageId pid = PidOf(head);
    // acquire: as above; the entry may have moved on since (popped and reused),
    // in which case the head has moved on too and the CAS below fails.
    const uint64_t link = entries_[pid].load(std::memory_order_acquire);
    if ((link & kTagBits) != kLinkTag) {
      // `pid` was popped after we read the head; read the new head.
      head = free_head_.load(std::memory_order_acquire);  // acquire: as above
      continue;
    }
#ifndef NDEBUG
    if (pop_hook_ != nullptr) pop_hook_(pop_hook_arg_);
#endif
    const uint64_t next = link >> 2;
    const uint64_t tag = (head >> kHeadTagShift) + 1;  // wraps mod 2^24
    const uint64_t new_head = (tag << kHeadTagShift) | next;
    // acq_rel: acquire the pushes' links (see above); release so that our
    // later reads of the stack are ordered after this pop for other poppers.
    // On failure `head` is reloaded with acquire, as above.
    if (free_head_.compare_exchange_weak(head, new_head, std::memory_order_acq_rel,
                                         std::memory_order_acquire)) {
      uint64_t expected = link;
      // acq_rel/acquire: an entry's state transitions use Cas()'s orders.
      [[maybe_unused]] const bool ok = entries_[pid].compare_exchange_strong(
          expected, kEmptyPage, std::memory_order_acq_rel, std::memory_order_acquire);
      assert(ok && "free-stack entry changed while the PID was on the stack");
      // relaxed (both): statistics.
      reused_.fetch_add(1, std::memory_order_relaxed);
      allocated_.fetch_add(1, std::memory_order_relaxed);
      return pid;
    }
  }

  // Then a never-used PID above the high-water mark (invariant 3).
  // relaxed: only the uniqueness of the value matters; the entry's state is
  // published by its own CAS below.
  const PageId pid = high_water_.fetch_add(1, std::memory_order_relaxed);
  if (pid >= capacity_) {
    // Nothing to undo: the mark stays past capacity and high_water() clamps.
    return Status::TooLarge("mapping table full: all " + std::to_string(capacity_ - 1) +
                            " page ids are in use (Options::max_pages)");
  }
  uint64_t expected = kFree;
  // acq_rel/acquire: an entry's state transitions use Cas()'s orders.
  [[maybe_unused]] const bool ok = entries_[pid].compare_exchange_strong(
      expected, kEmptyPage, std::memory_order_acq_rel, std::memory_order_acquire);
  assert(ok && "entry above the high-water mark was not free (recovery set it?)");
  allocated_.fetch_add(1, std::memory_order_relaxed);  // relaxed: statistics
  return pid;
}

uint64_t MappingTable::Free(PageId pid) {
  assert(pid > 0 && pid < high_water());
  // release: pairs with Load()'s acquire; whoever sees the PID free also sees
  // what the freeing thread did before. acq_rel: the caller retires the
  // chain it gets back, so it must also see that chain's nodes whole. An
  // exchange, not a store: the old state is whatever was last installed.
  const uint64_t old = entries_[pid].exchange(kFree, std::memory_order_acq_rel);
  assert(old != kFree && (old & kTagBits) != kLinkTag && "Free of a PID that is not allocated");
  // relaxed (both): a count checked by the destructor (whose caller orders
  // every use before it) and statistics.
  pending_pushes_.fetch_add(1, std::memory_order_relaxed);
  freed_.fetch_add(1, std::memory_order_relaxed);
  epochs_->Defer(&DeferredPush, this, pid, 0);
  return old;
}

void MappingTable::DeferredPush(void* table, uint64_t pid) {
  auto* t = static_cast<MappingTable*>(table);
  t->PushFree(pid);
  t->pending_pushes_.fetch_sub(1, std::memory_order_relaxed);  // relaxed: as in Free
}

void MappingTable::PushFree(PageId pid) {
  // relaxed: the CAS below re-checks the value and acquires on success.
  uint64_t head = free_head_.load(std::memory_order_relaxed);
  for (;;) {
    // The entry is 0 (freed) or our own earlier link: nobody else writes it
    // until the CAS below puts it on the stack (invariant 5).
    // relaxed: published by the release half of the head CAS below.
    entries_[pid].store((PidOf(head) << 2) | kLinkTag, std::memory_order_relaxed);
    // acq_rel: release publishes the link to the popper that acquires this
    // head; acquire keeps the chain of pushes and pops ordered. The tag is
    // kept: only pops change it (invariant 4). relaxed on failure: we retry.
    if (free_head_.compare_exchange_weak(head, (head & ~kMaxPid) | pid,
                                         std::memory_order_acq_rel,
                                         std::memory_order_relaxed)) {
      return;
    }
  }
}

PageId MappingTable::high_water() const {
  // relaxed: a snapshot; entries are read with their own acquire loads.
  return std::min(high_water_.load(std::memory_order_relaxed), capacity_);
}

size_t MappingTable::MemoryUsage() const {
  const uint64_t bytes = high_water() * sizeof(uint64_t);
  return static_cast<size_t>((bytes + kOsPage - 1) / kOsPage * kOsPage);
}

void MappingTable::RecoverySet(PageId pid, uint64_t entry) {
  assert(pid > 0 && pid < capacity_);
  assert((entry & kTagBits) != kLinkTag && "link values are internal to the free stack");
  // relaxed: RECOVERY runs alone; whoever publishes the recovered table to
  // other threads (thread start, a mutex) orders this store before their loads.
  entries_[pid].store(entry, std::memory_order_relaxed);
}

void MappingTable::RecoverySetHighWater(PageId high_water) {
  assert(high_water >= 1 && high_water <= capacity_);
  // relaxed: RECOVERY, as in RecoverySet.
  high_water_.store(high_water, std::memory_order_relaxed);
}

void MappingTable::RebuildFreeList() {
  // relaxed (all): RECOVERY, as in RecoverySet.
  // Start from an empty stack, keeping the tag (invariant 4).
  free_head_.store(free_head_.load(std::memory_order_relaxed) & ~kMaxPid,
                   std::memory_order_relaxed);
  // Descending, so that the lowest PID ends on top and is reused first.
  uint64_t live = 0;
  for (PageId pid = high_water(); pid-- > 1;) {
    const uint64_t e = entries_[pid].load(std::memory_order_relaxed);
    if (e == kFree || (e & kTagBits) == kLinkTag) {
      PushFree(pid);
    } else {
      ++live;
    }
  }
  recovered_.store(live, std::memory_order_relaxed);
}

MappingTable::Stats MappingTable::GetStats() const {
  // relaxed (all): statistics.
  return Stats{allocated_.load(std::memory_order_relaxed), freed_.load(std::memory_order_relaxed),
               reused_.load(std::memory_order_relaxed), high_water(),
               recovered_.load(std::memory_order_relaxed)};
}

uint64_t MappingTable::pending_frees() const {
  return pending_pushes_.load(std::memory_order_relaxed);  // relaxed: a count
}

}  // namespace deuteron::llama
