// BwTree: a latch-free B-link tree on the LLAMA cache (Bw-tree paper, with
// OpenBw-Tree's consolidation and search shortcuts). Every node is a LLAMA
// page; every change is an Update-D (a delta) or an Update-R (a consolidated
// chain) through the mapping table. Design notes: dc/bwtree/bwtree.md;
// node bytes: dc/bwtree/node_format.md.
//
// Keys and values are byte strings, keys ordered bytewise. Every record
// carries an LSN given by the caller; it is stored, returned, and kept through
// consolidation, splits, merges, flushes and recovery.
//
// Structure changes:
//  - Split (B-link half split): a system transaction allocates the new right
//    sibling with the upper half and commits with a split delta on the old
//    node; the index entry is then posted on the parent by a plain delta.
//    A root split also allocates a new root and commits by swapping the root
//    PID on the meta page.
//  - Merge of an underfull node R (a leaf or an inner node) into its left
//    neighbour L: a remove-node delta on R, a merge delta on L,
//    index-term-delete deltas on the parents; L's consolidation folds R's
//    state in and frees R in one system transaction.
//  - Root collapse: a root left with one child is frozen by a remove-node
//    and replaced by that child (the meta page's upsert, and the old root's
//    free, in one system transaction): the tree's height shrinks.
//  - A thread that meets an unfinished step (a split without its index
//    entry, a removed node without its merge) completes it before going on;
//    no thread waits for another.
//
// The WAL rule (DESIGN.md contract 2): consolidation folds into a base only
// records with LSN <= flush_bound() (the DC's ESL); younger records stay as
// deltas above the new base, and system transactions flush under that bound.
//
// Thread safety: every method is thread-safe except Check (REQUIRES: no
// concurrent writers). An Iterator is used by one thread at a time. The
// Llama must outlive the tree and every iterator.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/slice.h"
#include "common/status.h"
#include "dc/bwtree/node_format.h"
#include "dc/bwtree/page_ops.h"
#include "dc/llama/llama.h"

