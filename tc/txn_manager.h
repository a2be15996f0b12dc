// TxnManager: the transactional component (TC) over any DataComponent and a
// write-ahead log (DESIGN.md, "Recommended shape of the TC"; design and
// failure rules: tc/txn.md). Redo-only, write-committed, strict two-phase
// locking:
//  - A Transaction's writes wait in its write set; reads see them. Reads take
//    S record locks, writes X record locks, scans an S range lock on the whole
//    requested range (tc/lock/lock_manager.h).
//  - Commit appends ONE log record holding every write (tc/commit_record.md),
//    operation i gets LSN span.lsn + i, applies them to the DC with the log's
//    ESL piggy-backed, releases the locks (early lock release, the default;
//    else after durability), waits until the log made the record durable and
//    only then reports success. Read-only transactions log nothing, but one
//    that read early-released data waits until it is durable (tc/txn.md,
//    "Early lock release"); aborted ones never reach the DC.
//  - Reads are fenced (tc/txn.md, "Read fences"): they carry the TC's
//    incarnation and the DC instance it restarted; a DC that refuses them
//    (StaleIncarnation) is recovered like one that refused a write.
//  - A background thread sends the ESL to the DC when no Apply carried it
//    (within Options::esl_interval) and checkpoints every
//    Options::checkpoint_log_bytes of log, or Options::checkpoint_interval.
//  - Open runs redo recovery: RestartTo(end of stable log) on the DC, replay
//    of every commit record from the durable RSSP in batches.
//  - DC failure while running (tc/txn.md, "DC recovery"): a DC call that
//    finds the DC gone (Unavailable, TimedOut, IOError, ShuttingDown) or
//    taken over (StaleIncarnation) puts the TC in DC recovery: the
//    background thread waits for the DC, restarts it to the log's ESL (a new
//    incarnation) and replays from the RSSP. Meanwhile reads and commits wait
//    up to Options::dc_wait, then fail with a retryable Unavailable; a commit
//    whose record is in the log is still reported by its durability.
//
// LSN conventions: the log's Esl() is an exclusive end (every record ending
// at or below it is durable); the DC's ESL is inclusive (every LSN at or
// below it is durable). The TC sends the DC log.Esl() - 1.
//
// Thread safety: TxnManager's methods may be called from any threads at once;
// Close must not race with other calls. A Transaction is driven by one thread
// at a time (any thread), and must be finished (Commit/Abort, or destroyed,
// which aborts) before the TxnManager is closed or destroyed.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/slice.h"
#include "common/status.h"
#include "protocol/data_component.h"
#include "tc/scan_iterator.h"
#include "tc/lock/lock_manager.h"
#include "tc/wal/log.h"

