// Llama: the LLAMA cache layer over the log-structured store (LLAMA paper
// sections 2, 3, 5 and 6). It knows page states made of nodes, not keys or
// transactions: an access method (the Bw-tree) builds pages from Update-D and
// Update-R, flushes them with a tag bound (the DC's ESL), and groups structure
// changes into system transactions. Design notes: dc/llama/llama.md.
//
// Every call that returns or takes a PageNode pointer REQUIRES that the calling
// thread holds a guard from Enter() for as long as it uses the pointer. A
// failed CAS is reported to the caller (false), never retried here, except
// where noted. Nothing blocks except reads from storage, waits for flush
// buffers whose I/O is in flight, and MakeStable.
//
// Thread safety: all methods are thread-safe unless marked otherwise; a
// SystemTxn is used by one thread at a time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/dir_lock.h"
#include "common/env.h"
#include "common/epoch.h"
#include "common/status.h"
#include "dc/llama/lss.h"
#include "dc/llama/mapping_table.h"
#include "dc/llama/page_node.h"
#include "dc/llama/state_bytes.h"

namespace deuteron::llama {

struct LlamaOptions {
  LssOptions lss;
  MappingTable::Options mapping;
  EpochManager::Options epochs;
  // Bytes of page nodes, mapping table and garbage waiting for its epoch that
  // the cache aims to stay under; 0 means no budget.
  size_t memory_budget = 0;
  // Write a checkpoint when closing.
  bool checkpoint_on_close = true;
  // Hold the data-directory lock (common/dir_lock.h) while open, so that two
  // processes never open the same store. Off only for an owner that already
  // holds the lock on this directory.
  bool lock_directory = true;
  // When swapping out flushed parts is not enough to get under the budget,
  // the evictor flushes cold pages under this bound (the DC gives its ESL, so
  // eviction never breaks the WAL rule). Unset: flush with no bound.
  std::function<uint64_t()> eviction_flush_bound;
  // Eviction stops once memory is at or below this fraction of the budget.
  double eviction_target = 0.9;
  // How many sweeps of the clock hand a page marked by KeepWarm survives
  // without a touch (every other page survives one: its reference bit).
  // At most 127; 1 treats warm pages as any other.
  uint8_t warm_page_sweeps = 4;
  // The evictor starts a sixteenth below the budget and waits for the
  // writes of the pages it flushed only while the cache is over its budget
  // (llama.md, "Memory budget"); false: it starts at the budget and waits
  // for every batch (the behaviour before issue 34).
  bool evict_without_waiting = true;
  // Cleaning (LLAMA 4.3): when a flush moves the LSS tail into a new segment
  // and more than `cleaning_trigger_segments` segments are held that are not
  // cleaned yet, that thread (once it leaves its guard) cleans the oldest ones
  // until `cleaning_target_segments` remain. After a cleaning, the trigger
  // is also at least twice the segments it left held (about the live
  // state), so a store whose live state outgrows the trigger cleans once
  // its LSS has doubled rather than at every new segment. Cleaned segments
  // are released (after two checkpoints) in batches of
  // `cleaning_trigger_segments`, so the files held peak near twice the
  // trigger, or twice the live state. 0: never automatically (Clean() can
  // still be called).
  size_t cleaning_trigger_segments = 0;
  size_t cleaning_target_segments = 0;
  // Run that cleaning on a thread of the cache's own (started at Open,
  // stopped at Close) instead of on the flushing thread as it leaves its
  // guard: a foreground operation then never waits out a cleaning pass (its
  // relocations and two checkpoints, each a sync; llama.md, "Cleaning").
  // The DC turns it on.
  bool clean_in_background = false;
  // Incremental flushing (llama.md, "Incremental flushing"): the most
  // records a page's LSS chain (newest C-delta down to its kBase) may have,
  // so a page is read back with at most this many LSS reads. A flush that
  // would go past it writes the page whole; UpdateRFlush writes the deltas
  // its new base folded as a C-delta while the chain is shorter. 0: off
  // (UpdateRFlush is UpdateR, and a consolidated base is always written
  // whole by the next flush).
  size_t max_lss_chain = 32;
};

struct CleanResult {
  uint64_t segments_cleaned = 0;
  uint64_t segments_released = 0;
  uint64_t pages_relocated = 0;
  uint64_t bytes_relocated = 0;
};

// Outcome of a flush.
enum class FlushOutcome {
  kFlushed,    // records written to the LSS buffer, flush node installed
  kClean,      // nothing under the bound was unflushed
  kBlocked,    // no durable base to write deltas over: the page has no base,
               // or its base is unflushed with a tag above the bound (then
               // even with nothing else to write: the base may hold records
               // under the bound that are not in the LSS)
  kRaced,      // the page changed between reading and the CAS (space voided)
};

struct FlushResult {
  FlushOutcome outcome = FlushOutcome::kClean;
  LssAddress address = kNullAddress;  // of the record written (kFlushed)
  LssAddress end = kNullAddress;      // end of that record
  size_t bytes = 0;                   // record bytes written
};

class Llama {
 public:
  // A system transaction's entry in the active transaction table: what it
  // allocated and what it will free. Used by one thread; ended by TCommit
  // (returning true) or TAbort.
  class SystemTxn {
   public:
    explicit SystemTxn(uint64_t tid) : tid_(tid) {}
    uint64_t tid() const { return tid_; }

