#include "common/metrics.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/json.h"

namespace deuteron {

namespace internal {

uint32_t AssignMetricsShard() {
  // relaxed: only spreads threads over shards; any order gives a valid shard.
  static std::atomic<uint32_t> next{0};
  const uint32_t s = next.fetch_add(1, std::memory_order_relaxed) % Counter::kShards;
  tls_metrics_shard = s;
  return s;
}

}  // namespace internal

// ---- Counter ---------------------------------------------------------------

uint64_t Counter::Value() const {
  uint64_t total = 0;
  for (const Shard& s : shards_) {
    total += s.value.load(std::memory_order_relaxed);  // relaxed: a statistic
  }
  return total;
}

void Counter::Reset() {
  for (Shard& s : shards_) s.value.store(0, std::memory_order_relaxed);  // relaxed: a statistic
}

// ---- Histogram -------------------------------------------------------------

Histogram::Snapshot Histogram::GetSnapshot() const {
  Snapshot snap;
  snap.buckets.resize(kNumBuckets);
  size_t first = kNumBuckets;
  size_t last = 0;
  // relaxed (all loads): statistics; see the header.
  for (size_t i = 0; i < kNumBuckets; ++i) {
    const uint64_t n = buckets_[i].load(std::memory_order_relaxed);
    snap.buckets[i] = n;
    if (n != 0) {
      snap.count += n;
      first = std::min(first, i);
      last = i;
    }
  }
  if (snap.count == 0) return snap;
  snap.sum = sum_.load(std::memory_order_relaxed);
  snap.min = min_.load(std::memory_order_relaxed);
  snap.max = max_.load(std::memory_order_relaxed);
  // Without concurrent updates min lies in the first non-empty bucket and max
  // in the last, and these clamps change nothing. A Record or Reset racing
  // with this snapshot can leave them out of step with the buckets (e.g. min
  // still at its UINT64_MAX sentinel); clamping keeps the snapshot coherent,
  // so Percentile's [min, max] clamp stays meaningful.
  snap.min = std::clamp(snap.min, BucketLower(first), BucketUpper(first));
  snap.max = std::clamp(snap.max, BucketLower(last), BucketUpper(last));
  snap.mean = static_cast<double>(snap.sum) / static_cast<double>(snap.count);
  return snap;
}

void Histogram::Reset() {
  // relaxed (all stores): statistics; see the header.
  for (auto& b : buckets_) b.store(0, std::memory_order_relaxed);
  sum_.store(0, std::memory_order_relaxed);
  min_.store(UINT64_MAX, std::memory_order_relaxed);
  max_.store(0, std::memory_order_relaxed);
}

uint64_t Histogram::Snapshot::Percentile(double p) const {
  if (count == 0 || buckets.empty()) return 0;
  if (!(p > 0.0)) p = 0.0;  // also maps NaN to 0
  if (p > 100.0) p = 100.0;
  double r = std::ceil(p / 100.0 * static_cast<double>(count));
  const uint64_t rank =
      r <= 1.0 ? 1 : (r >= static_cast<double>(count) ? count : static_cast<uint64_t>(r));
  if (rank == 1) return min;
  if (rank == count) return max;
  uint64_t seen = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    seen += buckets[i];
    if (seen >= rank) {
      const uint64_t lo = BucketLower(i);
      const uint64_t mid = lo + (BucketUpper(i) - lo) / 2;
      return std::clamp(mid, min, max);
    }
  }
  return max;  // unreachable when count matches the buckets
}

void Histogram::Snapshot::Merge(const Snapshot& other) {
  if (other.count == 0) return;
  if (count == 0) {
    *this = other;
    return;
  }
  if (buckets.size() < other.buckets.size()) buckets.resize(other.buckets.size());
  for (size_t i = 0; i < other.buckets.size(); ++i) buckets[i] += other.buckets[i];
  count += other.count;
  sum += other.sum;
  min = std::min(min, other.min);
  max = std::max(max, other.max);
  mean = static_cast<double>(sum) / static_cast<double>(count);
}

// ---- MetricsRegistry -------------------------------------------------------

namespace {

template <typename T>
T* GetOrCreate(std::map<std::string, std::unique_ptr<T>, std::less<>>* metrics,
               std::string_view name) {
  auto it = metrics->find(name);
  if (it == metrics->end()) {
    it = metrics->emplace(std::string(name), std::make_unique<T>()).first;
  }
  return it->second.get();
}

}  // namespace

Counter* MetricsRegistry::GetCounter(std::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  return GetOrCreate(&counters_, name);
}

Gauge* MetricsRegistry::GetGauge(std::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  return GetOrCreate(&gauges_, name);
}

Histogram* MetricsRegistry::GetHistogram(std::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  return GetOrCreate(&histograms_, name);
}

std::string MetricsRegistry::ToJson() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out = "{\"counters\":{";
  auto inserter = std::back_inserter(out);
  bool first = true;
  for (const auto& [name, c] : counters_) {
    if (!first) out.push_back(',');
    first = false;
    AppendJsonString(&out, name);
    fmt::format_to(inserter, ":{}", c->Value());
  }
  out.append("},\"gauges\":{");
  first = true;
  for (const auto& [name, g] : gauges_) {
    if (!first) out.push_back(',');
    first = false;
    AppendJsonString(&out, name);
    fmt::format_to(inserter, ":{}", g->Value());
  }
  out.append("},\"histograms\":{");
  first = true;
  for (const auto& [name, h] : histograms_) {
    if (!first) out.push_back(',');
    first = false;
    const Histogram::Snapshot s = h->GetSnapshot();
    AppendJsonString(&out, name);
    fmt::format_to(inserter,
                   ":{{\"count\":{},\"sum\":{},\"min\":{},\"mean\":{:.3f},\"p50\":{},"
                   "\"p90\":{},\"p99\":{},\"p999\":{},\"max\":{}}}",
                   s.count, s.sum, s.min, s.mean, s.Percentile(50), s.Percentile(90),
                   s.Percentile(99), s.Percentile(99.9), s.max);
  }
  out.append("}}");
  return out;
}

std::string MetricsRegistry::ToText() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t width = 0;
  for (const auto& [name, c] : counters_) width = std::max(width, name.size());
  for (const auto& [name, g] : gauges_) width = std::max(width, name.size());
  for (const auto& [name, h] : histograms_) width = std::max(width, name.size());

  std::string out;
  auto inserter = std::back_inserter(out);
  for (const auto& [name, c] : counters_) {
    fmt::format_to(inserter, "{:<10} {:<{}}  {}\n", "counter", name, width, c->Value());
  }
  for (const auto& [name, g] : gauges_) {
    fmt::format_to(inserter, "{:<10} {:<{}}  {}\n", "gauge", name, width, g->Value());
  }
  for (const auto& [name, h] : histograms_) {
    const Histogram::Snapshot s = h->GetSnapshot();
    fmt::format_to(inserter,
                   "{:<10} {:<{}}  count={} mean={:.3f} min={} p50={} p90={} p99={} "
                   "p999={} max={}\n",
                   "histogram", name, width, s.count, s.mean, s.min, s.Percentile(50),
                   s.Percentile(90), s.Percentile(99), s.Percentile(99.9), s.max);
  }
  return out;
}

}  // namespace deuteron