namespace deuteron::bwtree {

struct BwTreeOptions {
  Limits limits;
  // Consolidate a node when its chain holds more than this many deltas.
  size_t leaf_delta_threshold = 4;
  // Inner chains are walked by every descent, and gain a delta only per
  // split or merge below them: 0 consolidates at once (bwtree_bench: ~10-20%
  // more lookups and inserts at 2 threads than 1).
  size_t inner_delta_threshold = 0;
  // A read (Get, GetLsn, ReadHeld) consolidates the leaf it read when the
  // leaf's chain holds at least this many record deltas that consolidation
  // may fold (LSN <= flush_bound()); 0: reads never consolidate. Each delta
  // costs every later read of the leaf a dependent cache miss, so a leaf
  // read more than written is cheaper consolidated; counting only foldable
  // deltas keeps reads from repeating consolidations that the ESL makes
  // useless. Writes consolidate each leaf at most once per this many. A
  // read also folds a leaf's split delta, whatever this threshold (not 0):
  // a leaf that stopped taking writes keeps it otherwise.
  size_t leaf_read_delta_threshold = 2;
  // Split a node when its consolidated state holds more records (entries)
  // than this, or its base is larger than the byte limit.
  size_t leaf_max_records = 128;
  size_t inner_max_entries = 128;
  // 0: the default, 64 KiB, lowered to what the store and the limits allow
  // or raised to one record at the limits (see BwTree::Open). Open resolves
  // it; options() reports the value in use.
  size_t node_max_bytes = 0;
  // Merge a leaf into its left neighbour when its consolidated state holds
  // at most this many records; 0: never merge.
  size_t leaf_merge_records = 16;
  // Merge an inner node into its left neighbour when its consolidated state
  // holds at most this many entries; 0: never merge. kAutoInnerMerge (the
  // default): (inner_max_entries - 1) / 4, and below the 1/8 of the entries
  // that an appending split leaves on the right ((inner_max_entries + 1) / 8
  // - 1, at least 1): 15 at the default 128. Resolved at Open (options()
  // reports the value in use). An explicit value must be below half of
  // inner_max_entries.
  static constexpr size_t kAutoInnerMerge = ~size_t{0};
  size_t inner_merge_entries = kAutoInnerMerge;
  // The ESL: records above it are never folded into bases nor flushed by
  // structure changes. Unset: no bound.
  std::function<uint64_t()> flush_bound;
  // The RSSP: consolidation purges tombstones with LSN below it. Unset: 0
  // (tombstones are kept).
  std::function<uint64_t()> purge_bound;
};

// A record read from the tree.
struct Record {
  std::string value;
  uint64_t lsn = 0;
};

// What a write requires of the key's current state.
enum class WriteKind {
  kInsert,       // AlreadyExists when the key is present
  kUpdate,       // NotFound when the key is absent
  kUpsert,       // blind: no existence check
  kDelete,       // NotFound when the key is absent; posts a tombstone
  kBlindDelete,  // posts a tombstone whatever the state
};

// Range scan bounds and direction.
struct ScanOptions {
  std::optional<std::string> lower;  // none: from the first key
  bool lower_inclusive = true;
  std::optional<std::string> upper;  // none: to the last key
  bool upper_inclusive = false;
  bool reverse = false;              // descending order
};

class BwTree;
class DeadPages;  // internal/bwtree_impl.h

// A cursor over a key range. It holds a private copy of the current leaf's
// records in range, so a concurrent change never invalidates it; moving past
// the copy re-finds the next leaf by key from the root. Keys deleted or
// inserted concurrently may or may not be seen; each key is returned at most
// once, in order. Deleted keys and empty leaves are crossed in a loop.
class Iterator {
 public:
  // The scan's status is the caller's to read (status()), not to consume.
  ~Iterator() { status_.PermitUncheckedError(); }
  bool Valid() const { return pos_ < items_.size(); }
  Slice key() const { return items_[pos_].key; }
  Slice value() const { return items_[pos_].value; }
  uint64_t lsn() const { return items_[pos_].lsn; }
  // Advances in the scan's direction. Not Valid() at the end or on error.
  void Next();
  // OK, or the error that ended the scan early.
  const Status& status() const { return status_; }

 private:
  friend class BwTree;
  struct Item {
    std::string key;
    std::string value;
    uint64_t lsn = 0;
  };
  Iterator(BwTree* tree, ScanOptions options);
  // Loads the leaf holding the next keys after (or before) `from`.
  void Load(bool first);
  bool InRange(Slice key) const;

  BwTree* tree_;
  ScanOptions options_;
  std::vector<Item> items_;
  size_t pos_ = 0;
  // The copied leaf's range: the next leaf starts at high_ (forward) or ends
  // at low_ (reverse).
  std::string low_, high_;
  bool high_infinite_ = true;
  bool done_ = false;
  Status status_;
};

class BwTree {
 public:
  // Opens the tree kept in `llama`, creating an empty one (meta page and a
  // root leaf, in one system transaction) when the store holds no pages.
  // Corruption when page 1 is not a Bw-tree meta page; InvalidArgument for
  // options the tree cannot keep (ValidateOptions), or a node size the
  // store's LSS records cannot hold: node_max_bytes above NodeBytesLimit or
  // below one record at the limits, or node_max_bytes plus NodeBytesRoom
  // (the limits' records) above 1.5 times NodeBytesLimit.
  static Result<std::unique_ptr<BwTree>> Open(llama::Llama* llama, BwTreeOptions options = {});
  // InvalidArgument naming the first option out of bounds: a node must be
  // able to split (at least 2 records or entries, 1 KiB unless 0 for the
  // default), keys must have a size, and a split's halves must be above the
  // merge threshold (else each split would invite a merge and the tree would
  // not settle).
  static Status ValidateOptions(const BwTreeOptions& options);
  // The largest node_max_bytes for LSS records of `max_record_bytes`
  // (Llama::MaxRecordBytes). A split's system transaction writes, in one
  // record, the page it splits whole (up to node_max_bytes plus what arrived
  // since its last size check) and the new sibling (up to nearly all of
  // that): the limit keeps a node at a third of the record, less the
  // records' headers, and Open holds a node plus what may reach it before
  // its size check (NodeBytesRoom) to 1.5 times the limit.
  static size_t NodeBytesLimit(size_t max_record_bytes);
  // How far past node_max_bytes a page may grow before it is sized: a leaf
  // is sized after each consolidation, so it may take leaf_delta_threshold
  // + 1 records of the largest size (key and value at their limits, with
  // their encoding and LSS framing) first; an inner node likewise
  // inner_delta_threshold + 1 index-entry deltas (two keys each). Open holds
  // node_max_bytes + this to 1.5 times NodeBytesLimit: a split writes the
  // page whole and its sibling, which a split by count may give nearly all
  // of the page's bytes, in one record. Saturates at SIZE_MAX.
  static size_t NodeBytesRoom(const BwTreeOptions& options);

