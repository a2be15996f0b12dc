// BwTree: statistics, Open, the descent and the point operations (bwtree.h).
#include "common/fault_hooks.h"
#include "dc/bwtree/internal/bwtree_impl.h"

namespace deuteron::bwtree {

void BwTree::NoteChain(const PageNode* head) {
  // Sampled (one leaf visit in 16 per thread): the statistic needs a walk.
  thread_local uint32_t calls = 0;
  if ((++calls & 15) != 0) return;
  const size_t length = DeltaCount(head);
  counters_->chains_seen.Add();
  counters_->chain_length_sum.Add(length);
  // relaxed: a statistic; written only when a new maximum is seen.
  uint64_t max = counters_->chain_length_max.load(std::memory_order_relaxed);
  while (length > max &&
         !counters_->chain_length_max.compare_exchange_weak(max, length, std::memory_order_relaxed)) {
  }
}

BwTree::Stats BwTree::GetStats() const {
  Stats s;
  const Counters& c = *counters_;
  s.reads = c.reads.Value();
  s.writes = c.writes.Value();
  s.read_fallbacks = c.read_fallbacks.Value();
  s.write_fallbacks = c.write_fallbacks.Value();
  s.update_retries = c.update_retries.Value();
  s.consolidations = c.consolidations.Value();
  s.failed_consolidations = c.failed_consolidations.Value();
  s.splits = c.splits.Value();
  s.failed_splits = c.failed_splits.Value();
  s.root_splits = c.root_splits.Value();
  s.merges = c.merges.Value();
  s.failed_merges = c.failed_merges.Value();
  s.index_posts = c.index_posts.Value();
  s.failed_index_posts = c.failed_index_posts.Value();
  s.helped_smos = c.helped_smos.Value();
  s.restarts = c.restarts.Value();
  s.chains_seen = c.chains_seen.Value();
  s.chain_length_sum = c.chain_length_sum.Value();
  s.chain_length_max = c.chain_length_max.load(std::memory_order_relaxed);
  s.pages_freed = c.pages_freed.Value();
  s.held_posts = c.held_posts.Value();
  s.bound_overruns = c.bound_overruns.Value();
  s.deferred_restructures = c.deferred_restructures.Value();
  s.inner_merges = c.inner_merges.Value();
  s.root_collapses = c.root_collapses.Value();
  auto guard = llama_->Enter();
  Result<const PageNode*> root = llama_->Read(root_.load(std::memory_order_acquire));
  if (root.ok() && *root != nullptr) {
    Result<BaseView> base = BaseOf(*root);
    if (base.ok()) s.height = base->header().level + 1u;
  }
  return s;
}

// ---- Open -----------------------------------------------------------------------

BwTree::BwTree(Llama* llama, BwTreeOptions options)
    : llama_(llama),
      options_(std::move(options)),
      counters_(std::make_unique<Counters>()),
      page_bytes_bound_(SatAdd(options_.node_max_bytes, NodeBytesRoom(options_))),
      node_bytes_max_(std::max(LargestRecordBytes(options_.limits),
                               IndexEntryBytes(options_.limits))),
      merge_bytes_max_(std::min(options_.node_max_bytes / 4, NodeBytesRoom(options_))),
      leaf_chain_hold_(2 * options_.leaf_delta_threshold + 2) {}

BwTree::~BwTree() = default;

uint64_t BwTree::FlushBound() const {
  return options_.flush_bound ? options_.flush_bound() : std::numeric_limits<uint64_t>::max();
}

uint64_t BwTree::PurgeBound() const { return options_.purge_bound ? options_.purge_bound() : 0; }

Status BwTree::ValidateOptions(const BwTreeOptions& o) {
  auto bad = [](std::string what) { return Status::InvalidArgument("bw-tree options: " + what); };
  if (o.limits.max_key_size == 0) return bad("limits.max_key_size must be at least 1");
  if (o.leaf_max_records < 2) return bad("leaf_max_records must be at least 2");
  if (o.inner_max_entries < 2) return bad("inner_max_entries must be at least 2");
  if (o.node_max_bytes != 0 && o.node_max_bytes < kMinNodeBytes) {
    return bad("node_max_bytes must be 0 (the default) or at least " +
               std::to_string(kMinNodeBytes));
  }
  if (2 * o.leaf_merge_records >= o.leaf_max_records) {
    return bad("leaf_merge_records (" + std::to_string(o.leaf_merge_records) +
               ") must be below half of leaf_max_records (" +
               std::to_string(o.leaf_max_records) + ")");
  }
  if (o.inner_merge_entries != BwTreeOptions::kAutoInnerMerge &&
      2 * o.inner_merge_entries >= o.inner_max_entries) {
    return bad("inner_merge_entries (" + std::to_string(o.inner_merge_entries) +
               ") must be below half of inner_max_entries (" +
               std::to_string(o.inner_max_entries) + ")");
  }
  return Status::OK();
}

size_t BwTree::NodeBytesRoom(const BwTreeOptions& o) {
  const size_t leaf = SatMul(SatAdd(o.leaf_delta_threshold, 1), LargestRecordBytes(o.limits));
  const size_t inner = SatMul(SatAdd(o.inner_delta_threshold, 1), IndexEntryBytes(o.limits));
  return std::max(leaf, inner);
}

BwTree::Hold BwTree::HoldOf(const PageNode* head, size_t bytes) const {
  // A plain chain (no structure delta) answers from its top node and base.
  size_t deltas = 0;
  if (const PageNode* base = PlainBase(head); base != nullptr && PlainDeltas(head, &deltas)) {
    if (FreshDeltas(deltas, base) >= leaf_chain_hold_) return Hold::kConsolidate;
    if (base->size > options_.node_max_bytes ||
        BaseView::CountIn(PayloadOf(base)) > options_.leaf_max_records) {
      return Hold::kSplit;
    }
    // Each record delta holds at most one record at the limits.
    const size_t most = SatAdd(SatAdd(base->size, SatMul(deltas, node_bytes_max_)), bytes);
    if (most <= page_bytes_bound_) return Hold::kNone;
    return Admits(head, bytes) ? Hold::kNone : Hold::kBytes;
  }
  // Any other chain (a structure delta on it, or nodes LLAMA copied) is
  // walked once: its deltas, its base's kept ones, and its bytes. Its split
  // limits are left to the consolidation that folds the structure delta.
  const ChainTally t = Tally(head);
  if (FreshDeltas(t.deltas, t.base) >= leaf_chain_hold_) return Hold::kConsolidate;
  return SatAdd(t.bytes, bytes) <= page_bytes_bound_ ? Hold::kNone : Hold::kBytes;
}

BwTree::ChainTally BwTree::Tally(const PageNode* head) const {
  // Bytes exact of the nodes in memory (a partial swap's flushed part was
  // within the bound when it was written), with each merged sibling at the
  // most a page may hold when it is removed (StartMerge): its state is the
  // page's.
  ChainTally t;
  for (const PageNode* n = head; n != nullptr; n = n->next) {
    if (!n->is_data()) continue;
    t.bytes = SatAdd(t.bytes, n->size);
    if (n->kind == NodeKind::kBase) {
      t.base = n;
      continue;
    }
    ++t.deltas;
    if (n->size > 0 && static_cast<DeltaType>(n->payload()[0]) == DeltaType::kMerge) {
      t.bytes = SatAdd(t.bytes, merge_bytes_max_);
    }
  }
  return t;
}

bool BwTree::Admits(const PageNode* head, size_t bytes) const {
  return SatAdd(Tally(head).bytes, bytes) <= page_bytes_bound_;
}

size_t BwTree::NodeBytesLimit(size_t max_record_bytes) {
  // The transaction's record, its allocation record and the two pages'.
  constexpr size_t kHeaders = 4 * llama::kRecordHeaderSize;
  return max_record_bytes > kHeaders ? (max_record_bytes - kHeaders) / 3 : 0;
}

Result<std::unique_ptr<BwTree>> BwTree::Open(Llama* llama, BwTreeOptions options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  const size_t record = llama->MaxRecordBytes();
  const size_t limit = NodeBytesLimit(record);
  // The LSS's smallest buffer (8 KiB) leaves room for 2.6 KiB nodes.
  assert(limit >= kMinNodeBytes);
  // A page may hold node_max_bytes plus `room` when it splits, and a split
  // writes it whole with its sibling in one record of 3 * limit. A split by
  // count may give the sibling nearly all the bytes, so the page may be 1.5
  // * limit. A node must also hold one record of the largest size, or a
  // leaf of one such record would stay above node_max_bytes after every
  // size check.
  const size_t page = limit + limit / 2;
  const size_t room = NodeBytesRoom(options);
  const size_t min_node = std::max(kMinNodeBytes, LargestRecordBytes(options.limits));
  if (room > page || min_node > page - room) {
    return Status::InvalidArgument(fmt::format(
        "bw-tree options: a node of {} bytes (one record of the largest size) and {} bytes "
        "past it ({}) do not fit in this store's LSS records of at most {} bytes "
        "(LssOptions::buffer_size - 64): lower the limits or the delta thresholds, or raise "
        "buffer_size",
        min_node, room, WhyRoom(options), record));
  }
  const size_t max_node = std::min(limit, page - room);
  if (options.node_max_bytes == 0) {
    options.node_max_bytes = std::max(min_node, std::min(kDefaultNodeBytes, max_node));
  }
  if (options.node_max_bytes < min_node) {
    return Status::InvalidArgument(fmt::format(
        "bw-tree options: node_max_bytes ({}) must be at least {}: one record of {}-byte "
        "keys and {}-byte values (the limits)",
        options.node_max_bytes, min_node, options.limits.max_key_size,
        options.limits.max_value_size));
  }
  if (options.node_max_bytes > max_node) {
    return Status::InvalidArgument(fmt::format(
        "bw-tree options: node_max_bytes ({}) must be at most {} for this store: a split "
        "writes the page, which may have grown by {} bytes past it ({}), and its new sibling "
        "in one LSS record of at most {} bytes (LssOptions::buffer_size - 64)",
        options.node_max_bytes, max_node, room, WhyRoom(options), record));
  }
  if (options.inner_merge_entries == BwTreeOptions::kAutoInnerMerge) {
    // Below what a split leaves either half: a quarter of the page, and
    // under the 1/8 that an appending split of the rightmost inner page
    // leaves on its right (else that page would merge back at its next
    // consolidation, and split again).
    const size_t max = options.inner_max_entries;
    const size_t below_append = (max + 1) / 8 > 1 ? (max + 1) / 8 - 1 : 1;
    options.inner_merge_entries = std::min((max - 1) / 4, below_append);
  }
  std::unique_ptr<BwTree> tree(new BwTree(llama, std::move(options)));
  auto guard = llama->Enter();
  Result<const PageNode*> meta = llama->Read(kMetaPid);
  if (!meta.ok()) {
    if (!meta.status().IsNotFound()) return meta.status();
    RETURN_IF_ERROR(tree->Bootstrap());
    return tree;
  }
  if (*meta == nullptr) return Status::Corruption("bw-tree: meta page has no state");
  Result<LookupResult> r = Lookup(*meta, kRootKey);
  if (!r.ok() || r->outcome != LookupOutcome::kFound || r->value.size() != 8) {
    return Status::Corruption("bw-tree: page 1 is not a Bw-tree meta page");
  }
  tree->root_.store(DecodeFixed64(r->value.data()), std::memory_order_release);
  return tree;
}

Status BwTree::Bootstrap() {
  std::unique_ptr<Llama::SystemTxn> txn = llama_->TBegin();
  Result<PageId> meta = llama_->TAllocate(txn.get());
  Result<PageId> root = meta.ok() ? llama_->TAllocate(txn.get()) : meta;
  if (!root.ok() || *meta != kMetaPid) {
    llama_->TAbort(txn.get());
    return root.ok() ? Status::Corruption("bw-tree: store has pages but no meta page")
                     : root.status();
  }
  const std::string root_pid = EncodePid(*root);
  const std::string meta_base = EncodeLeafBase(BaseHeader(), {LeafRecord{kRootKey, root_pid, 0, false}});
  const std::string root_base = EncodeLeafBase(BaseHeader(), {});
  Result<bool> a = llama_->TUpdateD(txn.get(), *meta, nullptr,
                                    MakeNode(llama_, NodeKind::kBase, meta_base, 0));
  Result<bool> b = llama_->TUpdateD(txn.get(), *root, nullptr,
                                    MakeNode(llama_, NodeKind::kBase, root_base, 0));
  if (!a.ok() || !*a || !b.ok() || !*b) {
    llama_->TAbort(txn.get());
    return Status::Internal("bw-tree: could not build the initial pages");
  }
  const uint64_t bound = FlushBound();  // the annotation: never below the bound
  Result<bool> c = llama_->TCommit(txn.get(), 0, nullptr, nullptr, bound, bound);
  if (!c.ok() || !*c) {
    llama_->TAbort(txn.get());
    return c.ok() ? Status::Internal("bw-tree: bootstrap commit failed") : c.status();
  }
  root_.store(*root, std::memory_order_release);
  return Status::OK();
}

Status BwTree::RefreshRoot() {
  ASSIGN_OR_RETURN(const PageNode* meta, llama_->Read(kMetaPid));
  if (meta == nullptr) return Status::Corruption("bw-tree: meta page has no state");
  ASSIGN_OR_RETURN(LookupResult r, Lookup(meta, kRootKey));
  if (r.outcome != LookupOutcome::kFound || r.value.size() != 8) {
    return Status::Corruption("bw-tree: meta page lost its root");
  }
  root_.store(DecodeFixed64(r.value.data()), std::memory_order_release);
  return Status::OK();
}

// ---- Descent ----------------------------------------------------------------------

Status BwTree::Descend(Slice key, bool before, uint32_t target_level, Path* path,
                       bool search_target) {
  constexpr uint32_t kAnyLevel = std::numeric_limits<uint32_t>::max();
  DeadPages dead;
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    if (attempt > 0) counters_->restarts.Add();
    PageId pid = root_.load(std::memory_order_acquire);
    Path at;  // the route that led to pid, if a parent's entry did
    uint32_t expect = kAnyLevel;
    bool tried_consolidate = false;
    // pid was reached through a merge delta: it is a removed page whose own
    // routing is read below its remove-node.
    bool through_remove = false;
    // The route that led to the level now walked right, while every right
    // move came straight from its page (HealRoute): `to` is the last page
    // reached whose low key is at or below the route's (0: none).
    struct {
      bool active = false;
      uint32_t parent_level = 0;
      Slice route_low;
      PageId from = 0, to = 0;
    } heal;
    for (int hop = 0; hop < kMaxHops; ++hop) {
      Result<const PageNode*> read = llama_->Read(pid);
      if (!read.ok() && !read.status().IsNotFound()) return read.status();
      const PageNode* head = read.ok() ? *read : nullptr;
      // Inner pages are always searched; the target page only for a read.
      if (search_target || expect != target_level) PrefetchHead(head);
      PrefetchBase(head);
      // B-link rule: any page of the right level whose low key is at or
      // below the key is a correct place to continue from (right moves do
      // the rest). A route to anything else (a freed page, or a PID reused
      // at another level or range) is stale: repair it and start over.
      bool stale = head == nullptr;
      uint32_t level = 0;
      size_t deltas = 0;
      bool base_only = false;  // no delta above the base (flush-state nodes aside)
      BaseView base;
      if (!stale) {
        if (const PageNode* plain = PlainBase(head); plain != nullptr) {
          // A leaf's record deltas over its base, or a consolidated page:
          // read the base directly.
          RETURN_IF_ERROR(base.Init(PayloadOf(plain)));
          deltas = 0;  // only inner chains' counts are used here; plain ones are leaves
          size_t above = 0;
          base_only = PlainDeltas(head, &above) && above == 0;
        } else {
          RETURN_IF_ERROR(BaseOf(head, &deltas, &base));
        }
        level = base.header().level;
        const Slice low = base.header().low_key;
        stale = (expect != kAnyLevel && level != expect) ||
                (before ? (!low.empty() && key <= low) : key < low);
      }
      if (stale) {
        // A page private to a system transaction is published by its
        // commit; any other dead page met again after its repair is damage.
        if (head != nullptr || !llama_->IsPrivate(pid)) RETURN_IF_ERROR(dead.Met(pid, "a descent"));
        if (at.routed) RETURN_IF_ERROR(RepairRoute(at.parent_level, at.route_low, pid));
        // A root freed by a collapse: the meta page names the new one.
        if (expect == kAnyLevel) RETURN_IF_ERROR(RefreshRoot());
        break;
      }
      if (level < target_level) return Status::NotFound("bw-tree: no such level");
      if (level == target_level) {
        at.pid = pid;
        at.head = head;
        at.base = base;
        *path = at;
        return Status::OK();
      }
      // An inner page: on every path below it, so the evictor keeps it
      // longer than a leaf (llama.md, "Memory budget").
      llama_->KeepWarm(pid);
      // (A removed page is its left neighbour's to consolidate.)
      if (!tried_consolidate && !through_remove && deltas > options_.inner_delta_threshold) {
        tried_consolidate = true;
        RETURN_IF_ERROR(MaybeRestructure(pid, level));
        continue;
      }
      ChildLookup c;
      if (base_only) {
        RETURN_IF_ERROR(RouteInBase(base, key, before, /*want_next=*/false, &c));
      } else {
        ASSIGN_OR_RETURN(c, FindChild(head, key, before, &base, /*want_next=*/false,
                                      through_remove));
      }
      tried_consolidate = false;
      through_remove = false;
      if (c.outcome == LookupOutcome::kRemoved) {
        // An inner page being merged into its left neighbour, or a root
        // being collapsed: complete that first (help-along). A route left
        // pointing at it from past its range goes to its left neighbour.
        counters_->helped_smos.Add();
        RETURN_IF_ERROR(CompleteMerge(pid));
        if (at.routed) RETURN_IF_ERROR(RepairRoute(at.parent_level, at.route_low, pid));
        if (expect == kAnyLevel) RETURN_IF_ERROR(RefreshRoot());
        break;
      }
      if (c.outcome == LookupOutcome::kFound) {
        if (heal.to != 0) {  // leaving the level a stale route led into
          RETURN_IF_ERROR(HealRoute(heal.parent_level, heal.route_low, heal.from, heal.to));
        }
        heal = {};
        at.routed = true;
        at.parent_level = level;
        at.route_low = c.low;
        expect = level - 1;
        pid = c.child;
        continue;
      }
      if (c.outcome != LookupOutcome::kRedirect) {
        // The key below every route of a page whose low key is at or below
        // it: only a damaged page answers so, and no repair follows.
        RETURN_IF_ERROR(dead.Met(pid, "a descent"));
        break;  // start over
      }
      if (c.redirect_kind != RedirectKind::kMerge) {
        // A split (or a B-link move) whose index entry is missing: help post
        // it, unless the sibling has no state (private to its split's
        // transaction, or dead: the next hop restarts past it; a route
        // posted to it would only be settled back).
        ASSIGN_OR_RETURN(bool live, HasState(c.redirect));
        if (live) RETURN_IF_ERROR(PostIndexEntry(level + 1, c.redirect_key, pid, c.redirect));
        if (at.routed) heal = {true, at.parent_level, at.route_low, pid, 0};
        // The next page's low key is at or below the route's: the routed
        // page never held the route's range (right moves within the range
        // are splits, whose posts above handle them).
        if (heal.active && c.redirect_key <= heal.route_low) heal.to = c.redirect;
      } else {
        heal = {};  // a merged sibling is never a route's target
        through_remove = true;
      }
      at.routed = false;
      expect = level;
      pid = c.redirect;
    }
  }
  return Status::Busy("bw-tree: descent did not settle");
}

