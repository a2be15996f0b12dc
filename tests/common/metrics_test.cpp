#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/random.h"

namespace deuteron {
namespace {

constexpr int kMetricThreads = 4;

// Exact nearest-rank percentile, with the rank formula Percentile documents.
uint64_t ExactPercentile(const std::vector<uint64_t>& sorted, double p) {
  const double r = std::ceil(p / 100.0 * static_cast<double>(sorted.size()));
  size_t rank = r <= 1.0 ? 1 : static_cast<size_t>(r);
  rank = std::min(rank, sorted.size());
  return sorted[rank - 1];
}

// Records `values`, then checks count/sum/min/max exactly and percentiles
// against the sorted sample within the documented relative error.
void CheckAgainstSample(std::vector<uint64_t> values) {
  Histogram h;
  uint64_t sum = 0;
  for (uint64_t v : values) {
    h.Record(v);
    sum += v;
  }
  std::sort(values.begin(), values.end());
  const Histogram::Snapshot s = h.GetSnapshot();
  CHECK(s.count == values.size());
  CHECK(s.sum == sum);
  CHECK(s.min == values.front());
  CHECK(s.max == values.back());
  CHECK(s.mean == Approx(static_cast<double>(sum) / static_cast<double>(values.size())));

  for (double p : {0.0, 0.1, 1.0, 5.0, 10.0, 25.0, 33.3, 50.0, 66.6, 75.0, 90.0, 95.0, 99.0,
                   99.9, 99.99, 100.0}) {
    const uint64_t exact = ExactPercentile(values, p);
    const uint64_t got = s.Percentile(p);
    INFO("p " << p << " exact " << exact << " got " << got);
    // Integer form of |got - exact| <= exact * kMaxRelativeError (1/64).
    const uint64_t err = got > exact ? got - exact : exact - got;
    CHECK(err <= exact / (2 * Histogram::kSubBuckets));
    CHECK(got >= s.min);
    CHECK(got <= s.max);
    if (exact < Histogram::kExactBelow) CHECK(got == exact);
  }
  CHECK(s.Percentile(0) == values.front());
  CHECK(s.Percentile(100) == values.back());
}

TEST_CASE("Counter sums adds from several threads exactly", "[common][metrics]") {
  Counter c;
  CHECK(c.Value() == 0);
  constexpr uint64_t kAdds = 100000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kMetricThreads; ++t) {
    threads.emplace_back([&c, t] {
      for (uint64_t i = 0; i < kAdds; ++i) c.Add(t == 0 ? 1 : 2);
    });
  }
  for (auto& th : threads) th.join();
  CHECK(c.Value() == kAdds * (1 + 2 * (kMetricThreads - 1)));

  c.Add();
  c.Add(10);
  CHECK(c.Value() == kAdds * (1 + 2 * (kMetricThreads - 1)) + 11);
  c.Reset();
  CHECK(c.Value() == 0);
  c.Add(5);
  CHECK(c.Value() == 5);
}

TEST_CASE("Counter shards sit on separate cache lines", "[common][metrics]") {
  CHECK(alignof(Counter) >= 64);
  CHECK(sizeof(Counter) == 64 * Counter::kShards);
  // Threads started one after another get different shards (round-robin).
  std::set<uint32_t> shards;
  for (int t = 0; t < 4; ++t) {
    std::thread([&shards] { shards.insert(internal::ThisThreadShard() % Counter::kShards); })
        .join();
  }
  CHECK(shards.size() == 4);
}

TEST_CASE("Gauge sets and adds", "[common][metrics]") {
  Gauge g;
  CHECK(g.Value() == 0);
  g.Set(42);
  CHECK(g.Value() == 42);
  g.Add(-50);
  CHECK(g.Value() == -8);
  g.Set(INT64_MIN);
  CHECK(g.Value() == INT64_MIN);
  g.Set(0);

  std::vector<std::thread> threads;
  for (int t = 0; t < kMetricThreads; ++t) {
    threads.emplace_back([&g, t] {
      for (int i = 0; i < 20000; ++i) g.Add(t % 2 == 0 ? 3 : -1);
    });
  }
  for (auto& th : threads) th.join();
  CHECK(g.Value() == 20000 * (3 - 1 + 3 - 1));
}

TEST_CASE("Histogram buckets are ordered and narrow", "[common][metrics]") {
  CHECK(Histogram::BucketIndex(0) == 0);
  CHECK(Histogram::BucketIndex(63) == 63);
  CHECK(Histogram::BucketIndex(64) == 64);
  CHECK(Histogram::BucketIndex(UINT64_MAX) == Histogram::kNumBuckets - 1);
  CHECK(Histogram::BucketUpper(Histogram::kNumBuckets - 1) == UINT64_MAX);
  for (size_t i = 0; i < Histogram::kNumBuckets; ++i) {
    INFO("bucket " << i);
    const uint64_t lo = Histogram::BucketLower(i);
    const uint64_t hi = Histogram::BucketUpper(i);
    REQUIRE(lo <= hi);
    REQUIRE(Histogram::BucketIndex(lo) == i);
    REQUIRE(Histogram::BucketIndex(hi) == i);
    if (i + 1 < Histogram::kNumBuckets) REQUIRE(Histogram::BucketLower(i + 1) == hi + 1);
    // Width at most lo / 32: the midpoint is within 1/64 of any value inside.
    REQUIRE(static_cast<double>(hi - lo) / 2 <=
            static_cast<double>(lo) * Histogram::kMaxRelativeError);
  }
}

TEST_CASE("Histogram percentiles match a uniform sample", "[common][metrics]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint64_t> dist(0, 1000000);
  std::vector<uint64_t> values(50000);
  for (auto& v : values) v = dist(rng);
  CheckAgainstSample(values);
}

TEST_CASE("Histogram percentiles match a skewed sample", "[common][metrics]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  SECTION("exponential") {
    std::exponential_distribution<double> dist(1.0 / 200.0);  // mean 200 us
    std::vector<uint64_t> values(50000);
    for (auto& v : values) v = static_cast<uint64_t>(dist(rng));
    CheckAgainstSample(values);
  }
  SECTION("log-uniform over 2^0..2^63 with a heavy tail") {
    std::uniform_real_distribution<double> exp_dist(0.0, 63.0);
    std::vector<uint64_t> values(50000);
    for (auto& v : values) v = static_cast<uint64_t>(std::exp2(exp_dist(rng)));
    values[0] = UINT64_MAX;
    values[1] = 0;
    CheckAgainstSample(values);
  }
  SECTION("few distinct values") {
    std::vector<uint64_t> values;
    for (int i = 0; i < 1000; ++i) values.push_back(i % 10 == 0 ? 1000000 : 7);
    CheckAgainstSample(values);
  }
}