namespace deuteron::tc {

struct TxnOptions {
  std::chrono::milliseconds lock_timeout{10000};
  // Most delay between the log's ESL moving and the DC hearing of it when no
  // Apply carries it.
  std::chrono::milliseconds esl_interval{20};
  // Coalesce the Apply batches of concurrent commits: one committer at a
  // time applies (the leader), taking every batch queued meanwhile into its
  // call, so a remote DC sees one round trip per group, not per commit.
  // Commits in one group never share a key (each holds its X locks until
  // after its apply), so per-key LSN order holds.
  bool coalesce_applies = true;
  // Whether commits piggy-back the ESL on Apply (off: only the idle path
  // sends it; for tests and measurements).
  bool piggyback_esl = true;
  // Checkpoint once the log grew this many bytes past the durable RSSP
  // (0: only on demand).
  uint64_t checkpoint_log_bytes = 64ull << 20;
  // ... and at least this often while the log grows (0: never by time).
  std::chrono::milliseconds checkpoint_interval{60000};
  // Most operations, and most key + value bytes, per Apply call, for commits
  // and for recovery's replay (keep them within the DC's max_batch_ops and
  // max_batch_bytes; a larger transaction is applied in several calls).
  size_t apply_batch_ops = 4096;
  size_t apply_batch_bytes = 16 << 20;
  // Keys and values over these limits are refused (TooLarge) at Put, before
  // anything reaches the log (keep them within the DC's tree limits).
  size_t max_key_size = 1024;
  size_t max_value_size = 64 << 10;
  // Scans page through the DC this many items per call (within its max).
  uint32_t scan_page = 1000;
  // While the DC is unreachable or being recovered, reads and commits wait
  // this long for it, then fail with Unavailable (retryable). Also how long a
  // call retries a DC that answers Busy (backpressure).
  std::chrono::milliseconds dc_wait{5000};
  // How often an idle TC asks the DC for its health, to notice a DC that
  // restarted or was restarted by someone else while no call reached it
  // (0: never; every fenced call notices anyway).
  std::chrono::milliseconds dc_probe_interval{200};
  // Early lock release (tc/txn.md, "Early lock release"): a committing
  // transaction releases its locks once its record is appended and its
  // operations are in the DC, before the record is durable; a transaction
  // that read such data is acknowledged only once the log made it durable.
  // Off: locks are held until the commit record is durable.
  bool early_lock_release = true;
  // Called during recovery's replay with the log bytes replayed so far and
  // the bytes to replay (for a progress line, tc/cli/progress.h); from the
  // recovering thread, at most once per record. Empty: none.
  std::function<void(uint64_t done, uint64_t total)> replay_progress;
  // Most bytes of one transaction's write set, as its commit record encodes
  // them (Transaction::write_set_bytes); a write that would pass it fails
  // TooLarge and the transaction stays active. 0: the most the log takes in
  // one record (wal::Log::MaxPayload), past which the commit would fail.
  size_t max_write_set_bytes = 0;
};

struct TxnStats {
  uint64_t commits = 0;          // write transactions committed
  uint64_t read_only_commits = 0;
  uint64_t aborts = 0;
  uint64_t applies = 0;          // DC Apply calls from commits (one per group)
  uint64_t esl_sends = 0;        // SetEsl calls from the background thread
  uint64_t checkpoints = 0;      // RSSPs made durable
  uint64_t replayed_ops = 0;     // at the last Open or DC recovery
  uint64_t dc_recoveries = 0;    // DC recoveries completed while running
  uint64_t dc_unavailable = 0;   // calls that gave up waiting for the DC
  uint64_t early_releases = 0;   // commits that released their locks before durability
  // Read-only commits that waited for the durability of data they read
  // (released early by its writer).
  uint64_t read_only_waits = 0;
  // The log, for `deuteron stats`:
  uint64_t esl = 0, rssp = 0, log_tail = 0;
  uint64_t log_held_bytes = 0;     // from the durable RSSP's segment start to the tail
  uint64_t log_bytes_written = 0;
};

class TxnManager;

class Transaction {
 public:
  ~Transaction();  // aborts when still active
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  TxnId id() const { return id_; }

  // NotFound when absent (or deleted, by this transaction too). Deadlock or
  // TimedOut from the lock: the transaction is then aborted (all locks
  // released); the caller may retry with a new one. TransactionFinished after
  // Commit/Abort.
  Result<std::string> Get(Slice key);
  // X-locks the key and records the write. Lock failures as Get; TooLarge
  // over the limits (the transaction stays active).
  Status Put(Slice key, Slice value);
  Status Delete(Slice key);
  // An iterator over the range in scan order, the DC's data merged with this
  // transaction's writes (tc/scan_iterator.h), positioned on the first item,
  // after an S range lock on the whole range. Lock failures as Get; a DC
  // error while positioning is returned. The iterator pages through the DC.
  Result<std::unique_ptr<ScanIterator>> Scan(const ScanOptions& options);
  // Scan collected into a vector (the whole range in memory).
  Result<std::vector<KeyValue>> ScanAll(const ScanOptions& options);

  // See TxnManager. On failure the transaction is finished (aborted, or in
  // doubt when the log failed after the record was appended: tc/txn.md).
  Status Commit();
  // Drops the write set and releases the locks. Idempotent.
  void Abort();

  bool active() const { return active_; }
  // The write set's size as its commit record encodes it (tc/commit_record.md:
  // per key its kind, key and value with their varint lengths; plus at most 6
  // for the version and count), and its number of keys; 0 once finished.
  // For memory accounting (tc/server/tc_budget.h).
  size_t write_set_bytes() const { return writes_.empty() ? 0 : write_bytes_ + kRecordHeaderBytes; }
  size_t write_set_keys() const { return writes_.size(); }

 private:
  friend class TxnManager;
  static constexpr size_t kRecordHeaderBytes = 6;   // version + op count (a varint32, at most 5)
  static size_t VarintBytes(size_t n) {
    size_t bytes = 1;
    for (; n >= 0x80; n >>= 7) ++bytes;
    return bytes;
  }
  // An operation's bytes in the commit record: kind, key, and an upsert's value.
  static size_t OpBytes(size_t key, const std::optional<std::string>& value) {
    return 1 + VarintBytes(key) + key + (value ? VarintBytes(value->size()) + value->size() : 0);
  }
  // Records `value` (nullopt: a delete) for `key` in the write set, or
  // TooLarge when the write set would pass the limit.
  Status RecordWrite(Slice key, std::optional<std::string> value);
  friend class ScanIterator;
  Transaction(TxnManager* tm, TxnId id) : tm_(tm), id_(id) {}
  Status CheckActive() const;
  // After a lock failure: abort and return `s`.
  Status Fail(Status s);
  // After a read from the DC: depend on the commits that released their
  // locks before durability, when the version read (`lsn`, 0 for a scan:
  // any) may be one of theirs.
  void NoteRead(uint64_t lsn);

