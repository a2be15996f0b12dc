// Internals shared by the files that implement BwTree (bwtree*.cpp, one
// concept each): the helpers over chains and nodes, the retry bounds, and
// the private structs BwTree declares. Not part of the tree's interface;
// include only from dc/bwtree/bwtree*.cpp. The helpers were file-local
// to bwtree.cpp before it was split along its concepts.
//
// Thread safety: pure functions over immutable chains (the caller holds a
// LLAMA epoch guard), and plain structs.
#pragma once

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/coding.h"
#include "common/metrics.h"
#include "common/prefetch.h"
#include "dc/bwtree/bwtree.h"
#include "dc/llama/lss_format.h"

namespace deuteron::bwtree {

using llama::Llama;
using llama::NodeKind;
using llama::PageNode;

// Page 1 is the meta page: a leaf-format page whose record "root" holds the
// root's PID (fixed64). Root growth and collapse change it by an upsert delta.
inline constexpr PageId kMetaPid = 1;
inline constexpr char kRootKey[] = "root";

// Bounds on retry loops. A loop that runs out means the tree is changing
// faster than this thread can follow, or is corrupt: Busy, never a hang.
inline constexpr int kMaxAttempts = 1 << 14;
inline constexpr int kMaxHops = 1 << 12;
// A retry loop that meets the same dead page (a free or empty PID that is
// not private to a system transaction, or a page of the wrong level or
// range) again after repairing or restarting past it this many times ends
// in Corruption: in a sound tree the route or link that led there is
// repaired, or gone, by the next try (bwtree.md, "Damaged stores").
inline constexpr int kDeadPageRepeats = 4;
// Posts one write holds back (restructuring the page each time) before it
// posts anyway: racing restructures settle in a few rounds (one wins each).
inline constexpr int kMaxHeldPosts = 64;

// node_max_bytes: the least allowed, and the default where the store and the
// limits allow it.
inline constexpr size_t kMinNodeBytes = 1024;
inline constexpr size_t kDefaultNodeBytes = 64 << 10;

// The dead pages one retry loop (a descent, a leaf search, a leaf read)
// met and restarted past. Met() is Corruption once one of them has been met
// kDeadPageRepeats times more: a damaged store (a page's address moved, a
// live page marked free by its checkpoint) otherwise sends the loop round
// the same repair or restart until kMaxAttempts, nested (a repair descends
// too) for minutes. Pages are few (a dead page is rare), so a short list.
class DeadPages {
 public:
  Status Met(PageId pid, const char* where) {
    for (auto& [p, n] : seen_) {
      if (p != pid) continue;
      if (++n < kDeadPageRepeats) return Status::OK();
      return Status::Corruption(fmt::format(
          "bw-tree: {} met page {} (free, empty, or of another level or range) {} times "
          "after repairing the route to it: the stored tree is damaged",
          where, pid, n + 1));
    }
    seen_.emplace_back(pid, 0);
    return Status::OK();
  }

