// BwTree: splits, index posts, route repairs and root growth (bwtree.md,
// "Structure changes").
#include "common/fault_hooks.h"
#include "dc/bwtree/internal/bwtree_impl.h"

namespace deuteron::bwtree {

Status BwTree::SplitNode(PageId pid, uint32_t level) {
  Result<const PageNode*> read = llama_->Read(pid);
  if (!read.ok()) return read.status().IsNotFound() ? Status::OK() : read.status();
  const PageNode* head = *read;
  if (head == nullptr || HasStructureDelta(head)) return Status::OK();

  std::string separator;
  std::optional<std::string> split_until;  // the page's high key before the split
  std::string right_base;
  std::vector<ConsolidatedPage::Delta> right_deltas;  // newest first
  uint64_t right_tag = 0;
  if (level == 0 && DeltaCount(head) == 0) {
    // A lone base (the usual state right after a consolidation): the
    // separator is its middle key, and the upper half is copied as bytes.
    const PageNode* base_node = head;
    while (base_node != nullptr && base_node->kind != NodeKind::kBase) base_node = base_node->next;
    if (base_node == nullptr) return Status::Corruption("bw-tree: page without a base");
    ASSIGN_OR_RETURN(BaseView base, BaseView::Parse(PayloadOf(base_node)));
    if (!base.is_leaf() || base.count() < 2) return Status::OK();
    // Appends (keys written in ascending order, as LSNs grow): the rightmost
    // leaf's last record is its newest. Its leaves then end up 7/8 full
    // instead of half.
    bool appending = false;
    if (base.header().high_infinite) {
      ASSIGN_OR_RETURN(LeafRecord last, base.RecordAt(base.count() - 1));
      appending = last.lsn == base_node->tag;
    }
    const size_t at = SplitIndex(base.count(), appending);
    ASSIGN_OR_RETURN(Slice middle, base.KeyAt(at));
    separator = middle.ToString();
    if (!base.header().high_infinite) split_until = base.header().high_key.ToString();
    ASSIGN_OR_RETURN(ConsolidatedPage page,
                     ConsolidateFrom(head, separator, FlushBound(), PurgeBound()));
    right_base = std::move(page.base);
    right_tag = page.base_tag;
    right_deltas = std::move(page.deltas);
  } else if (level == 0) {
    LeafImage image;
    RETURN_IF_ERROR(GatherLeaf(head, PageReader(), &image));
    std::vector<Slice> keys;
    keys.reserve(image.base.size() + image.deltas.size());
    for (const LeafRecord& r : image.base) keys.push_back(r.key);
    for (const LeafImage::Delta& d : image.deltas) keys.push_back(d.d.key);
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    if (keys.size() < 2) return Status::OK();
    // Appends, as for a lone base above, on a chain (deltas kept above the
    // ESL, or written since the consolidation): the newest record, base or
    // delta, holds the page's largest key.
    bool appending = false;
    if (image.header.high_infinite) {
      uint64_t newest = 0;
      Slice newest_key;
      auto see = [&](uint64_t lsn, Slice key) {
        if (lsn > newest) {
          newest = lsn;
          newest_key = key;
        }
      };
      for (const LeafRecord& r : image.base) see(r.lsn, r.key);
      for (const LeafImage::Delta& d : image.deltas) see(d.d.lsn, d.d.key);
      appending = newest_key == keys.back();
    }
    separator = keys[SplitIndex(keys.size(), appending)].ToString();
    if (!image.header.high_infinite) split_until = image.header.high_key.ToString();
    const Slice sep(separator);
    LeafImage right;
    right.header = image.header;
    right.header.low_key = sep;
    right.base_tag = image.base_tag;
    for (const LeafRecord& r : image.base) {
      if (r.key >= sep) right.base.push_back(r);
    }
    for (const LeafImage::Delta& d : image.deltas) {
      if (d.d.key >= sep) right.deltas.push_back(d);
    }
    ASSIGN_OR_RETURN(ConsolidatedPage page, Consolidate(right, FlushBound(), PurgeBound()));
    right_base = std::move(page.base);
    right_tag = page.base_tag;
    right_deltas = std::move(page.deltas);
  } else {
    InnerImage image;
    RETURN_IF_ERROR(GatherInner(head, &image));
    if (image.entries.size() < 2) return Status::OK();
    // Appends, as for leaves: the rightmost inner page whose last child is
    // its newest (the largest page id, the right half of the latest split
    // below). Then inner pages too end up 7/8 full, and the tree one level
    // lower for as many keys. A reused page id may hide an append, and a
    // random load may look like one: an early split at most.
    bool appending = false;
    if (image.header.high_infinite) {
      auto newest = std::max_element(
          image.entries.begin(), image.entries.end(),
          [](const InnerEntry& a, const InnerEntry& b) { return a.child < b.child; });
      appending = newest == image.entries.end() - 1;
    }
    const size_t mid = SplitIndex(image.entries.size(), appending);
    separator = image.entries[mid].separator.ToString();
    if (!image.header.high_infinite) split_until = image.header.high_key.ToString();
    BaseHeader header = image.header;
    header.low_key = separator;
    std::vector<InnerEntry> entries(image.entries.begin() + static_cast<ptrdiff_t>(mid),
                                    image.entries.end());
    entries.front().separator = header.low_key;
    right_base = EncodeInnerBase(header, entries);
  }

  std::unique_ptr<Llama::SystemTxn> txn = llama_->TBegin();
  Result<PageId> sibling = llama_->TAllocate(txn.get());
  if (!sibling.ok()) {
    llama_->TAbort(txn.get());
    return sibling.status();
  }
  // The sibling's state, built on the private page: base, then the deltas
  // above the ESL, oldest first.
  const PageNode* at = nullptr;
  auto put = [&](PageNode* n) -> Status {
    Result<bool> ok = llama_->TUpdateD(txn.get(), *sibling, at, n);
    if (!ok.ok() || !*ok) {
      llama_->DiscardNode(n);
      return ok.ok() ? Status::Internal("bw-tree: private page changed") : ok.status();
    }
    at = n;
    return Status::OK();
  };
  PageNode* right_base_node = MakeNode(llama_, NodeKind::kBase, right_base, right_tag);
  right_base_node->user_flags = KeptFlags(right_deltas.size());  // as a consolidation's
  Status s = put(right_base_node);
  for (auto it = right_deltas.rbegin(); s.ok() && it != right_deltas.rend(); ++it) {
    s = put(MakeNode(llama_, NodeKind::kDelta, it->payload, it->tag));
  }
  if (!s.ok()) {
    llama_->TAbort(txn.get());
    return s;
  }
  DeltaView split;
  split.type = DeltaType::kSplit;
  split.key = separator;
  split.pid = *sibling;
  PageNode* delta = MakeDelta(llama_, split, 0);
  const uint64_t bound = FlushBound();  // the annotation: never below the bound
  DEUTERON_KILL_POINT(kDcBwtreeSplitInstall);  // the sibling written, the split not committed
  Result<bool> committed = llama_->TCommit(txn.get(), pid, head, delta, bound, bound);
  if (!committed.ok() || !*committed) {
    llama_->TAbort(txn.get());
    llama_->DiscardNode(delta);
    if (!committed.ok()) return committed.status();
    counters_->failed_splits.Add();
    return Status::OK();
  }
  counters_->splits.Add();
  return PostIndexEntry(level + 1, separator, pid, *sibling, /*span=*/true, split_until);
}

// A route posted to `target` for the range starting at `key` must land on a
// page that (still) holds the key. Whoever changes a page's range writes the
// page first and then reads the parents (a split's posts, a merge's
// index-term deletes); whoever posts a route writes the parent first and then
// reads the page here. So one of the two always sees the other: either the
// page's change saw this route and moved it, or this check sees the change
// and moves the route itself: to the split's new sibling, through the merge
// (which redirects routes to a removed page), or back to `fallback` when the
// page is already freed. Until then a reader of a stale route only starts
// over: a freed PID is not reused while this thread's guard is held.
Status BwTree::SettleRoute(uint32_t level, const std::string& key, PageId target,
                           PageId fallback) {
  DeadPages dead;
  for (int i = 0; i < kMaxHops; ++i) {
    Result<const PageNode*> r = llama_->Read(target);
    if (!r.ok() || *r == nullptr) {
      if (r.ok() || !r.status().IsNotFound()) return r.status();
      if (fallback == 0) return Status::OK();
      // The fallback's own link leading back here (a dead sibling) would
      // move the route to and fro until kMaxHops, posting each time.
      if (!llama_->IsPrivate(target)) RETURN_IF_ERROR(dead.Met(target, "a route's settling"));
      RETURN_IF_ERROR(Reroute(level, key, target, fallback));
      target = fallback;
      fallback = 0;
      continue;
    }
    ASSIGN_OR_RETURN(LookupResult route, RouteOf(*r, key, false));
    if (route.outcome == LookupOutcome::kRemoved) {
      RETURN_IF_ERROR(CompleteMerge(target));
      Result<const PageNode*> after = llama_->Read(target);
      if (after.ok()) return Status::OK();  // the merge's scan moved the route
      continue;                             // freed first: move it here
    }
    if (route.outcome != LookupOutcome::kRedirect || route.redirect_kind == RedirectKind::kMerge) {
      return Status::OK();  // the page holds the key (itself or through a merge)
    }
    RETURN_IF_ERROR(Reroute(level, key, target, route.redirect));
    fallback = target;
    target = route.redirect;
  }
  return Status::OK();
}

Result<bool> BwTree::FindRoute(uint32_t level, Slice key, Route* out, DeadPages* dead) {
  Path path;
  Status s = Descend(key, false, level, &path);
  // NotFound: no such level (a root collapse took it away since the
  // caller looked); the callers take it as nothing routed there.
  RETURN_IF_ERROR(s);
  PageId pid = path.pid;
  const PageNode* head = path.head;
  for (int hop = 0; hop < kMaxHops; ++hop) {
    ASSIGN_OR_RETURN(ChildLookup c, FindChild(head, key));
    if (c.outcome == LookupOutcome::kFound) {
      *out = Route{pid, head, c};
      return true;
    }
    if (c.outcome == LookupOutcome::kRemoved) {
      // An inner page being merged (or a root being collapsed): complete
      // it, and hand on a route left pointing at it past its range.
      counters_->helped_smos.Add();
      RETURN_IF_ERROR(CompleteMerge(pid));
      if (pid == path.pid && path.routed) {
        RETURN_IF_ERROR(RepairRoute(path.parent_level, path.route_low, pid));
      }
      return false;
    }
    if (c.outcome != LookupOutcome::kRedirect) return false;
    if (c.redirect_kind == RedirectKind::kMerge) {
      // The key's route lies in a merged sibling's part of this page: no
      // route is posted there (it would go on the removed sibling, or above
      // the merge delta over entries it does not see). The page's
      // consolidation completes the merge first (help-along).
      counters_->helped_smos.Add();
      RETURN_IF_ERROR(MaybeRestructure(pid, level));
      return false;
    }
    Result<const PageNode*> next = llama_->Read(c.redirect);
    if (!next.ok() || *next == nullptr) {
      if (!next.ok() && !next.status().IsNotFound()) return next.status();
      if (dead != nullptr && !llama_->IsPrivate(c.redirect)) {
        RETURN_IF_ERROR(dead->Met(c.redirect, "a route search"));
      }
      return false;
    }
    pid = c.redirect;
    head = *next;
  }
  return false;
}

Result<const PageNode*> BwTree::PostRoute(const Route& route, uint32_t level, DeltaType type,
                                          Slice low, PageId child) {
  DeltaView d;
  d.type = type;
  d.key = low;
  d.pid = child;
  d.next_infinite = route.c.next_infinite;
  d.next = route.c.next;
  PageNode* node = MakeDelta(llama_, d, 0);
  if (!Admits(route.head, node->size)) {
    // As a leaf write: an inner page's consolidation folds every delta, so
    // the page always comes back under its bound.
    llama_->DiscardNode(node);
    counters_->held_posts.Add();
    RETURN_IF_ERROR(MaybeRestructure(route.pid, level));
    return static_cast<const PageNode*>(nullptr);
  }
  if (llama_->UpdateD(route.pid, route.head, node)) {
    counters_->index_posts.Add();
    return node;
  }
  llama_->DiscardNode(node);
  counters_->failed_index_posts.Add();
  return nullptr;
}

Status BwTree::Reroute(uint32_t level, Slice key, PageId from, PageId to) {
  DeadPages dead;
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    Route route;
    Result<bool> found = FindRoute(level, key, &route, &dead);
    if (!found.ok() && found.status().IsNotFound()) return Status::OK();  // the level is gone
    RETURN_IF_ERROR(found.status());
    if (!*found) continue;
    if (route.c.child != from) return Status::OK();
    // The caller settles the new route.
    ASSIGN_OR_RETURN(const PageNode* posted,
                     PostRoute(route, level, DeltaType::kIndexTermDelete, route.c.low, to));
    if (posted != nullptr) return Status::OK();
  }
  return Status::Busy("bw-tree: reroute did not settle");
}

