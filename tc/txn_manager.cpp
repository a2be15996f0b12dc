#include "tc/txn_manager.h"

#include <algorithm>
#include <cassert>
#include <deque>
#include <limits>

#include "common/fault_hooks.h"
#include "common/logging.h"
#include "tc/commit_record.h"

namespace deuteron::tc {

namespace {

// How long a commit waits before it resends an Apply the DC refused with
// Busy (backpressure).
constexpr std::chrono::milliseconds kBusyRetryDelay{2};

}  // namespace

// ------------------------------------------------------------ Transaction

Transaction::~Transaction() {
  assert(open_scans_ == 0 && "a ScanIterator outlives its transaction");
  Abort();
}

Status Transaction::CheckActive() const {
  if (!active_) return Status::TransactionFinished("transaction " + std::to_string(id_) + " is finished");
  return Status::OK();
}

Status Transaction::Fail(Status s) {
  Abort();
  return s;
}

void Transaction::Abort() {
  if (!active_) return;
  active_ = false;
  writes_.clear();
  write_bytes_ = 0;
  tm_->locks_.ReleaseAll(id_);
  tm_->aborts_.fetch_add(1, std::memory_order_relaxed);
}

Result<std::string> Transaction::Get(Slice key) {
  if (Status s = CheckActive(); !s.ok()) return s;
  auto it = writes_.find(std::string_view(key.data(), key.size()));
  if (it != writes_.end()) {
    if (!it->second) return Status::NotFound("deleted by this transaction");
    return *it->second;
  }
  if (Status s = tm_->locks_.LockKey(id_, key, LockMode::kShared); !s.ok()) return Fail(std::move(s));
  // After the lock: a failed or DC-recovering TC may have left the DC
  // without a committed writer's operations (or with a doubtful one's), so
  // nothing is read until it serves again (DcGet waits, then Unavailable).
  Result<ReadResult> r = tm_->DcGet(key);
  if (!r.ok()) return r.status();
  // A tombstone has its LSN too: a delete released early is a dependency.
  if (r->lsn != 0) NoteRead(r->lsn);
  if (!r->found) return Status::NotFound("key not found");
  return std::move(r->value);
}

Status Transaction::Put(Slice key, Slice value) {
  if (Status s = CheckActive(); !s.ok()) return s;
  if (key.size() > tm_->options_.max_key_size || value.size() > tm_->options_.max_value_size) {
    return Status::TooLarge("key or value over the limits");
  }
  if (Status s = tm_->locks_.LockKey(id_, key, LockMode::kExclusive); !s.ok()) return Fail(std::move(s));
  return RecordWrite(key, value.ToString());
}

Status Transaction::Delete(Slice key) {
  if (Status s = CheckActive(); !s.ok()) return s;
  if (key.size() > tm_->options_.max_key_size) return Status::TooLarge("key over the limit");
  if (Status s = tm_->locks_.LockKey(id_, key, LockMode::kExclusive); !s.ok()) return Fail(std::move(s));
  return RecordWrite(key, std::nullopt);
}

Status Transaction::RecordWrite(Slice key, std::optional<std::string> value) {
  const std::string_view k(key.data(), key.size());
  auto it = writes_.find(k);
  const size_t old_bytes = it == writes_.end() ? 0 : OpBytes(k.size(), it->second);
  const size_t new_bytes = write_bytes_ - old_bytes + OpBytes(k.size(), value);
  const size_t limit = tm_->options_.max_write_set_bytes != 0 ? tm_->options_.max_write_set_bytes
                                                              : tm_->log_->MaxPayload();
  if (new_bytes + kRecordHeaderBytes > limit) {
    // The X lock stays: released with the others at commit or abort.
    return Status::TooLarge("transaction " + std::to_string(id_) + ": its write set would pass " +
                            std::to_string(limit) + " bytes");
  }
  if (it == writes_.end()) {
    writes_.emplace(std::string(k), std::move(value));
  } else {
    it->second = std::move(value);
  }
  write_bytes_ = new_bytes;
  return Status::OK();
}

// Scan and ScanAll: tc/scan_iterator.cpp.

void Transaction::NoteRead(uint64_t lsn) {
  // Loaded after this transaction's lock on what it read: every commit that
  // released a lock on it before is in released_end_ (tc/txn.md, "Early
  // lock release"). A version below the log's ESL is durable already.
  const uint64_t released = tm_->released_end_.load(std::memory_order_acquire);
  const uint64_t esl = tm_->log_->Esl();
  if (released <= esl) return;  // every early release is durable
  if (lsn != 0 && lsn < esl) return;
  depends_on_ = std::max(depends_on_, released);
}

Status Transaction::Commit() {
  if (Status s = CheckActive(); !s.ok()) return s;
  active_ = false;
  if (writes_.empty()) {
    tm_->locks_.ReleaseAll(id_);
    // It read data whose writer released its locks before durability: not
    // acknowledged before that data is durable (a crash would undo it).
    if (depends_on_ != 0) {
      if (Status s = tm_->WaitDependency(depends_on_); !s.ok()) {
        tm_->aborts_.fetch_add(1, std::memory_order_relaxed);
        return s;
      }
    }
    tm_->ro_commits_.fetch_add(1, std::memory_order_relaxed);
    return Status::OK();
  }
  bool released = false;
  Status s = tm_->CommitWrites(this, &released);
  writes_.clear();
  write_bytes_ = 0;
  // Strict 2PL: unless released early (once applied), the locks go only
  // now, after the record is durable (or the TC failed, which refuses every
  // later read). Its own record ends above every dependency it read.
  if (!released) tm_->locks_.ReleaseAll(id_);
  (s.ok() ? tm_->commits_ : tm_->aborts_).fetch_add(1, std::memory_order_relaxed);
  return s;
}

// ------------------------------------------------------------ TxnManager

TxnManager::TxnManager(DataComponent* dc, wal::Log* log, TxnOptions options)
    : dc_(dc), log_(log), options_(options),
      locks_(LockManager::Options{options.lock_timeout}),
      early_lock_release_(options.early_lock_release) {}

Result<std::unique_ptr<TxnManager>> TxnManager::Open(DataComponent* dc, wal::Log* log,
                                                     TxnOptions options) {
  std::unique_ptr<TxnManager> tm(new TxnManager(dc, log, options));
  if (Status s = tm->Recover(); !s.ok()) return s;
  tm->last_checkpoint_tail_ = log->Tail();
  tm->last_checkpoint_time_ = std::chrono::steady_clock::now();
  tm->bg_ = std::thread([p = tm.get()] { p->BackgroundLoop(); });
  return tm;
}

TxnManager::~TxnManager() {
  Status s = Close();
  s.PermitUncheckedError();
  failed_.PermitUncheckedError();  // a member, read through CheckHealthy
  dc_lost_why_.PermitUncheckedError();  // a member, copied into messages
}

std::unique_ptr<Transaction> TxnManager::Begin() {
  return std::unique_ptr<Transaction>(
      new Transaction(this, next_txn_.fetch_add(1, std::memory_order_relaxed)));
}

Status TxnManager::WaitDependency(uint64_t end) {
  if (log_->Esl() >= end) return Status::OK();
  read_only_waits_.fetch_add(1, std::memory_order_relaxed);
  Status s = log_->WaitDurable(end);
  if (!s.ok()) {
    // The writer's record may be lost: what this transaction read may never
    // have been (tc/txn.md, "Early lock release").
    return s.WithContext("read-only commit: data it read was not made durable");
  }
  return s;
}

Status TxnManager::CommitWrites(Transaction* txn, bool* released) {
  if (Status s = CheckHealthy(); !s.ok()) return s;
  const auto deadline = std::chrono::steady_clock::now() + options_.dc_wait;
  // One op per key, in key order (the write set is a map).
  std::vector<RecordOp> ops;
  ops.reserve(txn->writes_.size());
  for (const auto& [k, v] : txn->writes_) {
    ops.push_back(v ? RecordOp{RecordOpKind::kUpsert, Slice(k), Slice(*v), 0}
                    : RecordOp{RecordOpKind::kDelete, Slice(k), Slice(), 0});
  }
  std::string payload;
  EncodeCommitRecord(ops, &payload);

  // Append and apply inside the DC section: a DC recovery starts only when
  // no commit is between its Append and the end of its Apply, so every
  // record appended before a recovery is covered by that recovery's replay
  // (tc/txn.md, "DC recovery"). While a recovery runs nothing is appended:
  // after dc_wait the commit fails with Unavailable, leaving nothing behind.
  if (Status s = EnterDc(deadline); !s.ok()) return s;

  // Register as in flight BEFORE Append, with the tail as a lower bound of
  // the span: a checkpoint must never choose an RSSP above operations that
  // are in the log but not yet in the DC.
  std::multiset<uint64_t>::iterator inflight;
  {
    std::lock_guard<std::mutex> l(inflight_mu_);
    inflight = inflight_.insert(log_->Tail());
  }
  auto done_inflight = [&] {
    std::lock_guard<std::mutex> l(inflight_mu_);
    inflight_.erase(inflight);
  };
  Result<wal::LogSpan> span = log_->Append(payload);
  if (!span.ok()) {
    // Nothing reached the log: the transaction is simply aborted.
    done_inflight();
    LeaveDc();
    return span.status();
  }
  NoteAppended(span->end);
  // Every op needs its own LSN inside the span (a record spans at least its
  // payload bytes, and every op takes at least two).
  assert(span->end - span->lsn >= ops.size());
  if (span->end - span->lsn < ops.size()) {
    LeaveDc();
    Fail(Status::Internal("commit record span shorter than its operation count"));
    return Status::Internal("commit record span shorter than its operation count");
  }
  for (size_t i = 0; i < ops.size(); ++i) ops[i].lsn = span->lsn + i;

  // Apply before durability (the apply-before-durable window): the X locks
  // keep every reader off these keys until the record is durable.
  Status applied = ApplyCommit(ops);
  if (applied.ok()) {
    done_inflight();
  } else if (DcLost(applied)) {
    // The DC is gone or was taken over. The recovery this triggers starts
    // after LeaveDc below, so its replay covers this record; no checkpoint
    // runs before it succeeds (Checkpoint checks recovering_ after reading
    // the in-flight set), so the entry may go now. Readers of these keys
    // wait for the recovery: the commit is reported by its durability.
    TriggerDcRecovery(applied);
    done_inflight();
  } else {
    // The record is in the log and may become durable: the TC can no longer
    // serve reads that would miss it. It stays in flight (no RSSP passes
    // it); a reopen replays it.
    Fail(applied.WithContext("DC apply failed after the commit record was appended"));
  }
  LeaveDc();

  if (applied.ok() && early_lock_release_.load(std::memory_order_relaxed)) {
    // Early lock release: the record is appended (the commit is decided:
    // nothing can abort it now, only a log failure leaves it in doubt) and
    // its operations are in the DC, so a reader of these keys sees them. A
    // later writer of a key appends after this record, so its own
    // durability covers this one; a later reader depends on released_end_,
    // raised before the locks go.
    uint64_t cur = released_end_.load(std::memory_order_relaxed);
    while (cur < span->end &&
           !released_end_.compare_exchange_weak(cur, span->end, std::memory_order_release)) {
    }
    locks_.ReleaseAll(txn->id_);
    *released = true;
    early_releases_.fetch_add(1, std::memory_order_relaxed);
  }

  Status durable = log_->WaitDurable(span->end);
  if (!durable.ok()) {
    // In doubt: the record may or may not have reached the disk. The DC may
    // hold its operations above the ESL; the failed TC refuses all reads and
    // recovery (RestartTo E) decides, wholly one way or the other.
    Fail(durable.WithContext("log failed before the commit record was durable"));
    return durable.WithContext("commit outcome in doubt (log failed)");
  }
  // Durable: committed, even if the DC apply failed (recovery applies it).
  DEUTERON_KILL_POINT(kTcCommitBeforeAck);
  return Status::OK();
}

Status TxnManager::ApplyWithRetry(std::span<const RecordOp> ops) {
  const uint64_t esl = options_.piggyback_esl ? DcEsl() : 0;
  // Busy (the DC's backpressure) is retried up to dc_wait; a retry resends
  // everything: idempotence skips what already landed, and the commits
  // still hold their X locks, so per-key LSN order holds. Anything else
  // goes back to the commit (a lost DC starts a DC recovery).
  const auto deadline = std::chrono::steady_clock::now() + options_.dc_wait;
  Result<ApplyResult> applied = ApplyInBatches(ops, esl);
  while (!applied.ok() && applied.status().IsBusy()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      applied = Status::Unavailable("DC busy for " + std::to_string(options_.dc_wait.count()) +
                                    " ms: " + std::string(applied.status().message()));
      break;
    }
    std::this_thread::sleep_for(kBusyRetryDelay);
    applied = ApplyInBatches(ops, esl);
  }
  applies_.fetch_add(1, std::memory_order_relaxed);
  if (!applied.ok()) return applied.status();
  NoteEslSent(esl);
  return Status::OK();
}

