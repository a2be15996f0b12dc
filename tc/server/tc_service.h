// TcService: the TransactionService protocol (protocol/deuteron.thrift,
// protocol/protocol.md "The TC service") mapped onto a TxnManager,
// independent of any transport. A server opens one TcSession per client
// connection and feeds it that connection's calls (through the generated
// TransactionServiceProcessor); the session is the connection's table of
// open transactions.
//
//  - Transaction ids are the TxnManager's, so unique in the server; a
//    session answers only for its own: another id is UNKNOWN_TRANSACTION,
//    one it committed or aborted recently (the last `remember_finished`)
//    TRANSACTION_FINISHED.
//  - At most max_open_transactions open per session; one more begin is BUSY.
//  - A lock failure (DEADLOCK, TIMED_OUT) aborts the transaction, as in
//    Transaction; it stays in the table as finished until commit or abort
//    removes it (both then answer as Transaction does).
//  - Close (the connection's close hook) aborts every open transaction,
//    releasing its locks; later calls get UNAVAILABLE.
//  - TcService::Shutdown makes every later call of every session answer
//    SHUTTING_DOWN (open transactions are aborted as their sessions close).
//  - The memory budget (tc/server/tc_server.md, "The memory budget"): every
//    session, open transaction, write and read lock is charged to one
//    TcBudget before it is taken; a begin or a call that does not fit is
//    refused with UNAVAILABLE (retryable; nothing of it done), and a write
//    set past TxnOptions::max_write_set_bytes gets TOO_LARGE from the
//    Transaction. A transaction is uncharged when it finishes.
// Errors leave the handler methods as protocol::DeuteronError, which the
// generated processor writes as the call's typed error.
//
// Thread safety: TcService is thread-safe. A TcSession's calls and Close
// may come from any threads; they are serialized (a session mutex), so Close
// waits for a call in progress (at most a lock wait) to return. Every
// session must be closed or destroyed before the TxnManager is closed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "TransactionService.h"
#include "common/metrics.h"
#include "common/status.h"
#include "tc/server/tc_budget.h"
#include "tc/txn_manager.h"

namespace deuteron::tc {

struct TcServiceOptions {
  size_t max_open_transactions = 64;  // per session; REQUIRES: >= 1
  // Most items in one scan page (a larger or zero request limit gets this).
  uint32_t max_scan_page = 1000;      // REQUIRES: >= 1
  // Most operations in one execute call.
  size_t max_execute_ops = 10000;
  // Finished transaction ids a session remembers, to answer
  // TRANSACTION_FINISHED rather than UNKNOWN_TRANSACTION.
  size_t remember_finished = 256;
  // The memory budget for sessions and transactions, in bytes (0: counted,
  // never enforced), and what of it is charged at start for memory the TC
  // holds whatever the load (the log's buffers).
  size_t memory_budget = size_t{256} << 20;
  size_t memory_reserved = 0;
};

// What the budget charges (tc/server/tc_server.md, "The memory budget").
struct TcCharges {
  static constexpr size_t kSession = 16 << 10;     // a session: its tables, remembered ids
  static constexpr size_t kTransaction = 2 << 10;  // a Transaction, its table entry and lock state
  // A write set byte lives in up to five copies: the write set, the X
  // lock's key, the commit record, the DC request converted and encoded.
  static constexpr size_t kWriteCopies = 5;
  static constexpr size_t kKey = 256;          // per key written: map node and lock entry
  static constexpr size_t kReadLock = 192;     // per read (plus its key): an S lock entry
  static constexpr size_t kRangeLock = 256;    // per scan page (plus its bounds): a range lock
  // A transaction charged past this is large: it may not take the last
  // quarter of the budget, kept for small ones.
  static constexpr size_t kSmallTransaction = 64 << 10;
};

class TcSession;

class TcService {
 public:
  // REQUIRES: tm outlives the service and every session.
  TcService(TxnManager* tm, TcServiceOptions options);
  ~TcService();

  std::shared_ptr<TcSession> OpenSession();

  void Shutdown() { shutting_down_.store(true); }

