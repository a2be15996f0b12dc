// Llama: the memory budget and eviction (llama.h; llama.md, "Memory budget").
#include <algorithm>
#include <cassert>
#include <cstring>
#include <vector>

#include "common/coding.h"
#include "common/logging.h"
#include "dc/llama/checkpoint.h"
#include "dc/llama/internal/llama_impl.h"
#include "dc/llama/llama.h"
#include "dc/llama/op_phases.h"

namespace deuteron::llama {

// ---------------------------------------------------------------------------
// Memory budget and eviction

// A page's clock byte: kWarmBit for pages marked by KeepWarm (kept while
// the page lives in that PID), and below it the sweeps of the hand the page
// survives untouched: 1 after a touch, warm_page_sweeps after a KeepWarm.
namespace {
constexpr uint8_t kWarmBit = 0x80;
constexpr uint8_t kSweepsMask = 0x7f;
// The evictor starts the write of the flushed pages' buffer every this many
// pages, and waits for writes only with this many pending (or the most).
constexpr size_t kSwapBatch = 32;
constexpr size_t kMaxPendingSwaps = 256;
// The record size the evictor asks the ring about before a flush: a page of
// the Bw-tree's usual size.
constexpr size_t kRingProbeBytes = 16 << 10;
}  // namespace

void Llama::Touch(PageId pid) {
  // Relaxed: a reference bit is a hint; test before set so hot pages do not
  // bounce the line between readers.
  if (referenced_ == nullptr) return;
  const uint8_t b = referenced_[pid].load(std::memory_order_relaxed);
  if ((b & kSweepsMask) == 0) referenced_[pid].store(b | 1, std::memory_order_relaxed);
}

void Llama::KeepWarm(PageId pid) {
  if (referenced_ == nullptr || pid == 0 || pid >= mapping_->high_water()) return;
  const uint8_t want = static_cast<uint8_t>(
      kWarmBit | std::clamp<uint8_t>(options_.warm_page_sweeps, 1, kSweepsMask));
  if (referenced_[pid].load(std::memory_order_relaxed) != want) {
    referenced_[pid].store(want, std::memory_order_relaxed);
  }
}

bool Llama::IsWarm(PageId pid) const {
  return referenced_ != nullptr && (referenced_[pid].load(std::memory_order_relaxed) & kWarmBit) != 0;
}

size_t Llama::MemoryUsage() const {
  const int64_t nodes = std::max<int64_t>(0, memory_->Total());
  // The reference bits cost one byte per page below the high-water mark.
  return static_cast<size_t>(nodes) + mapping_->MemoryUsage() + mapping_->high_water();
}


bool Llama::HasFlushableOverSwap(uint64_t entry, uint64_t bound) {
  if (!MappingTable::IsMemory(entry)) return false;
  bool seen_flush = false;
  uint64_t flush_bound = 0;
  bool flushable = false;
  for (const PageNode* n = MappingTable::ToPointer<PageNode>(entry); n != nullptr; n = n->next) {
    if (n->kind == NodeKind::kPartialSwap) return flushable;
    if (n->kind == NodeKind::kFlush && !seen_flush) {
      seen_flush = true;
      flush_bound = n->tag;
    }
    if (n->is_data() && n->tag <= bound && !(seen_flush && n->tag <= flush_bound)) {
      flushable = true;
    }
  }
  return true;  // wholly in memory: Flush reads nothing back
}

void Llama::MaybeEnforceBudget() {
  if (options_.memory_budget == 0) return;
  // Checking the sum of the counter's shards on every allocation would cost
  // more than the allocation; every 64th is enough to stay within the budget.
  thread_local uint32_t calls = 0;
  if ((++calls & 63) != 0) return;
  if (MemoryUsage() <= SoftBudget()) return;
  // The caller holds a guard (it is building a node): evicting here would
  // make garbage that cannot be reclaimed until the guard goes. Ask for it
  // at the next guard-free moment (Guard::~Guard).
  eviction_wanted_.store(true, std::memory_order_relaxed);
}

size_t Llama::SoftBudget() const {
  // Without waiting for writes, eviction starts a sixteenth below the
  // budget, so that the pages whose writes are in flight fit under it; the
  // evictor waits only once the cache passes the budget itself.
  const size_t b = options_.memory_budget;
  return options_.evict_without_waiting ? b - b / 16 : b;
}

Status Llama::SwapOutWritten(bool wait) {
  if (pending_swaps_.empty()) return Status::OK();
  if (wait) {
    LssAddress newest = 0;
    for (const auto& [pid, end] : pending_swaps_) newest = std::max(newest, end);
    RETURN_IF_ERROR(lss_->MakeWritten(newest));
  }
  const LssAddress written = lss_->HiWritten();
  auto guard = epochs_->Enter();
  size_t kept = 0;
  for (const auto& p : pending_swaps_) {
    if (p.second > written) {
      pending_swaps_[kept++] = p;
      continue;
    }
    pending_swap_set_.erase(p.first);
    if (SwapOut(p.first) && IsWarm(p.first)) {
      warm_swap_outs_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  pending_swaps_.resize(kept);
  return Status::OK();
}

Status Llama::EnforceBudget() {
  if (options_.memory_budget == 0) return Status::OK();
  ScopedPhase phase(OpPhase::kEviction);
  const size_t target = static_cast<size_t>(static_cast<double>(options_.memory_budget) *
                                            options_.eviction_target);
  // Far over budget, wait for the running evictor; slightly over, leave it to it.
  std::unique_lock<std::mutex> lock(evict_mu_, std::defer_lock);
  if (MemoryUsage() > options_.memory_budget + options_.memory_budget / 20) {
    lock.lock();
  } else if (!lock.try_lock()) {
    return Status::OK();
  }
  eviction_wanted_.store(false, std::memory_order_relaxed);
  const uint64_t bound =
      options_.eviction_flush_bound ? options_.eviction_flush_bound() : ~0ull;
  // The last pass ended over its target with nothing more it could drop
  // (pages above the bound: the DC's records above the ESL). Until the bound
  // moves or memory grows by an eighth (of the budget, or of what it was if
  // more), another pass would walk mostly the same pages for nothing: every
  // thread leaving a guard would walk them all (issue 38). Growth in steps
  // of an eighth keeps the passes to a logarithmic number while the cache
  // fills; what was flushed meanwhile (an RSSP's FlushAll, structure
  // changes) waits for the next pass.
  //
  // Progress is measured without the garbage waiting for other threads'
  // guards: it is already dropped, and goes when they leave.
  auto live = [&] {
    const size_t used = MemoryUsage();
    const size_t pending = epochs_->PendingBytes();
    return used > pending ? used - pending : 0;
  };
  // Pages flushed by earlier passes whose records are written by now go
  // first (cheap: at most kMaxPendingSwaps), futile pass or not.
  RETURN_IF_ERROR(SwapOutWritten(/*wait=*/false));
  if (futile_.valid && futile_.bound == bound &&
      live() <= futile_.usage + std::max(options_.memory_budget, futile_.usage) / 8) {
    return Status::OK();
  }
  futile_.valid = false;
  eviction_passes_.fetch_add(1, std::memory_order_relaxed);
  epochs_->TryReclaim();
  // Two sweeps: the first clears reference bits, the second finds them clear.
  // Pages that need a flush first are flushed and swapped out once their
  // records are written, by this pass or a later one: the pass starts the
  // buffer's write (StartWrite) and sweeps on for pages it can drop now,
  // waiting for the write only once the cache is over its budget (or
  // kMaxPendingSwaps pages wait): passes start a sixteenth below it
  // (SoftBudget), so a foreground operation seldom waits for a pwrite, and
  // the pages whose writes are in flight stay within the budget.
  const size_t hard = options_.evict_without_waiting ? options_.memory_budget : 0;
  const PageId high_water = mapping_->high_water();
  bool skipped_for_ring = false;  // pages left for the next pass: not futile
  for (uint64_t visited = 0; visited < 2 * high_water && live() > target; ++visited) {
    if ((visited & 63) == 63) epochs_->TryReclaim();
    if (clock_hand_ >= high_water || clock_hand_ == 0) clock_hand_ = 1;
    const PageId pid = clock_hand_++;
    if (!MappingTable::IsMemory(mapping_->Load(pid))) continue;
    if (referenced_ != nullptr) {
      const uint8_t b = referenced_[pid].load(std::memory_order_relaxed);
      if ((b & kSweepsMask) != 0) {
        referenced_[pid].store(b - 1, std::memory_order_relaxed);
        continue;
      }
    }
    if (pending_swap_set_.count(pid) != 0) continue;  // flushed, its write under way
    bool queued = false;
    {
      auto guard = epochs_->Enter();
      if (SwapOut(pid)) {
        if (IsWarm(pid)) warm_swap_outs_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      {
        std::lock_guard<std::mutex> att(att_mu_);
        if (private_pages_.count(pid) != 0) continue;
      }
      // A partly swapped page whose unflushed nodes are all above the bound
      // has nothing more to give: flushing it would only read its swapped part
      // back in (Flush materializes), and the next sweep would do it again.
      if (!HasFlushableOverSwap(mapping_->Load(pid), bound)) continue;
      // A flush now would wait for the ring (both buffers busy): while the
      // cache is within a sixteenth of its budget, look for pages that can
      // go without one instead; the next pass flushes this one.
      if (live() <= hard && lss_->RingWouldWait(kRingProbeBytes)) {
        skipped_for_ring = true;
        continue;
      }
      // Annotated with its bound, like every flush under the owner's bound.
      Result<FlushResult> r = Flush(pid, bound, options_.eviction_flush_bound ? bound : 0);
      if (!r.ok() && r.status().IsNotFound()) continue;  // freed under the evictor
      if (!r.ok()) return r.status();
      if (r->outcome == FlushOutcome::kFlushed) {
        eviction_flushes_.fetch_add(1, std::memory_order_relaxed);
      }
      // Flushed now, or flushed before but not yet written: swap out once
      // written (a sync is MakeStable's, for durability, not the evictor's).
      if (r->outcome == FlushOutcome::kFlushed || r->outcome == FlushOutcome::kClean) {
        pending_swaps_.push_back(
            {pid, r->outcome == FlushOutcome::kFlushed ? r->end : lss_->Tail()});
        pending_swap_set_.insert(pid);
        queued = true;
      }
    }  // (the guard ends: SwapOutWritten may wait for a write)
    const size_t pending = pending_swaps_.size();
    // Each batch of queued pages starts its buffer's write once.
    if (queued && pending % kSwapBatch == 0) lss_->StartWrite(lss_->Tail());
    if ((pending >= kSwapBatch && live() > hard) || pending >= kMaxPendingSwaps) {
      RETURN_IF_ERROR(SwapOutWritten(/*wait=*/true));
    } else if ((visited & 15) == 15) {
      RETURN_IF_ERROR(SwapOutWritten(/*wait=*/false));
    }
  }
  if (!pending_swaps_.empty() && live() > target) {
    lss_->StartWrite(lss_->Tail());
    RETURN_IF_ERROR(SwapOutWritten(/*wait=*/live() > hard));
  }
  epochs_->TryReclaim();
  // Over the target with pages whose writes are in flight, or pages left
  // because the ring was busy, is not futile: the next pass can drop them
  // (a futile mark lets the cache grow an eighth of the budget first).
  if (const size_t left = live(); left > target && pending_swaps_.empty() && !skipped_for_ring) {
    futile_ = FutilePass{true, bound, left};
  }
  return Status::OK();
}

}  // namespace deuteron::llama