Status TxnManager::ApplyCommit(std::span<const RecordOp> ops) {
  if (!options_.coalesce_applies) return ApplyWithRetry(ops);
  ApplyRequest me;
  me.ops = ops;
  std::unique_lock<std::mutex> l(group_mu_);
  group_queue_.push_back(&me);
  group_cv_.wait(l, [&] { return me.done || !group_applying_; });
  if (me.done) return std::move(me.result);
  // Leader: take every queued batch (this one included) into one apply.
  // Queued commits never share a key (each still holds its X locks), so
  // their order inside the group does not matter for per-key LSN order.
  group_applying_ = true;
  std::vector<ApplyRequest*> group;
  group.swap(group_queue_);
  l.unlock();
  std::vector<RecordOp> all;
  if (group.size() > 1) {
    size_t n = 0;
    for (const ApplyRequest* r : group) n += r->ops.size();
    all.reserve(n);
    for (const ApplyRequest* r : group) all.insert(all.end(), r->ops.begin(), r->ops.end());
  }
  Status s = ApplyWithRetry(group.size() > 1 ? std::span<const RecordOp>(all) : ops);
  l.lock();
  for (ApplyRequest* r : group) {
    r->result = s;
    r->done = true;
  }
  group_applying_ = false;
  l.unlock();
  group_cv_.notify_all();
  me.result.PermitUncheckedError();
  return s;
}

