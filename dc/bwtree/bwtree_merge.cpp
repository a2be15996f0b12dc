// BwTree: merges (remove-node, merge delta, index-term deletes) and the
// parents' flush before a free (bwtree.md, "Structure changes").
#include "common/fault_hooks.h"
#include "dc/bwtree/internal/bwtree_impl.h"

namespace deuteron::bwtree {

bool BwTree::StepHook(MergeStep step, PageId removed) {
  return !merge_step_hook_for_test_ || merge_step_hook_for_test_(step, removed);
}

Status BwTree::StartMerge(PageId pid, uint32_t level) {
  Result<const PageNode*> read = llama_->Read(pid);
  if (!read.ok()) return read.status().IsNotFound() ? Status::OK() : read.status();
  const PageNode* head = *read;
  if (head == nullptr || HasStructureDelta(head)) return Status::OK();
  // A page small in records may be large in bytes: it merges only when its
  // left neighbour can take it within the page byte bound (CompleteMerge).
  if (DataBytes(head) > merge_bytes_max_) return Status::OK();
  // Pages merge only under a parent level (the index-term deletes need one).
  Result<const PageNode*> root = llama_->Read(root_.load(std::memory_order_acquire));
  if (!root.ok() || *root == nullptr) {
    return root.ok() || root.status().IsNotFound() ? Status::OK() : root.status();
  }
  ASSIGN_OR_RETURN(BaseView root_base, BaseOf(*root));
  if (root_base.header().level <= level) return Status::OK();
  ASSIGN_OR_RETURN(bool posted, PostRemoveNode(pid, head));
  if (!posted) {
    counters_->failed_merges.Add();
    return Status::OK();
  }
  counters_->merges.Add();
  if (level > 0) {
    counters_->inner_merges.Add();
    if (!StepHook(MergeStep::kRemoveNode, pid)) return Status::OK();
  }
  PageId left = 0;
  std::vector<PageId> parents;
  RETURN_IF_ERROR(CompleteMerge(pid, &left, &parents));
  if (left == 0) return Status::OK();
  if (level == 0 && merge_hook_for_test_) merge_hook_for_test_(pid, left);
  // The merge's last step: the left page's consolidation folds this page in
  // and frees it (one system transaction). Left to the left page's writes,
  // it might never come: a load that deletes keys in ascending order
  // writes no page left of the one it empties. The union may outgrow the
  // page's limits (a page small in records can be large in bytes): it is
  // split at once, as a write's consolidation would, or a further union
  // could outgrow what one LSS record holds. A further merge of the left
  // page is left to its next consolidation, so merges never recurse
  // sideways.
  Result<const PageNode*> left_head = llama_->Read(left);
  if (!left_head.ok()) return left_head.status().IsNotFound() ? Status::OK() : left_head.status();
  if (*left_head == nullptr) return Status::OK();
  if (level == 0) {
    bool installed = false;
    RETURN_IF_ERROR(ConsolidateLeaf(left, *left_head, &installed));
    if (installed) RETURN_IF_ERROR(SizeLeaf(left, /*allow_merge=*/false));
  } else {
    const PageNode* installed = nullptr;
    size_t entries = 0;
    RETURN_IF_ERROR(ConsolidateInner(left, *left_head, &installed, &entries));
    if (installed != nullptr) RETURN_IF_ERROR(SizeInner(left, level, /*allow_merge=*/false));
  }
  // The parents lost an entry each: consolidated and sized now, they merge
  // in turn when small, and a root left with one child collapses, so the
  // tree shrinks as it empties (upwards only: at most its height).
  std::sort(parents.begin(), parents.end());
  parents.erase(std::unique(parents.begin(), parents.end()), parents.end());
  for (PageId parent : parents) {
    Result<const PageNode*> p = llama_->Read(parent);
    if (!p.ok()) {
      if (p.status().IsNotFound()) continue;
      return p.status();
    }
    if (*p == nullptr) continue;
    if (DeltaCount(*p) > 0) {
      RETURN_IF_ERROR(MaybeRestructure(parent, level + 1));
    } else {
      RETURN_IF_ERROR(SizeInner(parent, level + 1, /*allow_merge=*/true));
    }
  }
  return Status::OK();
}

Result<bool> BwTree::PostRemoveNode(PageId pid, const PageNode* head) {
  // A system transaction, so the remove-node's record is in the LSS before
  // anything that depends on it: the merge delta on the left page and that
  // page's writes to this range, all posted after this commit and flushed
  // after it. Recovery keeps a prefix of the LSS, so it never keeps those
  // without the remove-node, which would leave this page live beside a left
  // page holding newer writes to its keys (bwtree.md, "Crash consistency").
  DeltaView d;
  d.type = DeltaType::kRemoveNode;
  PageNode* node = MakeDelta(llama_, d, 0);
  std::unique_ptr<Llama::SystemTxn> txn = llama_->TBegin();
  const uint64_t bound = FlushBound();  // the annotation: never below the bound
  DEUTERON_KILL_POINT(kDcBwtreeMergeInstall);  // a node's removal about to commit
  Result<bool> committed = llama_->TCommit(txn.get(), pid, head, node, bound, bound);
  if (committed.ok() && *committed) return true;
  llama_->TAbort(txn.get());
  llama_->DiscardNode(node);
  // Lost the race, or the page's base is not yet flushable under the ESL:
  // the merge is tried again later.
  if (committed.ok() || committed.status().IsInvalidArgument()) return false;
  return committed.status();
}

Result<BwTree::LeftOutcome> BwTree::FindLeftNeighbour(PageId removed, Slice low, uint32_t level,
                                                      PageId* left, const PageNode** left_head,
                                                      bool* merged_in) {
  *merged_in = false;
  Path path;
  RETURN_IF_ERROR(Descend(low, /*before=*/true, level, &path));
  PageId pid = path.pid;
  const PageNode* head = path.head;
  for (int hop = 0; hop < kMaxHops; ++hop) {
    if (pid == removed) return LeftOutcome::kRetry;
    ASSIGN_OR_RETURN(LookupResult r, RouteOf(head, low, false));
    PageId next = 0;
    switch (r.outcome) {
      case LookupOutcome::kRemoved:
        // The neighbour is being merged itself: finish that first. A parent
        // range may still route here from past the removed page's high key
        // (a B-link entry point the index-term deletes do not reach): hand
        // it on, or the next descent lands here again.
        RETURN_IF_ERROR(CompleteMerge(pid));
        if (pid == path.pid && path.routed) {
          RETURN_IF_ERROR(RepairRoute(path.parent_level, path.route_low, pid));
        }
        return LeftOutcome::kRetry;
      case LookupOutcome::kFound:
      case LookupOutcome::kNotFound:
      case LookupOutcome::kDeleted: {
        // This page covers `low`: the removed page was absorbed and freed.
        Result<const PageNode*> gone = llama_->Read(removed);
        if (!gone.ok() && gone.status().IsNotFound()) return LeftOutcome::kDone;
        return LeftOutcome::kRetry;
      }
      case LookupOutcome::kRedirect:
        if (r.redirect == removed) {
          *merged_in = r.redirect_kind == RedirectKind::kMerge;
          *left = pid;
          *left_head = head;
          return LeftOutcome::kFound;
        }
        if (r.redirect_kind == RedirectKind::kMerge) {
          // This page absorbed another sibling whose range ends at `low`?
          Result<const PageNode*> sib = llama_->Read(r.redirect);
          if (!sib.ok() || *sib == nullptr) return LeftOutcome::kRetry;
          ASSIGN_OR_RETURN(LookupResult r2, RouteOf(*sib, low, true));
          // As in Locate: past the merged range by its sibling link or by
          // a split of the merged page (live in an old store, see there).
          if (r2.outcome != LookupOutcome::kRedirect || r2.redirect_kind == RedirectKind::kMerge) {
            return LeftOutcome::kRetry;
          }
          if (r2.redirect == removed) {
            *left = pid;
            *left_head = head;
            return LeftOutcome::kFound;
          }
          next = r2.redirect;
        } else {
          next = r.redirect;
        }
        break;
    }
    Result<const PageNode*> read = llama_->Read(next);
    if (!read.ok() || *read == nullptr) return LeftOutcome::kRetry;
    pid = next;
    head = *read;
  }
  return LeftOutcome::kRetry;
}

Status BwTree::FlushParents(const std::vector<PageId>& parents) {
  if (!flush_parents_before_free_) return Status::OK();
  const uint64_t bound = FlushBound();  // the annotation: never below the bound
  for (size_t i = 0; i < parents.size(); ++i) {
    if (std::find(parents.begin(), parents.begin() + i, parents[i]) != parents.begin() + i) {
      continue;
    }
    // kRaced: the page changed (a post, or another flush) between the read
    // and the CAS, and this flush's space was voided: flush again until a
    // state holding the deletes is written here or found already flushed (a
    // flush that installed first reserved its record before the free's).
    for (int attempt = 0;; ++attempt) {
      Result<llama::FlushResult> f = llama_->Flush(parents[i], bound, bound);
      if (!f.ok()) {
        if (f.status().IsNotFound()) break;  // freed since: merged, or a collapsed root
        return f.status();
      }
      if (f->outcome != llama::FlushOutcome::kRaced) break;
      if (attempt >= kMaxAttempts) return Status::Busy("bw-tree: parent flush kept racing");
    }
  }
  return Status::OK();
}

Status BwTree::CompleteMerge(PageId removed, PageId* left_out, std::vector<PageId>* parents) {
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    Result<const PageNode*> read = llama_->Read(removed);
    if (!read.ok()) return read.status().IsNotFound() ? Status::OK() : read.status();
    if (*read == nullptr) return Status::OK();
    // The removed page's level and range (a leaf's or an inner page's).
    ASSIGN_OR_RETURN(BaseView removed_base, BaseOf(*read));
    const uint32_t level = removed_base.header().level;
    bool is_removed = false;
    std::string low, high;
    bool high_infinite = true;
    if (level == 0) {
      LeafImage image;
      Status s = GatherLeaf(*read, Reader(), &image);
      if (s.IsNotFound()) continue;
      RETURN_IF_ERROR(s);
      is_removed = image.removed;
      low = image.header.low_key.ToString();
      high = image.header.high_key.ToString();
      high_infinite = image.header.high_infinite;
    } else {
      InnerImage image;
      Status s = GatherInner(*read, Reader(), &image);
      if (s.IsNotFound()) continue;
      RETURN_IF_ERROR(s);
      is_removed = image.removed;
      low = image.header.low_key.ToString();
      high = image.header.high_key.ToString();
      high_infinite = image.header.high_infinite;
    }
    if (!is_removed) return Status::OK();
    // The leftmost page of a level is never merged: a removed one is a root
    // being replaced by its one child.
    if (low.empty()) return CompleteCollapse(removed);

    // 1. The merge delta on the left neighbour.
    PageId left = 0;
    const PageNode* left_head = nullptr;
    bool merged_in = false;
    ASSIGN_OR_RETURN(LeftOutcome found,
                     FindLeftNeighbour(removed, low, level, &left, &left_head, &merged_in));
    if (found == LeftOutcome::kDone) return Status::OK();
    if (found == LeftOutcome::kRetry) continue;
    if (!merged_in) {
      // The left page takes this one's state whole: within the page byte
      // bound, or after the left page is restructured (consolidated, and
      // split when over node_max_bytes, which a page too full to take a
      // removed page of at most merge_bytes_max_ is).
      if (!Admits(left_head, merge_bytes_max_)) {
        counters_->held_posts.Add();
        if (level == 0) {
          RETURN_IF_ERROR(RestructureHeld(left, left_head, Hold::kBytes));
        } else {
          RETURN_IF_ERROR(MaybeRestructure(left, level));
        }
        continue;
      }
      DeltaView d;
      d.type = DeltaType::kMerge;
      d.key = low;
      d.pid = removed;
      PageNode* node = MakeDelta(llama_, d, 0);
      if (!llama_->UpdateD(left, left_head, node)) {
        llama_->DiscardNode(node);
        continue;
      }
      if (level > 0 && !StepHook(MergeStep::kMergeDelta, removed)) return Status::OK();
    }

    // 2. No parent routes to the removed page any more: each range routed
    // to it is handed to the left neighbour.
    std::string key = low;
    const uint32_t parent_level = level + 1;
    DeadPages dead;
    for (int step = 0; step < kMaxAttempts; ++step) {
      Route route;
      Result<bool> found = FindRoute(parent_level, key, &route, &dead);
      if (!found.ok() && found.status().IsNotFound()) {
        // No parent level any more (a root collapse, which a level holding
        // a merge under way never allows): nothing routes to the page.
        if (left_out != nullptr) *left_out = left;
        return Status::OK();
      }
      RETURN_IF_ERROR(found.status());
      if (!*found) continue;
      const ChildLookup& c = route.c;
      if (parents != nullptr) parents->push_back(route.pid);
      if (c.child == removed) {
        // Find the range again either way: the next pass sees its new child.
        const std::string range_low = c.low.ToString();
        ASSIGN_OR_RETURN(const PageNode* posted,
                         PostRoute(route, parent_level, DeltaType::kIndexTermDelete, c.low, left));
        if (posted != nullptr) RETURN_IF_ERROR(SettleRoute(parent_level, range_low, left, 0));
        continue;
      }
      // Past the removed page's range, a route to it can only continue the
      // routes within it (an entry spanning past a split whose post is
      // pending): stop at the first range routed elsewhere.
      if (c.next_infinite || (!high_infinite && Slice(key) >= Slice(high))) {
        if (level > 0 && !StepHook(MergeStep::kRoutesMoved, removed)) return Status::OK();
        if (left_out != nullptr) *left_out = left;
        return Status::OK();
      }
      key = c.next.ToString();
    }
    return Status::Busy("bw-tree: index-term delete did not settle");
  }
  return Status::Busy("bw-tree: merge did not settle");
}

