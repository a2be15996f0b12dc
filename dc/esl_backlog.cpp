// The DC's account of records above the ESL; see dc/esl_backlog.h.
#include "dc/esl_backlog.h"

#include <algorithm>
#include <string>

namespace deuteron::dc {

Status EslBacklog::Reserve(uint64_t esl, uint64_t max_lsn, size_t bytes, size_t cache_bytes) {
  if (limit_ == 0 || bytes == 0) return Status::OK();
  std::lock_guard<std::mutex> lock(mu_);
  esl = std::max(esl, released_esl_);
  ReleaseLocked(esl);
  // The ESL moved past the whole batch meanwhile: nothing of it is held.
  if (max_lsn <= esl) return Status::OK();
  const size_t held = bytes_.load(std::memory_order_relaxed);
  const size_t asked = bytes + kAboveEslEntryOverhead;
  if (!held_.empty() && cache_bytes > cache_limit_) {
    return Status::Busy("apply: the cache holds " + std::to_string(cache_bytes) +
                        " bytes, over " + std::to_string(cache_limit_) + ", with " +
                        std::to_string(held) + " bytes counted above ESL " +
                        std::to_string(esl) + "; setEsl to >= " +
                        std::to_string(held_.rbegin()->first) + " frees them");
  }
  if (held + asked > limit_) {
    if (held_.empty()) {
      return Status::Busy("apply: the batch alone would hold " + std::to_string(asked) +
                          " bytes above ESL " + std::to_string(esl) + ", over the limit of " +
                          std::to_string(limit_) + "; setEsl to >= " + std::to_string(max_lsn) +
                          " lets it in");
    }
    return Status::Busy("apply: " + std::to_string(held) + " bytes held above ESL " +
                        std::to_string(esl) + ", " + std::to_string(asked) +
                        " more asked, over the limit of " + std::to_string(limit_) +
                        "; setEsl to >= " + std::to_string(held_.rbegin()->first) +
                        " frees them");
  }
  held_[max_lsn] += asked;
  bytes_.store(held + asked, std::memory_order_relaxed);
  return Status::OK();
}

void EslBacklog::Release(uint64_t esl) {
  if (limit_ == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  released_esl_ = std::max(released_esl_, esl);
  ReleaseLocked(released_esl_);
}

void EslBacklog::Reset(uint64_t esl) {
  std::lock_guard<std::mutex> lock(mu_);
  held_.clear();
  released_esl_ = esl;
  bytes_.store(0, std::memory_order_relaxed);
}

void EslBacklog::ReleaseLocked(uint64_t esl) {
  size_t freed = 0;
  auto end = held_.upper_bound(esl);
  for (auto it = held_.begin(); it != end; ++it) freed += it->second;
  if (freed == 0) return;
  held_.erase(held_.begin(), end);
  bytes_.store(bytes_.load(std::memory_order_relaxed) - freed, std::memory_order_relaxed);
}

}  // namespace deuteron::dc