  // Reads the key: NotFound when absent or deleted.
  Result<Record> Get(Slice key);
  // The LSN the tree holds for the key, tombstones included; 0 when none.
  Result<uint64_t> GetLsn(Slice key);

  // Writes a record delta tagged `lsn`. TooLarge for keys/values over the
  // limits; AlreadyExists / NotFound as WriteKind says.
  Status Write(WriteKind kind, Slice key, Slice value, uint64_t lsn);
  Status Insert(Slice key, Slice value, uint64_t lsn) {
    return Write(WriteKind::kInsert, key, value, lsn);
  }
  Status Update(Slice key, Slice value, uint64_t lsn) {
    return Write(WriteKind::kUpdate, key, value, lsn);
  }
  Status Upsert(Slice key, Slice value, uint64_t lsn) {
    return Write(WriteKind::kUpsert, key, value, lsn);
  }
  Status Delete(Slice key, uint64_t lsn) { return Write(WriteKind::kDelete, key, Slice(), lsn); }

  // The DC's idempotent write (DESIGN.md contract 2): posts an upsert (with
  // `tombstone`, a delete) tagged `lsn` only if `lsn` is above the LSN the
  // tree holds for the key, a tombstone's included. The check is made on the
  // very chain state the delta's CAS is made on, so it is atomic with the
  // write. True when applied, false when skipped. TooLarge as for Write.
  Result<bool> WriteIfNewer(bool tombstone, Slice key, Slice value, uint64_t lsn);

  // The key's state in one lookup: the record when present (*found = true);
  // otherwise *found = false and the LSN is the tombstone's, or 0 when the
  // tree holds none for the key.
  Result<Record> ReadHeld(Slice key, bool* found);

  // A scan. TooLarge for bounds over the key limit (as for writes).
  Result<std::unique_ptr<Iterator>> Scan(const ScanOptions& options = {});

  // Flushes every page that is in memory with unflushed nodes under
  // `max_tag` and makes the LSS stable up to its tail (so also the records
  // other threads wrote for pages it found clean): when it
  // returns OK, every record at or below max_tag that the tree held when it
  // was called is stable. A page whose unflushed base was consolidated
  // above max_tag (flush_bound() moved on meanwhile) is flushed under
  // flush_bound() read again, never skipped. Each flush is annotated with
  // the bound it used (as structure changes are with flush_bound()), so
  // Llama::MaxAnnotation() bounds the LSNs in the LSS. Internal when a
  // base lies above flush_bound() itself (a bound that went back). Busy when a page
  // kept changing under its flush (16 tries): nothing is lost, call again.
  // Not atomic: a crash before it returns leaves each key in some state it
  // had between the last completed FlushAll's bound and max_tag (bwtree.md,
  // "Crash consistency"), which redo from the log brings up to date.
  Status FlushAll(uint64_t max_tag);

  // Walks the whole tree and verifies: every node decodes; keys ascend
  // within [low, high) in every node; each level is a chain of right-sibling
  // links whose ranges meet exactly and end at +infinity; every inner entry
  // routes to a node of the level below whose low key is at or below the
  // entry's start (a correct B-link entry point);
  // and every key in every leaf is found again by a search from the root.
  // Missing index entries (a split whose post was lost in a crash) are
  // allowed: B-link right moves reach those nodes. Every allocated page must
  // be reached by this walk (else it leaked).
  // REQUIRES: no concurrent writers.
  Status Check();