Result<bool> BwTree::HasState(PageId pid) {
  Result<const PageNode*> r = llama_->Read(pid);
  if (!r.ok()) {
    if (r.status().IsNotFound()) return false;
    return r.status();
  }
  return *r != nullptr;
}

Status BwTree::HealRoute(uint32_t parent_level, Slice route_low, PageId from, PageId to) {
  if (route_low.empty() || from == to) return Status::OK();
  const std::string low = route_low.ToString();  // the slice points into the parent
  counters_->helped_smos.Add();
  RETURN_IF_ERROR(Reroute(parent_level, low, from, to));
  return SettleRoute(parent_level, low, to, 0);
}

Status BwTree::RepairRoute(uint32_t parent_level, Slice route_low, PageId bad) {
  if (route_low.empty()) return Status::OK();  // the leftmost pages are never freed
  const std::string low = route_low.ToString();
  // Hand the range to the page holding the keys just below it.
  Path pred;
  RETURN_IF_ERROR(Descend(low, /*before=*/true, parent_level - 1, &pred));
  if (pred.pid == bad) {
    // The keys below the range lead to the bad page too: both routes are
    // B-link entry points past its high key (ranges it held before a split,
    // or routes a crash kept to a PID since reused lower down), which its
    // merge's index-term deletes do not reach. Hand the range to the page
    // before the bad page's own range; its right moves reach the range.
    const Slice bad_low = pred.base.header().low_key;
    if (bad_low.empty() || bad_low >= Slice(low)) return Status::OK();
    const std::string below = bad_low.ToString();
    RETURN_IF_ERROR(Descend(below, /*before=*/true, parent_level - 1, &pred));
    if (pred.pid == bad) return Status::OK();
  }
  counters_->helped_smos.Add();
  RETURN_IF_ERROR(Reroute(parent_level, low, bad, pred.pid));
  return SettleRoute(parent_level, low, pred.pid, 0);
}

