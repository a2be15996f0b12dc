// Metrics: counters, gauges and latency histograms cheap enough for hot paths
// (LLAMA flushes, Bw-tree CAS retries, WAL group-commit latency, benchmarks),
// and a registry that names them for `deuteron stats`.
//
// Thread safety: every method of Counter, Gauge, Histogram and MetricsRegistry
// may be called concurrently from any thread. Add/Set/Record are lock-free.
// Reads (Value, GetSnapshot, ToJson) taken while other threads update are not
// an atomic cut across fields: each update that completed before the read
// began is included, updates racing with it may be partly included. Reset
// racing with updates may keep some of them. After threads are joined (or
// otherwise synchronized with), reads are exact.
//
// Memory orders: all metric atomics are relaxed. Metrics publish no other
// data; they are statistics whose readers need each value, not an ordering
// between values. Cross-thread exactness comes from the caller's own
// synchronization (thread join, a mutex, a release/acquire pair).
//
// Invariants:
//   1. Counter::Value() is the sum of the shards; each thread adds only to its
//      own shard (chosen once per thread), so hot-path adds by different
//      threads (up to kShards of them) touch different cache lines.
//   2. Histogram bucket i holds the values v with BucketIndex(v) == i, i.e.
//      BucketLower(i) <= v <= BucketUpper(i); indices grow with values, so the
//      buckets are sorted and a cumulative walk finds any rank.
//   3. Histogram min_/max_ only move down/up between Resets (CAS loops).
//
// Units: a Histogram records plain uint64 values; the unit (microseconds or
// nanoseconds) is chosen by the user and stated in the metric's name, e.g.
// "wal.group_commit_latency_us".
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace deuteron {

namespace internal {
// Shard of the calling thread: assigned round-robin on a thread's first use,
// then fixed. Shared by all Counters.
inline constexpr uint32_t kNoShard = UINT32_MAX;
inline thread_local uint32_t tls_metrics_shard = kNoShard;
uint32_t AssignMetricsShard();
inline uint32_t ThisThreadShard() {
  uint32_t s = tls_metrics_shard;
  if (s == kNoShard) [[unlikely]] s = AssignMetricsShard();
  return s;
}
}  // namespace internal

// A monotonically increasing count (events, bytes). Add is a relaxed
// fetch_add on the calling thread's own cache-line-padded shard.
class Counter {
 public:
  static constexpr uint32_t kShards = 16;

  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  void Add(uint64_t n = 1) {
    // relaxed: a statistic; the shard is written only by its threads.
    shards_[internal::ThisThreadShard() % kShards].value.fetch_add(n, std::memory_order_relaxed);
  }
  // Sum of all shards (wraps modulo 2^64).
  uint64_t Value() const;
  // Sets every shard to zero; adds racing with Reset may survive it.
  void Reset();

 private:
  struct alignas(64) Shard {
    std::atomic<uint64_t> value{0};
  };
  static_assert(sizeof(Shard) == 64, "one shard per cache line");
  Shard shards_[kShards];
};

// A value that goes up and down (queue depth, bytes in use).
class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  // relaxed (all three): a statistic, no data is published through it.
  void Set(int64_t v) { value_.store(v, std::memory_order_relaxed); }
  void Add(int64_t delta) { value_.fetch_add(delta, std::memory_order_relaxed); }
  int64_t Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

// A distribution of uint64 values with log-linear buckets: values below 64
// are counted exactly; above, each power-of-two range [2^k, 2^(k+1)) is split
// into 32 equal sub-buckets, so a bucket's width is at most 1/32 of its lower
// bound. Percentile() reports the middle of the bucket holding the requested
// rank, clamped to [min, max], so it is within kMaxRelativeError (1/64, about
// 1.6%) of the exact value at that rank, and never outside [min, max].
//
// Record() is lock-free: two relaxed fetch_adds (bucket, sum) and, only when a
// new extreme is seen, a CAS on min or max. One Histogram is ~15 KB. Threads
// recording at very high rates into one Histogram share its sum line; such
// callers (benchmarks) keep one Histogram per thread and merge snapshots.
class Histogram {
 public:
  static constexpr int kSubBucketBits = 5;
  static constexpr uint64_t kSubBuckets = uint64_t{1} << kSubBucketBits;  // 32
  // Values below this are exact (one bucket per value).
  static constexpr uint64_t kExactBelow = 2 * kSubBuckets;  // 64
  static constexpr size_t kNumBuckets = (64 - kSubBucketBits - 1) * kSubBuckets + kExactBelow;  // 1920
  static constexpr double kMaxRelativeError = 1.0 / (2 * kSubBuckets);

  // Bucket of `value`; nondecreasing in value, BucketIndex(UINT64_MAX) is
  // kNumBuckets - 1.
  static constexpr size_t BucketIndex(uint64_t value) {
    if (value < kExactBelow) return static_cast<size_t>(value);
    const int shift = std::bit_width(value) - kSubBucketBits - 1;  // >= 1
    return static_cast<size_t>(shift) * kSubBuckets + static_cast<size_t>(value >> shift);
  }
  // Smallest and largest value in bucket `index`.
  // REQUIRES: index < kNumBuckets
  static constexpr uint64_t BucketLower(size_t index) {
    if (index < kExactBelow) return index;
    const size_t shift = index / kSubBuckets - 1;
    return (index % kSubBuckets + kSubBuckets) << shift;
  }
  static constexpr uint64_t BucketUpper(size_t index) {
    if (index < kExactBelow) return index;
    const size_t shift = index / kSubBuckets - 1;
    return BucketLower(index) + ((uint64_t{1} << shift) - 1);
  }

  // A copy of a Histogram's state at one moment (see the file comment for
  // concurrent updates). count/sum/min/max are exact; sum wraps modulo 2^64.
  // An empty snapshot has every field 0.
  struct Snapshot {
    uint64_t count = 0;
    uint64_t sum = 0;
    uint64_t min = 0;
    uint64_t max = 0;
    double mean = 0.0;
    // Per-bucket counts, kNumBuckets long (or empty when count == 0 and the
    // snapshot was default-constructed).
    std::vector<uint64_t> buckets;

    // The value at nearest rank r = max(1, ceil(p / 100.0 * count)) of the
    // sorted values, within kMaxRelativeError. Exact for p == 0 (min),
    // p == 100 (max) and values below kExactBelow; 0 when count == 0.
    // REQUIRES: 0 <= p <= 100 (clamped otherwise)
    uint64_t Percentile(double p) const;

    // Adds `other` into this snapshot, as if all of its values had been
    // recorded here too.
    void Merge(const Snapshot& other);
  };

  Histogram() = default;
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  void Record(uint64_t value) {
    // relaxed (all below): statistics; see the file comment.
    buckets_[BucketIndex(value)].fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(value, std::memory_order_relaxed);
    uint64_t cur = min_.load(std::memory_order_relaxed);
    while (value < cur &&
           !min_.compare_exchange_weak(cur, value, std::memory_order_relaxed)) {
    }
    cur = max_.load(std::memory_order_relaxed);
    while (value > cur &&
           !max_.compare_exchange_weak(cur, value, std::memory_order_relaxed)) {
    }
  }

  Snapshot GetSnapshot() const;
  void Reset();

  // Merges `from` into `*into` (per-thread benchmark histograms).
  static void Merge(const Snapshot& from, Snapshot* into) { into->Merge(from); }

 private:
  std::atomic<uint64_t> buckets_[kNumBuckets] = {};
  alignas(64) std::atomic<uint64_t> sum_{0};
  std::atomic<uint64_t> min_{UINT64_MAX};
  std::atomic<uint64_t> max_{0};
};

// Name -> metric. Counters, gauges and histograms have separate namespaces.
// Metrics are created on first lookup and live as long as the registry, so
// callers look a metric up once at setup and keep the pointer; lookups take a
// mutex and are not for hot paths.
class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // The metric called `name`, created on first use; the same pointer for the
  // same name, for the registry's lifetime. Never null.
  Counter* GetCounter(std::string_view name);
  Gauge* GetGauge(std::string_view name);
  Histogram* GetHistogram(std::string_view name);

  // One JSON object, keys sorted by name, no whitespace:
  // {"counters":{"a":1},"gauges":{"g":-2},"histograms":{"h":{"count":3,
  //  "sum":6,"min":1,"mean":2.000,"p50":2,"p90":3,"p99":3,"p999":3,"max":3}}}
  std::string ToJson() const;
  // Human-readable, one metric per line, names padded to one column:
  //   counter    a      1
  //   gauge      g      -2
  //   histogram  h      count=3 mean=2.000 min=1 p50=2 p90=3 p99=3 p999=3 max=3
  std::string ToText() const;

 private:
  mutable std::mutex mu_;
  // All three guarded by mu_; the pointees are never removed or moved.
  std::map<std::string, std::unique_ptr<Counter>, std::less<>> counters_;
  std::map<std::string, std::unique_ptr<Gauge>, std::less<>> gauges_;
  std::map<std::string, std::unique_ptr<Histogram>, std::less<>> histograms_;
};

}  // namespace deuteron