Status BwTree::PostIndexEntry(uint32_t parent_level, Slice separator, PageId left, PageId right,
                              bool span, const std::optional<std::string>& until) {
  std::string key = separator.ToString();  // the caller's slice may go stale
  DeadPages dead;
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    const PageId root = root_.load(std::memory_order_acquire);
    Result<const PageNode*> root_head = llama_->Read(root);
    if (!root_head.ok() && root_head.status().IsNotFound()) {
      RETURN_IF_ERROR(RefreshRoot());  // freed by a root collapse
      continue;
    }
    if (!root_head.ok()) return root_head.status();
    if (*root_head == nullptr) return Status::Corruption("bw-tree: root without state");
    ASSIGN_OR_RETURN(BaseView root_base, BaseOf(*root_head));
    if (parent_level > root_base.header().level) {
      if (root != left) return Status::OK();  // the root's own split posts first
      bool retry = false;
      RETURN_IF_ERROR(GrowRoot(left, parent_level - 1, key, right, &retry));
      if (retry) continue;
      return Status::OK();
    }
    Route route;
    Result<bool> found = FindRoute(parent_level, key, &route, &dead);
    if (!found.ok() && found.status().IsNotFound()) continue;  // the root collapsed: look again
    RETURN_IF_ERROR(found.status());
    if (!*found) continue;
    const ChildLookup& c = route.c;
    if (c.child == left) {
      // Post only what `left` still hands to `right` (a helper's view of
      // `left` may be old: `right` may be merged back and freed since).
      Result<const PageNode*> left_head = llama_->Read(left);
      if (!left_head.ok() || *left_head == nullptr) {
        return left_head.ok() || left_head.status().IsNotFound() ? Status::OK()
                                                                 : left_head.status();
      }
      ASSIGN_OR_RETURN(LookupResult to, RouteOf(*left_head, key, false));
      if (to.outcome != LookupOutcome::kRedirect || to.redirect != right ||
          to.redirect_kind == RedirectKind::kMerge) {
        return Status::OK();
      }
      ASSIGN_OR_RETURN(const PageNode* node,
                       PostRoute(route, parent_level, DeltaType::kIndexEntry, key, right));
      if (node == nullptr) continue;
      RETURN_IF_ERROR(SettleRoute(parent_level, key, right, left));
      if (DeltaCount(node) > options_.inner_delta_threshold) {
        RETURN_IF_ERROR(MaybeRestructure(route.pid, parent_level));
      }
    }
    // This range is posted (or routed elsewhere). A split hands the new
    // sibling every range up to its high key that still routes to the left
    // page, in whichever parent it is, so that no parent routes to a page
    // keys outside its range (the merge's index-term deletes rely on that).
    if (!span || c.next_infinite) return Status::OK();
    key = c.next.ToString();
    if (until && Slice(key) >= Slice(*until)) return Status::OK();
  }
  return Status::Busy("bw-tree: index entry post did not settle");
}