TEST_CASE("Histogram of one value reports it exactly", "[common][metrics]") {
  Histogram h;
  CHECK(h.GetSnapshot().count == 0);
  CHECK(h.GetSnapshot().Percentile(50) == 0);
  h.Record(123457);
  h.Record(123457);
  h.Record(123457);
  const Histogram::Snapshot s = h.GetSnapshot();
  CHECK(s.count == 3);
  CHECK(s.sum == 3 * 123457);
  for (double p : {0.0, 50.0, 99.0, 100.0}) CHECK(s.Percentile(p) == 123457);
}

TEST_CASE("Histogram Record from several threads loses nothing", "[common][metrics]") {
  Histogram h;
  constexpr uint64_t kPerThread = 50000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kMetricThreads; ++t) {
    threads.emplace_back([&h, t] {
      for (uint64_t i = 1; i <= kPerThread; ++i) h.Record(i * (t + 1));
    });
  }
  // A reader racing with the writers sees a coherent snapshot.
  for (int i = 0; i < 20; ++i) {
    const Histogram::Snapshot s = h.GetSnapshot();
    if (s.count == 0) continue;
    CHECK(s.min <= s.max);
    CHECK(s.Percentile(50) >= s.min);
    CHECK(s.Percentile(50) <= s.max);
  }
  for (auto& th : threads) th.join();
  const Histogram::Snapshot s = h.GetSnapshot();
  CHECK(s.count == kMetricThreads * kPerThread);
  const uint64_t tri = kPerThread * (kPerThread + 1) / 2;
  CHECK(s.sum == tri * (1 + 2 + 3 + 4));
  CHECK(s.min == 1);
  CHECK(s.max == kPerThread * kMetricThreads);
}

TEST_CASE("Histogram Reset empties it", "[common][metrics]") {
  Histogram h;
  for (uint64_t v = 100; v < 200; ++v) h.Record(v);
  h.Reset();
  Histogram::Snapshot s = h.GetSnapshot();
  CHECK(s.count == 0);
  CHECK(s.sum == 0);
  CHECK(s.min == 0);
  CHECK(s.max == 0);
  CHECK(s.mean == 0.0);
  CHECK(s.Percentile(99) == 0);
  h.Record(5);
  s = h.GetSnapshot();
  CHECK(s.count == 1);
  CHECK(s.min == 5);
  CHECK(s.max == 5);
}

