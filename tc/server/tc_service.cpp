#include "tc/server/tc_service.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "protocol/convert.h"
#include "protocol/errors.h"
#include "tc/scan_page.h"

namespace deuteron::tc {
namespace {

namespace proto = ::deuteron::protocol;

[[noreturn]] void Throw(const Status& s) { throw proto::ToDeuteronError(s); }

void Check(const Status& s) {
  if (!s.ok()) Throw(s);
}

// What a client is told of a TC that has failed for good (its log failed,
// or its DC refused it for good: tc/txn_manager.h, health()): the failure's
// own code, which no client retries (IOError, Corruption, NoSpace,
// StoreMismatch, ...), as a call that met the failure itself gets it. Never
// Unavailable, which says "try again later": this TC serves nothing until an
// operator restarts it. A failure with a code a client would retry (none
// today) is reported as Internal.
Status FailedForGood(const Status& failure) {
  Code code = failure.code();
  switch (code) {
    case Code::kUnavailable:
    case Code::kTimedOut:
    case Code::kDeadlock:
    case Code::kBusy:
    case Code::kShuttingDown:
    case Code::kOk:
      code = Code::kInternal;
      break;
    default:
      break;
  }
  return Status(code, fmt::format("the TC has failed and serves nothing until it is restarted: {}",
                                  failure.ToString()));
}

// Enum fields are read through their bytes (see RawEnum in
// protocol/convert.cpp): a value off the enumeration is no valid enum.
int32_t RawKind(const proto::TcOpKind::type& k) {
  int32_t v;
  std::memcpy(&v, &k, sizeof(v));
  return v;
}

}  // namespace

TcService::TcService(TxnManager* tm, TcServiceOptions options)
    : tm_(tm), options_(options), budget_(options.memory_budget, options.memory_budget / 4) {
  budget_.Charge(options_.memory_reserved);
}

TcService::~TcService() { budget_.Release(options_.memory_reserved); }

TcSession::TcSession(TcService* service) : service_(service) {
  service_->sessions_.fetch_add(1);
  service_->budget_.Charge(TcCharges::kSession);  // bounded by the server's connections
}

std::shared_ptr<TcSession> TcService::OpenSession() {
  return std::shared_ptr<TcSession>(new TcSession(this));
}

TcSession::~TcSession() { Close(); }

void TcService::NoteAbort(const Status& s) {
  if (s.code() == Code::kDeadlock) {
    aborts_deadlock_.fetch_add(1, std::memory_order_relaxed);
  } else if (s.code() == Code::kTimedOut) {
    aborts_lock_timeout_.fetch_add(1, std::memory_order_relaxed);
  } else {
    aborts_other_.fetch_add(1, std::memory_order_relaxed);
  }
}

void TcService::FillStats(proto::TcStats* out) const {
  using C = int64_t;
  const TxnStats t = tm_->stats();
  *out = proto::TcStats();
  out->__set_commits(C(t.commits));
  out->__set_read_only_commits(C(t.read_only_commits));
  out->__set_aborts(C(t.aborts));
  out->__set_aborts_deadlock(C(aborts_deadlock_.load(std::memory_order_relaxed)));
  out->__set_aborts_lock_timeout(C(aborts_lock_timeout_.load(std::memory_order_relaxed)));
  out->__set_aborts_by_client(C(aborts_by_client_.load(std::memory_order_relaxed)));
  out->__set_aborts_disconnect(C(aborts_disconnect_.load(std::memory_order_relaxed)));
  out->__set_aborts_other(C(aborts_other_.load(std::memory_order_relaxed)));
  const Histogram::Snapshot lat = commit_us_.GetSnapshot();
  out->__set_commit_count(C(lat.count));
  out->__set_commit_p50_us(C(lat.Percentile(50)));
  out->__set_commit_p90_us(C(lat.Percentile(90)));
  out->__set_commit_p99_us(C(lat.Percentile(99)));
  out->__set_commit_max_us(C(lat.max));
  out->__set_esl(C(t.esl));
  out->__set_rssp(C(t.rssp));
  out->__set_log_tail(C(t.log_tail));
  out->__set_log_held_bytes(C(t.log_held_bytes));
  out->__set_log_bytes_written(C(t.log_bytes_written));
  out->__set_checkpoints(C(t.checkpoints));
  out->__set_replayed_ops(C(t.replayed_ops));
  out->__set_dc_recoveries(C(t.dc_recoveries));
  out->__set_open_transactions(C(open_.load()));
  out->__set_connections(C(sessions_.load()));
  out->__set_memory_budget(C(budget_.limit()));
  out->__set_memory_used(C(budget_.used()));
  out->__set_memory_peak(C(budget_.peak()));
  out->__set_memory_refusals(C(budget_.refusals()));
  out->__set_uptime_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::steady_clock::now() - started_)
                           .count());
  Result<DcStats> dc = tm_->DcStatsNow();
  if (dc.ok()) {
    out->__set_dc(proto::ToWire(*dc));
  } else {
    out->__set_dc_error(dc.status().ToString());
  }
}