   private:
    friend class Llama;
    bool Owns(PageId pid) const;
    const uint64_t tid_;
    std::vector<PageId> allocated_;
    std::vector<PageId> freed_;
    bool finished_ = false;
  };

  // Opens (creating if absent) the store in `dir`, recovering the mapping
  // table from the newest valid checkpoint and the LSS after it.
  static Result<std::unique_ptr<Llama>> Open(Env* env, const std::string& dir,
                                             const LlamaOptions& options);
  // Close() if not closed yet (errors are logged).
  ~Llama();
  // Makes every completed flush stable and, if configured, checkpoints, then
  // releases the directory lock. REQUIRES: no other thread uses the cache any
  // more; only the destructor may follow.
  Status Close();
  // Close() without the checkpoint, whatever the options say: for an owner
  // that drops the cache to recover again from the LSS (the DC's restart-to).
  // Flushes nothing new; only completed flushes are made stable.
  Status CloseWithoutCheckpoint();

  // An epoch guard. Work the cache defers until no guard is held (eviction
  // when over budget, cleaning when the LSS holds too many segments) runs
  // when a thread releases its outermost guard, so that the garbage it makes
  // can be reclaimed as it goes. Without clean_in_background that cleaning
  // waits for every other thread's older guard before it releases segments:
  // release an outermost guard holding no lock that a thread inside a guard
  // may wait for.
  class Guard {
   public:
    Guard(Guard&& other) noexcept;
    Guard& operator=(Guard&&) = delete;
    Guard(const Guard&) = delete;
    ~Guard();

   private:
    friend class Llama;
    Guard(Llama* llama, EpochManager::Guard epoch);
    Llama* llama_;
    std::optional<EpochManager::Guard> epoch_;
  };
  [[nodiscard]] Guard Enter();

  // ---- Page data operations ----

  // The page's current state, newest node first, brought in from the LSS if
  // it is not in memory (or only partly). Null for an allocated page that has
  // no state yet; NotFound for a PID that is not allocated, or that is
  // private to an open system transaction (its owner updates it through
  // TUpdateD and never reads it here: a route that reaches it is stale).
  Result<const PageNode*> Read(PageId pid);
  // Whether the page is private to an open system transaction (Read's
  // NotFound then passes once the transaction commits or aborts), as opposed
  // to free or empty. For callers telling a passing NotFound from a dead
  // page; takes a lock, so for rare paths only.
  bool IsPrivate(PageId pid);
  // The page's head when its whole state is in memory (what Read returns
  // without any work); null otherwise: not allocated, empty, on the LSS or
  // partly swapped out, where the caller takes Read. For lean read paths.
  // REQUIRES: an epoch guard.
  const PageNode* ReadResident(PageId pid);

