// Dc: the data component, in process (DESIGN.md "The contracts" 1, 2, 3, 7,
// 8, 10). A Bw-tree on LLAMA in one directory, driven through the
// DataComponent interface (protocol/data_component.h): the TC calls it
// directly (the embedded binding), or a DC server calls it for a remote TC.
// Design notes, states and the dc.meta format: dc/dc.md.
//
// What it adds to the tree:
//  - Idempotence: an operation is applied only if its LSN is above the LSN
//    the tree holds for its key (tombstones included), checked atomically
//    with the write (BwTree::WriteIfNewer).
//  - The WAL rule: the tree's flush bound and the evictor's are the ESL, so
//    nothing above the ESL reaches the LSS; every flush is annotated with its
//    bound, so the highest annotation (Llama::MaxAnnotation) is the highest
//    LSN that may be durable (max_durable_lsn).
//  - RSSP: a proposal flushes everything under the ESL, makes the LSS stable
//    and persists the RSSP (dc.meta) before acknowledging; tombstones below
//    the acknowledged RSSP may then be purged.
//  - Restart-to: drops the cache and recovers from the LSS, which holds
//    nothing above the ESL, and takes the TC's stable end as its ESL.
//  - The incarnation fence: RestartTo starts a new TC incarnation, kept in
//    dc.meta; Apply, SetEsl and ProposeRssp from any other are refused.
//
//  - Writes above the ESL are bounded (EslBacklog): past a share of the
//    memory budget Apply answers Busy until the ESL moves on.
//  - LSN values in the reserved top of the range (kReservedLsnFloor) are
//    refused everywhere.
//
// Thread safety: every method is thread-safe. While RestartTo runs, record
// calls and the other control calls return Unavailable (they never block on
// it); calls already inside finish first. After Close, they return
// ShuttingDown. Health always answers (its state says which).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/env.h"
#include "common/slice.h"
#include "common/status.h"
#include "dc/bwtree/bwtree.h"
#include "dc/esl_backlog.h"
#include "dc/llama/llama.h"
#include "protocol/data_component.h"

