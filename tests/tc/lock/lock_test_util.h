// Helpers for the lock manager tests: run a lock call on its own thread and
// wait until the manager reports it waiting.
#pragma once

#include <chrono>
#include <future>
#include <thread>
#include <utility>

#include "common/status.h"
#include "tc/lock/lock_manager.h"

namespace deuteron::tc::testing {

// Runs `fn` (returning Status) on a new thread.
template <typename Fn>
std::future<Status> Async(Fn fn) {
  return std::async(std::launch::async, std::move(fn));
}

// Waits until `n` requests wait in `lm` (or 5 s pass); returns whether they do.
inline bool WaitForWaiters(const LockManager& lm, size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (lm.NumWaiting() < n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Whether `f` completes within `ms` milliseconds.
inline bool ReadyWithin(std::future<Status>& f, int ms) {
  return f.wait_for(std::chrono::milliseconds(ms)) == std::future_status::ready;
}

}  // namespace deuteron::tc::testing