  // Counters in the spirit of the Bw-tree paper's Table I.
  struct Stats {
    uint64_t reads = 0, writes = 0;
    // Point reads and blind writes the settled path left to the general one.
    uint64_t read_fallbacks = 0, write_fallbacks = 0;
    uint64_t update_retries = 0;          // failed record-delta CASes
    uint64_t consolidations = 0, failed_consolidations = 0;
    uint64_t splits = 0, failed_splits = 0, root_splits = 0;
    uint64_t merges = 0, failed_merges = 0;
    uint64_t index_posts = 0, failed_index_posts = 0;  // entries / term deletes
    uint64_t helped_smos = 0;             // unfinished SMOs completed by others
    uint64_t restarts = 0;                // descents started over from the root
    // Leaf chain lengths seen by point operations (sampled 1 in 16).
    uint64_t chains_seen = 0, chain_length_sum = 0, chain_length_max = 0;
    uint64_t pages_freed = 0;
    // Held posts (bwtree.md): posts held back to restructure a page first
    // (its consolidation or split lost to racing writers, or its byte bound
    // reached); posts made past the bound (a page that could not be brought
    // under it); and restructures after a write's post that failed with an
    // error, left to the next writer (the write itself succeeded).
    uint64_t held_posts = 0, bound_overruns = 0, deferred_restructures = 0;
    uint32_t height = 0;                  // levels, the leaves included
    // Of `merges`, those of inner nodes; roots replaced by their one child.
    uint64_t inner_merges = 0, root_collapses = 0;
  };
  Stats GetStats() const;

  llama::Llama* llama() { return llama_; }
  const BwTreeOptions& options() const { return options_; }
  PageId root() const { return root_.load(std::memory_order_acquire); }

  // Test hook: a merge calls it with (removed, left) once the remove-node,
  // the merge delta and the index-term deletes are posted and before the
  // left page's consolidation folds the removed page in, so a test can act
  // in that window (a concurrent write and flush of the left page).
  // nullptr turns it off. REQUIRES: no other thread uses the tree while the
  // hook is set or cleared.
  void TEST_SetMergeHook(std::function<void(PageId removed, PageId left)> hook) {
    merge_hook_for_test_ = std::move(hook);
  }
  // Test hook: false makes merges free pages without first flushing the
  // parents whose routes they changed (the defect of issue 37), so tests can
  // build the stale routes a store written before the fix may hold, and
  // check that descents survive and repair them. Set while no other thread
  // uses the tree.
  void TEST_SetFlushParentsBeforeFree(bool on) { flush_parents_before_free_ = on; }
  // The steps of an inner merge (of `removed` into its left neighbour) and
  // of a root collapse, in order: each is in place when the hook is called.
  enum class MergeStep {
    kRemoveNode,     // removed's remove-node committed (a system transaction)
    kMergeDelta,     // the merge delta posted on the left neighbour
    kRoutesMoved,    // the index-term deletes posted in the parents
    kParentsFlushed, // those parents flushed; next: the left page's new base
                     // and removed's free, in one system transaction
    kRootRemoveNode, // a root with one child frozen; next: the meta page
                     // names the child, and the old root is freed
  };
  // Test hook: called after each step of an inner merge or root collapse,
  // by whichever thread takes it (the one that started it or a helper).
  // Returning false abandons the change there, as a crash right after that
  // step would (help-along completes it later). nullptr turns it off.
  // REQUIRES: no other thread uses the tree while it is set or cleared.
  void TEST_SetMergeStepHook(std::function<bool(MergeStep step, PageId removed)> hook) {
    merge_step_hook_for_test_ = std::move(hook);
  }

  ~BwTree();

