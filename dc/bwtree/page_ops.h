// Operations on one Bw-tree page's chain: lookups through a delta chain with
// search shortcuts (OpenBw-Tree 4.4), and consolidation by merging sorted runs
// (OpenBw-Tree 4.3) under the DC's ESL rule. No tree here: callers (the
// Bw-tree) read the chain from LLAMA, act on redirects, and install results
// with Update-D / Update-R. Formats: dc/bwtree/node_format.h and .md.
//
// Chains are walked newest first; only data nodes (kBase, kDelta) are looked
// at, LLAMA's flush/relocation/partial-swap nodes are skipped. Results hold
// Slices into the chain's payloads.
//
// Thread safety: pure functions over immutable chains. REQUIRES for every
// function taking a chain: the caller holds a LLAMA epoch guard for as long as
// it uses the chain and any Slice in the result.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/slice.h"
#include "common/status.h"
#include "dc/bwtree/node_format.h"
#include "dc/llama/llama.h"
#include "dc/llama/page_node.h"

namespace deuteron::bwtree {

// Size limits on keys and values; larger ones are rejected with TooLarge.
struct Limits {
  size_t max_key_size = 4096;
  size_t max_value_size = 64 << 10;
};

Status CheckKey(const Limits& limits, Slice key);
Status CheckRecord(const Limits& limits, Slice key, Slice value);

enum class LookupOutcome {
  kFound,     // value and lsn set
  kNotFound,  // no record for the key on this page
  kDeleted,   // a tombstone; lsn is the delete's LSN
  kRedirect,  // the key is not on this page: follow `redirect` (see RedirectKind)
  kRemoved,   // the page carries a remove-node delta: retry from the parent
};

enum class RedirectKind {
  kNone,
  kSplit,    // a split delta moved the key to the new right sibling
  kSibling,  // the key is at or above the base's high key: B-link right sibling
  kMerge,    // a merge delta: the key is in the merged sibling's state
};

struct LookupResult {
  LookupOutcome outcome = LookupOutcome::kNotFound;
  Slice value;             // kFound: points into the chain
  uint64_t lsn = 0;        // kFound / kDeleted
  RedirectKind redirect_kind = RedirectKind::kNone;
  PageId redirect = 0;     // kRedirect: the page to continue on
  // kRedirect: the key from which the other page holds keys (a split's or
  // merge's separator, or the base's high key).
  Slice redirect_key;
  // Lower bound of the key in the page's base (kNoHint if the page has no
  // base): the hint to store in a new record delta for this key.
  uint32_t hint = kNoHint;
};

// ---- Plain chains ----
//
// A leaf chain of record deltas (and LLAMA flush-state nodes) over its base
// routes every key by the base's range alone. The Bw-tree marks a record
// delta kPlainChain (PageNode::user_flags) when it prepends it to a chain
// that is plain and whose base_hint names that base; kept deltas of a
// consolidation are marked too. The other bits of a marked node's
// user_flags count the record deltas from it down to the base (itself
// included, saturating at kPlainMaxCount). Then a blind write and a descent read the
// base through the head's base_hint without walking the deltas (each one a
// dependent cache miss). Unmarked nodes (structure deltas, copies, loads)
// make the chain "not known plain": it is walked as before.
inline constexpr uint16_t kPlainChain = 1;
inline constexpr uint16_t kPlainMaxCount = 0x7fff;

// The user_flags of a marked record delta with `deltas` record deltas from
// it down to the base.
inline uint16_t PlainFlags(size_t deltas) {
  return static_cast<uint16_t>(kPlainChain | (std::min<size_t>(deltas, kPlainMaxCount) << 1));
}

// The base of `head`'s chain when the chain is known plain, else null.
// Flush and relocation nodes on top are passed over; the first data node
// decides.
inline const llama::PageNode* PlainBase(const llama::PageNode* head) {
  for (const llama::PageNode* n = head; n != nullptr; n = n->next) {
    if (n->kind == llama::NodeKind::kBase) return n;
    if (n->kind == llama::NodeKind::kDelta) {
      return (n->user_flags & kPlainChain) != 0 ? n->base_hint : nullptr;
    }
    if (n->kind == llama::NodeKind::kPartialSwap) return nullptr;
  }
  return nullptr;
}

// When `head`'s chain is known plain: true, and *deltas = its record
// deltas (flush-state nodes not counted).
inline bool PlainDeltas(const llama::PageNode* head, size_t* deltas) {
  for (const llama::PageNode* n = head; n != nullptr; n = n->next) {
    if (n->kind == llama::NodeKind::kBase) {
      *deltas = 0;
      return true;
    }
    if (n->kind == llama::NodeKind::kDelta) {
      if ((n->user_flags & kPlainChain) == 0 || n->base_hint == nullptr) return false;
      *deltas = n->user_flags >> 1;
      return true;
    }
    if (n->kind == llama::NodeKind::kPartialSwap) return false;
  }
  return false;
}

// A consolidation's base carries in its user_flags the number of deltas it
// kept above itself (above the flush bound), saturating: a writer then tells
// the deltas posted since the consolidation (the chain's deltas less these)
// from those that no consolidation can fold yet. Bases of copies and loads
// have 0, which counts every delta above them as new.
inline uint16_t KeptFlags(size_t kept) {
  return static_cast<uint16_t>(std::min<size_t>(kept, 0xffff));
}

// Of a chain's `deltas` over `base` (null: not known), those posted since
// its consolidation: less the ones the base's KeptFlags say it kept.
inline size_t FreshDeltas(size_t deltas, const llama::PageNode* base) {
  return deltas - (base != nullptr ? std::min<size_t>(deltas, base->user_flags) : 0);
}

// The user_flags for a record delta about to be prepended to `expected`.
inline uint16_t PlainFlagsOver(const llama::PageNode* expected) {
  const llama::PageNode* base = PlainBase(expected);
  size_t below = 0;
  if (base == nullptr || base != llama::BaseHintBelow(expected) || !PlainDeltas(expected, &below)) {
    return 0;
  }
  return PlainFlags(below + 1);
}

// Looks `key` up in a leaf page's chain. The newest record delta for the key
// decides; structure deltas passed on the way may redirect; otherwise the
// base is binary-searched in the range narrowed by the hints of the deltas
// passed (search shortcuts). TooLarge for a key over the limit; Corruption for
// malformed payloads; InvalidArgument if the base is not a leaf.
// With `through_remove`, a remove-node delta on top of the chain is passed
// over: the page's own state is read (as a merge into the left sibling does).
// `base`, when given, is the chain's base already parsed by the caller (the
// view of the kBase node that ends head's chain): it is not parsed again.
// The same holds for RouteOf and FindChild.
Result<LookupResult> Lookup(const llama::PageNode* head, Slice key, const Limits& limits = {},
                            bool through_remove = false, const BaseView* base = nullptr);

// The LSN the page holds for `key` (a tombstone's included), 0 if none: for
// idempotent redo (apply an operation only if its LSN is larger). If the key
// is not on this page (a redirect), returns 0 and sets *redirect if given;
// *redirect is set to 0 otherwise.
Result<uint64_t> LatestLsn(const llama::PageNode* head, Slice key, PageId* redirect = nullptr);

// A record delta for `key` to prepend on `head` (its tag is `lsn`), with the
// base position hint computed by a Lookup on the chain. TooLarge over limits.
// The caller builds the node with Llama::NewNode(kDelta, size, lsn).
Result<std::string> MakeRecordDelta(const llama::PageNode* head, DeltaType type, Slice key,
                                    Slice value, uint64_t lsn, const Limits& limits = {});

// Where a chain (leaf or inner) sends `key` by its structure alone: record
// and index deltas are passed over. kRedirect for split, merge and B-link
// moves, kRemoved for a remove-node delta (passed over when on top with
// `through_remove`), kNotFound when the page's own range holds the key.
Result<LookupResult> RouteOf(const llama::PageNode* head, Slice key, bool through_remove = false,
                             const BaseView* base = nullptr);

// Routing in an inner node's chain: the child whose range holds `key`.
struct ChildLookup {
  LookupOutcome outcome = LookupOutcome::kNotFound;  // kFound: child is set
  PageId child = 0;
  // kFound: the range [low, next) of the node routed to `child` that holds
  // the key (next_infinite: no upper end).
  Slice low;
  Slice next;
  bool next_infinite = false;
  RedirectKind redirect_kind = RedirectKind::kNone;
  PageId redirect = 0;  // kRedirect
  Slice redirect_key;   // kRedirect: as in LookupResult
};

// Index-entry and index-term-delete deltas whose range [separator, next) holds
// the key decide (newest first); split/merge deltas redirect as in Lookup;
// otherwise the base's entry with the largest separator <= key. kNotFound if
// the key is below every separator. InvalidArgument if the base is a leaf.
// With `before`, routes the largest key below `key` instead (for reverse
// scans and for finding a node's left neighbour): ranges are taken as
// (low, next] and redirects apply when key > separator. Without want_next,
// an answer from the base leaves `next` unset (empty, not infinite): a
// descent needs child and low only, and skips reading the next entry.
// With `through_remove`, a remove-node delta on top of the chain is passed
// over (a removed inner page's own routing, read through its left
// neighbour's merge delta), as in Lookup.
Result<ChildLookup> FindChild(const llama::PageNode* head, Slice key, bool before = false,
                              const BaseView* base = nullptr, bool want_next = true,
                              bool through_remove = false);
// FindChild's answer from an inner base alone, into *out (which starts as a
// default ChildLookup): what FindChild does at the end of the chain, and all
// it does on a consolidated inner page (no deltas: the descent's common case).
Status RouteInBase(const BaseView& base, Slice key, bool before, bool want_next,
                   ChildLookup* out);

// The new state of a page for Update-R.
struct ConsolidatedPage {
  struct Delta {
    std::string payload;
    uint64_t tag = 0;  // the record's LSN
  };
  std::string base;       // a leaf base payload
  uint64_t base_tag = 0;  // largest LSN folded into the base (or the old base's tag)
  std::vector<Delta> deltas;  // kept deltas, newest first, to sit above the base
  // Statistics.
  size_t folded = 0;   // record deltas merged into the base
  size_t purged = 0;   // tombstones dropped (LSN below the purge bound)
  size_t dropped = 0;  // deltas made dead (shadowed, or moved away by a split)
};

// Reads another page's state (a merged sibling's): the Bw-tree passes
// Llama::Read. Same guard rule as the chains.
using PageReader = std::function<Result<const llama::PageNode*>(PageId)>;

// Everything a leaf page holds, gathered from its chain and from the states
// of the siblings merged into it: what consolidation, splits and iterators
// work from. Slices point into the chains.
//  - Newest first, a split delta at separator s hides everything older with
//    key >= s (moved to the sibling); a merge delta at m brings in the merged
//    sibling's state below its remove-node delta (keys >= m, subject to the
//    newer splits) and hides everything older with key >= m.
//  - The newest split or merge delta decides the effective high key and
//    right sibling; without one, the base does.
struct LeafImage {
  struct Delta {
    DeltaView d;
    uint64_t tag = 0;
  };
  BaseHeader header;            // the effective range and right sibling
  std::vector<LeafRecord> base; // base records in range, ascending
  std::vector<Delta> deltas;    // record deltas in range, newest first
  uint64_t base_tag = 0;        // largest tag of the bases involved
  std::vector<PageId> merged;   // siblings whose states were merged in
  size_t dropped = 0;           // deltas and records hidden by splits/merges
  bool removed = false;         // the chain starts with a remove-node delta
};

// Gathers a leaf page. A remove-node delta on top is passed over (and noted
// in `removed`); anywhere else it is Corruption. `read` may be empty when the
// chain has no merge delta (NotSupported otherwise).
Status GatherLeaf(const llama::PageNode* head, const PageReader& read, LeafImage* out);

// The visible records of an image: the newest version of each key, ascending,
// tombstones left out.
Result<std::vector<LeafRecord>> VisibleRecords(const LeafImage& image);

// An inner page's routing, consolidated: the base's entries with the index
// deltas applied oldest first (each sets the child of the range starting at
// its separator), the newest split applied, the entries of each merged
// sibling (its own routing, gathered below its remove-node) brought in at
// its merge delta's place in that order, and consecutive entries routing to
// the same child folded into the first. The newest split or merge decides
// the high key and right sibling, as for leaves.
struct InnerImage {
  BaseHeader header;
  std::vector<InnerEntry> entries;
  std::vector<PageId> merged;  // siblings whose routing was merged in
  bool removed = false;        // the chain starts with a remove-node delta
};
// A remove-node delta on top is passed over (noted in `removed`); anywhere
// else it is Corruption. Merge deltas read the merged sibling through
// `read`: NotSupported when `read` is empty; Corruption when the sibling
// has no state or is not an inner page of the same level.
Status GatherInner(const llama::PageNode* head, InnerImage* out);
Status GatherInner(const llama::PageNode* head, const PageReader& read, InnerImage* out);

// An inner page's chain consolidated straight into a new base node for
// Llama::UpdateR (tag 0): the entries GatherInner gathers, encoded as
// EncodeInnerBase does; *entries gets their count. The usual chain after a
// split, one index delta over an inner base whose entries stay as they are
// around it, is built by copying the base's entries as bytes (BaseBuilder)
// beside the one new or changed entry: byte for byte what gathering builds,
// for a base without neighbours routing to one child (every base the tree
// writes). Any other chain (several deltas, a split, a change that folds
// neighbours together) is gathered. The node is the caller's until UpdateR
// succeeds (Llama::DiscardNode otherwise). *copied (when given) says which
// way it went: true for the byte copy.
// A chain with merge deltas is gathered with `read` (GatherInner); the
// caller frees the merged siblings with the new base (a system transaction).
Result<llama::PageNode*> ConsolidateInnerChain(llama::Llama* llama, const llama::PageNode* head,
                                               size_t* entries, bool* copied = nullptr,
                                               const PageReader& read = {});

// Consolidates a gathered leaf (OpenBw-Tree 4.3 fast consolidation): as
// Consolidate(head, ...) below, for any image.
Result<ConsolidatedPage> Consolidate(const LeafImage& image, uint64_t lsn_bound,
                                     uint64_t purge_bound = 0);

// Consolidates a leaf page's chain (OpenBw-Tree 4.3 fast consolidation).
//  - Record deltas with LSN <= lsn_bound are merged into a new base: the newest
//    delta per key wins; the deltas are sorted by key (there are few) and merged
//    with the base's sorted records in one linear pass. Older deltas of a key
//    whose newest foldable delta was folded are dropped (they are invisible).
//  - Record deltas with LSN > lsn_bound (not yet allowed to be flushed: the ESL
//    rule) are kept above the new base, newest first, with their position
//    hints recomputed against the new base.
//  - A split delta is applied: records and kept deltas with key >= separator
//    are dropped, high key = separator, right sibling = the split's sibling.
//  - Tombstones (from the base or folded deletes) with LSN < purge_bound (the
//    RSSP) are dropped; others are kept.
// NotSupported for chains with remove-node or merge deltas or an inner base
// (gather those with GatherLeaf and a reader);
// Corruption for malformed payloads. A chain without a base consolidates as if
// over an empty leaf covering everything.
// The kept-deltas-over-base state looks up exactly like the old chain, except
// that purged tombstones read as kNotFound.
// A chain of record and split deltas over a leaf base (the common case) is
// consolidated without decoding the base: the runs of base records no
// folded delta replaces are copied as bytes (BaseBuilder); the result is
// byte for byte what gathering the chain and Consolidate(image) build.
Result<ConsolidatedPage> Consolidate(const llama::PageNode* head, uint64_t lsn_bound,
                                     uint64_t purge_bound = 0);

// The part of a leaf page's state at and above `low`, consolidated as
// Consolidate(head, ...) does, with `low` as the new base's low key: the state
// of a split's new right sibling. Base records are copied as bytes.
// NotSupported unless the chain holds only record and split deltas over a
// leaf base. REQUIRES: `low` lies in the page's range.
Result<ConsolidatedPage> ConsolidateFrom(const llama::PageNode* head, Slice low,
                                         uint64_t lsn_bound, uint64_t purge_bound = 0);

// Consolidate(head, ...) straight into a chain for Llama::UpdateR (as
// BuildChain makes), the base written in its node without a payload copy.
// *stats gets the consolidation's figures and kept deltas (its base is left
// empty on the plain-chain path). The nodes are the caller's as for BuildChain.
Result<llama::PageNode*> ConsolidateChain(llama::Llama* llama, const llama::PageNode* head,
                                          uint64_t lsn_bound, uint64_t purge_bound,
                                          ConsolidatedPage* stats);

// Builds the chain for Llama::UpdateR from a consolidated page: a kBase node
// tagged base_tag under the kept deltas, each tagged with its LSN. The nodes
// are the caller's until UpdateR succeeds (Llama::DiscardChain otherwise).
llama::PageNode* BuildChain(llama::Llama* llama, const ConsolidatedPage& page);

}  // namespace deuteron::bwtree
