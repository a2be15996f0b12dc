// TcBudget: the TC server's memory budget (tc/server/tc_server.md, "The
// memory budget"): one account of the bytes the TC holds for its clients'
// transactions and sessions, and for its log's buffers. Two kinds of charge:
//  - TryCharge: refused (false, nothing charged) when the charge would take
//    the account past its limit (or, for a charge marked large, past the
//    limit less the small-transaction reserve); the caller then refuses the
//    request that wanted the memory, with a typed error;
//  - Charge: always succeeds (memory already bounded elsewhere: a session,
//    bounded by the server's connection limit; the log's fixed buffers).
// Every byte charged is released exactly once by its holder.
// A limit of 0 enforces nothing: TryCharge always succeeds, the account
// still counts.
//
// Thread safety: every method is thread-safe (atomics).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace deuteron::tc {

class TcBudget {
 public:
  // `reserve`: the last bytes of the limit that only small charges may take
  // (REQUIRES: reserve <= limit).
  TcBudget(size_t limit, size_t reserve) : limit_(limit), reserve_(reserve) {}
  TcBudget(const TcBudget&) = delete;
  TcBudget& operator=(const TcBudget&) = delete;

  // Charges `bytes` when the account stays within the limit (within the
  // limit less the reserve when `large`); false (and counted as a refusal)
  // otherwise.
  bool TryCharge(size_t bytes, bool large = false);
  void Charge(size_t bytes);
  void Release(size_t bytes);

  size_t used() const { return used_.load(std::memory_order_relaxed); }
  size_t peak() const { return peak_.load(std::memory_order_relaxed); }
  size_t limit() const { return limit_; }
  size_t reserve() const { return reserve_; }
  uint64_t refusals() const { return refusals_.load(std::memory_order_relaxed); }

 private:
  void NotePeak(size_t used);

  const size_t limit_;
  const size_t reserve_;
  std::atomic<size_t> used_{0};
  std::atomic<size_t> peak_{0};
  std::atomic<uint64_t> refusals_{0};
};

}  // namespace deuteron::tc