Result<ApplyResult> TxnManager::ApplyInBatches(std::span<const RecordOp> ops, uint64_t esl) {
  ApplyResult total;
  size_t start = 0;
  while (start < ops.size()) {
    size_t end = start;
    size_t bytes = 0;
    while (end < ops.size() && end - start < options_.apply_batch_ops) {
      const size_t b = ops[end].key.size() + ops[end].value.size();
      if (end > start && bytes + b > options_.apply_batch_bytes) break;
      bytes += b;
      ++end;
    }
    Result<ApplyResult> r =
        dc_->Apply(ops.subspan(start, end - start), esl, incarnation_.load(std::memory_order_acquire));
    if (!r.ok()) return r.status();
    total.applied += r->applied;
    total.skipped += r->skipped;
    start = end;
  }
  return total;
}

void TxnManager::NoteAppended(wal::Lsn end) {
  uint64_t cur = max_appended_end_.load(std::memory_order_relaxed);
  while (cur < end && !max_appended_end_.compare_exchange_weak(cur, end, std::memory_order_relaxed)) {
  }
}

void TxnManager::NoteEslSent(uint64_t esl) {
  uint64_t cur = esl_sent_.load(std::memory_order_relaxed);
  while (cur < esl && !esl_sent_.compare_exchange_weak(cur, esl, std::memory_order_relaxed)) {
  }
}