void TcSession::Close() {
  std::lock_guard<std::mutex> l(mu_);
  if (closed_) return;
  closed_ = true;
  service_->sessions_.fetch_sub(1);
  size_t charged = TcCharges::kSession;
  for (const auto& [id, t] : open_) {
    if (t.txn->active()) service_->aborts_disconnect_.fetch_add(1, std::memory_order_relaxed);
    charged += t.charged;
  }
  service_->open_.fetch_sub(open_.size());
  open_.clear();  // each Transaction aborts as it is destroyed
  service_->budget_.Release(charged);
}

void TcSession::Reserve(OpenTxn& t, size_t need) {
  const bool large = t.charged + need > TcCharges::kSmallTransaction;
  if (!service_->budget_.TryCharge(need, large)) {
    const TcBudget& b = service_->budget_;
    Throw(Status::Unavailable(fmt::format(
        "the TC's memory budget is full ({} of {} bytes held{}): retry later", b.used(), b.limit(),
        large ? ", the last quarter kept for small transactions" : "")));
  }
  t.charged += need;
}

void TcSession::Settle(OpenTxn& t) {
  size_t now = TcCharges::kTransaction;
  if (t.txn->active()) {
    now += TcCharges::kWriteCopies * t.txn->write_set_bytes() + TcCharges::kKey * t.txn->write_set_keys() +
           t.read_bytes;
  } else {
    t.read_bytes = 0;  // finished: its locks are gone
  }
  if (now < t.charged) {
    service_->budget_.Release(t.charged - now);
  } else if (now > t.charged) {
    service_->budget_.Charge(now - t.charged);  // within what Reserve charged, but for rounding
  }
  t.charged = now;
}

size_t TcSession::open_transactions() const {
  std::lock_guard<std::mutex> l(mu_);
  return open_.size();
}

void TcSession::CheckServing() const {
  if (closed_) Throw(Status::Unavailable("the session is closed"));
  if (service_->shutting_down_.load()) Throw(Status::ShuttingDown("the TC server is shutting down"));
  if (Status h = service_->tm_->health(); !h.ok()) {
    // Failed for good, or recovering its DC (it serves again by itself:
    // retry later). Told apart by the failure, which is final: a second
    // look at dc_recovering() would race with the end of the recovery, and
    // a TC whose recovery ended between the two looks was reported failed
    // for good (INTERNAL, not retried) while it served.
    const Status failure = service_->tm_->failure();
    Throw(failure.ok() ? h : FailedForGood(failure));
  }
}

TcSession::OpenTxn& TcSession::Find(int64_t id) {
  auto it = open_.find(id);
  if (it != open_.end()) return it->second;
  if (finished_.count(id) != 0) {
    Throw(Status::TransactionFinished(fmt::format("transaction {} is finished", id)));
  }
  Throw(Status::UnknownTransaction(fmt::format("no transaction {} on this connection", id)));
}

void TcSession::Finish(int64_t id) {
  auto it = open_.find(id);
  if (it == open_.end()) return;
  const size_t charged = it->second.charged;
  open_.erase(it);  // aborts when still active
  service_->budget_.Release(charged);
  service_->open_.fetch_sub(1);
  if (service_->options_.remember_finished == 0) return;
  finished_.insert(id);
  finished_order_.push_back(id);
  while (finished_order_.size() > service_->options_.remember_finished) {
    finished_.erase(finished_order_.front());
    finished_order_.pop_front();
  }
}

int64_t TcSession::beginTransaction() {
  std::lock_guard<std::mutex> l(mu_);
  CheckServing();
  if (open_.size() >= service_->options_.max_open_transactions) {
    Throw(Status::Busy(fmt::format("{} transactions open on this connection, the limit",
                                   open_.size())));
  }
  if (!service_->budget_.TryCharge(TcCharges::kTransaction)) {
    const TcBudget& b = service_->budget_;
    Throw(Status::Unavailable(fmt::format("the TC's memory budget is full ({} of {} bytes held): retry later",
                                          b.used(), b.limit())));
  }
  std::unique_ptr<Transaction> txn = service_->tm_->Begin();
  const auto id = static_cast<int64_t>(txn->id());
  open_.emplace(id, OpenTxn{std::move(txn), TcCharges::kTransaction, 0});
  service_->open_.fetch_add(1);
  return id;
}