 private:
  friend class Iterator;
  struct Path;
  struct Leaf;
  struct Located;
  struct Route;
  enum class LeftOutcome;
  // Why a leaf write holds its post (bwtree.md, "Held posts"): kNone, it
  // posts; kConsolidate, leaf_chain_hold_ deltas arrived since the last
  // consolidation; kSplit, the base is over the split limits and no split
  // delta is on it; kBytes, the post would take the page past
  // page_bytes_bound_.
  enum class Hold { kNone, kConsolidate, kSplit, kBytes };
  BwTree(llama::Llama* llama, BwTreeOptions options);
  Status Bootstrap();

  // Write, and WriteIfNewer (if_newer: skip unless lsn is above the key's).
  Status WriteImpl(WriteKind kind, bool if_newer, Slice key, Slice value, uint64_t lsn,
                   bool* applied);
  uint64_t FlushBound() const;
  uint64_t PurgeBound() const;
  PageReader Reader();

  // Descends to the first node at `target_level` on the way to `key` (with
  // `before`: to the largest key below it), completing unfinished SMOs met
  // on the way. The caller follows right moves at that level. With
  // `search_target` (the caller will search the target page's records), that
  // page's slot table is prefetched with its head, as inner pages' always are.
  Status Descend(Slice key, bool before, uint32_t target_level, Path* path,
                 bool search_target = false);
  // The leaf holding `key`, after right moves and merged-sibling reads.
  // Without `need_record` only the page is found (for a blind write): the
  // answer's outcome is kNotFound and its hint kNoHint, whatever the key's
  // state.
  Status Locate(Slice key, Located* out, bool need_record = true);
  // A point read's Locate: checks the key, counts the read, and consolidates
  // the leaf when MaybeConsolidateOnRead says so. REQUIRES: the caller's
  // epoch guard, for as long as it uses *out.
  Status LocateForRead(Slice key, Located* out);
  // Locate's lean path for a settled tree: every page on the way wholly in
  // memory, inner pages bare bases, the key inside each page's range, and
  // the leaf's chain answering with the key's state (no redirect). False
  // when it met anything else; then the general path runs, which handles
  // every state. need_record as for Locate.
  bool LocateSettled(Slice key, Located* out, bool need_record = true);
  // Snapshot of the leaf holding `key` (or the largest key below it).
  Status ReadLeaf(Slice key, bool before, Leaf* leaf);

