// Llama: system transactions (llama.h, "System transactions"; llama.md).
#include <algorithm>
#include <cassert>
#include <cstring>
#include <vector>

#include "common/coding.h"
#include "common/fault_hooks.h"
#include "common/logging.h"
#include "dc/llama/checkpoint.h"
#include "dc/llama/internal/llama_impl.h"
#include "dc/llama/llama.h"

namespace deuteron::llama {

namespace {

// Writes a record with no payload (kAllocate, kFree) at dst.
size_t WriteMarkerRecord(char* dst, RecordType type, PageId pid, uint64_t annotation) {
  RecordHeader h;
  h.type = type;
  h.pid = pid;
  h.annotation = annotation;
  EncodeRecord(h, Slice(), dst);
  return RecordSpan(0);
}

}  // namespace

// ---------------------------------------------------------------------------
// System transactions


bool Llama::SystemTxn::Owns(PageId pid) const {
  return std::find(allocated_.begin(), allocated_.end(), pid) != allocated_.end();
}

std::unique_ptr<Llama::SystemTxn> Llama::TBegin() {
  return std::make_unique<SystemTxn>(next_tid_.fetch_add(1, std::memory_order_relaxed));
}

Result<PageId> Llama::TAllocate(SystemTxn* txn) {
  assert(!txn->finished_);
  // Allocated and private in one hold: a checkpoint never sees the PID
  // allocated (empty) and not private, which would record it allocated and
  // leak it if the transaction aborts or the process crashes.
  std::lock_guard<std::mutex> lock(att_mu_);
  ASSIGN_OR_RETURN(PageId pid, mapping_->Allocate());
  // A reused PID starts cold: its last page's warm mark (KeepWarm) is not its.
  if (referenced_ != nullptr) referenced_[pid].store(0, std::memory_order_relaxed);
  txn->allocated_.push_back(pid);
  private_pages_.insert(pid);
  if (checkpoint_reading_) allocated_in_checkpoint_.push_back(pid);
  return pid;
}

Status Llama::TFree(SystemTxn* txn, PageId pid) {
  assert(!txn->finished_);
  if (pid == 0 || pid >= mapping_->high_water() || MappingTable::IsFree(mapping_->Load(pid))) {
    return Status::InvalidArgument("cannot free " + PageName(pid) + ": not allocated");
  }
  if (txn->Owns(pid) || std::find(txn->freed_.begin(), txn->freed_.end(), pid) != txn->freed_.end()) {
    return Status::InvalidArgument("cannot free " + PageName(pid) + " twice in one transaction");
  }
  txn->freed_.push_back(pid);
  return Status::OK();
}

Result<bool> Llama::TUpdateD(SystemTxn* txn, PageId pid, const PageNode* expected,
                             PageNode* delta) {
  assert(!txn->finished_);
  if (!txn->Owns(pid)) {
    return Status::InvalidArgument("system transaction updates only pages it allocated; " +
                                   PageName(pid) + " is not one");
  }
  delta->flags |= kNodePrivate;  // Read hides the page until the commit
  if (UpdateD(pid, expected, delta)) return true;
  delta->flags &= static_cast<uint8_t>(~kNodePrivate);
  return false;
}

namespace {

// One page written by a commit.
struct PagePlan {
  PageId pid = 0;
  const PageNode* head = nullptr;  // state the flush node goes on
  std::vector<const PageNode*> selected;
  bool whole = false;
  LssAddress prev = kNullAddress;
  LssAddress chain_base = kNullAddress;  // kBase record under `prev`
  uint32_t depth = 0;                    // the page's LSS chain after the commit
  uint32_t chain_bytes = 0;
  uint64_t old_bytes = 0;          // the page's LSS state's bytes before the commit
  uint64_t bound = 0;
  size_t payload = 0;
  FlushNode* flush = nullptr;
  uint64_t installed_over = 0;     // entry replaced by the flush node (private pages)
};

}  // namespace

Result<bool> Llama::TCommit(SystemTxn* txn, PageId pid, const PageNode* expected,
                            PageNode* final_delta, uint64_t max_tag, uint64_t annotation) {
  return CommitTxn(txn, pid, expected, final_delta, /*replace=*/false, max_tag, annotation);
}

Result<bool> Llama::TCommitReplace(SystemTxn* txn, PageId pid, const PageNode* expected,
                                   PageNode* state, uint64_t max_tag, uint64_t annotation) {
  assert(pid != 0 && state != nullptr);
  return CommitTxn(txn, pid, expected, state, /*replace=*/true, max_tag, annotation);
}

Result<bool> Llama::CommitTxn(SystemTxn* txn, PageId pid, const PageNode* expected,
                              PageNode* final_delta, bool replace, uint64_t max_tag,
                              uint64_t annotation) {
  assert(!txn->finished_);
  assert((pid == 0) == (final_delta == nullptr));
  DEUTERON_KILL_POINT(kDcSmoBeforeCommit);
  if (replace) {
    PrepareReplacement(expected, final_delta);  // a whole chain, as Update-R installs
  } else if (final_delta != nullptr) {
    final_delta->next = const_cast<PageNode*>(expected);
    final_delta->seq = expected != nullptr ? expected->seq + 1 : 1;
    final_delta->base_hint = BaseHintBelow(expected);
  }

  // Plan every page the transaction changed, the final page included.
  std::vector<PagePlan> plans;
  auto plan_page = [&](PageId p, const PageNode* head) -> Status {
    if (head == nullptr) return Status::OK();  // still empty: its kAllocate says all
    ChainInfo info;
    AnalyzeChain(head, &info);
    PagePlan plan;
    plan.pid = p;
    plan.head = head;
    plan.bound = EffectiveBound(info.has_flush, info.bound, max_tag);
    for (const PageNode* n : info.unflushed) {
      if (n->tag <= plan.bound) plan.selected.push_back(n);
    }
    if (info.base == nullptr) {
      return Status::InvalidArgument(PageName(p) + " has deltas but no base to flush them over");
    }
    plan.whole = !info.base_flushed;
    if (plan.whole && info.base->tag > plan.bound) {
      return Status::InvalidArgument(PageName(p) + "'s base (tag " + std::to_string(info.base->tag) +
                                     ") cannot be flushed under bound " + std::to_string(max_tag));
    }
    if (plan.selected.empty()) return Status::OK();
    plan.prev = plan.whole ? kNullAddress : info.lss_head;
    plan.chain_base = info.lss_base;
    plan.depth = plan.whole ? 1 : DeeperBy(info.lss_depth);
    plan.payload = PagePayloadSize(plan.selected);
    plan.chain_bytes =
        plan.whole ? 0 : ChainBytesPlus(info.lss_chain_bytes, RecordSpan(plan.payload));
    if (info.lss_head != kNullAddress) {
      ASSIGN_OR_RETURN(plan.old_bytes, StateBytesOf(p, info.lss_head));
    }
    plans.push_back(std::move(plan));
    return Status::OK();
  };
  for (PageId p : txn->allocated_) {
    if (p == pid) continue;
    const uint64_t e = mapping_->Load(p);
    RETURN_IF_ERROR(plan_page(p, MappingTable::IsMemory(e) ? MappingTable::ToPointer<PageNode>(e)
                                                           : nullptr));
  }
  if (final_delta != nullptr) RETURN_IF_ERROR(plan_page(pid, final_delta));
  if (after_plan_for_test_) after_plan_for_test_(txn->allocated_);
  // The freed pages' states leave the live bytes at the commit; note them
  // now, while a walk may still wait for stability (no reservation held).
  for (PageId p : txn->freed_) {
    auto guard = epochs_->Enter();
    const LssAddress head = EntryLssHead(mapping_->Load(p));
    if (head == kNullAddress) continue;
    // A failure here is walked again after the commit (SubtractUnresolved).
    if (!StateBytesOf(p, head).ok()) continue;
  }

  // Reserve one transaction record holding every inner record.
  size_t inner = RecordSpan(0) * (txn->allocated_.size() + txn->freed_.size());
  for (const PagePlan& plan : plans) inner += RecordSpan(plan.payload);
  const size_t count = txn->allocated_.size() + txn->freed_.size() + plans.size();
  ASSIGN_OR_RETURN(Reservation r, lss_->Reserve(RecordSpan(inner)));

  // Addresses of the inner records, in the order they will be written:
  // allocations, page states, frees.
  LssAddress at = r.address + kRecordHeaderSize + RecordSpan(0) * txn->allocated_.size();
  for (PagePlan& plan : plans) {
    FlushNode* f = NewFlushNode(NodeKind::kFlush);
    f->seq = plan.head->seq + 1;
    f->tag = plan.bound;
    f->address = at;
    f->end = at + RecordSpan(plan.payload);
    f->base = plan.whole ? at : plan.chain_base;
    f->depth = plan.depth;
    f->chain_bytes = plan.chain_bytes;
    f->annotation = annotation;
    f->next = const_cast<PageNode*>(plan.head);
    f->base_hint = BaseHintBelow(plan.head);
    if (plan.pid != pid) f->flags = kNodePrivate;  // a private page stays hidden
    plan.flush = f;
    at = f->end;
  }

  // Install the flush nodes on the private pages, then the final update: the
  // commit point. Undo the private installs if the final CAS fails. An
  // installed flush node was visible to LLAMA's own walkers of the mapping
  // table (Flush, SwapOut, the evictor, checkpoints, the cleaner), which load
  // a head before they check the active transaction table: it is retired
  // through the epoch, never freed at once. Only the commit changes a private
  // page (Read hides it from everyone else, and those walkers skip it), so the
  // undo CAS cannot fail.
  auto undo = [&](size_t installed) {
    for (size_t i = 0; i < plans.size(); ++i) {
      if (i < installed) {
        uint64_t e = MappingTable::FromPointer(plans[i].flush);
        const bool ok = mapping_->Cas(plans[i].pid, e, plans[i].installed_over);
        assert(ok && "private page changed under its system transaction");
        (void)ok;
        RetireNode(plans[i].flush);
      } else {
        FreeNode(plans[i].flush);
      }
    }
  };
  size_t installed = 0;
  for (PagePlan& plan : plans) {
    if (plan.pid == pid) continue;
    plan.installed_over = MappingTable::FromPointer(plan.head);
    uint64_t e = plan.installed_over;
    if (!mapping_->Cas(plan.pid, e, MappingTable::FromPointer(plan.flush))) {
      undo(installed);
      lss_->Void(r);
      return Status::Internal(PageName(plan.pid) + " changed while private to a system transaction");
    }
    ++installed;
  }
  // Plans of private pages come first (the final page's plan is last).
  if (final_delta != nullptr) {
    const bool final_planned = !plans.empty() && plans.back().pid == pid;
    uint64_t e = expected != nullptr ? MappingTable::FromPointer(expected) : MappingTable::kEmptyPage;
    const uint64_t desired = final_planned ? MappingTable::FromPointer(plans.back().flush)
                                           : MappingTable::FromPointer(final_delta);
    const bool fault = commit_fault_for_test_ && commit_fault_for_test_(pid);
    if (fault || !mapping_->Cas(pid, e, desired)) {
      undo(installed);
      lss_->Void(r);
      if (replace) {
        update_r_failures_.fetch_add(1, std::memory_order_relaxed);
      } else {
        final_delta->next = nullptr;
        update_d_failures_.fetch_add(1, std::memory_order_relaxed);
      }
      return false;
    }
    if (replace) RetireChain(expected);
  }
  // Committed: the new pages become readable. Each private head (the flush
  // node installed above) is replaced by an unmarked copy, as the final CAS
  // just linked the pages in; readers that meet them before this see
  // NotFound and start over. Still private (in the active transaction
  // table), so no other thread changes them and each CAS succeeds.
  for (PagePlan& plan : plans) {
    if (plan.pid == pid) continue;
    FlushNode* pub = NewFlushNode(NodeKind::kFlush);
    *pub = *plan.flush;
    pub->flags = 0;
    uint64_t e = MappingTable::FromPointer(plan.flush);
    const bool ok = mapping_->Cas(plan.pid, e, MappingTable::FromPointer(pub));
    assert(ok && "private page changed under its system transaction");
    (void)ok;
    RetireNode(plan.flush);
  }
  // The live bytes: each page written has a new LSS state.
  for (const PagePlan& plan : plans) {
    const uint64_t span = RecordSpan(plan.payload);
    const uint64_t bytes = plan.whole ? span : plan.old_bytes + span;
    state_bytes_->Note(plan.pid, plan.flush->address, bytes);
    state_bytes_->Add(static_cast<int64_t>(bytes) - static_cast<int64_t>(plan.old_bytes));
  }

  // Committed in memory; copy the records (LLAMA 5.3.1).
  char* out = r.dst + kRecordHeaderSize;
  for (PageId p : txn->allocated_) out += WriteMarkerRecord(out, RecordType::kAllocate, p, annotation);
  for (const PagePlan& plan : plans) {
    out += WritePageRecord(out, plan.pid, plan.selected, plan.payload, plan.prev, annotation,
                           plan.bound);
  }
  for (PageId p : txn->freed_) out += WriteMarkerRecord(out, RecordType::kFree, p, annotation);
  RecordHeader outer;
  outer.type = RecordType::kTransaction;
  outer.length = static_cast<uint32_t>(inner);
  outer.count = static_cast<uint32_t>(count);
  outer.annotation = annotation;
  EncodeRecord(outer, Slice(r.dst + kRecordHeaderSize, inner), r.dst);
  // The in-memory effects of the commit (frees, leaving the ATT) come before
  // the record may become stable: a checkpoint whose RSP (Hi-Stable) is past
  // this record must see them, or recovery, which does not replay the record,
  // would bring the freed pages back and lose the new ones.
  if (before_frees_for_test_) before_frees_for_test_();
  std::vector<std::pair<PageId, LssAddress>> unresolved;
  FreePagesNow(txn->freed_, &unresolved);
  EndTransaction(txn);
  NoteAnnotation(annotation);
  lss_->Commit(r);
  DEUTERON_KILL_POINT(kDcSmoAfterCommit);
  SubtractUnresolved(unresolved);
  txn_commits_.fetch_add(1, std::memory_order_relaxed);
  flushes_.fetch_add(plans.size(), std::memory_order_relaxed);
  flush_bytes_.fetch_add(RecordSpan(inner), std::memory_order_relaxed);
  return true;
}

void Llama::FreePagesNow(const std::vector<PageId>& pids,
                         std::vector<std::pair<PageId, LssAddress>>* unresolved) {
  for (PageId p : pids) {
    // Retire the state the free replaced, not one loaded before it: a flush
    // or swap-out may CAS a new head on in between, and loading first would
    // leak that head.
    const uint64_t e = mapping_->Free(p);
    SubtractFreed(p, e, unresolved);
    if (MappingTable::IsMemory(e)) RetireChain(MappingTable::ToPointer<PageNode>(e));
  }
}

void Llama::EndTransaction(SystemTxn* txn) {
  {
    std::lock_guard<std::mutex> lock(att_mu_);
    for (PageId p : txn->allocated_) private_pages_.erase(p);
  }
  txn->finished_ = true;
}

void Llama::TAbort(SystemTxn* txn) {
  assert(!txn->finished_);
  std::vector<std::pair<PageId, LssAddress>> unresolved;  // none: never written
  {
    // Freed and no longer private in one hold, as TAllocate made them
    // allocated and private: a PID freed first could be reused (once the
    // epoch lets it) by another transaction's TAllocate, whose private mark
    // the erase below would then remove; erased first, a checkpoint could
    // record it allocated and empty.
    std::lock_guard<std::mutex> lock(att_mu_);
    FreePagesNow(txn->allocated_, &unresolved);
    for (PageId p : txn->allocated_) private_pages_.erase(p);
  }
  SubtractUnresolved(unresolved);
  txn->finished_ = true;
  txn_aborts_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace deuteron::llama
