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

#include <cstddef>
#include <cstdint>
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
  // Lower bound of the key in the page's base (kNoHint if the page has no
  // base): the hint to store in a new record delta for this key.
  uint32_t hint = kNoHint;
};

// Looks `key` up in a leaf page's chain. The newest record delta for the key
// decides; structure deltas passed on the way may redirect; otherwise the
// base is binary-searched in the range narrowed by the hints of the deltas
// passed (search shortcuts). TooLarge for a key over the limit; Corruption for
// malformed payloads; InvalidArgument if the base is not a leaf.
Result<LookupResult> Lookup(const llama::PageNode* head, Slice key, const Limits& limits = {});

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

// Routing in an inner node's chain: the child whose range holds `key`.
struct ChildLookup {
  LookupOutcome outcome = LookupOutcome::kNotFound;  // kFound: child is set
  PageId child = 0;
  RedirectKind redirect_kind = RedirectKind::kNone;
  PageId redirect = 0;  // kRedirect
};

// Index-entry and index-term-delete deltas whose range [separator, next) holds
// the key decide (newest first); split/merge deltas redirect as in Lookup;
// otherwise the base's entry with the largest separator <= key. kNotFound if
// the key is below every separator. InvalidArgument if the base is a leaf.
Result<ChildLookup> FindChild(const llama::PageNode* head, Slice key);

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
// NotSupported for chains with remove-node or merge deltas or an inner base;
// Corruption for malformed payloads. A chain without a base consolidates as if
// over an empty leaf covering everything.
// The kept-deltas-over-base state looks up exactly like the old chain, except
// that purged tombstones read as kNotFound.
Result<ConsolidatedPage> Consolidate(const llama::PageNode* head, uint64_t lsn_bound,
                                     uint64_t purge_bound = 0);

// Builds the chain for Llama::UpdateR from a consolidated page: a kBase node
// tagged base_tag under the kept deltas, each tagged with its LSN. The nodes
// are the caller's until UpdateR succeeds (Llama::DiscardChain otherwise).
llama::PageNode* BuildChain(llama::Llama* llama, const ConsolidatedPage& page);

}  // namespace deuteron::bwtree
