// What txn_bench's clients drive (bench/README.md, "txn_bench"): a
// transactional store behind TxnSystem, one transaction behind BenchTxn.
// `embedded` (bench/txn_bench.cpp), `split` and `remote`
// (bench/txn_bench_modes.h) each implement it.
//
// Thread safety: TxnSystem::Begin may be called from any threads at once; a
// BenchTxn is driven by the one thread that began it. Report is called by the
// main thread between points.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "common/status.h"
#include "tc/txn_manager.h"

namespace deuteron::bench {

// One transaction of a system under test. Lock failures (Deadlock,
// TimedOut) abort it, as tc::Transaction does.
class BenchTxn {
 public:
  virtual ~BenchTxn() = default;
  // NotFound is a result, not a failure.
  virtual Status Get(const std::string& key) = 0;
  virtual Status Put(const std::string& key, const std::string& value) = 0;
  virtual Status Commit() = 0;
};

// A transactional store the clients drive.
class TxnSystem {
 public:
  virtual ~TxnSystem() = default;
  virtual const char* name() const = 0;
  virtual std::unique_ptr<BenchTxn> Begin() = 0;
  // Progress line with the system's counters.
  virtual void Report(const std::string& what) = 0;
};

// A transaction of a TC in this process (tc::TxnManager, whatever its DC).
class TcTxn final : public BenchTxn {
 public:
  explicit TcTxn(std::unique_ptr<tc::Transaction> t) : t_(std::move(t)) {}
  Status Get(const std::string& key) override {
    Result<std::string> r = t_->Get(key);
    if (r.ok() || r.status().IsNotFound()) return Status::OK();
    return r.status();
  }
  Status Put(const std::string& key, const std::string& value) override {
    return t_->Put(key, value);
  }
  Status Commit() override { return t_->Commit(); }

 private:
  std::unique_ptr<tc::Transaction> t_;
};

}  // namespace deuteron::bench