// ---- Root collapse ------------------------------------------------------------------

Status BwTree::CollapseRoot(PageId root, const PageNode* head) {
  // The root's one child must be the whole of its level: no split delta
  // whose index entry the root still lacks, no merge under way, no high
  // key. Then the child can stand in for the root as it is.
  InnerImage image;
  RETURN_IF_ERROR(GatherInner(head, &image));
  if (image.entries.size() != 1 || image.header.level == 0) return Status::OK();
  const PageId child = image.entries.front().child;
  Result<const PageNode*> child_head = llama_->Read(child);
  if (!child_head.ok()) {
    return child_head.status().IsNotFound() ? Status::OK() : child_head.status();
  }
  if (*child_head == nullptr || HasStructureDelta(*child_head)) return Status::OK();
  ASSIGN_OR_RETURN(BaseView child_base, BaseOf(*child_head));
  const BaseHeader& ch = child_base.header();
  if (!ch.high_infinite || !ch.low_key.empty() || ch.level + 1u != image.header.level) {
    return Status::OK();
  }
  // Frozen first (a system transaction, as a merge's remove-node): no post
  // can land on the root once it is to go, and a crash leaves it for the
  // next thread that meets it (CompleteMerge sends a removed leftmost page
  // here).
  ASSIGN_OR_RETURN(bool posted, PostRemoveNode(root, head));
  if (!posted) return Status::OK();
  if (!StepHook(MergeStep::kRootRemoveNode, root)) return Status::OK();
  return CompleteCollapse(root);
}

