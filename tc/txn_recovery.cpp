// TxnManager's recovery: redo at Open, and DC recovery while the TC runs
// (tc/txn.md, "Recovery" and "DC recovery"). The rest of TxnManager is in
// tc/txn_manager.cpp.
#include <algorithm>
#include <deque>
#include <string>
#include <thread>

#include "common/fault_hooks.h"
#include "common/logging.h"
#include "tc/commit_record.h"
#include "tc/txn_manager.h"

namespace deuteron::tc {

namespace {

constexpr std::chrono::milliseconds kBusyReadDelay{2};
// Backoff between DC recovery rounds that found the DC still gone.
constexpr std::chrono::milliseconds kFirstRoundBackoff{10};
constexpr std::chrono::milliseconds kMaxRoundBackoff{200};

}  // namespace

Status TxnManager::Recover() {
  last_probe_ = std::chrono::steady_clock::now();
  return RestartAndReplay(log_->Esl());  // the end of the stable log E
}

Status TxnManager::RestartAndReplay(wal::Lsn end) {
  DEUTERON_KILL_POINT(kTcRecoveryBegin);
  // One store: the DC adopts the log's store id, or refuses a TC of another
  // store (StoreMismatch); a binding that says which store it holds is
  // checked here too.
  const StoreId store = log_->store_id();
  Result<DcReady> ready = dc_->RestartToStore(end - 1, store);
  if (!ready.ok()) return ready.status().WithContext("TC recovery: DC restart-to");
  if (!ready->store_id.nil() && ready->store_id != store) {
    return Status::StoreMismatch("TC recovery: the DC belongs to store " + ready->store_id.ToString() +
                                 ", this TC's log to store " + store.ToString());
  }
  incarnation_.store(ready->incarnation, std::memory_order_release);
  dc_instance_.store(ready->instance, std::memory_order_release);
  // Replay from the log's durable RSSP, or from the DC's acknowledged RSSP
  // when that is higher (a crash between ProposeRssp and SetDurableRssp):
  // operations below the DC's RSSP are durable there, and resending them
  // could resurrect a key whose tombstone the DC purged below its RSSP.
  const uint64_t first = wal::SegmentStart(wal::kFirstSegment, log_->options().segment_size);
  const wal::Lsn from = std::max({log_->DurableRssp(), ready->rssp, first});
  Result<std::unique_ptr<wal::LogReader>> reader = log_->NewReader(std::min(from, end));
  if (!reader.ok()) return reader.status().WithContext("TC recovery: log reader");

  // Own the bytes `batch` borrows. A deque: dropping its front leaves the
  // rest (the record being replayed) in place.
  std::deque<std::string> payloads;
  std::vector<RecordOp> batch;
  std::vector<RecordOp> ops;
  uint64_t replayed = 0;
  // Progress counts what the DC has applied, not what was read: a batch
  // holds up to apply_batch_ops operations, and with large values the whole
  // replay was read (100% shown) before its one batch was applied. Reported
  // at record ends: the end of the last record whose operations are all
  // in a batch applied.
  uint64_t whole_end = std::min(from, end);
  auto report = [&] {
    if (options_.replay_progress) {
      options_.replay_progress(whole_end - std::min(from, end), end - std::min(from, end));
    }
  };
  // Applies the batch (Busy retried up to dc_wait, then Unavailable), then
  // drops every payload but the current record's.
  auto flush = [&]() -> Status {
    if (batch.empty()) return Status::OK();
    const auto deadline = std::chrono::steady_clock::now() + options_.dc_wait;
    Result<ApplyResult> r = ApplyInBatches(batch, end - 1);
    while (!r.ok() && r.status().IsBusy() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(kBusyReadDelay);
      r = ApplyInBatches(batch, end - 1);
    }
    if (!r.ok() && r.status().IsBusy()) r = Status::Unavailable(r.status().message());
    if (!r.ok()) return r.status().WithContext("TC recovery: replay");
    replayed += batch.size();
    batch.clear();
    report();
    if (payloads.size() > 1) payloads.erase(payloads.begin(), payloads.end() - 1);
    return Status::OK();
  };
  wal::LogRecord rec;
  for (;;) {
    Result<bool> more = (*reader)->Next(&rec);
    if (!more.ok()) return more.status().WithContext("TC recovery: reading the log");
    // The reader stops at the ESL as of NewReader; records past `end` (made
    // durable since) are not this recovery's: their commits apply them.
    if (!*more || rec.end > end) break;
    DEUTERON_KILL_POINT(kTcReplayRecord);
    payloads.push_back(rec.payload.ToString());
    if (Status s = DecodeCommitRecord(payloads.back(), rec.lsn, &ops); !s.ok()) {
      return s.WithContext("TC recovery: record at LSN " + std::to_string(rec.lsn));
    }
    if (rec.end - rec.lsn < ops.size()) {
      return Status::Corruption("TC recovery: record at LSN " + std::to_string(rec.lsn) +
                                " holds more operations than its span");
    }
    for (const RecordOp& op : ops) {
      if (op.lsn < from) continue;
      batch.push_back(op);
      if (batch.size() >= options_.apply_batch_ops) {
        if (Status s = flush(); !s.ok()) return s;
      }
    }
    whole_end = rec.end;
  }
  if (Status s = flush(); !s.ok()) return s;
  if (whole_end > std::min(from, end)) report();  // the end, when anything was replayed
  replayed_ops_.store(replayed, std::memory_order_relaxed);
  NoteEslSent(end - 1);  // RestartTo set the DC's ESL to E - 1
  DEUTERON_KILL_POINT(kTcRecoveryEnd);
  return Status::OK();
}

bool TxnManager::DcLost(const Status& s) {
  switch (s.code()) {
    case Code::kUnavailable:       // unreachable, connection refused or reset, restarting
    case Code::kTimedOut:          // the hop timed out: the reply may never come
    case Code::kIOError:           // a reply that could not be read (remote)
    case Code::kShuttingDown:      // the DC is closing: it comes back as a new process
    case Code::kStaleIncarnation:  // someone else restarted the DC
    case Code::kNoSpace:           // the DC's disk is full: it may get space back
      return true;
    default:
      return false;
  }
}

void TxnManager::TriggerDcRecovery(const Status& why) {
  why.PermitUncheckedError();  // kept as the cause, or dropped (a recovery is due already)
  {
    std::lock_guard<std::mutex> l(dc_mu_);
    if (recovering_.load(std::memory_order_relaxed)) return;
    DLOG_WARN("TC: DC lost ({}); recovering it", why.ToString());
    dc_lost_why_ = why;
    dc_lost_why_.PermitUncheckedError();
    recovering_.store(true, std::memory_order_release);
  }
  // The background thread runs the recovery: wake it now.
  { std::lock_guard<std::mutex> l(bg_mu_); }
  bg_cv_.notify_all();
}

namespace {

Status GaveUp(std::chrono::milliseconds waited, const Status& why) {
  return Status::Unavailable("the DC is unavailable (waited " + std::to_string(waited.count()) +
                             " ms for its recovery; retry): " + why.ToString());
}

}  // namespace

Status TxnManager::EnterDc(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> l(dc_mu_);
  const bool ready = dc_cv_.wait_until(l, deadline, [&] {
    return !recovering_.load(std::memory_order_relaxed) || has_failed_.load(std::memory_order_acquire);
  });
  if (has_failed_.load(std::memory_order_acquire)) {
    l.unlock();
    return CheckHealthy();
  }
  if (!ready) {
    dc_unavailable_.fetch_add(1, std::memory_order_relaxed);
    return GaveUp(options_.dc_wait, dc_lost_why_);
  }
  ++dc_users_;
  return Status::OK();
}

void TxnManager::LeaveDc() {
  bool wake;
  {
    std::lock_guard<std::mutex> l(dc_mu_);
    --dc_users_;
    wake = dc_users_ == 0 && recovering_.load(std::memory_order_relaxed);
  }
  if (wake) dc_cv_.notify_all();
}

Status TxnManager::WaitDcReady(std::chrono::steady_clock::time_point deadline) {
  if (Status s = CheckHealthy(); !s.ok()) return s;
  if (!recovering_.load(std::memory_order_acquire)) return Status::OK();
  std::unique_lock<std::mutex> l(dc_mu_);
  const bool ready = dc_cv_.wait_until(l, deadline, [&] {
    return !recovering_.load(std::memory_order_relaxed) || has_failed_.load(std::memory_order_acquire);
  });
  if (!ready) {
    dc_unavailable_.fetch_add(1, std::memory_order_relaxed);
    return GaveUp(options_.dc_wait, dc_lost_why_);
  }
  l.unlock();
  return CheckHealthy();
}

template <typename T, typename Read>
Result<T> TxnManager::ReadThroughDc(Read&& read) {
  const auto deadline = std::chrono::steady_clock::now() + options_.dc_wait;
  for (;;) {
    if (Status s = WaitDcReady(deadline); !s.ok()) return s;
    // The fence: the incarnation this TC started and the DC instance it
    // restarted (tc/txn.md, "Read fences"). Read after WaitDcReady, so a
    // round that finished meanwhile is in it.
    const ReadFence fence{incarnation_.load(std::memory_order_acquire),
                          dc_instance_.load(std::memory_order_acquire)};
    Result<T> r = read(fence);
    if (r.ok()) return r;
    if (r.status().IsStaleIncarnation() &&
        incarnation_.load(std::memory_order_acquire) != fence.incarnation) {
      // This TC's own recovery round restarted the DC after the fence was
      // read: not a loss, read again with the new fence.
    } else if (DcLost(r.status())) {
      TriggerDcRecovery(r.status());
    } else if (!r.status().IsBusy()) {
      return r;
    } else {
      std::this_thread::sleep_for(kBusyReadDelay);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      dc_unavailable_.fetch_add(1, std::memory_order_relaxed);
      return GaveUp(options_.dc_wait, r.status());
    }
  }
}

Result<ReadResult> TxnManager::DcGet(Slice key) {
  return ReadThroughDc<ReadResult>([&](const ReadFence& f) { return dc_->GetFenced(key, f); });
}

Result<ScanResult> TxnManager::DcScan(const ScanRequest& request) {
  return ReadThroughDc<ScanResult>([&](const ReadFence& f) { return dc_->ScanFenced(request, f); });
}

Status TxnManager::RecoverDcRound() {
  {
    // recovering_ keeps new commits out; wait for those inside (their
    // Appends and Applies finish or fail on their own).
    std::unique_lock<std::mutex> l(dc_mu_);
    dc_cv_.wait(l, [&] { return dc_users_ == 0; });
  }
  // Every record appended so far becomes durable, so the ESL taken next
  // covers every commit that was inside the DC section: each is applied,
  // or replayed below.
  const wal::Lsn appended = max_appended_end_.load(std::memory_order_relaxed);
  if (appended > log_->Esl()) {
    if (Status s = log_->WaitDurable(appended); !s.ok()) {
      Fail(s.WithContext("log failed during DC recovery"));
      return s;
    }
  }
  const wal::Lsn end = log_->Esl();
  Status s = RestartAndReplay(end);
  if (!s.ok()) {
    if (DcLost(s)) return s;  // still gone: the next round retries
    // Refused for good (say a DC that holds operations above our stable
    // end: another store's, or the log was lost).
    Fail(s.WithContext("DC recovery"));
    return s;
  }
  // Counted before the TC serves again: whoever sees it serving sees the
  // recovery in stats().
  dc_recoveries_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> l(dc_mu_);
    recovering_.store(false, std::memory_order_release);
    dc_lost_why_ = Status::OK();
    dc_lost_why_.PermitUncheckedError();
  }
  last_probe_ = std::chrono::steady_clock::now();
  dc_cv_.notify_all();
  DLOG_INFO("TC: DC recovered to ESL {} (incarnation {}, {} operations replayed)", end - 1,
            incarnation_.load(std::memory_order_relaxed), replayed_ops_.load(std::memory_order_relaxed));
  return Status::OK();
}