Status BwTree::GrowRoot(PageId old_root, uint32_t old_level, Slice separator, PageId right,
                        bool* retry) {
  *retry = false;
  ASSIGN_OR_RETURN(const PageNode* meta, llama_->Read(kMetaPid));
  ASSIGN_OR_RETURN(LookupResult r, Lookup(meta, kRootKey));
  if (r.outcome != LookupOutcome::kFound || r.value.size() != 8) {
    return Status::Corruption("bw-tree: meta page lost its root");
  }
  const PageId current = DecodeFixed64(r.value.data());
  if (current != old_root) {
    // The cached root is stale: refresh it and post into the real parent.
    root_.store(current, std::memory_order_release);
    *retry = true;
    return Status::OK();
  }
  std::unique_ptr<Llama::SystemTxn> txn = llama_->TBegin();
  Result<PageId> new_root = llama_->TAllocate(txn.get());
  if (!new_root.ok()) {
    llama_->TAbort(txn.get());
    return new_root.status();
  }
  BaseHeader header;
  header.type = NodeType::kInner;
  header.level = static_cast<uint8_t>(old_level + 1);
  const std::string base =
      EncodeInnerBase(header, {InnerEntry{Slice(), old_root}, InnerEntry{separator, right}});
  PageNode* base_node = MakeNode(llama_, NodeKind::kBase, base, 0);
  Result<bool> put = llama_->TUpdateD(txn.get(), *new_root, nullptr, base_node);
  if (!put.ok() || !*put) {
    llama_->DiscardNode(base_node);
    llama_->TAbort(txn.get());
    return put.ok() ? Status::Internal("bw-tree: private page changed") : put.status();
  }
  const std::string pid_bytes = EncodePid(*new_root);
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
    *retry = true;  // the meta page changed: someone else grew the root
    return Status::OK();
  }
  root_.store(*new_root, std::memory_order_release);
  counters_->root_splits.Add();
  return Status::OK();
}

}  // namespace deuteron::bwtree