  TxnManager* const tm_;
  const TxnId id_;
  bool active_ = true;
  // key -> value, or nullopt for a delete. One op per key: the last write.
  std::map<std::string, std::optional<std::string>, std::less<>> writes_;
  size_t write_bytes_ = 0;  // sum of OpBytes over writes_
  int open_scans_ = 0;  // live ScanIterators, which must go first
  // Early lock release: a log end that must be durable before this
  // transaction is acknowledged (0: none), the end of the latest
  // early-released commit it may have read from.
  uint64_t depends_on_ = 0;
};

class TxnManager {
 public:
  // Recovers and starts serving: RestartTo(log->Esl() - 1) on `dc`, replay
  // of the log from its durable RSSP, then the ESL/checkpoint thread starts.
  // `dc` and `log` must outlive the TxnManager.
  static Result<std::unique_ptr<TxnManager>> Open(DataComponent* dc, wal::Log* log,
                                                  TxnOptions options);
  ~TxnManager();  // Close()

  std::unique_ptr<Transaction> Begin();

  // Chooses an RSSP no in-flight commit is below, has the DC acknowledge it,
  // records it in the log (which truncates). One at a time. Unavailable
  // while a DC recovery runs.
  Status Checkpoint();

  // Stops the background thread and sends the final ESL. REQUIRES: no
  // transaction active. Idempotent. Does not close the log or the DC.
  Status Close();

  // OK while serving; Unavailable while a DC recovery runs (the TC recovers
  // by itself); the error that made the TC fail (the log failed, or the DC
  // refused a commit's operations for a reason other than being gone)
  // otherwise: reopen to recover.
  Status health() const;
  // True while the TC waits for the DC, restarts it or replays into it.
  bool dc_recovering() const { return recovering_.load(std::memory_order_acquire); }
  // OK unless the TC has failed for good; then the error that made it fail.
  // Final: once not OK it never changes, so it tells a failure apart from a
  // DC recovery (which ends by itself) whatever happened since health().
  Status failure() const { return CheckHealthy(); }

  uint64_t incarnation() const { return incarnation_.load(std::memory_order_acquire); }
  // Early lock release on or off for the commits that start from now on
  // (TxnOptions::early_lock_release is the initial setting). Safe at any
  // time: readers always track the early-released data they read.
  void SetEarlyLockRelease(bool on) { early_lock_release_.store(on, std::memory_order_relaxed); }
  TxnStats stats() const;
  // The DC's counters (a call to the DC when it is remote), for stats.
  Result<DcStats> DcStatsNow() const { return dc_->GetStats(); }
  LockManager& locks() { return locks_; }

 private:
  friend class Transaction;
  friend class ScanIterator;
  TxnManager(DataComponent* dc, wal::Log* log, TxnOptions options);

  // Open's recovery: RestartAndReplay with the log's ESL.
  Status Recover();
  // RestartTo(end - 1) on the DC (keeping the new incarnation), then replay
  // of every operation with LSN >= max(log RSSP, DC RSSP) in records ending
  // at or below `end`. REQUIRES: no commit applies or appends meanwhile.
  Status RestartAndReplay(wal::Lsn end);

  // ---- DC recovery (tc/txn_recovery.cpp) ----
  // Whether `s` from a DC call means the DC is gone or was taken over, so the
  // TC must restart it and replay (vs a refusal of the request itself).
  static bool DcLost(const Status& s);
  // Puts the TC in DC recovery (idempotent) and wakes the background thread.
  void TriggerDcRecovery(const Status& why);
  // Enters the DC section for a commit or checkpoint (counted in dc_users_):
  // waits until no recovery runs, up to `deadline`, then Unavailable.
  // Also the TC's failure, if it failed.
  Status EnterDc(std::chrono::steady_clock::time_point deadline);
  void LeaveDc();
  // For reads (not counted): waits until no recovery runs, up to `deadline`.
  Status WaitDcReady(std::chrono::steady_clock::time_point deadline);
  // Reads through the DC, waiting out recoveries and Busy up to dc_wait.
  Result<ReadResult> DcGet(Slice key);
  Result<ScanResult> DcScan(const ScanRequest& request);
  template <typename T, typename Read>
  Result<T> ReadThroughDc(Read&& read);
  // One round of DC recovery, on the background thread: waits until no
  // commit is inside the DC section, makes every appended record durable,
  // then RestartAndReplay(ESL). OK when the TC serves again.
  Status RecoverDcRound();
  // The background thread's share: a recovery round when one is due, or a
  // health probe when idle for dc_probe_interval.
  void MaintainDc();
  // Appends, applies and waits for durability; releases the transaction's
  // locks early (and says so in *released) when early_lock_release.
  Status CommitWrites(Transaction* txn, bool* released);
  // A read-only commit's wait for the data it read (Transaction::depends_on_).
  Status WaitDependency(uint64_t end);
  // Applies `ops` in order, in calls within the batch limits.
  Result<ApplyResult> ApplyInBatches(std::span<const RecordOp> ops, uint64_t esl);
  // A commit's apply: ApplyInBatches retrying Unavailable, coalesced with
  // concurrent commits' when options_.coalesce_applies. Returns the status.
  Status ApplyCommit(std::span<const RecordOp> ops);
  Status ApplyWithRetry(std::span<const RecordOp> ops);
  // The DC's form of the log's ESL.
  uint64_t DcEsl() const { return log_->Esl() - 1; }
  void NoteEslSent(uint64_t esl);
  void NoteAppended(wal::Lsn end);
  void Fail(Status s);
  Status CheckHealthy() const;
  void BackgroundLoop();