void TxnManager::MaintainDc() {
  const auto now = std::chrono::steady_clock::now();
  if (recovering_.load(std::memory_order_acquire)) {
    if (now < next_round_) return;
    Status s = RecoverDcRound();
    if (s.ok()) {
      round_backoff_ = std::chrono::milliseconds(0);
      return;
    }
    // The first failure of a recovery is logged; the retries would flood.
    if (round_backoff_.count() == 0) DLOG_INFO("TC: DC recovery round failed (retried): {}", s.ToString());
    round_backoff_ = std::clamp(round_backoff_ * 2, kFirstRoundBackoff, kMaxRoundBackoff);
    next_round_ = std::chrono::steady_clock::now() + round_backoff_;
    return;
  }
  if (options_.dc_probe_interval.count() == 0 || now - last_probe_ < options_.dc_probe_interval) return;
  last_probe_ = now;
  // Read what the DC must have seen before asking it: its ESL only moves
  // back when it restarted (and lost what it held in memory).
  const uint64_t sent = esl_sent_.load(std::memory_order_acquire);
  const uint64_t inc = incarnation_.load(std::memory_order_acquire);
  const uint64_t instance = dc_instance_.load(std::memory_order_acquire);
  Result<DcHealth> h = dc_->Health();
  if (!h.ok()) {
    if (DcLost(h.status())) TriggerDcRecovery(h.status().WithContext("DC health probe"));
    return;
  }
  if (h->instance != 0 && h->instance != instance) {
    // The DC process opened its store again since this TC restarted it: it
    // lost whatever it held only in memory, committed operations among them.
    TriggerDcRecovery(Status::Unavailable("DC health probe: the DC restarted (instance " +
                                          std::to_string(h->instance) + ", was " +
                                          std::to_string(instance) + ")"));
  } else if (h->incarnation != inc) {
    TriggerDcRecovery(Status::StaleIncarnation(
        "DC health probe: the DC is at incarnation " + std::to_string(h->incarnation) +
        ", this TC started " + std::to_string(inc)));
  } else if (h->state != DcState::kServing) {
    TriggerDcRecovery(Status::Unavailable("DC health probe: the DC is not serving"));
  } else if (h->esl < sent) {
    TriggerDcRecovery(Status::Unavailable(
        "DC health probe: the DC's ESL " + std::to_string(h->esl) + " is below the " +
        std::to_string(sent) + " it acknowledged (it restarted)"));
  }
}

}  // namespace deuteron::tc
