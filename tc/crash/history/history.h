// History: the record of a list-append workload's transactions, as Elle
// (Kingsbury & Alvaro, "Elle: Inferring Isolation Anomalies from
// Experimental Observations") checks them. Each transaction is a list of
// micro-operations on named lists: ["append", key, value] or
// ["r", key, [v1, v2, ...]] (the list as read; null when not recorded),
// and an outcome: ok (committed), fail (certainly not committed) or info
// (in doubt: the commit's answer was lost). Start and end times (steady
// clock, microseconds since the History was made) give the real-time order
// the checker's lost-append rule uses.
//
// Saved and loaded as JSON lines, one transaction per line
// (tc/crash/history/history.md): a history recorded by the crash harness can
// be checked offline (isolation_checker.h).
//
// Thread safety: Add, NextId, NextValue, Now, size and Save may be called
// from any threads at once; transactions() (and CheckHistory, which reads
// it) must not race with Add.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace deuteron::crash {

struct HistoryOp {
  enum class Kind : uint8_t { kAppend, kRead };
  Kind kind = Kind::kRead;
  std::string key;
  uint64_t value = 0;                           // kAppend: the element appended
  std::optional<std::vector<uint64_t>> read;    // kRead: the list as read (nullopt: unknown)

  static HistoryOp Append(std::string key, uint64_t value);
  static HistoryOp Read(std::string key, std::optional<std::vector<uint64_t>> list);
  friend bool operator==(const HistoryOp&, const HistoryOp&) = default;
};

enum class TxnOutcome : uint8_t { kOk, kFail, kInfo };
std::string_view OutcomeName(TxnOutcome outcome);  // "ok", "fail", "info"

struct HistoryTxn {
  uint64_t id = 0;
  uint64_t client = 0;
  TxnOutcome outcome = TxnOutcome::kOk;
  std::vector<HistoryOp> ops;
  // Microseconds on the History's clock; -1: not recorded (no real-time
  // inference for this transaction).
  int64_t start_us = -1;
  int64_t end_us = -1;
  friend bool operator==(const HistoryTxn&, const HistoryTxn&) = default;
};

class History {
 public:
  History();
  History(const History&) = delete;
  History& operator=(const History&) = delete;

  // A fresh transaction id / appended value, unique in this History (and
  // above every one loaded into it).
  uint64_t NextId() { return next_id_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t NextValue() { return next_value_.fetch_add(1, std::memory_order_relaxed); }
  // Microseconds since this History was made (steady clock).
  int64_t Now() const;

  void Add(HistoryTxn txn);
  size_t size() const;
  // REQUIRES: no concurrent Add.
  const std::vector<HistoryTxn>& transactions() const { return txns_; }

  // One JSON object per line (history.md). Save overwrites `path`.
  Status Save(const std::string& path) const;
  // Loads a saved history; InvalidArgument (with the line number) for a
  // malformed line, NotFound/IOError when the file cannot be read.
  static Result<std::unique_ptr<History>> Load(const std::string& path);

  // One transaction as its JSON line (no newline), and back.
  static std::string ToJson(const HistoryTxn& txn);
  static Result<HistoryTxn> FromJson(std::string_view line);

 private:
  const std::chrono::steady_clock::time_point epoch_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<uint64_t> next_value_{1};
  mutable std::mutex mu_;
  std::vector<HistoryTxn> txns_;  // guarded by mu_
};

}  // namespace deuteron::crash
