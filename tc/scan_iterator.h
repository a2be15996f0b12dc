// ScanIterator: a transaction's scan as a stream (tc/txn.md, "Scans"). It
// pages through the DC (TxnOptions::scan_page items per call, each call
// resuming after the last DC key it got) and merges the transaction's own
// writes: an upsert in the write set replaces or adds its key, a delete hides
// it. Both directions, inclusive or exclusive bounds, a limit. Memory is one
// DC page plus the current item, whatever the range.
//
// Semantics:
//  - The S range lock on the whole requested range is taken by
//    Transaction::Scan, before the iterator exists; the iterator takes no
//    locks, so it never fails with Deadlock or TimedOut.
//  - The write set is read live: each step merges the write set as it is
//    then. A write the transaction makes while iterating, at a key past the
//    current position (in scan order), shows up (a delete hides it); one at
//    or behind the current position does not (the current item is a copy).
//  - After the transaction finished (Commit, Abort, or an abort after a lock
//    failure in another call), Valid() is false and status() is
//    TransactionFinished.
//  - A DC error (or a failed TC) ends the iteration: Valid() false, status()
//    the error.
//
// Thread safety: driven by the thread driving its transaction, like the
// transaction. REQUIRES: destroyed before its Transaction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "protocol/data_component.h"

namespace deuteron::tc {

class Transaction;

// A key and value from a scan.
struct KeyValue {
  std::string key;
  std::string value;
};

// Scan bounds as in protocol ScanRequest (lower inclusive by default, upper
// exclusive by default, absent: open), plus direction and limit (0: all).
struct ScanOptions {
  std::optional<std::string> lower;
  bool lower_inclusive = true;
  std::optional<std::string> upper;
  bool upper_inclusive = false;
  bool reverse = false;
  size_t limit = 0;
};

class ScanIterator {
 public:
  ~ScanIterator();
  ScanIterator(const ScanIterator&) = delete;
  ScanIterator& operator=(const ScanIterator&) = delete;

  // Positioned on an item: key() and value() may be read.
  bool Valid() const;
  // Moves to the next item in scan order. REQUIRES: Valid(), or Valid()
  // was true when the transaction finished (then the iteration ends with
  // TransactionFinished).
  void Next();
  // REQUIRES: Valid().
  const std::string& key() const;
  const std::string& value() const;
  // OK while valid and after the end of the range (or the limit); the error
  // that ended the iteration otherwise (TransactionFinished once the
  // transaction finished).
  Status status() const;

 private:
  friend class Transaction;
  // `empty`: the range holds no key (lower above upper); nothing is fetched.
  ScanIterator(Transaction* txn, const ScanOptions& options, bool empty);

  // Moves to the first item after the current position (or the first of the
  // range); sets done_ and status_ at the end or on an error.
  void Advance();
  // Makes page_ hold an unconsumed item unless the DC's range is exhausted.
  Status FillPage();
  // Whether `a` comes before `b` in scan order.
  bool Before(const std::string& a, const std::string& b) const {
    return options_.reverse ? a > b : a < b;
  }

  Transaction* const txn_;
  const ScanOptions options_;
  // The current item (a copy) and whether there is one.
  bool valid_ = false;
  bool done_ = false;
  std::string key_;
  std::string value_;
  // The key of the last item emitted or hidden (the position); none before
  // the first step.
  std::optional<std::string> cursor_;
  size_t emitted_ = 0;
  // One DC page, items at [page_pos_, size) not yet consumed.
  std::vector<ScanItem> page_;
  size_t page_pos_ = 0;
  // Whether the DC may hold more items past the page, and where to resume
  // (the last DC key received, exclusive).
  bool dc_more_ = true;
  std::optional<std::string> resume_;
  Status status_;
};

}  // namespace deuteron::tc