  // Structure changes. Each returns OK when it gave up because the page
  // changed under it (counted as a failure); errors are real errors.
  Status MaybeRestructure(PageId pid, uint32_t level);
  // A leaf whose post was held (its chain `head`, the reason `hold`): split,
  // or consolidated and sized, or only sized when `head` is a lone base.
  Status RestructureHeld(PageId pid, const llama::PageNode* head, Hold hold);
  // A leaf just consolidated: split it if it outgrew its limits, or, with
  // allow_merge, merge it into its left neighbour if it is small enough.
  Status SizeLeaf(PageId pid, bool allow_merge);
  // A page's state to size after its consolidation; null when the page is
  // gone, empty, or carries a structure delta (another thread's change).
  Result<const llama::PageNode*> ReadToSize(PageId pid);
  Status ConsolidateLeaf(PageId pid, const llama::PageNode* head, bool* installed);
  // *installed: the new base, once Update-R put it in place (else null);
  // *entries: how many entries it holds.
  Status ConsolidateInner(PageId pid, const llama::PageNode* head,
                          const llama::PageNode** installed, size_t* entries);
  // A chain walked once: its base (null past a partial swap), its deltas,
  // and its data bytes with merged siblings counted (Admits).
  struct ChainTally {
    const llama::PageNode* base = nullptr;
    size_t deltas = 0;
    size_t bytes = 0;
  };
  ChainTally Tally(const llama::PageNode* head) const;
  // Whether a page whose chain is `head` may take a delta of `bytes` payload
  // bytes: its data bytes stay within page_bytes_bound_.
  bool Admits(const llama::PageNode* head, size_t bytes) const;
  Hold HoldOf(const llama::PageNode* head, size_t bytes) const;
  // Installs a consolidated `chain` over `head` by Update-R, counting the
  // outcome; a lost race discards the chain. True when installed. With a
  // `fold_bound` (the flush bound the chain was consolidated under, which
  // kept exactly the deltas above it), by Llama::UpdateRFlush: the deltas
  // the new base folded go to the LSS as a C-delta, so the base itself is
  // not written whole (llama.md, "Incremental flushing"). Only for leaf
  // chains that involve no other page (no merge or remove-node delta): read
  // back, the page is its old chain; inner pages: bwtree.md.
  // A small page (under its merge threshold) merges: into its left
  // neighbour, or, the leftmost of its level, by taking its right sibling in.
  Status MergeSmall(const BaseHeader& header, PageId pid, uint32_t level);
  bool InstallConsolidated(PageId pid, const llama::PageNode* head, llama::PageNode* chain,
                           std::optional<uint64_t> fold_bound = std::nullopt);
  // Installs `chain` as pid's state over `head` and frees the `merged`
  // siblings folded into it, in one system transaction (no recovery sees the
  // new state without the frees, or the frees without it). False when another
  // thread changed the page or freed a sibling first (the chain is then
  // discarded); an error when the commit failed.
  Result<bool> InstallOverMerged(PageId pid, const llama::PageNode* head, llama::PageNode* chain,
                                 const std::vector<PageId>& merged);
  Status SplitNode(PageId pid, uint32_t level);
  // Posts [separator, ...) -> right in the parent level for the range that
  // routes `separator` to `left`; with `span`, also every following range
  // still routed to `left`, up to `until` (none: no end).
  Status PostIndexEntry(uint32_t parent_level, Slice separator, PageId left, PageId right,
                        bool span = false, const std::optional<std::string>& until = {});
  // After a route to `target` for the range at `key` was posted: moves it
  // if `target` no longer holds the key (see the .cpp).
  Status SettleRoute(uint32_t level, const std::string& key, PageId target, PageId fallback);
  // A parent's route at `route_low` led to `bad` (freed, removed, or not
  // holding the key): hands the range to the page just below it.
  Status RepairRoute(uint32_t parent_level, Slice route_low, PageId bad);
  // A parent's route at `route_low` led to `from`, which does not hold
  // `route_low`: a descent moved right from it to `to`, whose low key is at
  // or below `route_low`. Re-points the range at `to`, so a route left
  // stale (far left of its range, a valid but long B-link entry) heals on
  // first use.
  Status HealRoute(uint32_t parent_level, Slice route_low, PageId from, PageId to);
  // Whether the page reads with a state (false: free, empty, or private to
  // a system transaction); its load's error otherwise.
  Result<bool> HasState(PageId pid);
  // The route for `key` at `level` (after right moves); false when the
  // descent met a stale state, or a merge or root collapse under way that
  // it helped along (the caller tries again). NotFound when the tree has no
  // such level (a root collapse took it away). With `dead`, the caller's
  // retry loop's dead pages: a right move to one met too often is
  // Corruption (internal/bwtree_impl.h, DeadPages).
  Result<bool> FindRoute(uint32_t level, Slice key, Route* out, DeadPages* dead = nullptr);
  // Posts an index-entry or index-term-delete delta [low, route's next) ->
  // child over the route's state (a page at `level`); the installed node, or
  // null if it raced or the page was at its byte bound (then restructured
  // first). Errors are the restructure's.
  Result<const llama::PageNode*> PostRoute(const Route& route, uint32_t level, DeltaType type,
                                           Slice low, PageId child);
  // Hands the range routing `key` at `level` from child `from` to `to`.
  Status Reroute(uint32_t level, Slice key, PageId from, PageId to);
  Status GrowRoot(PageId old_root, uint32_t old_level, Slice separator, PageId right,
                  bool* retry);
  // Starts the merge of `pid` (at `level`, just consolidated and small)
  // into its left neighbour, and completes it: CompleteMerge, then the left
  // page's consolidation, then the parents' sizing (which may merge them in
  // turn, or collapse the root).
  Status StartMerge(PageId pid, uint32_t level);
  // An inner page just consolidated (or with `head` its state to size):
  // split when over its limits, collapse when it is the root with one
  // child, or, with allow_merge, merge when small. `head` null: read it.
  Status SizeInner(PageId pid, uint32_t level, bool allow_merge);
  // Root collapse: freezes the root `root` (state `head`, one child) with a
  // remove-node, then CompleteCollapse.
  Status CollapseRoot(PageId root, const llama::PageNode* head);
  // A removed root: the meta page names its one child and the old root is
  // freed, in one system transaction. Help-along for any thread meeting it.
  Status CompleteCollapse(PageId old_root);
  // Reads the root's PID from the meta page into root_.
  Status RefreshRoot();
  // The merge step hook's answer (true without a hook).
  bool StepHook(MergeStep step, PageId removed);
  // Freezes `pid` (whose chain is `head`) with a remove-node, committed as a
  // system transaction; false when the page changed or cannot be flushed yet.
  Result<bool> PostRemoveNode(PageId pid, const llama::PageNode* head);
  // Posts the merge delta for `removed` (a leaf or an inner page) on its
  // left neighbour (found by a descent) and hands the neighbour every
  // parent range routed to it. The neighbour's PID in *left when one took
  // the merge (0 if the merge was already done, or a test hook stopped it).
  // Folding `removed` in, and freeing it, is the neighbour's next
  // consolidation. A removed leftmost page is a root being collapsed:
  // CompleteCollapse. `parents`, when given, receives every page of the
  // level above whose routes over the removed page's range were checked
  // (the pages a free must wait for).
  Status CompleteMerge(PageId removed, PageId* left = nullptr,
                       std::vector<PageId>* parents = nullptr);
  // Consolidates an inner page whose chain holds merge deltas: completes
  // each merge (a remove-node posted first where a crash lost it), flushes
  // the parents, then installs the new base and frees the merged siblings
  // in one system transaction. *installed and *entries as ConsolidateInner.
  Status ConsolidateInnerMerges(PageId pid, const llama::PageNode* head,
                                const llama::PageNode** installed, size_t* entries);
  // Flushes `parents` (inner pages: always flushable) before a merge's
  // freeing transaction is reserved, so no recovered prefix of the LSS holds
  // the free without the index-term deletes (bwtree.md, "Freeing R").
  Status FlushParents(const std::vector<PageId>& parents);
  Result<LeftOutcome> FindLeftNeighbour(PageId removed, Slice low, uint32_t level, PageId* left,
                                        const llama::PageNode** left_head, bool* merged_in);