  // A data node with room for `payload_size` bytes, for Update-D (kDelta) or
  // Update-R (kBase). The caller fills payload() and, for chains built for
  // Update-R, links next. Owned by the caller until a successful update.
  PageNode* NewNode(NodeKind kind, size_t payload_size, uint64_t tag);
  // Frees a node that was never published (after a failed Update-D).
  void DiscardNode(PageNode* node);
  // Frees a whole chain that was never published (after a failed Update-R).
  void DiscardChain(PageNode* head);

  // Update-D: prepends `delta` to the state `expected` (null for an empty
  // page). False when the state has changed; `delta` stays the caller's.
  bool UpdateD(PageId pid, const PageNode* expected, PageNode* delta);
  // Update-R: replaces the state `expected` with the chain at `state` (a new
  // base, possibly under new deltas; none of its nodes may come from another
  // chain). The old chain is freed after its epoch.
  bool UpdateR(PageId pid, const PageNode* expected, PageNode* state);
  // Update-R that keeps the page's flushed state incremental (LLAMA 4.1's
  // C-deltas, for a consolidated page): when the replaced state's base is in
  // the LSS under a chain with room for one more C-delta (CDeltaFits: under
  // max_lss_chain records, C-deltas within the new base's size), the replaced chain's
  // unflushed data nodes with tag <= the bound (max_tag, or the chain's
  // higher flush bound) are written as they are, as one C-delta over its LSS
  // state, and a flush node with that bound goes on top of `state` in the
  // same CAS. The next flush then writes only what is newer, never the new
  // base; read back, the page is its old base under its pieces, which holds
  // what the new base holds. Otherwise, or when the record cannot be
  // reserved, exactly UpdateR.
  // REQUIRES (the caller's promise, which the Bw-tree's plain consolidation
  // keeps): `state`'s base holds what the replaced chain's data nodes with
  // tag <= the bound hold (folded, and less what is dead), and its deltas
  // are the replaced chain's with tag above it. A base or delta that breaks
  // the tag half of it is caught (plain UpdateR). Same CAS result as
  // UpdateR. `annotation` is the flush's (llama.h, Flush).
  bool UpdateRFlush(PageId pid, const PageNode* expected, PageNode* state, uint64_t max_tag,
                    uint64_t annotation);

  // A page's flushed state, when written whole (a consolidated base, or the
  // cleaner making a page contiguous), must fit one flush buffer
  // (LssOptions::buffer_size); TooLarge otherwise. The access method keeps
  // pages far smaller (the Bw-tree's node size limit and consolidation).
  //
  // Flush (LLAMA 3.2.3): writes the page's unflushed data nodes whose tag is at
  // most `max_tag` into the LSS buffer (a C-delta, or the whole page when its
  // base is unflushed) and installs a flush node carrying `annotation`.
  // Reserve, then CAS, then copy; a failed CAS voids the reserved space.
  // The records are stable only after MakeStable(result.end). A page private
  // to an open system transaction is left alone (kClean): its TCommit writes
  // it, and a flush node on it would fail that commit.
  Result<FlushResult> Flush(PageId pid, uint64_t max_tag, uint64_t annotation);

  // Swap-out (LLAMA 3.3): drops the page's flushed and written part from memory.
  // A page with nothing unflushed leaves memory entirely (its entry becomes
  // its LSS address); otherwise copies of its unflushed nodes stay over a
  // partial-swap node. False when nothing could be dropped (no written flush,
  // already swapped, private to a system transaction) or the CAS failed.
  bool SwapOut(PageId pid);

  // Evicts pages with a CLOCK policy until memory (less garbage that waits
  // only for other threads' guards) is at or below the target fraction of the
  // budget, or two sweeps found nothing more to drop. Runs on its own when a
  // thread that allocated over budget releases its outermost guard.
  // REQUIRES: the caller holds no guard (its garbage could not be reclaimed).
  Status EnforceBudget();
  size_t MemoryUsage() const;

