// The two systems dc_bench measures, behind one small interface: the DC
// (dc::Dc on the real file system, driven as the TC drives it) and Berkeley
// DB's B-tree (a locking environment without a transactional log). Both are
// configured as bench/README.md ("dc_bench") says.
//
// Thread safety: Put, Get and Scan may be called from any number of threads
// at once, each passing its own worker index `t` (0 <= t < max_threads given
// at open); Counters and Close from the main thread once the workers are
// joined.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "bench/bench_util.h"
#include "common/slice.h"
#include "common/status.h"

namespace deuteron::bench {

class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual const char* name() const = 0;
  // Insert or overwrite.
  virtual Status Put(int t, Slice key, Slice value) = 0;
  // OK with *found false when the key is absent.
  virtual Status Get(int t, Slice key, std::string* value, bool* found) = 0;
  // Reads up to `n` records from the first key at or above `start`; *read
  // is how many it read.
  virtual Status Scan(int t, Slice start, size_t n, size_t* read) = 0;
  // The system's own counters, added to a result line (`user_bytes`: key
  // and value bytes of the live data, for space amplification).
  virtual void AddCounters(ResultLine* line, uint64_t user_bytes) = 0;
  // The resident memory the system holds beyond its budget by design.
  virtual uint64_t RssAllowance() = 0;
  virtual Status Close() = 0;
};

struct StoreConfig {
  std::string dir;
  // The memory both systems get: Berkeley DB's cache size, LLAMA's cache
  // budget (LlamaOptions::memory_budget).
  size_t budget_bytes = 0;
  int max_threads = 1;
  // DC only: the LSS flush buffers and segments, how often the "TC" moves
  // the ESL, and proposes an RSSP (by time or by log growth, whichever
  // comes first).
  size_t lss_buffer_bytes = size_t{1} << 20;
  size_t lss_segment_bytes = size_t{16} << 20;
  uint64_t esl_period_us = 1000;
  uint64_t rssp_period_ms = 1000;
  uint64_t rssp_log_bytes = uint64_t{16} << 20;
  // LlamaOptions::clean_in_background and warm_page_sweeps.
  bool clean_in_background = true;
  uint8_t warm_page_sweeps = 4;
  bool evict_without_waiting = true;
  // DcOptions::heap_purge_above = the budget, as deuteron dc sets it.
  bool heap_purge = true;
};

Result<std::unique_ptr<KvStore>> OpenDcStore(const StoreConfig& config);
Result<std::unique_ptr<KvStore>> OpenBdbStore(const StoreConfig& config);

}  // namespace deuteron::bench