Status BwTree::Locate(Slice key, Located* out, bool need_record) {
  // A blind write needs the page only: its structure deltas and high key, no
  // search of its records.
  auto look = [&](const PageNode* head, bool through_remove,
                  const BaseView* base = nullptr) -> Result<LookupResult> {
    if (need_record) return Lookup(head, key, options_.limits, through_remove, base);
    return RouteOf(head, key, through_remove, base);
  };
  DeadPages dead;
  // A page a link led to that has no state: a restart, unless the same page
  // keeps answering so (a split's sibling is private until its commit).
  auto dead_end = [&](PageId to) -> Status {
    if (llama_->IsPrivate(to)) return Status::OK();
    return dead.Met(to, "a leaf search");
  };
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    Path path;
    RETURN_IF_ERROR(Descend(key, false, 0, &path, need_record));
    PageId pid = path.pid;
    const PageNode* head = path.head;
    bool restart = false;
    // Where a routed leaf that did not hold the route's low key led right to
    // (0: nowhere): the route's better target (HealRoute).
    PageId heal_to = 0;
    for (int hop = 0; hop < kMaxHops && !restart; ++hop) {
      // The descent parsed the first page's base; later hops parse their own.
      ASSIGN_OR_RETURN(LookupResult r, look(head, false, hop == 0 ? &path.base : nullptr));
      switch (r.outcome) {
        case LookupOutcome::kFound:
        case LookupOutcome::kNotFound:
        case LookupOutcome::kDeleted:
          if (heal_to != 0) {
            RETURN_IF_ERROR(HealRoute(path.parent_level, path.route_low, path.pid, heal_to));
          }
          NoteChain(head);
          *out = Located{pid, head, r};
          return Status::OK();
        case LookupOutcome::kRemoved:
          counters_->helped_smos.Add();
          RETURN_IF_ERROR(CompleteMerge(pid));
          // A route left pointing at the removed page (one past its range,
          // which its merge does not scan) goes to its left neighbour.
          if (pid == path.pid && path.routed) {
            RETURN_IF_ERROR(RepairRoute(path.parent_level, path.route_low, pid));
          }
          restart = true;
          break;
        case LookupOutcome::kRedirect: {
          if (r.redirect_kind == RedirectKind::kMerge) {
            // The key is in the merged sibling's state, below its remove-node.
            Result<const PageNode*> sib = llama_->Read(r.redirect);
            if (!sib.ok() || *sib == nullptr) {
              if (sib.ok() || sib.status().IsNotFound()) {
                RETURN_IF_ERROR(dead_end(r.redirect));
                restart = true;
                break;
              }
              return sib.status();
            }
            ASSIGN_OR_RETURN(LookupResult r2, look(*sib, true));
            if (r2.outcome == LookupOutcome::kRedirect) {
              if (r2.redirect_kind == RedirectKind::kMerge) {
                restart = true;
                break;
              }
              // Past the merged range: the B-link sibling, or the right half
              // of a split of the merged page. A merge delta without its
              // remove-node (a crash in a store written before remove-nodes
              // were system transactions) leaves the merged page live, so it
              // may split; restarting here would never settle.
              pid = r2.redirect;
            } else {
              r2.hint = kNoHint;  // a delta goes on this page, over its own base
              NoteChain(head);
              *out = Located{pid, head, r2};
              return Status::OK();
            }
          } else {
            // As in Descend: no route posted to a sibling without state.
            ASSIGN_OR_RETURN(bool live, HasState(r.redirect));
            if (!live) {
              RETURN_IF_ERROR(dead_end(r.redirect));
              restart = true;
              break;
            }
            RETURN_IF_ERROR(PostIndexEntry(1, r.redirect_key, pid, r.redirect));
            // Right moves straight from the routed leaf past the route's
            // low key: the route did not lead to the leaf holding it.
            if (path.routed && (pid == path.pid || pid == heal_to) &&
                r.redirect_key <= path.route_low) {
              heal_to = r.redirect;
            }
            pid = r.redirect;
          }
          Result<const PageNode*> next = llama_->Read(pid);
          if (!next.ok() || *next == nullptr) {
            if (next.ok() || next.status().IsNotFound()) {
              RETURN_IF_ERROR(dead_end(pid));
              restart = true;
              break;
            }
            return next.status();
          }
          head = *next;
          break;
        }
      }
    }
    counters_->restarts.Add();
  }
  return Status::Busy("bw-tree: leaf search did not settle");
}

