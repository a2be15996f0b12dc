// Llama: checkpoints and cleaning (llama.h; llama.md, "Checkpoints", "Cleaning").
#include <algorithm>
#include <cassert>
#include <cstring>
#include <mutex>
#include <optional>
#include <vector>

#include "common/coding.h"
#include "common/fault_hooks.h"
#include "common/heap.h"
#include "common/logging.h"
#include "dc/llama/checkpoint.h"
#include "dc/llama/internal/llama_impl.h"
#include "dc/llama/llama.h"
#include "dc/llama/op_phases.h"

namespace deuteron::llama {

// ---------------------------------------------------------------------------
// Checkpoint

Status Llama::Checkpoint() {
  ScopedPhase phase(OpPhase::kCheckpoint);
  std::lock_guard<std::mutex> lock(checkpoint_mu_);
  CheckpointData d;
  d.store_id = lss_->identity().store_id;
  d.sequence = checkpoint_sequence_ + 1;
  // Every reservation below Hi-Written has finished its CAS (its buffer was
  // written only once its writers were done), so each state the table shows
  // from here on is either captured below or replayed from the RSP. (Not
  // Hi-Stable: it may lag behind when the LSS syncs only on MakeStable; the
  // MakeStable below makes the RSP durable before the checkpoint is.)
  d.rsp = lss_->HiWritten();
  // Every record below the RSP noted its annotation before its commit.
  d.max_annotation = MaxAnnotation();
  std::unordered_set<PageId> private_pages;
  {
    std::lock_guard<std::mutex> att(att_mu_);
    private_pages = private_pages_;
    checkpoint_reading_ = true;
    allocated_in_checkpoint_.clear();
  }
  if (checkpoint_hook_for_test_) checkpoint_hook_for_test_();
  const PageId high_water = mapping_->high_water();
  d.entries.assign(high_water - 1, 0);
  constexpr PageId kPagesPerGuard = 4096;  // let reclamation progress on big tables
  for (PageId first = 1; first < high_water; first += kPagesPerGuard) {
    auto guard = epochs_->Enter();
    for (PageId pid = first; pid < std::min(high_water, first + kPagesPerGuard); ++pid) {
      const uint64_t e = mapping_->Load(pid);
      uint64_t& out = d.entries[pid - 1];
      if (MappingTable::IsFree(e) || private_pages.count(pid) != 0) {
        out = 0;
      } else if (MappingTable::IsEmptyPage(e)) {
        out = kEmptyPageEntry;
      } else if (MappingTable::IsLss(e)) {
        out = MappingTable::ToLss(e);
      } else {
        ChainInfo info;
        AnalyzeChain(MappingTable::ToPointer<PageNode>(e), &info);
        out = info.lss_head != kNullAddress ? info.lss_head : kEmptyPageEntry;
      }
    }
  }
  {
    // Allocated while the table was read: private then, perhaps not in the
    // snapshot. Free here; committed ones are replayed from the RSP.
    std::lock_guard<std::mutex> att(att_mu_);
    for (PageId pid : allocated_in_checkpoint_) {
      if (pid < high_water) d.entries[pid - 1] = 0;
    }
    allocated_in_checkpoint_.clear();
    checkpoint_reading_ = false;
  }
  // What the entries point at must be durable before the checkpoint is.
  RETURN_IF_ERROR(lss_->MakeStable(lss_->Tail()));
  d.gc_frontier = gc_frontier_.load();
  RETURN_IF_ERROR(WriteCheckpoint(env_, dir_, d));
  checkpoint_sequence_ = d.sequence;
  checkpoint_rsp_[0] = checkpoint_rsp_[1];
  checkpoint_rsp_[1] = d.rsp;
  checkpoints_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

LssAddress Llama::LastCheckpointRsp() {
  std::lock_guard<std::mutex> lock(checkpoint_mu_);
  return checkpoint_rsp_[1];
}

// ---------------------------------------------------------------------------
// Cleaning

void Llama::MaybeClean(LssAddress flushed_at) {
  if (options_.cleaning_trigger_segments == 0) return;
  // Only the flush that first lands in a new segment looks (cheap otherwise).
  const uint64_t segment = SegmentOf(flushed_at, lss_->identity().segment_size);
  uint64_t seen = tail_segment_seen_.load(std::memory_order_relaxed);
  if (segment <= seen ||
      !tail_segment_seen_.compare_exchange_strong(seen, segment, std::memory_order_relaxed)) {
    return;
  }
  const size_t segments = SegmentsToClean();
  if (segments == 0) return;
  if (background_cleaning_) {
    // Once per new segment: the cleaner allocates from this thread's arena
    // (common/heap.h: the writers' slabs, not one of its own).
    cleaner_arena_.store(HeapThreadArena(), std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(cleaner_mu_);
      cleaning_wanted_.store(segments, std::memory_order_relaxed);
    }
    cleaner_cv_.notify_one();
    return;
  }
  // The flushing thread holds a guard: clean when it lets go of it.
  cleaning_wanted_.store(segments, std::memory_order_relaxed);
}

uint64_t Llama::SegmentsHeld() const {
  const uint64_t segment_size = lss_->identity().segment_size;
  const uint64_t first_uncleaned =
      std::max(lss_->LowestSegment(), cleaned_frontier_.load() / segment_size);
  return lss_->TailSegment() + 1 - std::min(first_uncleaned, lss_->TailSegment());
}

size_t Llama::SegmentsToClean() const {
  const uint64_t held = SegmentsHeld();
  if (held <= std::max<uint64_t>(options_.cleaning_trigger_segments,
                                 clean_trigger_.load(std::memory_order_relaxed))) {
    return 0;
  }
  return held - std::max<size_t>(options_.cleaning_target_segments, 1);
}

Status Llama::RelocateIfLive(PageId pid, LssAddress lo, LssAddress hi, CleanResult* result) {
  for (;;) {
    std::optional<EpochManager::Guard> guard(epochs_->Enter());
    if (pid == 0 || pid >= mapping_->high_water()) return Status::OK();
    const uint64_t e = mapping_->Load(pid);
    if (MappingTable::IsFree(e) || MappingTable::IsEmptyPage(e)) return Status::OK();
    const PageNode* head = nullptr;
    LssAddress at = kNullAddress;
    bool swapped = false;
    ChainInfo info;
    if (MappingTable::IsLss(e)) {
      at = MappingTable::ToLss(e);
      // A page wholly in the LSS: nothing below reaches a shared node (the
      // reads make private ones, the CAS compares the entry), so no guard
      // is held across its reads and the ring's wait. A guard held there
      // kept every other thread's garbage from being freed for as long as
      // this thread waited for the disk or the CPU: 5-7 MiB of it on a 9
      // MiB cache under a steady writer (issue 34).
      guard.reset();
    } else {
      head = MappingTable::ToPointer<const PageNode>(e);
      swapped = head->kind == NodeKind::kPartialSwap || (head->flags & kNodeSwapped) != 0;
      AnalyzeChain(head, &info);
      at = info.lss_head;
    }
    // Is any record of the page's durable state in the victim range? Chain
    // addresses fall from the newest record to the kBase that ends it, and
    // nothing lies below the victim (the lowest segment held), so the state
    // is live there iff its kBase is. A resident page knows its kBase; a
    // swapped-out one has its chain walked.
    bool live = false;
    if (info.lss_base != kNullAddress) {
      live = info.lss_base < hi;
    } else {
      for (LssAddress a = at; a != kNullAddress;) {
        if (a >= lo && a < hi) {
          live = true;
          break;
        }
        RETURN_IF_ERROR(EnsureWritten(a));
        std::string payload;
        ASSIGN_OR_RETURN(RecordHeader h, lss_->ReadRecord(a, &payload));
        if (h.type != RecordType::kDelta) break;
        a = h.prev;
      }
    }
    if (!live) return Status::OK();

    // Rewrite the whole durable state as one kBase record at the tail.
    LoadedState loaded_state;
    ASSIGN_OR_RETURN(PageNode * loaded, LoadFromLss(pid, at, &loaded_state));
    const uint64_t bound = loaded_state.bound;
    std::vector<const PageNode*> pieces;
    for (const PageNode* n = loaded; n != nullptr; n = n->next) pieces.push_back(n);
    const size_t payload = PagePayloadSize(pieces);
    const size_t span = RecordSpan(payload);
      Result<Reservation> rr = lss_->Reserve(span);
    if (!rr.ok()) {
      DiscardChain(loaded);
      return rr.status();
    }
    const Reservation r = *rr;

    // The new mapping: an entry, a relocation node, or a rebuilt partial swap.
    uint64_t desired;
    PageNode* built = nullptr;
    if (head == nullptr) {
      desired = MappingTable::FromLss(r.address);
    } else if (!swapped) {
      FlushNode* rel = NewFlushNode(NodeKind::kRelocation);
      rel->seq = head->seq + 1;
      rel->address = r.address;
      rel->end = r.address + span;
      rel->base = r.address;
      rel->depth = 1;
      rel->chain_bytes = 0;
      rel->next = const_cast<PageNode*>(head);
      rel->base_hint = BaseHintBelow(head);
      built = rel;
      desired = MappingTable::FromPointer(rel);
    } else {
      const PageNode* n = head;
      std::vector<const PageNode*> copies;
      for (; n->kind != NodeKind::kPartialSwap; n = n->next) copies.push_back(n);
      const FlushNode* old_ps = AsFlush(n);
      FlushNode* ps = NewFlushNode(NodeKind::kPartialSwap);
      ps->seq = old_ps->seq;
      ps->seq_hi = old_ps->seq_hi;
      ps->tag = old_ps->tag;
      ps->annotation = old_ps->annotation;
      ps->address = r.address;
      ps->end = r.address + span;
      ps->base = r.address;
      ps->depth = 1;
      ps->chain_bytes = 0;
      PageNode* top = ps;
      for (auto it = copies.rbegin(); it != copies.rend(); ++it) {
        PageNode* c = NewNode((*it)->kind, (*it)->size, (*it)->tag);
        c->seq = (*it)->seq;
        c->prior = (*it)->prior;
        c->flags = (*it)->flags;
        std::memcpy(c->payload(), (*it)->payload(), (*it)->size);
        c->next = top;
        top = c;
      }
      built = top;
      desired = MappingTable::FromPointer(top);
    }
    uint64_t expected = e;
    if (!mapping_->Cas(pid, expected, desired)) {
      lss_->Void(r);
      if (built != nullptr) {
        if (!swapped) built->next = nullptr;
        DiscardChain(built);
      }
      DiscardChain(loaded);
      continue;  // the page changed: look again
    }
    // The live bytes: the page's state is now this one record.
    state_bytes_->Note(pid, r.address, span);
    state_bytes_->Add(static_cast<int64_t>(span) - static_cast<int64_t>(loaded_state.bytes));
    WritePageRecord(r.dst, pid, pieces, payload, kNullAddress, 0, bound);
    lss_->Commit(r);
    if (swapped) RetireChain(head);
    DiscardChain(loaded);
    result->pages_relocated++;
    result->bytes_relocated += span;
    return Status::OK();
  }
}

Result<CleanResult> Llama::Clean(size_t max_segments) {
  // Releasing waits for every older guard: inside one, it would wait for
  // itself.
  if (epochs_->InGuard()) return Status::InvalidArgument("Llama::Clean inside an epoch guard");
  return CleanSegments(max_segments, /*release_now=*/true);
}

Result<CleanResult> Llama::CleanSegments(size_t max_segments, bool release_now) {
  ScopedPhase phase(OpPhase::kCleaning);
  std::lock_guard<std::mutex> lock(clean_mu_);
  CleanResult result;
  const uint64_t segment_size = lss_->identity().segment_size;
  for (size_t i = 0; i < max_segments; ++i) {
    const uint64_t victim =
        std::max(lss_->LowestSegment(), cleaned_frontier_.load() / segment_size);
    const LssAddress lo = victim * segment_size;
    const LssAddress hi = lo + segment_size;
    // Only whole, written segments behind the one being written.
    if (victim >= lss_->TailSegment() || hi > lss_->HiWritten()) break;
    std::vector<PageId> pids;
    RETURN_IF_ERROR(lss_->ScanSegment(
        victim, [&](LssAddress, const RecordHeader& h, Slice, bool) -> Status {
          if (h.type == RecordType::kBase || h.type == RecordType::kDelta) pids.push_back(h.pid);
          return Status::OK();
        }));
    std::sort(pids.begin(), pids.end());
    pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
    DEUTERON_KILL_POINT(kDcCleanBeforeRelocate);
    for (PageId pid : pids) RETURN_IF_ERROR(RelocateIfLive(pid, lo, hi, &result));
    DEUTERON_KILL_POINT(kDcCleanAfterRelocate);
    cleaned_frontier_.store(hi);
    result.segments_cleaned++;
  }
  segments_cleaned_.fetch_add(result.segments_cleaned, std::memory_order_relaxed);
  pages_relocated_.fetch_add(result.pages_relocated, std::memory_order_relaxed);
  if (result.segments_cleaned > 0) {
    // What survived (relocated, and written meanwhile) is about the live
    // state: clean again once the segments held have doubled, not at the
    // fixed trigger, which a live state bigger than it would meet after
    // every new segment, relocating the whole state each time (llama.md,
    // "Cleaning").
    clean_trigger_.store(2 * SegmentsHeld(), std::memory_order_relaxed);
  }
  bytes_relocated_.fetch_add(result.bytes_relocated, std::memory_order_relaxed);

  // Releasing costs two checkpoints (after the relocations, so that neither
  // slot can send recovery into the cleaned segments; LLAMA 4.3 and 6.2):
  // automatic cleaning pays it once per batch.
  const LssAddress frontier = cleaned_frontier_.load();
  const uint64_t unreleased = frontier / segment_size > lss_->LowestSegment()
                                  ? frontier / segment_size - lss_->LowestSegment()
                                  : 0;
  const uint64_t batch = std::max<uint64_t>(options_.cleaning_trigger_segments, 1);
  if (unreleased == 0 || (!release_now && unreleased < batch)) return result;
  gc_frontier_.store(frontier);
  RETURN_IF_ERROR(Checkpoint());
  RETURN_IF_ERROR(Checkpoint());
  LssAddress release;
  {
    std::lock_guard<std::mutex> ck(checkpoint_mu_);
    release = std::min({frontier, checkpoint_rsp_[0], checkpoint_rsp_[1]});
  }
  // A reader inside a guard that began before the relocations may still
  // hold an address in these segments (an entry or partial-swap node it
  // loaded, about to be read): let every such guard end first, or it reads
  // a released segment, or a recycled file's new records (common/epoch.md).
  epochs_->Synchronize();
  const uint64_t before = lss_->LowestSegment();
  DEUTERON_KILL_POINT(kDcCleanBeforeRelease);
  RETURN_IF_ERROR(lss_->ReleaseSegmentsBelow(release));
  result.segments_released = lss_->LowestSegment() - before;
  return result;
}

}  // namespace deuteron::llama
