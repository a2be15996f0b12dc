// Database: the embedded store. One directory holds the TC's log (dir/log)
// and an in-process data component (dc::Dc, dir/dc), under the directory lock
// (dir/LOCK). Open recovers both (TxnManager::Open) and hands out
// transactions. This is the one place in tc/ that links dc/ (its own target,
// deuteron_tc_embedded); TxnManager itself sees only DataComponent.
//
// Thread safety: Begin, Checkpoint and txn() may be called from any threads;
// Close (and the destructor) must not race with them, and every transaction
// must be finished first.
#pragma once

#include <memory>
#include <string>

#include "common/dir_lock.h"
#include "common/env.h"
#include "common/status.h"
#include "dc/dc.h"
#include "tc/txn_manager.h"
#include "tc/wal/log.h"

namespace deuteron::tc {

// The TC's options over an in-process DC: TxnOptions' defaults, but with
// coalesce_applies off. Coalescing saves round trips to a remote DC; in
// process an Apply is a call into a latch-free tree, and one leader at a
// time would serialize every commit's apply (tc/txn.md, "Coalescing
// applies": write-only, 64 clients, 16 cores: 3.1-3.7x the commits/s
// without it).
inline TxnOptions EmbeddedTxnOptions() {
  TxnOptions o;
  o.coalesce_applies = false;
  return o;
}

struct DatabaseOptions {
  Env* env = nullptr;  // null: Env::Posix()
  dc::DcOptions dc;
  wal::LogOptions log;
  TxnOptions txn = EmbeddedTxnOptions();
};

class Database {
 public:
  // Creates `dir` when absent. Busy when another Database holds it.
  // StoreMismatch when its log and DC belong to different stores, or when a
  // part was written by a newer format.
  static Result<std::unique_ptr<Database>> Open(const std::string& dir, DatabaseOptions options);
  ~Database();  // Close(), errors logged

  std::unique_ptr<Transaction> Begin() { return tm_->Begin(); }
  Status Checkpoint() { return tm_->Checkpoint(); }
  TxnManager& txn() { return *tm_; }

  // Stops the TC, closes the log, then the DC (clean: flushes what the ESL
  // allows), then releases the directory lock. Idempotent.
  Status Close();

 private:
  Database() = default;
  std::unique_ptr<DirLock> lock_;
  std::unique_ptr<dc::Dc> dc_;
  std::unique_ptr<wal::Log> log_;
  std::unique_ptr<TxnManager> tm_;
  bool closed_ = false;
};

}  // namespace deuteron::tc