// ---- Point operations --------------------------------------------------------------

Status BwTree::MaybeConsolidateOnRead(PageId pid, const PageNode* head) {
  const size_t threshold = options_.leaf_read_delta_threshold;
  if (threshold == 0) return Status::OK();
  // A plain chain knows its record deltas without a walk: too few to fold
  // ends it here (the common read of a consolidated leaf).
  if (size_t deltas = 0; PlainDeltas(head, &deltas) && deltas < threshold) return Status::OK();
  // Record deltas foldable under the ESL, and split deltas: a split delta
  // costs every read of the leaf a dependent miss before the base, and
  // nothing after the split writes a leaf whose keys stopped growing (an
  // append-only load leaves every leaf but the last so), so only a read
  // can fold it. Folding it is what a write's consolidation does: the
  // split's range and sibling link go into the new base (B-link). Any
  // other delta (a merge, a remove-node) leaves the chain to the writers.
  size_t foldable = 0;
  bool split = false;
  uint64_t bound = 0;
  bool have_bound = false;
  for (const PageNode* n = head; n != nullptr && n->kind != NodeKind::kBase; n = n->next) {
    if (n->kind != NodeKind::kDelta) continue;
    if (n->size == 0) return Status::OK();
    const auto type = static_cast<DeltaType>(n->payload()[0]);
    if (type == DeltaType::kSplit) {
      split = true;
      continue;
    }
    if (!IsRecordDelta(type)) return Status::OK();
    if (!have_bound) {
      bound = FlushBound();
      have_bound = true;
    }
    if (n->tag <= bound) ++foldable;
  }
  if (foldable < threshold && !split) return Status::OK();
  // As a write does: the consolidated leaf is then sized for a split or a
  // merge (a read-consolidated leaf must not escape its size limits).
  return MaybeRestructure(pid, 0);
}