  // Transactions open in all sessions now (for tests and stats).
  size_t open_transactions() const { return open_.load(); }
  const TcServiceOptions& options() const { return options_; }
  const TcBudget& budget() const { return budget_; }

  // The tcStats answer: the TxnManager's and the log's counters, this
  // service's abort causes and commit latencies, and the DC's counters
  // (asked of the DC now; dc_error says why when it did not answer).
  void FillStats(protocol::TcStats* out) const;

 private:
  friend class TcSession;
  // Counts an abort caused by `s` (a lock failure, or `other`).
  void NoteAbort(const Status& s);

  // Abort causes and commit latencies, for stats.
  std::atomic<uint64_t> aborts_deadlock_{0}, aborts_lock_timeout_{0}, aborts_by_client_{0},
      aborts_disconnect_{0}, aborts_other_{0};
  Histogram commit_us_;
  std::atomic<size_t> sessions_{0};
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  TxnManager* const tm_;
  const TcServiceOptions options_;
  std::atomic<bool> shutting_down_{false};
  std::atomic<size_t> open_{0};
  TcBudget budget_;
};

class TcSession final : public protocol::TransactionServiceIf {
 public:
  ~TcSession() override;  // Close()
  TcSession(const TcSession&) = delete;
  TcSession& operator=(const TcSession&) = delete;

  // Aborts every open transaction. Idempotent.
  void Close();
  size_t open_transactions() const;

  int64_t beginTransaction() override;
  void get(protocol::TcReadResult& out, int64_t txn, const std::string& key) override;
  void put(int64_t txn, const std::string& key, const std::string& value) override;
  void remove(int64_t txn, const std::string& key) override;
  void scan(protocol::TcScanPage& out, int64_t txn, const protocol::ScanRequest& request) override;
  void commit(int64_t txn) override;
  void abort(int64_t txn) override;
  void execute(protocol::ExecuteResult& out, const protocol::ExecuteRequest& request) override;
  // The server layer answers authenticate itself; this one is never called
  // by a server and throws INTERNAL.
  void authenticate(const std::string& token) override;
  void tcStats(protocol::TcStats& out) override;

 private:
  friend class TcService;
  explicit TcSession(TcService* service);

  // An open transaction and what the budget holds for it.
  struct OpenTxn {
    std::unique_ptr<Transaction> txn;
    size_t charged = 0;     // bytes charged to the budget for it
    size_t read_bytes = 0;  // its read locks' share of charged
  };
  // Charges `need` bytes for a call about to run on `t`; throws UNAVAILABLE
  // (nothing charged) when the budget refuses them.
  void Reserve(OpenTxn& t, size_t need);
  // After a call on `t`: its charge becomes what it holds now.
  void Settle(OpenTxn& t);
  // Settles `t` when the call's scope ends, thrown out of or not.
  struct SettleAtExit {
    TcSession* session;
    OpenTxn* txn;
    ~SettleAtExit() { session->Settle(*txn); }
  };

  // Throws unless the session may serve a call. REQUIRES: mu_ held.
  void CheckServing() const;
  // The open transaction `id`; throws the typed error otherwise.
  OpenTxn& Find(int64_t id);
  // Drops `id` from the table (aborting it when still active) and
  // remembers it as finished.
  void Finish(int64_t id);
  // One page of a scan in `t`, its range lock charged first.
  void Scan(OpenTxn& t, const protocol::ScanRequest& request, protocol::TcScanPage* out);
  // What Reserve charges for a write of a key and value of these sizes.
  static size_t WriteNeed(size_t key, size_t value);
  // Counts a lock failure (deadlock, lock timeout) as the abort it caused.
  void NoteLockFailure(const Status& s);

  TcService* const service_;
  mutable std::mutex mu_;
  bool closed_ = false;  // GUARDED_BY(mu_)
  std::unordered_map<int64_t, OpenTxn> open_;  // GUARDED_BY(mu_)
  std::deque<int64_t> finished_order_;                              // GUARDED_BY(mu_)
  std::unordered_set<int64_t> finished_;                            // GUARDED_BY(mu_)
};

}  // namespace deuteron::tc