void TxnManager::Fail(Status s) {
  s.PermitUncheckedError();  // kept (the first) or dropped (a later one)
  {
    std::lock_guard<std::mutex> l(fail_mu_);
    if (has_failed_.load(std::memory_order_relaxed)) return;
    DLOG_ERROR("TC failed: {}", s.ToString());
    failed_ = std::move(s);
    failed_.PermitUncheckedError();  // callers check the copies CheckHealthy returns
    has_failed_.store(true, std::memory_order_release);
  }
  // Wake whoever waits for a DC recovery: the failure is final.
  { std::lock_guard<std::mutex> l(dc_mu_); }
  dc_cv_.notify_all();
}

Status TxnManager::CheckHealthy() const {
  if (!has_failed_.load(std::memory_order_acquire)) return Status::OK();
  std::lock_guard<std::mutex> l(fail_mu_);
  return failed_;
}

Status TxnManager::health() const {
  if (Status s = CheckHealthy(); !s.ok()) return s;
  if (recovering_.load(std::memory_order_acquire)) {
    return Status::Unavailable("the TC is recovering the DC (restart-to and replay)");
  }
  return Status::OK();
}

Status TxnManager::Checkpoint() {
  if (Status s = CheckHealthy(); !s.ok()) return s;
  std::lock_guard<std::mutex> cl(checkpoint_mu_);
  // Inside the DC section: no DC recovery runs meanwhile. No waiting for
  // one (Unavailable at once): the background thread, which runs both
  // checkpoints and recoveries, must never wait for itself.
  if (Status s = EnterDc(std::chrono::steady_clock::now()); !s.ok()) return s;
  struct Leave {
    TxnManager* tm;
    ~Leave() { tm->LeaveDc(); }
  } leave{this};
  const uint64_t tail = log_->Tail();
  wal::Lsn rssp;
  {
    // Under inflight_mu_: a commit registering after this has a lower bound
    // (the tail then) at or above the ESL read here.
    std::lock_guard<std::mutex> l(inflight_mu_);
    rssp = log_->Esl();
    if (!inflight_.empty()) rssp = std::min(rssp, *inflight_.begin());
    // A commit whose apply found the DC gone drops its entry only after it
    // set recovering_: seen here, the RSSP could pass operations the DC
    // lacks until the recovery replays them.
    if (recovering_.load(std::memory_order_acquire)) {
      return Status::Unavailable("checkpoint: the TC is recovering the DC");
    }
  }
  if (rssp <= log_->DurableRssp()) return Status::OK();
  const uint64_t inc = incarnation_.load(std::memory_order_acquire);
  // The DC accepts an RSSP up to its ESL + 1: bring its ESL up first.
  const uint64_t esl = DcEsl();
  if (Status s = dc_->SetEsl(esl, inc); !s.ok()) {
    if (DcLost(s)) TriggerDcRecovery(s);
    return s.WithContext("checkpoint: SetEsl");
  }
  NoteEslSent(esl);
  if (Status s = dc_->ProposeRssp(rssp, inc); !s.ok()) {
    if (DcLost(s)) TriggerDcRecovery(s);
    return s.WithContext("checkpoint: ProposeRssp");
  }
  if (Status s = log_->SetDurableRssp(rssp); !s.ok()) return s.WithContext("checkpoint: log RSSP");
  last_checkpoint_tail_.store(tail, std::memory_order_relaxed);
  checkpoints_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

void TxnManager::BackgroundLoop() {
  std::unique_lock<std::mutex> l(bg_mu_);
  while (!stop_) {
    // While a DC recovery is due, wake for its next round even when the ESL
    // interval is longer.
    auto wait = std::chrono::duration_cast<std::chrono::microseconds>(options_.esl_interval);
    if (recovering_.load(std::memory_order_acquire)) {
      wait = std::clamp(std::chrono::duration_cast<std::chrono::microseconds>(
                            next_round_ - std::chrono::steady_clock::now()),
                        std::chrono::microseconds(100), wait);
    }
    bg_cv_.wait_for(l, wait);
    if (stop_) break;
    l.unlock();
    // A DC recovery when one is due, else the idle health probe.
    if (CheckHealthy().ok()) MaintainDc();
    if (CheckHealthy().ok() && !recovering_.load(std::memory_order_acquire)) {
      const uint64_t esl = DcEsl();
      if (esl > esl_sent_.load(std::memory_order_relaxed)) {
        Status s = dc_->SetEsl(esl, incarnation_.load(std::memory_order_acquire));
        if (s.ok()) {
          NoteEslSent(esl);
          esl_sends_.fetch_add(1, std::memory_order_relaxed);
        } else if (DcLost(s)) {
          // Gone, or another TC restarted the DC: restart it and replay.
          TriggerDcRecovery(s.WithContext("SetEsl"));
        } else {
          DLOG_WARN("TC: SetEsl failed (retried): {}", s.ToString());
        }
      }
      const uint64_t grown = log_->Tail() - last_checkpoint_tail_.load(std::memory_order_relaxed);
      const auto now = std::chrono::steady_clock::now();
      const bool by_size = options_.checkpoint_log_bytes != 0 && grown >= options_.checkpoint_log_bytes;
      const bool by_time = options_.checkpoint_interval.count() != 0 && grown != 0 &&
                           now - last_checkpoint_time_ >= options_.checkpoint_interval;
      if (by_size || by_time) {
        last_checkpoint_time_ = now;
        Status s = Checkpoint();
        if (!s.ok()) DLOG_WARN("TC: scheduled checkpoint failed: {}", s.ToString());
      }
    }
    l.lock();
  }
}

Status TxnManager::Close() {
  if (closed_) return Status::OK();
  closed_ = true;
  {
    std::lock_guard<std::mutex> l(bg_mu_);
    stop_ = true;
  }
  bg_cv_.notify_all();
  if (bg_.joinable()) bg_.join();
  if (Status s = CheckHealthy(); !s.ok()) return s;
  // A DC recovery still pending: the log holds everything; the next Open
  // restarts the DC and replays.
  if (recovering_.load(std::memory_order_acquire)) return Status::OK();
  const uint64_t esl = DcEsl();
  if (esl > esl_sent_.load(std::memory_order_relaxed)) {
    Status s = dc_->SetEsl(esl, incarnation_.load(std::memory_order_acquire));
    if (DcLost(s)) return Status::OK();  // as above: the next Open restarts it
    if (!s.ok()) return s.WithContext("close: SetEsl");
    NoteEslSent(esl);
  }
  return Status::OK();
}

TxnStats TxnManager::stats() const {
  TxnStats s;
  s.commits = commits_.load(std::memory_order_relaxed);
  s.read_only_commits = ro_commits_.load(std::memory_order_relaxed);
  s.aborts = aborts_.load(std::memory_order_relaxed);
  s.applies = applies_.load(std::memory_order_relaxed);
  s.esl_sends = esl_sends_.load(std::memory_order_relaxed);
  s.checkpoints = checkpoints_.load(std::memory_order_relaxed);
  s.replayed_ops = replayed_ops_.load(std::memory_order_relaxed);
  s.dc_recoveries = dc_recoveries_.load(std::memory_order_relaxed);
  s.dc_unavailable = dc_unavailable_.load(std::memory_order_relaxed);
  s.early_releases = early_releases_.load(std::memory_order_relaxed);
  s.read_only_waits = read_only_waits_.load(std::memory_order_relaxed);
  s.esl = log_->Esl();
  s.rssp = log_->DurableRssp();
  s.log_tail = log_->Tail();
  const uint64_t segment = log_->options().segment_size;
  const uint64_t held_from = s.rssp / segment * segment;
  s.log_held_bytes = s.log_tail > held_from ? s.log_tail - held_from : 0;
  s.log_bytes_written = log_->GetStats().bytes_written;
  return s;
}

}  // namespace deuteron::tc