bool BwTree::LocateSettled(Slice key, Located* out, bool need_record) {
  // The general descent (Descend) reads the same pages by the same rules;
  // this one only leaves out what a settled tree never needs: right moves,
  // help-along, repairs and route records. The leaf is read as Locate reads
  // it (Lookup / RouteOf); an answer other than the key's state here (a
  // redirect, a remove-node) is the general path's, as is any page not
  // settled or malformed.
  PageId pid = root_.load(std::memory_order_acquire);
  uint32_t expect = std::numeric_limits<uint32_t>::max();  // the root's level is any
  for (int hop = 0; hop < kMaxHops; ++hop) {
    const PageNode* head = llama_->ReadResident(pid);
    if (head == nullptr) return false;
    // Inner pages are always searched; the leaf only for a read.
    if (need_record || expect != 0) PrefetchHead(head);
    PrefetchBase(head);
    // base_hint is exact wherever LLAMA set it; null (a partial swap) falls back.
    const PageNode* base_node = llama::BaseHintBelow(head);
    BaseView base;
    if (base_node == nullptr || !base.Init(PayloadOf(base_node)).ok()) return false;
    const BaseHeader& h = base.header();
    if ((expect != std::numeric_limits<uint32_t>::max() && h.level != expect) ||
        key < h.low_key || base.AboveHigh(key)) {
      return false;  // a stale route or a right move: the general path's work
    }
    if (h.level == 0) {
      Result<LookupResult> r = need_record ? Lookup(head, key, options_.limits, false, &base)
                                           : RouteOf(head, key, false, &base);
      if (!r.ok() || (r->outcome != LookupOutcome::kFound &&
                      r->outcome != LookupOutcome::kNotFound &&
                      r->outcome != LookupOutcome::kDeleted)) {
        return false;
      }
      NoteChain(head);
      *out = Located{pid, head, *r};
      return true;
    }
    // An inner page passes only as a bare base (flush-state nodes aside),
    // as Descend's base_only.
    if (size_t above = 0; !PlainDeltas(head, &above) || above != 0) return false;
    base.PrefetchEntryNear(key);
    size_t i = 0;
    InnerEntry e;
    if (!base.RouteEntry(key, /*before=*/false, &i, &e).ok() || i == base.count()) return false;
    pid = e.child;
    expect = h.level - 1u;
  }
  return false;
}