void TcSession::get(proto::TcReadResult& out, int64_t txn, const std::string& key) {
  std::lock_guard<std::mutex> l(mu_);
  CheckServing();
  OpenTxn& t = Find(txn);
  const size_t need = key.size() + TcCharges::kReadLock;
  Reserve(t, need);
  t.read_bytes += need;
  SettleAtExit settle{this, &t};
  Result<std::string> r = t.txn->Get(Slice(key));
  out = proto::TcReadResult();
  if (r.ok()) {
    out.__set_found(true);
    out.__set_value(std::move(r).value());
  } else if (!r.status().IsNotFound()) {
    NoteLockFailure(r.status());
    Throw(r.status());
  }
}

void TcSession::put(int64_t txn, const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> l(mu_);
  CheckServing();
  OpenTxn& t = Find(txn);
  Reserve(t, WriteNeed(key.size(), value.size()));
  SettleAtExit settle{this, &t};
  Status s = t.txn->Put(Slice(key), Slice(value));
  NoteLockFailure(s);
  Check(s);
}

void TcSession::remove(int64_t txn, const std::string& key) {
  std::lock_guard<std::mutex> l(mu_);
  CheckServing();
  OpenTxn& t = Find(txn);
  Reserve(t, WriteNeed(key.size(), 0));
  SettleAtExit settle{this, &t};
  Status s = t.txn->Delete(Slice(key));
  NoteLockFailure(s);
  Check(s);
}

void TcSession::Scan(OpenTxn& t, const proto::ScanRequest& request, proto::TcScanPage* out) {
  Result<ScanRequest> r = proto::FromWireScan(request);
  Check(r.status());
  const size_t need = (r->lower ? r->lower->size() : 0) + (r->upper ? r->upper->size() : 0) + TcCharges::kRangeLock;
  Reserve(t, need);
  t.read_bytes += need;
  SettleAtExit settle{this, &t};
  Transaction& txn = *t.txn;
  ScanOptions o;
  o.lower = r->lower;
  o.lower_inclusive = r->lower_inclusive;
  o.upper = r->upper;
  o.upper_inclusive = r->upper_inclusive;
  o.reverse = r->reverse;
  const uint32_t max_page = service_->options_.max_scan_page;
  const size_t page_size = r->limit == 0 ? max_page : std::min(r->limit, max_page);
  Result<ScanPageResult> page = ScanPage(txn, o, page_size);
  Check(page.status());
  *out = proto::TcScanPage();
  out->items.reserve(page->items.size());
  for (KeyValue& kv : page->items) {
    proto::KeyValue w;
    w.__set_key(std::move(kv.key));
    w.__set_value(std::move(kv.value));
    out->items.push_back(std::move(w));
  }
  out->__isset.items = true;
  out->__set_more(page->more);
  if (page->more) out->__set_resume_key(std::move(page->resume_key));
}

void TcSession::scan(proto::TcScanPage& out, int64_t txn, const proto::ScanRequest& request) {
  std::lock_guard<std::mutex> l(mu_);
  CheckServing();
  try {
    Scan(Find(txn), request, &out);  // settles the transaction's charge
  } catch (const proto::DeuteronError& e) {
    NoteLockFailure(proto::FromDeuteronError(e));
    throw;
  }
}

void TcSession::commit(int64_t txn) {
  std::lock_guard<std::mutex> l(mu_);
  CheckServing();
  Transaction& t = *Find(txn).txn;
  const bool active = t.active();
  const auto start = std::chrono::steady_clock::now();
  Status s = t.Commit();  // its copies were charged with its writes
  if (active) {
    service_->commit_us_.Record(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count()));
    if (!s.ok()) service_->NoteAbort(Status::IOError("commit failed"));  // "other"
  }
  Finish(txn);
  Check(s);
}