  // An access method's hint that page `pid` lies on many operations' paths
  // (the Bw-tree's inner pages): the evictor's clock hand passes it
  // `LlamaOptions::warm_page_sweeps` times untouched before it drops it,
  // rather than once (llama.md, "Memory budget"). Costs a byte load when
  // the page is already marked.
  void KeepWarm(PageId pid);

  // Mk-Stable and Hi-Stable of the LSS.
  Status MakeStable(LssAddress address) { return lss_->MakeStable(address); }
  LssAddress HiStable() const { return lss_->HiStable(); }
  // Where the next flush would be written.
  LssAddress Tail() const { return lss_->Tail(); }
  // The largest LSS record, header included (LssOptions::buffer_size - 64):
  // a whole page's flush, or a system transaction's record with every page
  // it writes, must fit in it.
  size_t MaxRecordBytes() const { return lss_->MaxReservation(); }

  // ---- System transactions (LLAMA section 5) ----

  std::unique_ptr<SystemTxn> TBegin();
  // Allocates a page, private to the transaction until it commits.
  Result<PageId> TAllocate(SystemTxn* txn);
  // Frees `pid` when the transaction commits.
  Status TFree(SystemTxn* txn, PageId pid);
  // Update-D on a page allocated by this transaction (the SMO template of
  // LLAMA figure 8: new pages are private until the commit connects them).
  // InvalidArgument for any other page.
  Result<bool> TUpdateD(SystemTxn* txn, PageId pid, const PageNode* expected, PageNode* delta);
  // Commits: installs `final_delta` on `pid` over `expected` (pid 0: no final
  // update) and writes every page the transaction changed, flushed under
  // `max_tag`, as one transaction record in the LSS buffer. False when the
  // final CAS failed: nothing was installed and the transaction stays open (retry
  // with a fresh `expected`, or abort). InvalidArgument when a changed page
  // cannot be flushed under `max_tag` (its base tag is above it).
  Result<bool> TCommit(SystemTxn* txn, PageId pid, const PageNode* expected,
                       PageNode* final_delta, uint64_t max_tag, uint64_t annotation);
  // As TCommit, but the final update is an Update-R: `state` (a chain ending
  // in its base, as for UpdateR) replaces the page's chain `expected`. The
  // new state is written in the transaction record with the rest, so it and
  // the transaction's frees become stable together (a merge: the absorbing
  // page's new base and the absorbed pages' frees). False when the CAS
  // failed: nothing was installed, `state` is still the caller's, and the
  // transaction stays open.
  Result<bool> TCommitReplace(SystemTxn* txn, PageId pid, const PageNode* expected,
                              PageNode* state, uint64_t max_tag, uint64_t annotation);
  // Undoes the transaction in memory: its new pages are freed.
  void TAbort(SystemTxn* txn);

  // ---- Cleaning ----

  // Cleans up to `max_segments` of the oldest segments: relocates every page
  // state still living there to the tail, made contiguous, installed by CAS
  // (retried on conflict); then checkpoints twice, so that no checkpoint
  // recovery could start from points into them, waits for every guard open
  // since before the relocations to end (a reader may hold an old address),
  // and releases them. Blocks as long as the longest such guard.
  // REQUIRES: the caller holds no epoch guard.
  Result<CleanResult> Clean(size_t max_segments);

  // ---- Checkpoint ----

  // Writes the mapping table (LSS addresses only) with the recovery start
  // position to the next checkpoint slot, after making what it references
  // stable.
  Status Checkpoint();
  // The newest checkpoint's recovery start position (written since open, or
  // recovered; 0 when none): recovery would replay the LSS from there.
  LssAddress LastCheckpointRsp();

  // ---- Introspection ----

  // The highest flush annotation written to the LSS by Flush and TCommit (the
  // DC annotates each flush with its bound, the ESL): kept in checkpoints and
  // recovered as the maximum of the checkpoint's value and the annotations of
  // the records replayed after it. An upper bound: it may count records that
  // are not stable yet (and, after a crash, records torn off the tail after
  // a checkpoint counted them).
  uint64_t MaxAnnotation() const { return max_annotation_.load(std::memory_order_acquire); }

