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

namespace deuteron::llama {

// ---------------------------------------------------------------------------
// Memory budget and eviction

void Llama::Touch(PageId pid) {
  // Relaxed: a reference bit is a hint; test before set so hot pages do not
  // bounce the line between readers.
  if (referenced_ != nullptr && referenced_[pid].load(std::memory_order_relaxed) == 0) {
    referenced_[pid].store(1, std::memory_order_relaxed);
  }
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
  if (MemoryUsage() <= options_.memory_budget) return;
  // The caller holds a guard (it is building a node): evicting here would
  // make garbage that cannot be reclaimed until the guard goes. Ask for it
  // at the next guard-free moment (Guard::~Guard).
  eviction_wanted_.store(true, std::memory_order_relaxed);
}

Status Llama::EnforceBudget() {
  if (options_.memory_budget == 0) return Status::OK();
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
  if (futile_.valid && futile_.bound == bound &&
      live() <= futile_.usage + std::max(options_.memory_budget, futile_.usage) / 8) {
    return Status::OK();
  }
  futile_.valid = false;
  eviction_passes_.fetch_add(1, std::memory_order_relaxed);
  epochs_->TryReclaim();
  // Two sweeps: the first clears reference bits, the second finds them clear.
  // Pages that need a flush first are flushed in a batch, made stable once,
  // then swapped out.
  std::vector<PageId> flushed;
  const PageId high_water = mapping_->high_water();
  for (uint64_t visited = 0; visited < 2 * high_water && live() > target; ++visited) {
    if ((visited & 63) == 63) epochs_->TryReclaim();
    if (clock_hand_ >= high_water || clock_hand_ == 0) clock_hand_ = 1;
    const PageId pid = clock_hand_++;
    if (!MappingTable::IsMemory(mapping_->Load(pid))) continue;
    if (referenced_ != nullptr && referenced_[pid].load(std::memory_order_relaxed) != 0) {
      referenced_[pid].store(0, std::memory_order_relaxed);
      continue;
    }
    auto guard = epochs_->Enter();
    if (SwapOut(pid)) continue;
    {
      std::lock_guard<std::mutex> att(att_mu_);
      if (private_pages_.count(pid) != 0) continue;
    }
    // A partly swapped page whose unflushed nodes are all above the bound
    // has nothing more to give: flushing it would only read its swapped part
    // back in (Flush materializes), and the next sweep would do it again.
    if (!HasFlushableOverSwap(mapping_->Load(pid), bound)) continue;
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
      flushed.push_back(pid);
    }
    if (flushed.size() >= 64) {
      RETURN_IF_ERROR(lss_->MakeWritten(lss_->Tail()));
      for (PageId f : flushed) SwapOut(f);
      flushed.clear();
    }
  }
  if (!flushed.empty()) {
    RETURN_IF_ERROR(lss_->MakeWritten(lss_->Tail()));
    auto guard = epochs_->Enter();
    for (PageId f : flushed) SwapOut(f);
  }
  epochs_->TryReclaim();
  if (const size_t left = live(); left > target) futile_ = FutilePass{true, bound, left};
  return Status::OK();
}

}  // namespace deuteron::llama