Status BwTree::CompleteCollapse(PageId old_root) {
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    Result<const PageNode*> read = llama_->Read(old_root);
    if (!read.ok() || *read == nullptr) {
      if (read.ok() || read.status().IsNotFound()) return RefreshRoot();  // done
      return read.status();
    }
    InnerImage image;
    RETURN_IF_ERROR(GatherInner(*read, &image));
    if (!image.removed || !image.header.low_key.empty()) return Status::OK();
    // Frozen with one child (CollapseRoot checked it before freezing).
    if (image.entries.size() != 1) {
      return Status::Corruption("bw-tree: a removed root with " +
                                std::to_string(image.entries.size()) + " children");
    }
    const PageId child = image.entries.front().child;
    ASSIGN_OR_RETURN(const PageNode* meta, llama_->Read(kMetaPid));
    if (meta == nullptr) return Status::Corruption("bw-tree: meta page has no state");
    ASSIGN_OR_RETURN(LookupResult r, Lookup(meta, kRootKey));
    if (r.outcome != LookupOutcome::kFound || r.value.size() != 8) {
      return Status::Corruption("bw-tree: meta page lost its root");
    }
    if (DecodeFixed64(r.value.data()) != old_root) {
      // Another thread's collapse named the child; the old root's free was
      // in its transaction.
      return RefreshRoot();
    }
    // The meta page names the child, and the old root is freed, in one
    // system transaction: no recovery sees the one without the other.
    // Nothing else routes to a root, so no parent needs flushing first.
    std::unique_ptr<Llama::SystemTxn> txn = llama_->TBegin();
    Status freed = llama_->TFree(txn.get(), old_root);
    if (!freed.ok()) {
      llama_->TAbort(txn.get());
      return freed;
    }
    const std::string pid_bytes = EncodePid(child);
    DeltaView d;
    d.type = DeltaType::kUpsert;
    d.key = kRootKey;
    d.value = pid_bytes;
    d.hint = r.hint;
    PageNode* delta = MakeDelta(llama_, d, 0);
    const uint64_t bound = FlushBound();  // the annotation: never below the bound
    Result<bool> committed = llama_->TCommit(txn.get(), kMetaPid, meta, delta, bound, bound);
    if (!committed.ok() || !*committed) {
      llama_->TAbort(txn.get());
      llama_->DiscardNode(delta);
      if (!committed.ok()) return committed.status();
      continue;  // the meta page changed: look again
    }
    root_.store(child, std::memory_order_release);
    counters_->root_collapses.Add();
    counters_->pages_freed.Add();
    return Status::OK();
  }
  return Status::Busy("bw-tree: root collapse did not settle");
}

}  // namespace deuteron::bwtree