namespace deuteron::dc {

// Cleaning's defaults for a DC (dc/dc.md, "Bounded space and recovery"):
// with 64 MiB segments, a store with little live data holds about eight
// segment files at most; a bigger one about twice its live state.
inline constexpr size_t kDefaultCleaningTriggerSegments = 4;
inline constexpr size_t kDefaultCleaningTargetSegments = 2;

// LLAMA's options as a DC uses them unless told otherwise: LLAMA's defaults
// with cleaning on; the LSS synced only when something needs it to be
// durable (RSSP, checkpoint, close), not after every flush buffer; and a
// page's LSS chain kept to kDcMaxLssChain records, so that a page swapped
// out is read back with at most that many reads (dc/dc.md, "Storage: syncs,
// page reads and the flush ring"); and cleaning on LLAMA's own thread, so
// that no operation waits out a cleaning pass and its checkpoints' syncs.
inline constexpr size_t kDcMaxLssChain = 3;
inline llama::LlamaOptions DefaultDcLlamaOptions() {
  llama::LlamaOptions o;
  o.cleaning_trigger_segments = kDefaultCleaningTriggerSegments;
  o.cleaning_target_segments = kDefaultCleaningTargetSegments;
  o.lss.sync_on_write = false;
  o.max_lss_chain = kDcMaxLssChain;
  o.clean_in_background = true;
  return o;
}

// The cache budget (LlamaOptions::memory_budget) for a process budget of
// `process_budget` bytes: three quarters of what is left after the
// flush-buffer ring (buffer_count x buffer_size), which the cache's count
// leaves out, the last quarter for the allocator's fragmentation; never less
// than a quarter of the budget. 0 stays 0 (no budget). dc/dc.md, "The
// memory budget".
size_t CacheBudgetFor(size_t process_budget, const llama::LssOptions& lss);

struct DcOptions {
  // LLAMA's options. eviction_flush_bound is the DC's (the ESL): a value set
  // here is replaced.
  llama::LlamaOptions llama = DefaultDcLlamaOptions();
  // The tree's options. flush_bound (the ESL) and purge_bound (the
  // acknowledged RSSP) are the DC's: values set here are replaced.
  bwtree::BwTreeOptions tree;
  // Apply: most operations per batch, and most key + value bytes per batch.
  size_t max_batch_ops = 65536;
  size_t max_batch_bytes = size_t{64} << 20;
  // Scan: most items per call (a request's limit is capped to it).
  uint32_t max_scan_items = 10000;
  // MultiGet: most keys per call.
  size_t max_multiget_keys = 65536;
  // Writes above the ESL (dc/dc.md, "Writes above the ESL"): the records the
  // DC holds above the ESL (which it may not flush, so cannot evict) are
  // bounded by this share of llama.memory_budget; past it Apply answers Busy
  // and names the ESL that would free them. 0, or no memory budget: no bound.
  double max_above_esl_share = 0.5;
  // Checkpoints during operation (dc/dc.md, "Bounded space and recovery"):
  // a background thread writes a LLAMA checkpoint once the LSS has grown by
  // `checkpoint_interval_bytes` since the last one (LLAMA's own, by cleaning,
  // included), or `checkpoint_interval_ms` has passed with anything written.
  // Recovery replays the LSS from the newest checkpoint, so these bound the
  // time from start to ready. 0 turns that trigger off; both 0: no thread.
  uint64_t checkpoint_interval_bytes = uint64_t{64} << 20;
  uint64_t checkpoint_interval_ms = 60'000;
  // Process-wide, for a DC that owns its process (deuteron dc sets it to the
  // memory budget): when the allocator holds more than this resident, and
  // freed pages it keeps (HeapBytesRetained) make more than a sixteenth of
  // it, the background thread gives those back to the OS (PurgeHeap,
  // common/heap.h). 0: never.
  uint64_t heap_purge_above = 0;
  // How often the background thread looks (at most).
  uint64_t maintenance_period_ms = 100;
  // With a memory budget (llama.memory_budget), the flush-buffer ring gets
  // FlushRingBuffersFor(budget) buffers instead of llama.lss.buffer_count,
  // so that a small cache is not outweighed by its ring (issue 34: 4 x 1 MiB
  // against a 1.9 MiB budget). false: buffer_count as given.
  bool flush_ring_from_budget = true;
};

// The flush-buffer ring's buffer count for a cache budget of `budget` bytes:
// as many buffers as fit in a quarter of the budget, at least 2 (the LSS's
// least: one filling while one is written), at most lss.buffer_count. dc/dc.md,
// "Storage: syncs, page reads and the flush ring".
int FlushRingBuffersFor(size_t budget, const llama::LssOptions& lss);

// LSNs at or above this are reserved (never a TC's): a record LSN, ESL,
// RSSP or restart-to stable end there is InvalidArgument, so that no such
// value is ever acted on or persisted (issue 38: setEsl(2^63 - 1) poisoned
// the store for the real TC).
inline constexpr uint64_t kReservedLsnFloor = uint64_t{1} << 62;

// The file in the store directory that holds the last acknowledged RSSP and
// the current TC incarnation.
inline constexpr char kDcMetaFileName[] = "dc.meta";
inline constexpr char kDcMetaTempFileName[] = "dc.meta.tmp";
inline constexpr uint64_t kDcMetaMagic = 0x544D43444E525444ull;  // "DTRNDCMT"
inline constexpr uint32_t kDcMetaVersion = 3;
inline constexpr size_t kDcMetaSize = 56;    // version 3 (written)
inline constexpr size_t kDcMetaSizeV2 = 40;  // version 2 (read)
inline constexpr size_t kDcMetaSizeV1 = 32;  // version 1 (read)

// dc.meta's content; encoded as dc/dc.md says.
struct DcMeta {
  uint64_t rssp = 0;
  // LLAMA's Hi-Stable when rssp was acknowledged: every LSS buffer below it
  // was reported stable, so recovery takes damage there for corruption
  // (LssOptions::stable_floor). 0 in a version 1 file.
  uint64_t stable_lss = 0;
  uint64_t incarnation = 0;  // REQUIRES: <= kMaxIncarnation to encode
  // The store this DC belongs to: nil until the first RestartToStore adopts
  // a TC's (and in version 1 and 2 files).
  StoreId store_id;
};
// dc.meta holds the incarnation in 32 bits; RestartTo refuses to go past it.
inline constexpr uint64_t kMaxIncarnation = UINT32_MAX;
std::string EncodeDcMeta(const DcMeta& meta);
// Corruption for a bad size, magic or checksum; NotSupported for a newer
// version.
Result<DcMeta> DecodeDcMeta(Slice data);

class Dc final : public DataComponent {
 public:
  // Opens (creating when absent) the store in `dir`: LLAMA recovers the LSS,
  // the tree opens over it, dc.meta gives the last acknowledged RSSP. The
  // ESL starts at the highest bound the store proves the TC had made durable
  // (max(max_durable_lsn, rssp - 1)).
  static Result<std::unique_ptr<Dc>> Open(Env* env, const std::string& dir, DcOptions options);

  // Close() unless closed (errors are logged), or, after
  // TEST_SkipCloseOnDestroy, drops everything as a crashed process would.
  ~Dc() override;

  // Clean shutdown: waits for calls inside and a restart in progress, flushes
  // what the ESL allows, makes it stable, checkpoints and closes LLAMA. Later
  // calls return ShuttingDown. Idempotent.
  Status Close();