  struct Stats {
    uint64_t pages = 0;              // allocated pages (high water - free)
    uint64_t memory_bytes = 0;       // node bytes + mapping table (garbage included)
    uint64_t memory_budget = 0;
    uint64_t node_bytes = 0;
    uint64_t flushes = 0;
    uint64_t flush_failures = 0;     // flush CAS failures (voided)
    uint64_t flush_bytes = 0;        // record bytes written by flushes
    uint64_t whole_flush_bytes = 0;  // of them, kBase records (a page written whole)
    uint64_t chain_rewrites = 0;     // flushes written whole for the max_lss_chain limit
    uint64_t incremental_replacements = 0;  // UpdateRFlush calls that kept the LSS state
    uint64_t page_change_bytes = 0;  // payload bytes of the data nodes flushed
    uint64_t swap_outs = 0;          // pages that left memory entirely
    uint64_t partial_swaps = 0;      // pages that kept only unflushed nodes
    uint64_t eviction_passes = 0;
    uint64_t eviction_flushes = 0;   // flushes the evictor did to make pages evictable
    uint64_t page_loads = 0;         // pages (or parts) brought in from the LSS
    uint64_t warm_page_loads = 0;    // of them, pages marked by KeepWarm (inner pages)
    uint64_t warm_swap_outs = 0;     // swap-outs of pages marked by KeepWarm
    uint64_t page_load_reads = 0;    // LSS records read for them
    uint64_t update_d_failures = 0;
    uint64_t update_r_failures = 0;
    uint64_t txn_commits = 0;
    uint64_t txn_aborts = 0;
    uint64_t checkpoints = 0;
    uint64_t segments_cleaned = 0;
    uint64_t pages_relocated = 0;
    uint64_t bytes_relocated = 0;
    // LSS bytes the pages' current states need: every page's records from
    // its newest down to its kBase (llama.md, "Live bytes"). The LSS's size
    // over this is the space amplification.
    uint64_t live_bytes = 0;
    LogStructuredStore::Stats lss;
  };
  Stats GetStats() const;

  // Debug: the live bytes recounted from scratch, by walking every page's
  // LSS state (reads the LSS). Equals GetStats().live_bytes when nothing
  // changes the cache meanwhile. REQUIRES: no other thread uses the cache
  // (a racing change may be counted by one and not the other); the caller
  // holds no epoch guard.
  Result<uint64_t> RecountLiveBytes();

  // Test hook: the destructor will not Close(), as after a process crash.
  void TEST_SkipCloseOnDestroy() { closed_ = true; }
  // Test hook: runs in every commit after its record is reserved and written,
  // just before its frees take effect (where a racing flush may land).
  void TEST_SetBeforeFrees(std::function<void()> hook) { before_frees_for_test_ = std::move(hook); }
  // Test hook: an UpdateR for which `fault` returns true fails as if another
  // thread's change had won its CAS (the state is the caller's to discard).
  // Set before other threads use the cache.
  void TEST_SetUpdateRFault(std::function<bool(PageId)> fault) {
    update_r_fault_for_test_ = std::move(fault);
  }
  // Test hook: a TCommit or TCommitReplace whose final page `fault` returns
  // true for fails at its commit point as if another thread's change had won
  // the CAS: after its flush nodes went onto its private pages, which the
  // hook may read from the mapping table. Set before other threads use the
  // cache.
  void TEST_SetCommitFault(std::function<bool(PageId)> fault) {
    commit_fault_for_test_ = std::move(fault);
  }
  // Test hook: runs in every commit after it planned its pages and before it
  // reserves its record, with the PIDs the transaction allocated (where a
  // preempted committer stalls). Set while no commit runs.
  void TEST_SetAfterPlan(std::function<void(const std::vector<PageId>&)> hook) {
    after_plan_for_test_ = std::move(hook);
  }
  // Test hook: Checkpoint calls `hook` after it took its snapshot of the
  // private pages, before it reads the mapping table. Set before use.
  void TEST_SetCheckpointHook(std::function<void()> hook) {
    checkpoint_hook_for_test_ = std::move(hook);
  }

