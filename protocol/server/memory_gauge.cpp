#include "protocol/server/memory_gauge.h"

#include <algorithm>
#include <cassert>
#include <utility>

namespace deuteron::server {

void MemoryGauge::Charge(size_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  used_ += bytes;
  peak_ = std::max(peak_, used_);
}

void MemoryGauge::Release(size_t bytes) {
  std::deque<std::function<void()>> granted;
  {
    std::lock_guard<std::mutex> l(mu_);
    assert(bytes <= used_);
    used_ -= std::min(bytes, used_);
    granted = GrantLocked();
  }
  for (auto& g : granted) g();
}

bool MemoryGauge::TryReserve(size_t bytes, std::function<void()> grant, uint64_t* ticket) {
  std::lock_guard<std::mutex> l(mu_);
  if (waiters_.empty() && FitsLocked(bytes)) {
    used_ += bytes;
    peak_ = std::max(peak_, used_);
    return true;
  }
  *ticket = next_ticket_++;
  waiters_.push_back(Waiter{*ticket, bytes, std::move(grant)});
  return false;
}

bool MemoryGauge::Cancel(uint64_t ticket) {
  std::deque<std::function<void()>> granted;
  bool found = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
      if (it->ticket == ticket) {
        waiters_.erase(it);
        found = true;
        break;
      }
    }
    if (found) granted = GrantLocked();  // the head may have been blocking others
  }
  for (auto& g : granted) g();
  return found;
}

std::deque<std::function<void()>> MemoryGauge::GrantLocked() {
  std::deque<std::function<void()>> granted;
  while (!waiters_.empty() && FitsLocked(waiters_.front().bytes)) {
    used_ += waiters_.front().bytes;
    peak_ = std::max(peak_, used_);
    granted.push_back(std::move(waiters_.front().grant));
    waiters_.pop_front();
  }
  return granted;
}

size_t MemoryGauge::used() const {
  std::lock_guard<std::mutex> l(mu_);
  return used_;
}

size_t MemoryGauge::peak() const {
  std::lock_guard<std::mutex> l(mu_);
  return peak_;
}

size_t MemoryGauge::waiting() const {
  std::lock_guard<std::mutex> l(mu_);
  return waiters_.size();
}

}  // namespace deuteron::server