  // Where the DC stood after Open or the last RestartTo (with the current
  // incarnation).
  DcReady ready() const;

  // ---- DataComponent ----
  Result<ApplyResult> Apply(std::span<const RecordOp> ops, uint64_t esl,
                            uint64_t incarnation) override;
  Result<ReadResult> Get(Slice key) override;
  Result<std::vector<ReadResult>> MultiGet(std::span<const Slice> keys) override;
  Result<ScanResult> Scan(const ScanRequest& request) override;
  Result<ReadResult> GetFenced(Slice key, const ReadFence& fence) override;
  Result<std::vector<ReadResult>> MultiGetFenced(std::span<const Slice> keys,
                                                 const ReadFence& fence) override;
  Result<ScanResult> ScanFenced(const ScanRequest& request, const ReadFence& fence) override;
  Status SetEsl(uint64_t esl, uint64_t incarnation) override;
  Status ProposeRssp(uint64_t rssp, uint64_t incarnation) override;
  // Also InvalidArgument when `stable_end` is below max_durable_lsn: the LSS
  // then holds operations the TC says are not stable, which cannot be undone
  // (a TC that lost its log, or another TC's). The new incarnation is in
  // dc.meta before anything is dropped; if writing it fails, RestartTo
  // returns that error and the DC goes on serving the old one.
  Result<DcReady> RestartTo(uint64_t stable_end) override;
  // RestartTo, adopting `store_id` when the DC has none (kept in dc.meta
  // with the new incarnation); StoreMismatch, with nothing changed, when it
  // belongs to another store.
  Result<DcReady> RestartToStore(uint64_t stable_end, const StoreId& store_id) override;
  Result<DcStats> GetStats() override;
  Result<DcHealth> Health() override;

  // Bytes the DC holds above the ESL, as EslBacklog counts them, and their
  // limit (0: none).
  size_t above_esl_bytes() const { return backlog_.bytes(); }
  size_t above_esl_limit() const { return backlog_.limit(); }
  // Key and value bytes of the operations applied (skipped ones left out)
  // since open: the user bytes write amplification is counted against
  // (LSS bytes written / user bytes).
  uint64_t user_bytes_applied() const { return user_bytes_.load(std::memory_order_relaxed); }
  // Heap purges the background thread asked for since open.
  uint64_t heap_purges() const { return heap_purges_.load(std::memory_order_relaxed); }
  // Checkpoints the background thread wrote since open.
  uint64_t periodic_checkpoints() const {
    return periodic_checkpoints_.load(std::memory_order_relaxed);
  }

  // Test hook: the destructor neither flushes nor closes, as after a crash.
  void TEST_SkipCloseOnDestroy() { skip_close_ = true; }
  // Test hook: LLAMA (null while restarting or closed). REQUIRES: no
  // concurrent RestartTo or Close.
  llama::Llama* TEST_llama() { return llama_.get(); }
  // Test hook: the tree (null while restarting or closed). REQUIRES: no
  // concurrent RestartTo or Close.
  bwtree::BwTree* TEST_tree() { return tree_.get(); }

  // The Bw-tree's structural check (bwtree::BwTree::Check), for offline
  // tools (`deuteron check` runs it on a copy of a stopped store).
  // REQUIRES: no Apply, RestartTo or ProposeRssp concurrently.
  Status CheckTree();
  // Test hook: RestartTo calls `hook` while the DC is kRestarting with the
  // cache dropped (before it reopens). REQUIRES: set before any RestartTo.
  void TEST_SetRestartHook(std::function<void()> hook) { restart_hook_ = std::move(hook); }
  // Test hook: ProposeRssp calls `hook` after it read the ESL, before it
  // flushes (holding the gate shared and rssp_mu_: the hook may run record
  // calls on another thread, not ProposeRssp). REQUIRES: set before any
  // ProposeRssp.
  void TEST_SetRsspHook(std::function<void()> hook) { rssp_hook_ = std::move(hook); }

 private:
  Dc(Env* env, std::string dir, DcOptions options);
  // RestartTo and RestartToStore (`tc_store` null: no check).
  Result<DcReady> Restart(uint64_t stable_end, const StoreId* tc_store);
  StoreId store_id() const;