  LogStructuredStore* lss() { return lss_.get(); }
  MappingTable* mapping_table() { return mapping_.get(); }
  EpochManager* epochs() { return epochs_.get(); }

 private:
  struct ChainInfo;
  class MemoryCounter;

  // A flush node's LSS state (address, end, base, depth, chain bytes,
  // annotation): the page's as `info` found it, or that state with one
  // C-delta record [address, address + span) chained over it.
  static void SetLssStateAsFound(FlushNode* f, const ChainInfo& info);
  static void SetLssStateChained(FlushNode* f, const ChainInfo& info, LssAddress address,
                                 size_t span, uint64_t annotation);

  Llama(Env* env, std::string dir, LlamaOptions options);
  Status Recover();
  // Live bytes (llama_live.cpp). The bytes of page `pid`'s LSS state at
  // `head` (0 for none): noted, or walked in the LSS and noted.
  // REQUIRES: the calling thread holds no LSS reservation.
  Result<uint64_t> StateBytesOf(PageId pid, LssAddress head);
  // Sums the spans of the records from `head` down to the page's kBase.
  Result<uint64_t> WalkStateBytes(PageId pid, LssAddress head);
  // The LSS state a page's mapping entry `e` names (0: none). REQUIRES: an
  // epoch guard (or the entry's chain owned by the caller).
  static LssAddress EntryLssHead(uint64_t e);
  // Sets the total from every page's state after recovery.
  Status RecoverLiveBytes();
  // Takes the states of pages just freed off the total; `unresolved` gets
  // those whose bytes are not noted (to walk once no reservation is held).
  void SubtractFreed(PageId pid, uint64_t entry,
                     std::vector<std::pair<PageId, LssAddress>>* unresolved);
  void SubtractUnresolved(const std::vector<std::pair<PageId, LssAddress>>& unresolved);
  void Touch(PageId pid);
  bool IsWarm(PageId pid) const;  // marked by KeepWarm
  // Clean(); releasing cleaned segments (two checkpoints) at once, or only
  // once a batch of cleaned segments waits for it.
  Result<CleanResult> CleanSegments(size_t max_segments, bool release_now);
  // Relocates the page's LSS state if any record of it lies in [lo, hi).
  Status RelocateIfLive(PageId pid, LssAddress lo, LssAddress hi, CleanResult* result);
  void MaybeClean(LssAddress flushed_at);
  // Segments held that are not cleaned yet, and how many of the oldest to
  // clean now (0 while they are within the trigger).
  uint64_t SegmentsHeld() const;
  size_t SegmentsToClean() const;
  // For the evictor: whether flushing the page under `bound` can help
  // without reading it back (true unless it is partly swapped out and no
  // unflushed node lies under the bound). REQUIRES: an epoch guard.
  static bool HasFlushableOverSwap(uint64_t entry, uint64_t bound);
  void MaybeEnforceBudget();
  // Runs eviction and cleaning that were asked for while guards were held.
  // REQUIRES: the calling thread holds no guard.
  void RunDeferredWork();