void TcSession::abort(int64_t txn) {
  std::lock_guard<std::mutex> l(mu_);
  // Not refused for the TC's health (CheckServing): an abort only releases
  // what the transaction holds here, and clients abort on the very errors a
  // DC recovery gives them; refused, the transaction would keep its locks
  // until the session ends and stall every client that needs them.
  if (closed_) return;  // a closed session aborted all its transactions
  if (finished_.count(txn) != 0) return;  // idempotent
  Transaction& t = *Find(txn).txn;
  if (t.active()) service_->aborts_by_client_.fetch_add(1, std::memory_order_relaxed);
  t.Abort();
  Finish(txn);
}

void TcSession::execute(proto::ExecuteResult& out, const proto::ExecuteRequest& request) {
  std::lock_guard<std::mutex> l(mu_);
  CheckServing();
  if (request.ops.size() > service_->options_.max_execute_ops) {
    Throw(Status::TooLarge(fmt::format("{} operations in one execute, over the limit of {}",
                                       request.ops.size(), service_->options_.max_execute_ops)));
  }
  const auto start = std::chrono::steady_clock::now();
  // Charged as a transaction of its own for the call, and uncharged at its end.
  OpenTxn open{nullptr, 0, 0};
  struct Uncharge {
    TcBudget* budget;
    OpenTxn* open;
    ~Uncharge() { budget->Release(open->charged); }
  } uncharge{&service_->budget_, &open};
  Reserve(open, TcCharges::kTransaction);
  open.txn = service_->tm_->Begin();  // aborts unless committed
  std::unique_ptr<Transaction>& txn = open.txn;
  out = proto::ExecuteResult();
  out.results.reserve(request.ops.size());
  out.__isset.results = true;
  auto fail = [this](size_t i, const Status& s) {
    service_->NoteAbort(s);
    Throw(Status(s.code(), fmt::format("operation {}: {}", i, s.message())));
  };
  for (size_t i = 0; i < request.ops.size(); ++i) {
    const proto::TcOp& op = request.ops[i];
    proto::TcOpResult result;
    switch (RawKind(op.kind)) {
      case proto::TcOpKind::GET: {
        Result<std::string> r = [&]() -> Result<std::string> {
          try {
            const size_t need = op.key.size() + TcCharges::kReadLock;
            Reserve(open, need);
            open.read_bytes += need;
            SettleAtExit settle{this, &open};
            return txn->Get(Slice(op.key));
          } catch (const proto::DeuteronError& e) {
            return proto::FromDeuteronError(e);
          }
        }();
        if (r.ok()) {
          result.__set_found(true);
          result.__set_value(std::move(r).value());
        } else if (!r.status().IsNotFound()) {
          fail(i, r.status());
        }
        break;
      }
      case proto::TcOpKind::PUT:
      case proto::TcOpKind::REMOVE: {
        const bool put = RawKind(op.kind) == proto::TcOpKind::PUT;
        Status s;
        try {
          Reserve(open, WriteNeed(op.key.size(), put ? op.value.size() : 0));
          SettleAtExit settle{this, &open};
          s = put ? txn->Put(Slice(op.key), Slice(op.value)) : txn->Delete(Slice(op.key));
        } catch (const proto::DeuteronError& e) {
          s = proto::FromDeuteronError(e);
        }
        if (!s.ok()) fail(i, s);
        break;
      }
      case proto::TcOpKind::SCAN:
        try {
          Scan(open, op.scan, &result.page);
          result.__isset.page = true;
        } catch (const proto::DeuteronError& e) {
          fail(i, proto::FromDeuteronError(e));
        }
        break;
      default:
        fail(i, Status::InvalidArgument(fmt::format("unknown operation kind {}", RawKind(op.kind))));
    }
    out.results.push_back(std::move(result));
  }
  Status s = txn->Commit();
  service_->commit_us_.Record(static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count()));
  if (!s.ok()) {
    service_->NoteAbort(Status::IOError("commit failed"));  // "other"
    Throw(s.WithContext("commit"));
  }
}

size_t TcSession::WriteNeed(size_t key, size_t value) {
  // Upper bound: the write adds a key (and the record's header, when first).
  return TcCharges::kWriteCopies * (key + value + 32) + TcCharges::kKey;
}

void TcSession::NoteLockFailure(const Status& s) {
  if (s.code() == Code::kDeadlock || s.code() == Code::kTimedOut) service_->NoteAbort(s);
}

void TcSession::tcStats(proto::TcStats& out) {
  {
    std::lock_guard<std::mutex> l(mu_);
    CheckServing();
  }
  service_->FillStats(&out);
}

void TcSession::authenticate(const std::string& /*token*/) {
  Throw(Status::Internal("authenticate reached a TC session"));
}

}  // namespace deuteron::tc