  // Opens LLAMA and the tree. REQUIRES: gate_ held exclusively (or not yet
  // shared with anyone), llama_ and tree_ null.
  Status OpenStore();
  // Drops the tree and LLAMA; with `clean`, flushes under the ESL and
  // checkpoints first, else flushes nothing new. REQUIRES: gate_ exclusive.
  Status CloseStore(bool clean);
  // A shared hold on the gate for a call that uses the store: Unavailable
  // while restarting, ShuttingDown once closed.
  Status Enter(std::shared_lock<std::shared_mutex>* hold);
  void AdvanceEsl(uint64_t esl);
  // OK when `incarnation` is the current one; StaleIncarnation when older,
  // InvalidArgument when newer. REQUIRES: a hold on gate_.
  Status CheckIncarnation(uint64_t incarnation, const char* call) const;
  // CheckIncarnation, and StaleIncarnation when fence.instance is nonzero
  // and not instance_. REQUIRES: a hold on gate_.
  Status CheckReadFence(const ReadFence& fence, const char* call) const;
  // The reads, under a hold the caller took (and checked a fence under).
  Result<ReadResult> GetHeld(Slice key);
  Result<std::vector<ReadResult>> MultiGetHeld(std::span<const Slice> keys);
  Result<ScanResult> ScanHeld(const ScanRequest& request);
  // Writes dc.meta atomically (temp file, sync, rename, sync directory).
  Status WriteMeta(const DcMeta& meta);
  Result<DcMeta> ReadMeta();
  uint64_t MaxDurable() const;  // REQUIRES: a hold on gate_
  // The background thread: periodic checkpoints and heap purges
  // (DcOptions).
  void StartMaintenance();
  void StopMaintenance();
  void MaintenanceLoop();
  // One look: checkpoints when a trigger is due. REQUIRES: a hold on gate_.
  Status MaybeCheckpoint();

  Env* const env_;
  const std::string dir_;
  DcOptions options_;

  std::atomic<DcState> state_{DcState::kServing};
  // Shared: every call that uses llama_/tree_. Exclusive: RestartTo, Close.
  std::shared_mutex gate_;
  std::mutex restart_mu_;  // one RestartTo or Close at a time
  std::mutex rssp_mu_;     // one ProposeRssp at a time (flush, dc.meta)
  std::unique_ptr<llama::Llama> llama_;   // GUARDED_BY(gate_)
  std::unique_ptr<bwtree::BwTree> tree_;  // GUARDED_BY(gate_); destroyed first
  bool closed_ = false;                   // GUARDED_BY(restart_mu_)
  bool skip_close_ = false;
  std::function<void()> restart_hook_;
  std::function<void()> rssp_hook_;

  // The ESL (monotonic except RestartTo) and the acknowledged RSSP
  // (monotonic, written under rssp_mu_ after dc.meta is durable). Read by
  // the tree's and the evictor's bound callbacks on any thread.
  std::atomic<uint64_t> esl_{0};
  std::atomic<uint64_t> rssp_{0};
  // What Apply holds above esl_ (released as the ESL advances, reset by
  // RestartTo).
  EslBacklog backlog_;
  // The current TC incarnation: written only under gate_ held exclusively
  // (Open, RestartTo), after dc.meta holds it; atomic for Health.
  std::atomic<uint64_t> incarnation_{0};
  // The store id (dc.meta): written at Open and by RestartToStore (under
  // gate_ exclusive, after dc.meta holds it); read under id_mu_ by Health.
  mutable std::mutex id_mu_;
  StoreId store_id_;  // GUARDED_BY(id_mu_)
  // Random and nonzero, new at every Open: DcReady/DcHealth::instance.
  uint64_t instance_ = 0;
  // dc.meta's stable_lss as last written or read: OpenStore hands it to
  // LLAMA's recovery. Written under rssp_mu_ or with gate_ exclusive.
  std::atomic<uint64_t> stable_lss_{0};
  // max_durable_lsn as of Open / the last RestartTo (for ready()), and the
  // latest seen (for Health while the store is unavailable).
  std::atomic<uint64_t> ready_durable_{0};
  std::atomic<uint64_t> last_durable_{0};

  // Relaxed counters: statistics only.
  std::atomic<uint64_t> applies_{0}, ops_applied_{0}, ops_skipped_{0}, gets_{0};
  std::atomic<uint64_t> scans_{0}, scan_items_{0}, rssp_proposals_{0}, restarts_{0};
  std::atomic<uint64_t> user_bytes_{0}, periodic_checkpoints_{0}, heap_purges_{0};

  // The maintenance thread (periodic checkpoints).
  std::thread maintenance_;
  std::mutex maintenance_mu_;
  std::condition_variable maintenance_cv_;
  bool maintenance_stop_ = false;  // GUARDED_BY(maintenance_mu_)
  // What the thread last saw of LLAMA's checkpoints: GUARDED_BY(gate_)
  // (used by the thread under a shared hold, one thread; reset by OpenStore
  // under the exclusive one).
  uint64_t checkpoint_rsp_seen_ = 0;  // the newest checkpoint's RSP
  uint64_t checkpoint_tail_ = 0;      // LSS tail when it was seen
  std::chrono::steady_clock::time_point checkpoint_time_{};
};

}  // namespace deuteron::dc