  static void AnalyzeChain(const PageNode* head, ChainInfo* info);
  // Whether a C-delta of `span` bytes may go over the chain `info`
  // describes, under a base of `base_bytes` (llama.md, "Incremental
  // flushing"): the chain stays under max_lss_chain records and its C-deltas
  // under the base's size.
  bool CDeltaFits(const ChainInfo& info, size_t base_bytes, size_t span) const;
  // AnalyzeChain(head).lss_head alone, with no allocation (every Update-R).
  static LssAddress LssHeadOf(const PageNode* head);
  // Numbers a replacement chain above `expected` and records the old state's
  // LSS place on its base (Update-R's preparation).
  void PrepareReplacement(const PageNode* expected, PageNode* state);
  // TCommit and TCommitReplace (replace: final_delta is a whole new chain).
  Result<bool> CommitTxn(SystemTxn* txn, PageId pid, const PageNode* expected,
                         PageNode* final_delta, bool replace, uint64_t max_tag,
                         uint64_t annotation);
  // Raises max_annotation_ to `annotation`. Called before the record's
  // reservation is committed, so a checkpoint whose RSP is past the record
  // sees it.
  void NoteAnnotation(uint64_t annotation);
  Status CloseImpl(bool checkpoint);
  // What LoadFromLss learns besides the nodes.
  struct LoadedState {
    uint64_t bound = 0;             // the newest record's flush bound
    LssAddress end = kNullAddress;  // end of the newest record
    LssAddress base = kNullAddress; // the kBase record ending the chain
    uint32_t records = 0;           // LSS records read (the chain's depth)
    uint32_t chain_bytes = 0;       // bytes of the C-deltas among them
    uint64_t bytes = 0;             // spans of all the records read
  };
  // Reads page `pid`'s LSS state at `address` and returns its data nodes in
  // chain order (newest first), linked. Corruption when a record there
  // belongs to another page.
  Result<PageNode*> LoadFromLss(PageId pid, LssAddress address, LoadedState* state);
  // Waits until the record at `a` is written (it may be in a flush buffer).
  // REQUIRES: the calling thread holds no LSS reservation.
  Status EnsureWritten(LssAddress a);
  // Brings a wholly or partly swapped-out page into memory.
  Result<const PageNode*> Materialize(PageId pid, uint64_t entry);

  // Frees pages in the mapping table, retires their chains and takes their
  // LSS states off the live bytes (`unresolved`: see SubtractFreed).
  void FreePagesNow(const std::vector<PageId>& pids,
                    std::vector<std::pair<PageId, LssAddress>>* unresolved);
  // Removes the transaction from the active transaction table.
  void EndTransaction(SystemTxn* txn);

  FlushNode* NewFlushNode(NodeKind kind);
  // Read; private pages too when !hide_private (LLAMA's own flushes).
  Result<const PageNode*> ReadState(PageId pid, bool hide_private);

  void FreeNode(PageNode* node);
  // Frees one node that was published (other threads may hold it) after the
  // epoch, leaving the nodes below it alone.
  void RetireNode(PageNode* node);
  static void FreeNodeDeferred(void* llama, uint64_t node);
  void RetireChain(const PageNode* head);
  static void FreeChainDeferred(void* llama, uint64_t head);
  size_t ChainBytes(const PageNode* head) const;

  Env* const env_;
  const std::string dir_;
  std::unique_ptr<DirLock> dir_lock_;  // released last
  const LlamaOptions options_;
  std::unique_ptr<EpochManager> epochs_;
  std::unique_ptr<MappingTable> mapping_;
  std::unique_ptr<LogStructuredStore> lss_;
  std::unique_ptr<MemoryCounter> memory_;
  // Each page's LSS state bytes and their total, the live bytes.
  std::unique_ptr<StateBytes> state_bytes_;

  // The active transaction table: pages allocated by open system
  // transactions, private until commit (checkpoints record them as free).
  // A PID is allocated and made private in one hold of att_mu_. While a
  // checkpoint reads the table, the PIDs allocated meanwhile are also noted
  // in allocated_in_checkpoint_: recorded as free too (a commit of one
  // writes its record above the checkpoint's RSP, where replay finds it).
  std::mutex att_mu_;
  std::unordered_set<PageId> private_pages_;
  bool checkpoint_reading_ = false;              // GUARDED_BY(att_mu_)
  std::vector<PageId> allocated_in_checkpoint_;  // GUARDED_BY(att_mu_)

