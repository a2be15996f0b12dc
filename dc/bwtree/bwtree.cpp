#include "dc/bwtree/bwtree.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <limits>
#include <unordered_set>

#include <fmt/format.h>

#include "common/coding.h"
#include "common/metrics.h"
#include "common/prefetch.h"
#include "dc/llama/lss_format.h"

namespace deuteron::bwtree {

using llama::Llama;
using llama::NodeKind;
using llama::PageNode;

namespace {

// Page 1 is the meta page: a leaf-format page whose record "root" holds the
// root's PID (fixed64). Root growth changes it by an upsert delta.
constexpr PageId kMetaPid = 1;
constexpr char kRootKey[] = "root";

// Bounds on retry loops. A loop that runs out means the tree is changing
// faster than this thread can follow, or is corrupt: Busy, never a hang.
constexpr int kMaxAttempts = 1 << 14;
constexpr int kMaxHops = 1 << 12;
// Posts one write holds back (restructuring the page each time) before it
// posts anyway: racing restructures settle in a few rounds (one wins each).
constexpr int kMaxHeldPosts = 64;

// node_max_bytes: the least allowed, and the default where the store and the
// limits allow it.
constexpr size_t kMinNodeBytes = 1024;
constexpr size_t kDefaultNodeBytes = 64 << 10;

Slice PayloadOf(const PageNode* n) { return Slice(n->payload(), n->size); }

PageNode* MakeNode(Llama* l, NodeKind kind, Slice payload, uint64_t tag) {
  PageNode* n = l->NewNode(kind, payload.size(), tag);
  if (!payload.empty()) std::memcpy(n->payload(), payload.data(), payload.size());
  return n;
}

PageNode* MakeDelta(Llama* l, const DeltaView& d, uint64_t tag) {
  PageNode* n = l->NewNode(NodeKind::kDelta, EncodedDeltaSize(d), tag);
  EncodeDelta(d, n->payload());
  return n;
}

// Asks for the first lines of the chain's base (its header, keys and first
// slots) before the walk down the deltas reaches it, so that those misses
// overlap the deltas' instead of following them. A hint only (page_node.h):
// a prefetch never faults, and the base is read through the chain.
inline void PrefetchBase(const PageNode* head) {
  if (head == nullptr || head->base_hint == nullptr || head->base_hint == head) return;
  PrefetchLines(head->base_hint, 4);
}

// Asks for a page's first lines as soon as the mapping table names its head,
// before anything in it is read: for a base, its header and the slots of its
// first ~78 entries (12 bytes each; a leaf averages about 90). For a page
// whose slot table is about to be searched, those misses then overlap the
// head's instead of following it (a base's header says where its slots are,
// so PrefetchBase and LowerBound, which asks for the rest, can only start
// after the head arrived). Wasted on a delta head, which lookups rarely meet
// (reads consolidate chains longer than leaf_read_delta_threshold). 16 and
// 24 lines measured alike, 8 worse (bwtree.md).
inline void PrefetchHead(const PageNode* head) {
  if (head != nullptr) PrefetchLines(head, 16);
}

// Where a page of `count` records or entries splits: its middle, or, when
// keys are being appended at the right edge (nothing will land below the
// ones already there), so that the left page keeps 7/8 of them.
size_t SplitIndex(size_t count, bool appending) {
  return appending && count >= 16 ? count - count / 8 : count / 2;
}

// The payload bytes of a chain's data nodes: its size against node_max_bytes.
size_t DataBytes(const PageNode* head) {
  size_t bytes = 0;
  for (const PageNode* n = head; n != nullptr; n = n->next) {
    if (n->is_data()) bytes += n->size;
  }
  return bytes;
}

// The chain's base, parsed into *out; *deltas counts the deltas above it.
Status BaseOf(const PageNode* head, size_t* deltas, BaseView* out) {
  size_t count = 0;
  for (const PageNode* n = head; n != nullptr; n = n->next) {
    if (n->kind == NodeKind::kBase) {
      *deltas = count;
      return out->Init(PayloadOf(n));
    }
    if (n->kind == NodeKind::kDelta) ++count;
  }
  return Status::Corruption("bw-tree: page without a base");
}

Result<BaseView> BaseOf(const PageNode* head, size_t* deltas = nullptr) {
  size_t count = 0;
  BaseView base;
  RETURN_IF_ERROR(BaseOf(head, deltas != nullptr ? deltas : &count, &base));
  return base;
}

// Deltas on the chain (its length, as the thresholds count it).
size_t DeltaCount(const PageNode* head) {
  size_t count = 0;
  for (const PageNode* n = head; n != nullptr && n->kind != NodeKind::kBase; n = n->next) {
    if (n->kind == NodeKind::kDelta) ++count;
  }
  return count;
}

// The chain's deltas, for the leaf threshold: a plain chain (page_ops.h)
// knows its count on its top data node, which needs no walk.
size_t ChainLength(const PageNode* head) {
  size_t deltas = 0;
  if (PlainDeltas(head, &deltas)) return deltas;
  return DeltaCount(head);
}

// Whether the chain holds a split, merge or remove-node delta.
bool HasStructureDelta(const PageNode* head) {
  for (const PageNode* n = head; n != nullptr && n->kind != NodeKind::kBase; n = n->next) {
    if (n->kind != NodeKind::kDelta || n->size == 0) continue;
    const auto t = static_cast<DeltaType>(n->payload()[0]);
    if (t == DeltaType::kSplit || t == DeltaType::kMerge || t == DeltaType::kRemoveNode) return true;
  }
  return false;
}

// Whether the chain holds a delta of the given type.
bool HasDeltaOf(const PageNode* head, DeltaType type) {
  for (const PageNode* n = head; n != nullptr && n->kind != NodeKind::kBase; n = n->next) {
    if (n->kind == NodeKind::kDelta && n->size > 0 && static_cast<DeltaType>(n->payload()[0]) == type) {
      return true;
    }
  }
  return false;
}

std::string EncodePid(PageId pid) {
  std::string s;
  PutFixed64(&s, pid);
  return s;
}

size_t SatAdd(size_t a, size_t b) {
  size_t r;
  return __builtin_add_overflow(a, b, &r) ? SIZE_MAX : r;
}

size_t SatMul(size_t a, size_t b) {
  size_t r;
  return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

// The most bytes one record at the limits takes in a page: a base entry (two
// length words, LSN, flags) with its slot, or a record delta with its LSS
// piece framing, whichever is larger. Saturates.
size_t LargestRecordBytes(const Limits& limits) {
  constexpr size_t kRecordOverhead = 48;
  return SatAdd(SatAdd(limits.max_key_size, limits.max_value_size), kRecordOverhead);
}

// The most bytes one index entry (two keys) at the limits takes: its fields
// and LSS piece framing. Saturates.
size_t IndexEntryBytes(const Limits& limits) {
  constexpr size_t kIndexOverhead = 48;
  return SatAdd(SatMul(limits.max_key_size, 2), kIndexOverhead);
}

// What NodeBytesRoom accounts for, for an error message.
std::string WhyRoom(const BwTreeOptions& o) {
  return fmt::format(
      "leaf_delta_threshold + 1 = {} records of {}-byte keys and {}-byte values, or "
      "inner_delta_threshold + 1 = {} index entries, arriving before the page is sized",
      o.leaf_delta_threshold + 1, o.limits.max_key_size, o.limits.max_value_size,
      o.inner_delta_threshold + 1);
}

// A key above every key the limits allow: where reverse scans start.
std::string KeyAboveAll(const Limits& limits) {
  return std::string(limits.max_key_size + 1, '\xff');
}

}  // namespace

// ---- Counters -----------------------------------------------------------------

struct BwTree::Counters {
  Counter reads, writes, update_retries;
  Counter read_fallbacks, write_fallbacks;
  Counter consolidations, failed_consolidations;
  Counter splits, failed_splits, root_splits;
  Counter merges, failed_merges;
  Counter index_posts, failed_index_posts;
  Counter helped_smos, restarts;
  Counter chains_seen, chain_length_sum;
  Counter pages_freed;
  Counter held_posts, bound_overruns, deferred_restructures;
  std::atomic<uint64_t> chain_length_max{0};
};

struct BwTree::Path {
  PageId pid = 0;
  const PageNode* head = nullptr;
  BaseView base;  // head's chain's base, parsed
  // Whether a parent's entry routed to pid (not a B-link move); then its
  // level and the routed range's start (a slice into the parent's chain).
  bool routed = false;
  uint32_t parent_level = 0;
  Slice route_low;
};

// A parent's route for a key: the page at the parent level whose range holds
// the key, the state read, and the routed range.
struct BwTree::Route {
  PageId pid = 0;
  const PageNode* head = nullptr;
  ChildLookup c;
};

struct BwTree::Leaf {
  std::vector<Iterator::Item> items;
  std::string low, high;
  bool high_infinite = true;
};

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

// ---- Descent ----------------------------------------------------------------------

Status BwTree::Descend(Slice key, bool before, uint32_t target_level, Path* path,
                       bool search_target) {
  constexpr uint32_t kAnyLevel = std::numeric_limits<uint32_t>::max();
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    if (attempt > 0) counters_->restarts.Add();
    PageId pid = root_.load(std::memory_order_acquire);
    Path at;  // the route that led to pid, if a parent's entry did
    uint32_t expect = kAnyLevel;
    bool tried_consolidate = false;
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
        if (at.routed) RETURN_IF_ERROR(RepairRoute(at.parent_level, at.route_low, pid));
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
      if (!tried_consolidate && deltas > options_.inner_delta_threshold) {
        tried_consolidate = true;
        RETURN_IF_ERROR(MaybeRestructure(pid, level));
        continue;
      }
      ChildLookup c;
      if (base_only) {
        RETURN_IF_ERROR(RouteInBase(base, key, before, /*want_next=*/false, &c));
      } else {
        ASSIGN_OR_RETURN(c, FindChild(head, key, before, &base, /*want_next=*/false));
      }
      tried_consolidate = false;
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
      if (c.outcome != LookupOutcome::kRedirect) break;  // stale route: start over
      if (c.redirect_kind != RedirectKind::kMerge) {
        // A split (or a B-link move) whose index entry is missing: help post it.
        RETURN_IF_ERROR(PostIndexEntry(level + 1, c.redirect_key, pid, c.redirect));
        if (at.routed) heal = {true, at.parent_level, at.route_low, pid, 0};
        // The next page's low key is at or below the route's: the routed
        // page never held the route's range (right moves within the range
        // are splits, whose posts above handle them).
        if (heal.active && c.redirect_key <= heal.route_low) heal.to = c.redirect;
      } else {
        heal = {};  // a merged sibling is never a route's target
      }
      at.routed = false;
      expect = level;
      pid = c.redirect;
    }
  }
  return Status::Busy("bw-tree: descent did not settle");
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

// The leaf holding `key` and the key's state there. pid/head name the page a
// delta for the key goes on (a merged-into left neighbour, not the removed
// sibling whose state the answer may come from).
struct BwTree::Located {
  PageId pid = 0;
  const PageNode* head = nullptr;
  LookupResult r;
};

Status BwTree::Locate(Slice key, Located* out, bool need_record) {
  // A blind write needs the page only: its structure deltas and high key, no
  // search of its records.
  auto look = [&](const PageNode* head, bool through_remove,
                  const BaseView* base = nullptr) -> Result<LookupResult> {
    if (need_record) return Lookup(head, key, options_.limits, through_remove, base);
    return RouteOf(head, key, through_remove, base);
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
    if (if_newer && loc.r.outcome != LookupOutcome::kNotFound && loc.r.lsn >= lsn) {
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

// ---- Consolidation ------------------------------------------------------------------

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
  ASSIGN_OR_RETURN(const PageNode* head, ReadToSize(pid));
  if (head == nullptr) return Status::OK();
  if (head != base) {
    // Another thread changed the page since: count what it holds now.
    InnerImage image;
    RETURN_IF_ERROR(GatherInner(head, &image));
    entries = image.entries.size();
  }
  if (entries > options_.inner_max_entries || DataBytes(head) > options_.node_max_bytes) {
    return SplitNode(pid, level);
  }
  return Status::OK();
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
  if (allow_merge && options_.leaf_merge_records > 0 && records <= options_.leaf_merge_records &&
      !base.header().low_key.empty()) {
    return StartMerge(pid);
  }
  return Status::OK();
}

PageReader BwTree::Reader() {
  return [this](PageId pid) -> Result<const PageNode*> { return llama_->Read(pid); };
}

Status BwTree::ConsolidateLeaf(PageId pid, const PageNode* head, bool* installed) {
  *installed = false;
  if (!HasDeltaOf(head, DeltaType::kMerge) && !HasDeltaOf(head, DeltaType::kRemoveNode)) {
    // The common case: no other page's state is involved, and the base's
    // unchanged records are copied as bytes (page_ops.h).
    ConsolidatedPage page;
    ASSIGN_OR_RETURN(PageNode* chain,
                     ConsolidateChain(llama_, head, FlushBound(), PurgeBound(), &page));
    *installed = InstallConsolidated(pid, head, chain);
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
  // The merged siblings' records now live in this page's new base. One
  // system transaction installs it and frees the siblings: its record holds
  // the new base and the frees, so no recovery sees either without the
  // other (a free without the base would lose records; the base without the
  // free would leak the siblings' PIDs).
  std::unique_ptr<Llama::SystemTxn> txn = llama_->TBegin();
  auto give_up = [&](Status s) {
    llama_->TAbort(txn.get());
    llama_->DiscardChain(chain);
    counters_->failed_consolidations.Add();
    return s;
  };
  for (PageId r : image.merged) {
    // A sibling freed meanwhile was folded in by another consolidation of
    // this page, so `head` is stale and the commit could not succeed anyway.
    if (!llama_->TFree(txn.get(), r).ok()) return give_up(Status::OK());
  }
  const uint64_t bound = FlushBound();  // the annotation: never below the bound
  Result<bool> committed = llama_->TCommitReplace(txn.get(), pid, head, chain, bound, bound);
  if (!committed.ok() || !*committed) return give_up(committed.status());
  counters_->consolidations.Add();
  counters_->pages_freed.Add(image.merged.size());
  *installed = true;
  return Status::OK();
}

Status BwTree::ConsolidateInner(PageId pid, const PageNode* head, const PageNode** installed,
                                size_t* entries) {
  *installed = nullptr;
  ASSIGN_OR_RETURN(PageNode* base, ConsolidateInnerChain(llama_, head, entries));
  if (InstallConsolidated(pid, head, base)) *installed = base;
  return Status::OK();
}

bool BwTree::InstallConsolidated(PageId pid, const PageNode* head, PageNode* chain) {
  if (!llama_->UpdateR(pid, head, chain)) {
    llama_->DiscardChain(chain);
    counters_->failed_consolidations.Add();
    return false;
  }
  counters_->consolidations.Add();
  return true;
}

// ---- Splits ----------------------------------------------------------------------------

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
  for (int i = 0; i < kMaxHops; ++i) {
    Result<const PageNode*> r = llama_->Read(target);
    if (!r.ok() || *r == nullptr) {
      if (r.ok() || !r.status().IsNotFound()) return r.status();
      if (fallback == 0) return Status::OK();
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

Result<bool> BwTree::FindRoute(uint32_t level, Slice key, Route* out) {
  Path path;
  RETURN_IF_ERROR(Descend(key, false, level, &path));
  PageId pid = path.pid;
  const PageNode* head = path.head;
  for (int hop = 0; hop < kMaxHops; ++hop) {
    ASSIGN_OR_RETURN(ChildLookup c, FindChild(head, key));
    if (c.outcome == LookupOutcome::kFound) {
      *out = Route{pid, head, c};
      return true;
    }
    if (c.outcome != LookupOutcome::kRedirect) return false;
    Result<const PageNode*> next = llama_->Read(c.redirect);
    if (!next.ok() || *next == nullptr) return false;
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
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    Route route;
    ASSIGN_OR_RETURN(bool found, FindRoute(level, key, &route));
    if (!found) continue;
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
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    const PageId root = root_.load(std::memory_order_acquire);
    Result<const PageNode*> root_head = llama_->Read(root);
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
    ASSIGN_OR_RETURN(bool found, FindRoute(parent_level, key, &route));
    if (!found) continue;
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

// ---- Merges ----------------------------------------------------------------------------

Status BwTree::StartMerge(PageId pid) {
  Result<const PageNode*> read = llama_->Read(pid);
  if (!read.ok()) return read.status().IsNotFound() ? Status::OK() : read.status();
  const PageNode* head = *read;
  if (head == nullptr || HasStructureDelta(head)) return Status::OK();
  // A page small in records may be large in bytes: it merges only when its
  // left neighbour can take it within the page byte bound (CompleteMerge).
  if (DataBytes(head) > merge_bytes_max_) return Status::OK();
  // Leaves merge only under an inner level (the index-term deletes need one).
  Result<const PageNode*> root = llama_->Read(root_.load(std::memory_order_acquire));
  if (!root.ok() || *root == nullptr) return root.ok() ? Status::OK() : root.status();
  ASSIGN_OR_RETURN(BaseView root_base, BaseOf(*root));
  if (root_base.header().level == 0) return Status::OK();
  ASSIGN_OR_RETURN(bool posted, PostRemoveNode(pid, head));
  if (!posted) {
    counters_->failed_merges.Add();
    return Status::OK();
  }
  counters_->merges.Add();
  PageId left = 0;
  RETURN_IF_ERROR(CompleteMerge(pid, &left));
  if (left == 0) return Status::OK();
  if (merge_hook_for_test_) merge_hook_for_test_(pid, left);
  // The merge's last step: the left page's consolidation folds this page in
  // and frees it (one system transaction). Left to the left page's writes,
  // it might never come: a load that deletes keys in ascending order
  // writes no page left of the one it empties. The union may outgrow the
  // page's limits (a page small in records can be large in bytes): it is
  // split at once, as a write's consolidation would, or a further union
  // could outgrow what one LSS record holds. A further merge of the left
  // page is left to its next consolidation, so merges never recurse.
  Result<const PageNode*> left_head = llama_->Read(left);
  if (!left_head.ok()) return left_head.status().IsNotFound() ? Status::OK() : left_head.status();
  if (*left_head == nullptr) return Status::OK();
  bool installed = false;
  RETURN_IF_ERROR(ConsolidateLeaf(left, *left_head, &installed));
  return installed ? SizeLeaf(left, /*allow_merge=*/false) : Status::OK();
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
  Result<bool> committed = llama_->TCommit(txn.get(), pid, head, node, bound, bound);
  if (committed.ok() && *committed) return true;
  llama_->TAbort(txn.get());
  llama_->DiscardNode(node);
  // Lost the race, or the page's base is not yet flushable under the ESL:
  // the merge is tried again later.
  if (committed.ok() || committed.status().IsInvalidArgument()) return false;
  return committed.status();
}

// Where the left neighbour search ended.
enum class BwTree::LeftOutcome { kFound, kRetry, kDone };

Result<BwTree::LeftOutcome> BwTree::FindLeftNeighbour(PageId removed, Slice low, PageId* left,
                                                      const PageNode** left_head,
                                                      bool* merged_in) {
  *merged_in = false;
  Path path;
  RETURN_IF_ERROR(Descend(low, /*before=*/true, 0, &path));
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
        if (f.status().IsNotFound()) break;  // inner pages are never freed; defensive
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
    LeafImage image;
    Status s = GatherLeaf(*read, Reader(), &image);
    if (s.IsNotFound()) continue;
    RETURN_IF_ERROR(s);
    if (!image.removed) return Status::OK();
    const std::string low = image.header.low_key.ToString();
    const std::string high = image.header.high_key.ToString();
    const bool high_infinite = image.header.high_infinite;

    // 1. The merge delta on the left neighbour.
    PageId left = 0;
    const PageNode* left_head = nullptr;
    bool merged_in = false;
    ASSIGN_OR_RETURN(LeftOutcome found,
                     FindLeftNeighbour(removed, low, &left, &left_head, &merged_in));
    if (found == LeftOutcome::kDone) return Status::OK();
    if (found == LeftOutcome::kRetry) continue;
    if (!merged_in) {
      // The left page takes this one's state whole: within the page byte
      // bound, or after the left page is restructured (consolidated, and
      // split when over node_max_bytes, which a page too full to take a
      // removed page of at most merge_bytes_max_ is).
      if (!Admits(left_head, merge_bytes_max_)) {
        counters_->held_posts.Add();
        RETURN_IF_ERROR(RestructureHeld(left, left_head, Hold::kBytes));
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
    }
    if (left_out != nullptr) *left_out = left;

    // 2. No parent routes to the removed page any more: each range routed
    // to it is handed to the left neighbour.
    std::string key = low;
    for (int step = 0; step < kMaxAttempts; ++step) {
      Route route;
      ASSIGN_OR_RETURN(bool found, FindRoute(1, key, &route));
      if (!found) continue;
      const ChildLookup& c = route.c;
      if (parents != nullptr) parents->push_back(route.pid);
      if (c.child == removed) {
        // Find the range again either way: the next pass sees its new child.
        const std::string range_low = c.low.ToString();
        ASSIGN_OR_RETURN(const PageNode* posted,
                         PostRoute(route, 1, DeltaType::kIndexTermDelete, c.low, left));
        if (posted != nullptr) RETURN_IF_ERROR(SettleRoute(1, range_low, left, 0));
        continue;
      }
      // Past the removed page's range, a route to it can only continue the
      // routes within it (an entry spanning past a split whose post is
      // pending): stop at the first range routed elsewhere.
      if (c.next_infinite || (!high_infinite && Slice(key) >= Slice(high))) {
        return Status::OK();
      }
      key = c.next.ToString();
    }
    return Status::Busy("bw-tree: index-term delete did not settle");
  }
  return Status::Busy("bw-tree: merge did not settle");
}

// ---- Scans -----------------------------------------------------------------------------

Status BwTree::ReadLeaf(Slice key, bool before, Leaf* leaf) {
  auto guard = llama_->Enter();
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    Path path;
    RETURN_IF_ERROR(Descend(key, before, 0, &path));
    PageId pid = path.pid;
    const PageNode* head = path.head;
    for (int hop = 0; hop < kMaxHops; ++hop) {
      LeafImage image;
      Status s = GatherLeaf(head, Reader(), &image);
      if (s.IsNotFound()) break;
      RETURN_IF_ERROR(s);
      if (image.removed) {
        RETURN_IF_ERROR(CompleteMerge(pid));
        if (pid == path.pid && path.routed) {
          RETURN_IF_ERROR(RepairRoute(path.parent_level, path.route_low, pid));
        }
        break;
      }
      const BaseHeader& h = image.header;
      const bool beyond = !h.high_infinite && (before ? key > h.high_key : key >= h.high_key);
      if (beyond) {
        Result<const PageNode*> next = llama_->Read(h.right_sibling);
        if (!next.ok() || *next == nullptr) break;
        pid = h.right_sibling;
        head = *next;
        continue;
      }
      const bool below = before ? (key <= h.low_key && !h.low_key.empty()) : key < h.low_key;
      if (below) break;  // a stale route: start over
      ASSIGN_OR_RETURN(std::vector<LeafRecord> records, VisibleRecords(image));
      leaf->items.clear();
      leaf->items.reserve(records.size());
      for (const LeafRecord& r : records) {
        leaf->items.push_back(Iterator::Item{r.key.ToString(), r.value.ToString(), r.lsn});
      }
      leaf->low = h.low_key.ToString();
      leaf->high_infinite = h.high_infinite;
      leaf->high = h.high_infinite ? std::string() : h.high_key.ToString();
      return Status::OK();
    }
    counters_->restarts.Add();
  }
  return Status::Busy("bw-tree: leaf read did not settle");
}

Result<std::unique_ptr<Iterator>> BwTree::Scan(const ScanOptions& options) {
  if (options.lower) RETURN_IF_ERROR(CheckKey(options_.limits, *options.lower));
  if (options.upper) RETURN_IF_ERROR(CheckKey(options_.limits, *options.upper));
  std::unique_ptr<Iterator> it(new Iterator(this, options));
  it->Load(/*first=*/true);
  return it;
}

Iterator::Iterator(BwTree* tree, ScanOptions options) : tree_(tree), options_(std::move(options)) {}

bool Iterator::InRange(Slice key) const {
  if (options_.lower) {
    const int c = key.compare(*options_.lower);
    if (c < 0 || (c == 0 && !options_.lower_inclusive)) return false;
  }
  if (options_.upper) {
    const int c = key.compare(*options_.upper);
    if (c > 0 || (c == 0 && !options_.upper_inclusive)) return false;
  }
  return true;
}

void Iterator::Next() {
  if (!Valid()) return;
  ++pos_;
  if (pos_ >= items_.size()) Load(/*first=*/false);
}

void Iterator::Load(bool first) {
  items_.clear();
  pos_ = 0;
  // Leaves are crossed in a loop: a run of empty or out-of-range leaves costs
  // one descent each, never recursion.
  for (;;) {
    if (done_) return;
    std::string from;
    if (!options_.reverse) {
      if (first) {
        from = options_.lower.value_or(std::string());
      } else {
        if (high_infinite_) {
          done_ = true;
          return;
        }
        from = high_;
      }
      // Past the upper bound: nothing more.
      if (!first && options_.upper && Slice(from) > Slice(*options_.upper)) {
        done_ = true;
        return;
      }
    } else {
      if (first) {
        // Just above the upper bound: the leaf holding the largest key below
        // it (or at it, when inclusive) is found by a "before" descent.
        from = options_.upper ? *options_.upper : KeyAboveAll(tree_->options_.limits);
        if (options_.upper && options_.upper_inclusive) from.push_back('\0');
      } else {
        if (low_.empty()) {
          done_ = true;
          return;
        }
        from = low_;
      }
      if (!first && options_.lower && Slice(from) <= Slice(*options_.lower)) {
        done_ = true;
        return;
      }
    }
    const bool was_first = first;
    first = false;
    if (options_.reverse && from.empty()) {  // nothing lies below the empty key
      done_ = true;
      return;
    }
    BwTree::Leaf leaf;
    Status s = tree_->ReadLeaf(from, options_.reverse, &leaf);
    if (!s.ok()) {
      status_ = s;
      done_ = true;
      return;
    }
    low_ = std::move(leaf.low);
    high_ = std::move(leaf.high);
    high_infinite_ = leaf.high_infinite;
    for (Iterator::Item& item : leaf.items) {
      if (!InRange(item.key)) continue;
      // A leaf found after concurrent merges may also cover keys already
      // returned: keep only those past the previous leaf's boundary.
      if (!was_first && (options_.reverse ? Slice(item.key) >= Slice(from)
                                          : Slice(item.key) < Slice(from))) {
        continue;
      }
      items_.push_back(std::move(item));
    }
    if (options_.reverse) std::reverse(items_.begin(), items_.end());
    if (!items_.empty()) return;
  }
}

// ---- Flush and Check ---------------------------------------------------------------------

Status BwTree::FlushAll(uint64_t max_tag) {
  llama::MappingTable* table = llama_->mapping_table();
  const PageId high = table->high_water();
  llama::LssAddress last = 0;
  for (PageId pid = 1; pid <= high; ++pid) {
    if (!llama::MappingTable::IsMemory(table->Load(pid))) continue;
    auto guard = llama_->Enter();
    uint64_t bound = max_tag;
    for (int attempt = 1;; ++attempt) {
      Result<llama::FlushResult> f = llama_->Flush(pid, bound, bound);
      if (!f.ok()) {
        if (f.status().IsNotFound()) break;
        return f.status();
      }
      if (f->outcome == llama::FlushOutcome::kRaced) {
        // Skipping the page would leave records under max_tag unflushed.
        if (attempt >= 16) return Status::Busy("bw-tree: flush of a page kept racing");
        continue;
      }
      if (f->outcome == llama::FlushOutcome::kBlocked) {
        // The page's unflushed base was consolidated under a flush bound
        // above `bound` (the ESL moved on since the caller read it), and
        // may hold records at or below max_tag: skipping it would leave
        // them only in memory. Its tag is at most the flush bound read
        // when it was built, which is at most today's (bounds only grow),
        // so it flushes under today's.
        const uint64_t now = FlushBound();
        if (now <= bound) {
          return Status::Internal("bw-tree: page " + std::to_string(pid) +
                                  " has a base above the flush bound " + std::to_string(now));
        }
        bound = now;
        if (attempt >= 16) return Status::Busy("bw-tree: flush of a page kept racing");
        continue;
      }
      if (f->outcome == llama::FlushOutcome::kFlushed) last = std::max(last, f->end);
      break;
    }
  }
  if (last != 0) RETURN_IF_ERROR(llama_->MakeStable(last));
  return Status::OK();
}

Status BwTree::Check() {
  auto guard = llama_->Enter();
  auto fail = [](PageId pid, const std::string& what) {
    return Status::Corruption("bw-tree check: page " + std::to_string(pid) + ": " + what);
  };
  const PageId high_water = llama_->mapping_table()->high_water();
  ASSIGN_OR_RETURN(const PageNode* root_head, llama_->Read(root_.load(std::memory_order_acquire)));
  if (root_head == nullptr) return fail(root(), "root has no state");
  ASSIGN_OR_RETURN(BaseView root_base, BaseOf(root_head));
  PageId leftmost = root();
  std::vector<std::pair<std::string, Record>> leaf_records;
  // Every page the walk reaches: the meta page, each level's sibling chain,
  // and the leaves merged into a neighbour not yet consolidated.
  std::unordered_set<PageId> reached = {kMetaPid};
  for (int level = root_base.header().level; level >= 0; --level) {
    PageId pid = leftmost;
    std::string prev_high;  // the previous node's high key: this node's low
    bool first = true;
    uint64_t visited = 0;
    PageId next_leftmost = 0;
    for (;;) {
      if (++visited > high_water) return fail(pid, "sibling chain has a cycle");
      ASSIGN_OR_RETURN(const PageNode* head, llama_->Read(pid));
      if (head == nullptr) return fail(pid, "no state");
      reached.insert(pid);
      // Every base on the chain must decode and be internally ordered.
      for (const PageNode* n = head; n != nullptr; n = n->next) {
        if (n->kind != NodeKind::kBase) continue;
        ASSIGN_OR_RETURN(BaseView b, BaseView::Parse(PayloadOf(n)));
        Status v = b.Validate();
        if (!v.ok()) return fail(pid, v.ToString());
        if (b.header().level != level) return fail(pid, "at the wrong level");
      }
      BaseHeader h;
      if (level == 0) {
        LeafImage image;
        RETURN_IF_ERROR(GatherLeaf(head, Reader(), &image));
        h = image.header;
        reached.insert(image.merged.begin(), image.merged.end());
        ASSIGN_OR_RETURN(std::vector<LeafRecord> records, VisibleRecords(image));
        for (size_t i = 0; i < records.size(); ++i) {
          const Slice k = records[i].key;
          if (k < h.low_key || (!h.high_infinite && k >= h.high_key)) {
            return fail(pid, "key outside [low, high)");
          }
          if (i > 0 && !(records[i - 1].key < k)) return fail(pid, "keys out of order");
          leaf_records.emplace_back(k.ToString(), Record{records[i].value.ToString(), records[i].lsn});
        }
      } else {
        InnerImage image;
        RETURN_IF_ERROR(GatherInner(head, &image));
        h = image.header;
        if (image.entries.empty()) return fail(pid, "inner node without entries");
        if (image.entries.front().separator != h.low_key) return fail(pid, "first separator != low key");
        for (size_t i = 0; i < image.entries.size(); ++i) {
          const InnerEntry& e = image.entries[i];
          if (i > 0 && !(image.entries[i - 1].separator < e.separator)) {
            return fail(pid, "separators out of order");
          }
          if (!h.high_infinite && e.separator >= h.high_key) return fail(pid, "separator above high");
          // The child lives one level down and holds the entry's start.
          ASSIGN_OR_RETURN(const PageNode* child, llama_->Read(e.child));
          if (child == nullptr) return fail(e.child, "child without state");
          ASSIGN_OR_RETURN(BaseView cb, BaseOf(child));
          if (cb.header().level + 1 != level) return fail(e.child, "child at the wrong level");
          if (e.separator < cb.header().low_key) return fail(e.child, "routed keys below its low key");
        }
        if (first) next_leftmost = image.entries.front().child;
      }
      if (first) {
        if (!h.low_key.empty()) return fail(pid, "leftmost node has a low key");
      } else if (h.low_key != Slice(prev_high)) {
        return fail(pid, "low key does not meet the left sibling's high key");
      }
      first = false;
      if (h.high_infinite) break;
      if (h.right_sibling == 0) return fail(pid, "finite high key without a right sibling");
      prev_high = h.high_key.ToString();
      pid = h.right_sibling;
    }
    leftmost = next_leftmost;
  }
  // No page is allocated but out of the tree's reach (a leak: nothing could
  // ever free it).
  const llama::MappingTable* table = llama_->mapping_table();
  for (PageId pid = 1; pid < high_water; ++pid) {
    if (!llama::MappingTable::IsFree(table->Load(pid)) && reached.count(pid) == 0) {
      return fail(pid, "allocated but not reachable from the root (leaked)");
    }
  }
  // Every key is found again from the root, with the same value and LSN.
  for (const auto& [key, rec] : leaf_records) {
    Located loc;
    RETURN_IF_ERROR(Locate(key, &loc));
    if (loc.r.outcome != LookupOutcome::kFound || loc.r.value != Slice(rec.value) ||
        loc.r.lsn != rec.lsn) {
      return Status::Corruption("bw-tree check: key '" + key + "' not reachable from the root");
    }
  }
  return Status::OK();
}

}  // namespace deuteron::bwtree