 private:
  std::vector<std::pair<PageId, int>> seen_;
};

inline Slice PayloadOf(const PageNode* n) { return Slice(n->payload(), n->size); }

inline PageNode* MakeNode(Llama* l, NodeKind kind, Slice payload, uint64_t tag) {
  PageNode* n = l->NewNode(kind, payload.size(), tag);
  if (!payload.empty()) std::memcpy(n->payload(), payload.data(), payload.size());
  return n;
}

inline PageNode* MakeDelta(Llama* l, const DeltaView& d, uint64_t tag) {
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
// 24 lines measured alike, 8 worse (performance.md).
inline void PrefetchHead(const PageNode* head) {
  if (head != nullptr) PrefetchLines(head, 16);
}

// Where a page of `count` records or entries splits: its middle, or, when
// keys are being appended at the right edge (nothing will land below the
// ones already there), so that the left page keeps 7/8 of them.
inline size_t SplitIndex(size_t count, bool appending) {
  return appending && count >= 16 ? count - count / 8 : count / 2;
}

// The payload bytes of a chain's data nodes: its size against node_max_bytes.
inline size_t DataBytes(const PageNode* head) {
  size_t bytes = 0;
  for (const PageNode* n = head; n != nullptr; n = n->next) {
    if (n->is_data()) bytes += n->size;
  }
  return bytes;
}

// The chain's base, parsed into *out; *deltas counts the deltas above it.
inline Status BaseOf(const PageNode* head, size_t* deltas, BaseView* out) {
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

inline Result<BaseView> BaseOf(const PageNode* head, size_t* deltas = nullptr) {
  size_t count = 0;
  BaseView base;
  RETURN_IF_ERROR(BaseOf(head, deltas != nullptr ? deltas : &count, &base));
  return base;
}

// Deltas on the chain (its length, as the thresholds count it).
inline size_t DeltaCount(const PageNode* head) {
  size_t count = 0;
  for (const PageNode* n = head; n != nullptr && n->kind != NodeKind::kBase; n = n->next) {
    if (n->kind == NodeKind::kDelta) ++count;
  }
  return count;
}

// The chain's deltas, for the leaf threshold: a plain chain (page_ops.h)
// knows its count on its top data node, which needs no walk.
inline size_t ChainLength(const PageNode* head) {
  size_t deltas = 0;
  if (PlainDeltas(head, &deltas)) return deltas;
  return DeltaCount(head);
}

// Whether the chain holds a split, merge or remove-node delta.
inline bool HasStructureDelta(const PageNode* head) {
  for (const PageNode* n = head; n != nullptr && n->kind != NodeKind::kBase; n = n->next) {
    if (n->kind != NodeKind::kDelta || n->size == 0) continue;
    const auto t = static_cast<DeltaType>(n->payload()[0]);
    if (t == DeltaType::kSplit || t == DeltaType::kMerge || t == DeltaType::kRemoveNode) return true;
  }
  return false;
}

// Whether the chain holds a delta of the given type.
inline bool HasDeltaOf(const PageNode* head, DeltaType type) {
  for (const PageNode* n = head; n != nullptr && n->kind != NodeKind::kBase; n = n->next) {
    if (n->kind == NodeKind::kDelta && n->size > 0 && static_cast<DeltaType>(n->payload()[0]) == type) {
      return true;
    }
  }
  return false;
}

inline std::string EncodePid(PageId pid) {
  std::string s;
  PutFixed64(&s, pid);
  return s;
}

inline size_t SatAdd(size_t a, size_t b) {
  size_t r;
  return __builtin_add_overflow(a, b, &r) ? SIZE_MAX : r;
}

inline size_t SatMul(size_t a, size_t b) {
  size_t r;
  return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

// The most bytes one record at the limits takes in a page: a base entry (two
// length words, LSN, flags) with its slot, or a record delta with its LSS
// piece framing, whichever is larger. Saturates.
inline size_t LargestRecordBytes(const Limits& limits) {
  constexpr size_t kRecordOverhead = 48;
  return SatAdd(SatAdd(limits.max_key_size, limits.max_value_size), kRecordOverhead);
}

// The most bytes one index entry (two keys) at the limits takes: its fields
// and LSS piece framing. Saturates.
inline size_t IndexEntryBytes(const Limits& limits) {
  constexpr size_t kIndexOverhead = 48;
  return SatAdd(SatMul(limits.max_key_size, 2), kIndexOverhead);
}

// What NodeBytesRoom accounts for, for an error message.
inline std::string WhyRoom(const BwTreeOptions& o) {
  return fmt::format(
      "leaf_delta_threshold + 1 = {} records of {}-byte keys and {}-byte values, or "
      "inner_delta_threshold + 1 = {} index entries, arriving before the page is sized",
      o.leaf_delta_threshold + 1, o.limits.max_key_size, o.limits.max_value_size,
      o.inner_delta_threshold + 1);
}

// A key above every key the limits allow: where reverse scans start.
inline std::string KeyAboveAll(const Limits& limits) {
  return std::string(limits.max_key_size + 1, '\xff');
}

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
  Counter inner_merges, root_collapses;
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

// The leaf holding `key` and the key's state there. pid/head name the page a
// delta for the key goes on (a merged-into left neighbour, not the removed
// sibling whose state the answer may come from).
struct BwTree::Located {
  PageId pid = 0;
  const PageNode* head = nullptr;
  LookupResult r;
};

// Where the left neighbour search ended.
enum class BwTree::LeftOutcome { kFound, kRetry, kDone };

}  // namespace deuteron::bwtree
