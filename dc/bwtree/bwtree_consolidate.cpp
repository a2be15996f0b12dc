// BwTree: consolidation and the sizing that follows it (bwtree.h, bwtree.md).
#include "dc/bwtree/internal/bwtree_impl.h"
#include "dc/llama/op_phases.h"

namespace deuteron::bwtree {

Status BwTree::MaybeRestructure(PageId pid, uint32_t level) {
  Result<const PageNode*> read = llama_->Read(pid);
  if (!read.ok()) return read.status().IsNotFound() ? Status::OK() : read.status();
  if (*read == nullptr) return Status::OK();
  bool installed = false;
  if (level == 0) {
    RETURN_IF_ERROR(ConsolidateLeaf(pid, *read, &installed));
    if (!installed) return Status::OK();
    return SizeLeaf(pid, /*allow_merge=*/true);
  }
  const PageNode* base = nullptr;
  size_t entries = 0;
  RETURN_IF_ERROR(ConsolidateInner(pid, *read, &base, &entries));
  if (base == nullptr) return Status::OK();
  return SizeInner(pid, level, /*allow_merge=*/true);
}

Status BwTree::SizeInner(PageId pid, uint32_t level, bool allow_merge) {
  ASSIGN_OR_RETURN(const PageNode* head, ReadToSize(pid));
  if (head == nullptr) return Status::OK();
  size_t deltas = 0;
  ASSIGN_OR_RETURN(BaseView base, BaseOf(head, &deltas));
  size_t entries = base.count();
  if (deltas > 0) {
    // Another thread changed the page since its consolidation: count what
    // it holds now.
    InnerImage image;
    RETURN_IF_ERROR(GatherInner(head, &image));
    entries = image.entries.size();
  }
  if (entries > options_.inner_max_entries || DataBytes(head) > options_.node_max_bytes) {
    return SplitNode(pid, level);
  }
  // A root with one child gives way to it: the tree loses a level.
  if (entries == 1 && pid == root_.load(std::memory_order_acquire)) {
    return CollapseRoot(pid, head);
  }
  if (allow_merge && options_.inner_merge_entries > 0 &&
      entries <= options_.inner_merge_entries) {
    return MergeSmall(base.header(), pid, level);
  }
  return Status::OK();
}

Status BwTree::MergeSmall(const BaseHeader& header, PageId pid, uint32_t level) {
  if (!header.low_key.empty()) return StartMerge(pid, level);
  // The leftmost page of its level has no left neighbour to go into: its
  // right sibling comes into it instead (a merge of that sibling, which
  // StartMerge refuses if the sibling is large in bytes; an oversized union
  // is split at once). Without it a small leftmost page stayed small for
  // good, and a root whose leftmost child was the small one kept two
  // children and its height (bwtree.md, "Inner merges, measured").
  if (header.high_infinite || header.right_sibling == 0) return Status::OK();
  return StartMerge(header.right_sibling, level);
}

Status BwTree::RestructureHeld(PageId pid, const PageNode* head, Hold hold) {
  // A page over its split limits is split as it is, and a lone base over
  // the byte bound only sized: consolidating either again would only make a
  // racing split fail.
  if (hold == Hold::kSplit) return SplitNode(pid, 0);
  if (hold == Hold::kBytes && DeltaCount(head) == 0) return SizeLeaf(pid, /*allow_merge=*/false);
  return MaybeRestructure(pid, 0);
}

Result<const PageNode*> BwTree::ReadToSize(PageId pid) {
  // Right after consolidation the chain is a base under at most the deltas
  // above the ESL. A structure delta there is another thread's change, left
  // to it.
  Result<const PageNode*> read = llama_->Read(pid);
  if (!read.ok()) {
    if (read.status().IsNotFound()) return static_cast<const PageNode*>(nullptr);
    return read.status();
  }
  if (*read == nullptr || HasStructureDelta(*read)) return static_cast<const PageNode*>(nullptr);
  return *read;
}

Status BwTree::SizeLeaf(PageId pid, bool allow_merge) {
  // Sized from the base's count and the kept deltas: no gather needed.
  ASSIGN_OR_RETURN(const PageNode* head, ReadToSize(pid));
  if (head == nullptr) return Status::OK();
  size_t deltas = 0;
  ASSIGN_OR_RETURN(BaseView base, BaseOf(head, &deltas));
  const size_t records = base.count() + deltas;
  if (records > options_.leaf_max_records || DataBytes(head) > options_.node_max_bytes) {
    return SplitNode(pid, 0);
  }
  if (allow_merge && options_.leaf_merge_records > 0 && records <= options_.leaf_merge_records) {
    return MergeSmall(base.header(), pid, 0);
  }
  return Status::OK();
}

PageReader BwTree::Reader() {
  return [this](PageId pid) -> Result<const PageNode*> { return llama_->Read(pid); };
}

Status BwTree::ConsolidateLeaf(PageId pid, const PageNode* head, bool* installed) {
  llama::ScopedPhase phase(llama::OpPhase::kConsolidation);
  *installed = false;
  if (!HasDeltaOf(head, DeltaType::kMerge) && !HasDeltaOf(head, DeltaType::kRemoveNode)) {
    // The common case: no other page's state is involved, and the base's
    // unchanged records are copied as bytes (page_ops.h).
    ConsolidatedPage page;
    const uint64_t bound = FlushBound();
    ASSIGN_OR_RETURN(PageNode* chain, ConsolidateChain(llama_, head, bound, PurgeBound(), &page));
    *installed = InstallConsolidated(pid, head, chain, bound);
    return Status::OK();
  }
  LeafImage image;
  Status s = GatherLeaf(head, Reader(), &image);
  if (s.IsNotFound()) return Status::OK();  // a merged sibling went away: retry later
  RETURN_IF_ERROR(s);
  if (image.removed) return Status::OK();  // frozen; its left neighbour absorbs it
  if (!image.merged.empty()) {
    // Before the merged siblings' states are folded in (and the siblings
    // freed), make sure they are frozen (a merge delta that outlived its
    // sibling's remove-node in a store written before remove-nodes were
    // system transactions leaves the sibling live) and that no parent routes
    // to them any more.
    const std::vector<PageId> merged = image.merged;
    std::vector<PageId> parents;
    for (PageId r : merged) {
      Result<const PageNode*> sibling = llama_->Read(r);
      if (!sibling.ok()) return sibling.status().IsNotFound() ? Status::OK() : sibling.status();
      if (*sibling == nullptr) return Status::OK();
      if (!HasDeltaOf(*sibling, DeltaType::kRemoveNode)) {
        ASSIGN_OR_RETURN(bool posted, PostRemoveNode(r, *sibling));
        if (!posted) return Status::OK();  // retried by a later consolidation
      }
      RETURN_IF_ERROR(CompleteMerge(r, nullptr, &parents));
    }
    // The index-term deletes must reach the LSS before the frees: recovery
    // keeps a prefix of it, and a durable parent routing to a freed PID
    // would send its range to whatever page reuses it.
    RETURN_IF_ERROR(FlushParents(parents));
    Result<const PageNode*> again = llama_->Read(pid);
    if (!again.ok()) return again.status().IsNotFound() ? Status::OK() : again.status();
    head = *again;
    s = GatherLeaf(head, Reader(), &image);
    if (s.IsNotFound()) return Status::OK();
    RETURN_IF_ERROR(s);
    if (image.removed) return Status::OK();
  }
  ASSIGN_OR_RETURN(ConsolidatedPage page, Consolidate(image, FlushBound(), PurgeBound()));
  PageNode* chain = BuildChain(llama_, page);
  if (image.merged.empty()) {
    *installed = InstallConsolidated(pid, head, chain);
    return Status::OK();
  }
  // The merged siblings' records now live in this page's new base.
  ASSIGN_OR_RETURN(*installed, InstallOverMerged(pid, head, chain, image.merged));
  return Status::OK();
}

Result<bool> BwTree::InstallOverMerged(PageId pid, const PageNode* head, PageNode* chain,
                                       const std::vector<PageId>& merged) {
  std::unique_ptr<Llama::SystemTxn> txn = llama_->TBegin();
  auto give_up = [&](Status s) -> Result<bool> {
    llama_->TAbort(txn.get());
    llama_->DiscardChain(chain);
    counters_->failed_consolidations.Add();
    if (!s.ok()) return s;
    return false;
  };
  for (PageId r : merged) {
    // A sibling freed meanwhile was folded in by another consolidation of
    // this page, so `head` is stale and the commit could not succeed anyway.
    if (!llama_->TFree(txn.get(), r).ok()) return give_up(Status::OK());
  }
  const uint64_t bound = FlushBound();  // the annotation: never below the bound
  Result<bool> committed = llama_->TCommitReplace(txn.get(), pid, head, chain, bound, bound);
  if (!committed.ok() || !*committed) return give_up(committed.status());
  counters_->consolidations.Add();
  counters_->pages_freed.Add(merged.size());
  return true;
}

Status BwTree::ConsolidateInner(PageId pid, const PageNode* head, const PageNode** installed,
                                size_t* entries) {
  llama::ScopedPhase phase(llama::OpPhase::kConsolidation);
  *installed = nullptr;
  if (HasDeltaOf(head, DeltaType::kMerge) || HasDeltaOf(head, DeltaType::kRemoveNode)) {
    return ConsolidateInnerMerges(pid, head, installed, entries);
  }
  ASSIGN_OR_RETURN(PageNode* base, ConsolidateInnerChain(llama_, head, entries));
  // Not incremental: an inner chain gathered from the old base and index
  // deltas folded by different consolidations reads back differently
  // (bwtree.md, "Consolidation under the WAL rule").
  if (InstallConsolidated(pid, head, base)) *installed = base;
  return Status::OK();
}

Status BwTree::ConsolidateInnerMerges(PageId pid, const PageNode* head,
                                      const PageNode** installed, size_t* entries) {
  // As ConsolidateLeaf's merge path, for routing instead of records.
  InnerImage image;
  Status s = GatherInner(head, Reader(), &image);
  if (s.IsNotFound()) return Status::OK();  // a merged sibling went away: retry later
  RETURN_IF_ERROR(s);
  if (image.removed) return Status::OK();  // frozen: its left neighbour absorbs it
  if (!image.merged.empty()) {
    // Each merged sibling frozen (a crash may have kept a merge delta
    // whose remove-node a torn flush of an old store lost) and no longer
    // routed to by any parent, and those parents flushed, before the new
    // base and the frees are written (bwtree.md, "Freeing R").
    const std::vector<PageId> merged = image.merged;
    std::vector<PageId> parents;
    for (PageId r : merged) {
      Result<const PageNode*> sibling = llama_->Read(r);
      if (!sibling.ok()) return sibling.status().IsNotFound() ? Status::OK() : sibling.status();
      if (*sibling == nullptr) return Status::OK();
      if (!HasDeltaOf(*sibling, DeltaType::kRemoveNode)) {
        ASSIGN_OR_RETURN(bool posted, PostRemoveNode(r, *sibling));
        if (!posted) return Status::OK();
      }
      RETURN_IF_ERROR(CompleteMerge(r, nullptr, &parents));
    }
    RETURN_IF_ERROR(FlushParents(parents));
    if (!StepHook(MergeStep::kParentsFlushed, merged.front())) return Status::OK();
    Result<const PageNode*> again = llama_->Read(pid);
    if (!again.ok()) return again.status().IsNotFound() ? Status::OK() : again.status();
    head = *again;
    if (head == nullptr) return Status::OK();
    s = GatherInner(head, Reader(), &image);
    if (s.IsNotFound()) return Status::OK();
    RETURN_IF_ERROR(s);
    if (image.removed) return Status::OK();
  }
  PageNode* base = llama_->NewNode(NodeKind::kBase, InnerBaseSize(image.header, image.entries), 0);
  EncodeInnerBase(image.header, image.entries, base->payload());
  if (image.merged.empty()) {
    if (InstallConsolidated(pid, head, base)) {
      *installed = base;
      *entries = image.entries.size();
    }
    return Status::OK();
  }
  // The merged siblings' routing now lives in the new base, as for leaves.
  ASSIGN_OR_RETURN(bool done, InstallOverMerged(pid, head, base, image.merged));
  if (!done) return Status::OK();
  *installed = base;
  *entries = image.entries.size();
  return Status::OK();
}

bool BwTree::InstallConsolidated(PageId pid, const PageNode* head, PageNode* chain,
                                 std::optional<uint64_t> fold_bound) {
  const bool done = fold_bound ? llama_->UpdateRFlush(pid, head, chain, *fold_bound, *fold_bound)
                               : llama_->UpdateR(pid, head, chain);
  if (!done) {
    llama_->DiscardChain(chain);
    counters_->failed_consolidations.Add();
    return false;
  }
  counters_->consolidations.Add();
  return true;
}

}  // namespace deuteron::bwtree
