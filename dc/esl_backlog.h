// EslBacklog: the DC's account of the records it holds above the ESL, which
// it may not flush (contract 1) and so cannot evict: they stay in the cache
// until the TC's ESL passes them (dc/dc.md, "Writes above the ESL"). Apply
// reserves a batch's share before applying it and is refused (Busy) past the
// limit; each ESL advance releases what it passed.
//
// The account is an estimate of the cache memory those records hold: each
// record counts its key and value plus kAboveEslRecordOverhead (its delta
// node and record header), each reservation kAboveEslEntryOverhead (its
// entry here). It errs high: a batch's records stay counted until the ESL
// passes the batch's highest LSN, skipped and superseded records included.
//
// Thread safety: every method is thread-safe (one mutex; Reserve and Release
// are one lock each, bytes() is a relaxed load).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "common/status.h"

namespace deuteron::dc {

inline constexpr size_t kAboveEslRecordOverhead = 96;
inline constexpr size_t kAboveEslEntryOverhead = 64;

class EslBacklog {
 public:
  // `limit`: most bytes held above the ESL; 0: no limit (Reserve always
  // succeeds and records nothing). `cache_limit`: the cache memory past
  // which nothing more is taken above the ESL while anything is held,
  // whatever the account says (it is an estimate: the tree may hold copies).
  EslBacklog(size_t limit, size_t cache_limit) : limit_(limit), cache_limit_(cache_limit) {}

  size_t limit() const { return limit_; }

  // Records `bytes` (already including the per-record overhead) for records
  // whose LSNs are above `esl`, the highest `max_lsn`. Busy, recording
  // nothing, when the bytes held (after dropping what `esl` passed) plus
  // `bytes` plus the entry's overhead would exceed the limit; the message
  // names the ESL that frees what is held (or, when nothing is, the ESL
  // that lets this batch in). Busy too while `cache_bytes` (the cache's
  // memory now) is over the cache limit and anything is held.
  Status Reserve(uint64_t esl, uint64_t max_lsn, size_t bytes, size_t cache_bytes);

  // The ESL reached `esl`: what lies at or below it is released.
  void Release(uint64_t esl);

  // Forgets everything (the cache was dropped) and starts over at `esl`,
  // which may be lower than before (restart-to).
  void Reset(uint64_t esl);

  // Bytes held above the ESL.
  size_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  void ReleaseLocked(uint64_t esl);  // REQUIRES: mu_ held

  const size_t limit_;
  const size_t cache_limit_;
  std::mutex mu_;
  // Highest LSN of a reservation -> its bytes. GUARDED_BY(mu_)
  std::map<uint64_t, size_t> held_;
  // The highest ESL released: a reservation made with an older ESL read
  // (racing an advance) is released against this one.  GUARDED_BY(mu_)
  uint64_t released_esl_ = 0;
  std::atomic<size_t> bytes_{0};  // sum of held_, written under mu_
};

}  // namespace deuteron::dc