Status BwTree::LocateForRead(Slice key, Located* loc) {
  RETURN_IF_ERROR(CheckKey(options_.limits, key));
  counters_->reads.Add();
  if (!LocateSettled(key, loc)) {
    counters_->read_fallbacks.Add();
    RETURN_IF_ERROR(Locate(key, loc));
  }
  // A consolidation retires the old chain through the epoch: loc's slices
  // stay valid under the caller's guard.
  return MaybeConsolidateOnRead(loc->pid, loc->head);
}

Result<Record> BwTree::Get(Slice key) {
  auto guard = llama_->Enter();
  Located loc;
  RETURN_IF_ERROR(LocateForRead(key, &loc));
  if (loc.r.outcome != LookupOutcome::kFound) return Status::NotFound("key not found");
  return Record{loc.r.value.ToString(), loc.r.lsn};
}

Result<uint64_t> BwTree::GetLsn(Slice key) {
  auto guard = llama_->Enter();
  Located loc;
  RETURN_IF_ERROR(LocateForRead(key, &loc));
  return loc.r.outcome == LookupOutcome::kNotFound ? 0 : loc.r.lsn;
}

Result<Record> BwTree::ReadHeld(Slice key, bool* found) {
  auto guard = llama_->Enter();
  Located loc;
  RETURN_IF_ERROR(LocateForRead(key, &loc));
  *found = loc.r.outcome == LookupOutcome::kFound;
  if (*found) return Record{loc.r.value.ToString(), loc.r.lsn};
  return Record{std::string(), loc.r.outcome == LookupOutcome::kDeleted ? loc.r.lsn : 0};
}