  void NoteChain(const llama::PageNode* head);
  // After a read of the leaf `pid` at state `head`: restructures it
  // (MaybeRestructure) when options_.leaf_read_delta_threshold says so.
  Status MaybeConsolidateOnRead(PageId pid, const llama::PageNode* head);

  llama::Llama* const llama_;
  const BwTreeOptions options_;
  std::atomic<PageId> root_{0};

  // Relaxed counters: statistics only.
  struct Counters;
  std::unique_ptr<Counters> counters_;
  // node_max_bytes + NodeBytesRoom: the data bytes no post may take a page
  // past (Admits), so that a split's record always holds the page.
  const size_t page_bytes_bound_;
  // The most data bytes one node above a base holds (a record or an index
  // entry at the limits).
  const size_t node_bytes_max_;
  // The most data bytes a leaf may hold to be merged into its left
  // neighbour: a quarter of node_max_bytes, and at most NodeBytesRoom, so
  // that a left page at node_max_bytes takes it within page_bytes_bound_.
  const size_t merge_bytes_max_;
  // Deltas posted to a leaf since its last consolidation at which writers
  // consolidate it before posting: 2 * leaf_delta_threshold + 2, past where
  // one writer's own consolidation would have run (threshold + 1), so that
  // only consolidations lost to racing writers bring it about.
  const size_t leaf_chain_hold_;
  std::function<void(PageId, PageId)> merge_hook_for_test_;  // TEST_SetMergeHook
  bool flush_parents_before_free_ = true;  // TEST_SetFlushParentsBeforeFree
  std::function<bool(MergeStep, PageId)> merge_step_hook_for_test_;  // TEST_SetMergeStepHook
};

}  // namespace deuteron::bwtree