  // CLOCK reference bits, one byte per possible PID, reserved like the
  // mapping table and backed by the OS on first touch.
  std::atomic<uint8_t>* referenced_ = nullptr;
  std::mutex evict_mu_;            // one evictor at a time
  PageId clock_hand_ = 1;          // GUARDED_BY(evict_mu_)
  // The last eviction pass, when it ended over its target: its flush bound
  // and live memory then (EnforceBudget skips passes that could only repeat
  // it).
  struct FutilePass {
    bool valid = false;
    uint64_t bound = 0;
    size_t usage = 0;
  };
  FutilePass futile_;              // GUARDED_BY(evict_mu_)
  // Pages the evictor flushed, to swap out once the LSS has written below
  // the address (the record's end) noted with each.
  std::vector<std::pair<PageId, LssAddress>> pending_swaps_;  // GUARDED_BY(evict_mu_)
  std::unordered_set<PageId> pending_swap_set_;              // GUARDED_BY(evict_mu_)
  // Swaps out the pending pages whose records are written; with `wait`,
  // first waits until all are. REQUIRES: evict_mu_, no guard held.
  Status SwapOutWritten(bool wait);
  // The cache's size at which eviction starts (MaybeEnforceBudget).
  size_t SoftBudget() const;
  std::atomic<uint64_t> eviction_passes_{0}, eviction_flushes_{0};
  // Set when work waits for a guard-free moment (relaxed: a hint; the work
  // itself synchronizes through its mutexes).
  std::atomic<bool> eviction_wanted_{false};
  // Asked for by a flush that reached a new segment: segments to clean at
  // the next guard-free moment; with a background cleaner, nonzero while a
  // pass is wanted (written under cleaner_mu_, then the cleaner is woken).
  std::atomic<size_t> cleaning_wanted_{0};
  // The background cleaner (LlamaOptions::clean_in_background); set at open.
  bool background_cleaning_ = false;
  void CleanerLoop();
  void StopCleaner();
  std::thread cleaner_;
  std::mutex cleaner_mu_;
  std::condition_variable cleaner_cv_;
  bool cleaner_stop_ = false;  // GUARDED_BY(cleaner_mu_)
  // The allocator arena of the thread that last asked for cleaning: the
  // cleaner allocates from it (common/heap.h, SetHeapThreadArena).
  std::atomic<int> cleaner_arena_{-1};

  std::mutex clean_mu_;                  // one cleaner at a time
  // All below is cleaned (relocated); written under clean_mu_, read anywhere.
  std::atomic<LssAddress> cleaned_frontier_{0};
  std::atomic<uint64_t> tail_segment_seen_{0};
  // Segments held (not yet cleaned) above which cleaning starts, besides the
  // configured trigger: twice what the last cleaning left.
  std::atomic<uint64_t> clean_trigger_{0};
  std::atomic<uint64_t> segments_cleaned_{0}, pages_relocated_{0}, bytes_relocated_{0};

  std::mutex checkpoint_mu_;  // serializes checkpoints
  uint64_t checkpoint_sequence_ = 0;
  LssAddress checkpoint_rsp_[2] = {0, 0};  // RSPs of the two newest checkpoints
  std::atomic<LssAddress> gc_frontier_{0};  // recorded in checkpoints
  std::atomic<uint64_t> max_annotation_{0};  // see MaxAnnotation()
  bool closed_ = false;
  std::function<void()> before_frees_for_test_;
  std::function<bool(PageId)> update_r_fault_for_test_;
  std::function<void(const std::vector<PageId>&)> after_plan_for_test_;
  std::function<bool(PageId)> commit_fault_for_test_;
  std::function<void()> checkpoint_hook_for_test_;

  std::atomic<uint64_t> next_tid_{1};
  // Relaxed counters: statistics only.
  std::atomic<uint64_t> flushes_{0}, flush_failures_{0}, flush_bytes_{0}, change_bytes_{0};
  std::atomic<uint64_t> whole_flush_bytes_{0}, chain_rewrites_{0}, incremental_replacements_{0};
  std::atomic<uint64_t> warm_page_loads_{0}, warm_swap_outs_{0};
  std::atomic<uint64_t> page_loads_{0}, page_load_reads_{0}, swap_outs_{0}, partial_swaps_{0};
  std::atomic<uint64_t> update_d_failures_{0}, update_r_failures_{0};
  std::atomic<uint64_t> txn_commits_{0}, txn_aborts_{0}, checkpoints_{0};
};

}  // namespace deuteron::llama
