// dc_bench's workloads: the keys, values and operation mixes of the seeds'
// papers, scaled to the development machine (bench/README.md, "dc_bench").
// Keys are computed from a record index (no pre-generated arrays, so the
// harness holds no data of its own that would blur the resident memory
// figures); both systems run the same generator code.
//
// Thread safety: WorkloadSpec and the key/value functions are values and
// pure functions. A WorkloadRun is shared by the workers of one store: its
// only mutable state is an atomic counter of fresh keys.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/dc_bench_stores.h"
#include "bench/zipf.h"
#include "common/random.h"

namespace deuteron::bench {

enum class KeyStyle {
  kOrdered8,  // 8-byte big-endian record index (key range order = index order)
  kRandom8,   // 8-byte big-endian hash of the index (bijective)
  kHash20,    // 20-byte hash (dedup's chunk hashes)
  kXbox,      // ~94-byte dotted string
  kEmail,     // email-like string, ~30 bytes
  kIngest16,  // 16-byte hash
};

enum class Mix {
  kSynthetic,  // 5:1 reads to updates, 95% on the lowest 20% of the keys
  kDedup,      // read, insert if absent; 2.2:1 reads to writes
  kXbox,       // 7.5:1 gets to sets, Zipfian
  kYcsbA,      // 50% read, 50% update, Zipfian
  kYcsbC,      // 100% read, Zipfian
  kYcsbE,      // 95% short scans (1-100 records), 5% inserts, Zipfian starts
  kIngest,     // inserts of fresh random keys only
};

struct WorkloadSpec {
  std::string name;   // the result lines' `workload`
  std::string group;  // --only name
  Mix mix;
  KeyStyle keys;
  size_t records;     // preloaded (0 for ingest)
  size_t value_size;
};

// Every workload at scale 1.0 (records scaled by the caller).
std::vector<WorkloadSpec> AllWorkloads();

void MakeKey(KeyStyle style, uint64_t index, std::string* out);
// A value of `size` bytes for record `index` at `version`.
void MakeValue(uint64_t index, uint64_t version, size_t size, std::string* out);

// Per-thread tallies of one measured run.
struct OpTally {
  uint64_t ops = 0;
  uint64_t reads = 0, writes = 0, scans = 0, scan_items = 0;
  uint64_t misses = 0;  // a preloaded key read as absent (a bug)
  uint64_t errors = 0;
  std::string first_error;
  double sum_sq_ns = 0;  // for the standard deviation of latency
  // The thread's slowest operations (at most kSlowestKept, slowest first) and
  // where they waited (llama::OpPhaseDiff: "phase:us,...").
  struct SlowOp {
    uint64_t ns = 0;
    std::string phases;
  };
  static constexpr size_t kSlowestKept = 3;
  std::vector<SlowOp> slowest;
  void NoteSlow(uint64_t ns, std::string phases);
};

// One store's workload state: the preloaded key count and the counter of
// fresh keys (indexes from `records` up, handed out once each).
class WorkloadRun {
 public:
  WorkloadRun(const WorkloadSpec& spec, size_t records);
  const WorkloadSpec& spec() const { return spec_; }
  size_t records() const { return records_; }
  // Keys inserted beyond the preload so far.
  uint64_t fresh() const { return fresh_.load(std::memory_order_relaxed); }
  // Key + value bytes of the live data now.
  uint64_t DataBytes() const;

  // Preloads records [lo, hi) of a random permutation of the key range.
  Status Load(KvStore* store, int t, size_t lo, size_t hi);
  // One operation of the mix on worker `t`; its latency goes to `h`.
  void Step(KvStore* store, int t, Random64* rng, Histogram* h, OpTally* tally);

 private:
  uint64_t Fresh() { return records_ + fresh_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t Existing(Random64* rng) const;

  WorkloadSpec spec_;
  size_t records_;
  size_t avg_key_bytes_;
  std::unique_ptr<ScrambledZipf> zipf_;  // Zipfian mixes
  std::atomic<uint64_t> fresh_{0};
};

}  // namespace deuteron::bench