TEST_CASE("Histogram snapshots merge like one histogram", "[common][metrics]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> dist(1.0 / 5000.0);
  Histogram a, b, all;
  for (int i = 0; i < 20000; ++i) {
    const uint64_t v = static_cast<uint64_t>(dist(rng));
    (i % 3 == 0 ? a : b).Record(v);
    all.Record(v);
  }
  Histogram::Snapshot merged;  // default: empty, no buckets
  Histogram::Merge(a.GetSnapshot(), &merged);
  Histogram::Merge(b.GetSnapshot(), &merged);
  Histogram::Merge(Histogram().GetSnapshot(), &merged);  // empty: no effect
  const Histogram::Snapshot want = all.GetSnapshot();
  CHECK(merged.count == want.count);
  CHECK(merged.sum == want.sum);
  CHECK(merged.min == want.min);
  CHECK(merged.max == want.max);
  CHECK(merged.mean == Approx(want.mean));
  CHECK(merged.buckets == want.buckets);
  for (double p : {1.0, 50.0, 99.0, 99.9}) CHECK(merged.Percentile(p) == want.Percentile(p));
}

TEST_CASE("MetricsRegistry returns one metric per name", "[common][metrics]") {
  MetricsRegistry reg;
  Counter* c = reg.GetCounter("llama.flushes");
  REQUIRE(c != nullptr);
  CHECK(reg.GetCounter("llama.flushes") == c);
  CHECK(reg.GetCounter(std::string("llama.") + "flushes") == c);
  CHECK(reg.GetCounter("llama.flush") != c);
  Gauge* g = reg.GetGauge("llama.flushes");  // separate namespace
  REQUIRE(g != nullptr);
  CHECK(reg.GetGauge("llama.flushes") == g);
  Histogram* h = reg.GetHistogram("wal.commit_us");
  REQUIRE(h != nullptr);
  CHECK(reg.GetHistogram("wal.commit_us") == h);

  // Concurrent first lookups agree on one pointer.
  std::vector<Counter*> seen(kMetricThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kMetricThreads; ++t) {
    threads.emplace_back([&reg, &seen, t] {
      for (int i = 0; i < 100; ++i) reg.GetCounter(std::to_string(i))->Add();
      seen[t] = reg.GetCounter("shared");
    });
  }
  for (auto& th : threads) th.join();
  for (Counter* p : seen) CHECK(p == seen[0]);
  CHECK(reg.GetCounter("42")->Value() == kMetricThreads);
}

TEST_CASE("MetricsRegistry renders JSON and text", "[common][metrics]") {
  MetricsRegistry reg;
  CHECK(reg.ToJson() == R"({"counters":{},"gauges":{},"histograms":{}})");

  reg.GetCounter("b.count")->Add(7);
  reg.GetCounter("a.count")->Add(5);
  reg.GetCounter("q\"uote\\")->Add(1);
  reg.GetGauge("depth")->Set(-3);
  Histogram* h = reg.GetHistogram("lat_us");
  for (uint64_t v = 1; v <= 1000; ++v) h->Record(v);
  reg.GetHistogram("empty_us");

  const std::string json = reg.ToJson();
  INFO(json);
  CHECK(json.rfind(R"({"counters":{"a.count":5,"b.count":7,"q\"uote\\":1},)", 0) == 0);
  CHECK(json.find(R"("gauges":{"depth":-3})") != std::string::npos);
  CHECK(json.find(R"("empty_us":{"count":0,"sum":0,"min":0,"mean":0.000,"p50":0,)") !=
        std::string::npos);
  // 1..1000: p50 = 500, p90 = 900, p99 = 990, p999 = 999 within 1/64.
  const std::string lat_key = R"("lat_us":{"count":1000,"sum":500500,"min":1,"mean":500.500,)";
  const size_t at = json.find(lat_key);
  REQUIRE(at != std::string::npos);
  CHECK(json.find("\"empty_us\"") < at);  // sorted by name
  auto number_after = [&](const std::string& key) -> double {
    const size_t k = json.find("\"" + key + "\":", at);
    REQUIRE(k != std::string::npos);
    return std::stod(json.substr(k + key.size() + 3));
  };
  CHECK(number_after("p50") == Approx(500).epsilon(Histogram::kMaxRelativeError));
  CHECK(number_after("p90") == Approx(900).epsilon(Histogram::kMaxRelativeError));
  CHECK(number_after("p99") == Approx(990).epsilon(Histogram::kMaxRelativeError));
  CHECK(number_after("p999") == Approx(999).epsilon(Histogram::kMaxRelativeError));
  CHECK(number_after("max") == 1000);
  CHECK(json.substr(json.size() - 3) == "}}}");

  const std::string text = reg.ToText();
  INFO(text);
  CHECK(text.find("counter    a.count   5\n") != std::string::npos);
  CHECK(text.find("gauge      depth     -3\n") != std::string::npos);
  CHECK(text.find("histogram  lat_us    count=1000 mean=500.500 min=1 p50=") !=
        std::string::npos);
  CHECK(std::count(text.begin(), text.end(), '\n') == 6);
}

}  // namespace
}  // namespace deuteron
