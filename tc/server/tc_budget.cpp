#include "tc/server/tc_budget.h"

#include <cassert>

namespace deuteron::tc {

bool TcBudget::TryCharge(size_t bytes, bool large) {
  if (limit_ == 0) {
    Charge(bytes);
    return true;
  }
  const size_t cap = large ? limit_ - reserve_ : limit_;
  size_t used = used_.load(std::memory_order_relaxed);
  do {
    if (used + bytes > cap) {
      refusals_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  NotePeak(used + bytes);
  return true;
}

void TcBudget::Charge(size_t bytes) {
  NotePeak(used_.fetch_add(bytes, std::memory_order_relaxed) + bytes);
}

void TcBudget::Release(size_t bytes) {
  [[maybe_unused]] const size_t before = used_.fetch_sub(bytes, std::memory_order_relaxed);
  assert(before >= bytes && "TcBudget: released more than charged");
}

void TcBudget::NotePeak(size_t used) {
  size_t peak = peak_.load(std::memory_order_relaxed);
  while (used > peak && !peak_.compare_exchange_weak(peak, used, std::memory_order_relaxed)) {
  }
}

}  // namespace deuteron::tc