Status BwTree::Write(WriteKind kind, Slice key, Slice value, uint64_t lsn) {
  return WriteImpl(kind, /*if_newer=*/false, key, value, lsn, nullptr);
}

Result<bool> BwTree::WriteIfNewer(bool tombstone, Slice key, Slice value, uint64_t lsn) {
  bool applied = false;
  RETURN_IF_ERROR(WriteImpl(tombstone ? WriteKind::kBlindDelete : WriteKind::kUpsert,
                            /*if_newer=*/true, key, value, lsn, &applied));
  return applied;
}

Status BwTree::WriteImpl(WriteKind kind, bool if_newer, Slice key, Slice value, uint64_t lsn,
                         bool* applied) {
  RETURN_IF_ERROR(CheckRecord(options_.limits, key, value));
  auto guard = llama_->Enter();
  counters_->writes.Add();
  DeltaView d;
  switch (kind) {
    case WriteKind::kInsert: d.type = DeltaType::kInsert; break;
    case WriteKind::kUpdate: d.type = DeltaType::kUpdate; break;
    case WriteKind::kUpsert: d.type = DeltaType::kUpsert; break;
    case WriteKind::kDelete:
    case WriteKind::kBlindDelete: d.type = DeltaType::kDelete; break;
  }
  d.key = key;
  if (d.type != DeltaType::kDelete) d.value = value;
  d.lsn = lsn;
  // Only the existence- and LSN-checking writes need the key's state; a
  // blind write needs its page (and posts no search hint).
  const bool blind = !if_newer && (kind == WriteKind::kUpsert || kind == WriteKind::kBlindDelete);
  int held = 0;  // posts this write held back (HoldOf)
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    Located loc;
    // A blind write needs only its page: the settled path finds it when it
    // can (a checking write needs the key's state, from the general path).
    if (!blind || !LocateSettled(key, &loc, /*need_record=*/false)) {
      if (blind) counters_->write_fallbacks.Add();
      RETURN_IF_ERROR(Locate(key, &loc, /*need_record=*/!blind));
    }
    const bool exists = loc.r.outcome == LookupOutcome::kFound;
    if (kind == WriteKind::kInsert && exists) return Status::AlreadyExists("key exists");
    if ((kind == WriteKind::kUpdate || kind == WriteKind::kDelete) && !exists) {
      return Status::NotFound("key not found");
    }
    // loc.r is the state of the chain at loc.head (or of a frozen, removed
    // sibling): the CAS below succeeds only over that very state.
    // DEUTERON_BREAK=idempotence skips this check (contract 2 broken on purpose).
    if (if_newer && loc.r.outcome != LookupOutcome::kNotFound && loc.r.lsn >= lsn &&
        !fault::BrokenOnPurpose(fault::Break::kIdempotence)) {
      return Status::OK();  // already reflected: *applied stays false
    }
    d.hint = loc.r.hint;
    PageNode* node = MakeDelta(llama_, d, lsn);
    // A page that racing writers kept from its consolidation or split, or
    // that this post would take past its byte bound, is restructured before
    // it takes more (bwtree.md, "Held posts"). One still held after
    // kMaxHeldPosts restructures cannot be brought under its bound (deltas
    // above the flush bound over too few keys to split): the write goes on,
    // counted.
    if (const Hold hold = HoldOf(loc.head, node->size); hold != Hold::kNone) {
      if (held < kMaxHeldPosts) {
        ++held;
        llama_->DiscardNode(node);
        counters_->held_posts.Add();
        RETURN_IF_ERROR(RestructureHeld(loc.pid, loc.head, hold));
        continue;
      }
      counters_->bound_overruns.Add();
    }
    node->user_flags = PlainFlagsOver(loc.head);
    if (llama_->UpdateD(loc.pid, loc.head, node)) {
      if (applied != nullptr) *applied = true;
      if (ChainLength(node) > options_.leaf_delta_threshold) {
        // The write is applied, so it succeeds whatever befalls this help:
        // an error here is left to the next writer, whose hold restructures
        // the page again before it posts.
        Status s = MaybeRestructure(loc.pid, 0);
        if (!s.ok()) {
          s.PermitUncheckedError();
          counters_->deferred_restructures.Add();
        }
      }
      return Status::OK();
    }
    llama_->DiscardNode(node);
    counters_->update_retries.Add();
  }
  return Status::Busy("bw-tree: write did not settle");
}

}  // namespace deuteron::bwtree