  DataComponent* const dc_;
  wal::Log* const log_;
  const TxnOptions options_;
  LockManager locks_;
  // The DC incarnation this TC started: written by recovery while no commit
  // is inside the DC section.
  std::atomic<uint64_t> incarnation_{0};
  // The DC's instance (DcReady::instance) when this TC last restarted it.
  std::atomic<uint64_t> dc_instance_{0};
  std::atomic<TxnId> next_txn_{1};

  // DC recovery state. recovering_ is set (under dc_mu_) when a DC call found
  // the DC gone, and cleared by the background thread once a round restarted
  // and replayed it. dc_users_ counts commits and checkpoints inside the DC
  // section (between EnterDc and LeaveDc): a round starts only when it is 0,
  // and none enters while recovering_.
  mutable std::mutex dc_mu_;
  std::condition_variable dc_cv_;
  std::atomic<bool> recovering_{false};
  int dc_users_ = 0;                      // GUARDED_BY(dc_mu_)
  Status dc_lost_why_;                    // GUARDED_BY(dc_mu_): the first cause
  std::atomic<uint64_t> max_appended_end_{0};  // highest end any Append returned
  std::chrono::steady_clock::time_point next_round_;  // bg thread only
  std::chrono::milliseconds round_backoff_{0};        // bg thread only
  std::chrono::steady_clock::time_point last_probe_;  // bg thread only

  // In-flight commits: a lower bound of each one's first LSN, registered
  // before Append, dropped once its operations are in the DC. The RSSP never
  // passes the smallest.
  std::mutex inflight_mu_;
  std::multiset<uint64_t> inflight_;  // GUARDED_BY(inflight_mu_)

  // The apply group (coalesce_applies): queued commits and whether a leader
  // is applying.
  struct ApplyRequest {
    std::span<const RecordOp> ops;
    Status result;
    bool done = false;
  };
  std::mutex group_mu_;
  std::condition_variable group_cv_;
  std::vector<ApplyRequest*> group_queue_;  // GUARDED_BY(group_mu_)
  bool group_applying_ = false;             // GUARDED_BY(group_mu_)

  std::atomic<uint64_t> esl_sent_{0};  // highest DC ESL any call carried
  // Early lock release: the highest log end of a commit that released its
  // locks before its record was durable (raised before the release, so a
  // transaction that locks a key after it sees the value).
  std::atomic<uint64_t> released_end_{0};
  std::atomic<bool> early_lock_release_;  // SetEarlyLockRelease
  std::mutex checkpoint_mu_;           // one checkpoint at a time
  std::atomic<uint64_t> last_checkpoint_tail_{0};  // log Tail() at the last checkpoint
  std::chrono::steady_clock::time_point last_checkpoint_time_;  // bg thread only

  mutable std::mutex fail_mu_;
  Status failed_;                      // GUARDED_BY(fail_mu_)
  std::atomic<bool> has_failed_{false};

  std::mutex bg_mu_;
  std::condition_variable bg_cv_;
  bool stop_ = false;  // GUARDED_BY(bg_mu_)
  std::thread bg_;
  bool closed_ = false;

  std::atomic<uint64_t> commits_{0}, ro_commits_{0}, aborts_{0}, applies_{0};
  std::atomic<uint64_t> esl_sends_{0}, checkpoints_{0}, replayed_ops_{0};
  std::atomic<uint64_t> dc_recoveries_{0}, dc_unavailable_{0};
  std::atomic<uint64_t> early_releases_{0}, read_only_waits_{0};
};

}  // namespace deuteron::tc
