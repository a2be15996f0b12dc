// Power loss during a concurrent workload (FaultInjectionEnv drops the
// unsynced writes of the TC's log and the DC's LSS at a random moment):
// after recovery every acknowledged commit is present with its exact
// effects, an unacknowledged one is wholly present or wholly absent,
// nothing else appears, and the DC holds nothing above the recovered end of
// the stable log. Crash points: TC and DC together, the TC alone (the DC
// keeps running and is restarted to E), the DC alone (remote; the TC keeps
// running and replays into it).
#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/tc/txn/tc_harness.h"

namespace deuteron::test {
namespace {

// Transaction n of thread w writes a/w/n, b/w/n, c/w/n = n and last/w = n,
// and deletes a/w/(n-1).
std::string K(const char* p, int w, int n) { return std::string(p) + "/" + std::to_string(w) + "/" + std::to_string(n); }

// kBoth: TC and DC lose power together. kTcOnly: the TC's log loses its
// unsynced writes and the TC restarts while the DC keeps running. kDcOnly:
// the DC process (remote) dies with power loss of its files and comes back
// while the TC keeps running; commits meanwhile fail with Unavailable
// (nothing appended) and are retried.
enum class CrashMode3 { kBoth, kTcOnly, kDcOnly };

void PowerLossRound(uint64_t seed, int threads, CrashMode3 mode) {
  const bool tc_only = mode == CrashMode3::kTcOnly;
  const bool dc_only = mode == CrashMode3::kDcOnly;
  tc::TxnOptions o = TcHarness::Defaults();
  o.checkpoint_log_bytes = 16 << 10;  // checkpoints race with the workload too
  o.dc_wait = std::chrono::milliseconds(100);
  o.dc_probe_interval = std::chrono::milliseconds(10);
  TcHarness h(/*remote=*/dc_only, seed, o);
  std::vector<int> acked(threads, -1);     // highest acknowledged n
  std::vector<int> attempted(threads, -1); // highest n whose commit was tried
  ThreadErrors errors;
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int w = 0; w < threads; ++w) {
    workers.emplace_back([&, w] {
      for (int n = 0; !stop.load(); ++n) {
        auto t = h.tm().Begin();
        bool ok = t->Put(K("a", w, n), std::to_string(n)).ok() &&
                  t->Put(K("b", w, n), std::to_string(n)).ok() &&
                  t->Put(K("c", w, n), std::to_string(n)).ok() &&
                  t->Put("last/" + std::to_string(w), std::to_string(n)).ok() &&
                  (n == 0 || t->Delete(K("a", w, n - 1)).ok());
        errors.Expect(ok, "put refused");  // each thread owns its keys: no conflicts
        attempted[w] = n;
        Status s = t->Commit();
        if (!s.ok()) {
          if (dc_only) {
            // The DC is away: nothing was appended; the same n again.
            errors.Expect(s.IsUnavailable(), "commit while the DC was away: " + s.ToString());
            if (!s.IsUnavailable()) break;
            --n;
            continue;
          }
          s.PermitUncheckedError();
          break;  // the log or the TC failed: the crash happened
        }
        acked[w] = n;
      }
    });
  }
  std::mt19937_64 rng(seed);
  std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 80));
  if (dc_only) {
    // The DC dies and comes back; the TC and its clients carry on.
    h.StopDc();
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 150));
    h.StartDc();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!h.tm().health().ok() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    stop = true;
    for (auto& t : workers) t.join();
    errors.CheckNone();
    REQUIRE(h.tm().health().ok());
    CHECK(h.tm().stats().dc_recoveries >= 1);
  } else {
    REQUIRE((tc_only ? h.log_env() : h.env()).SimulateCrash(CrashMode::kDropUnsynced).ok());
    stop = true;
    for (auto& t : workers) t.join();
    errors.CheckNone();
    // The process is gone; reopen recovers DC and TC.
    if (tc_only) {
      h.CrashTcOnly();
    } else {
      h.Crash();
    }
  }
  // The DC holds nothing above the recovered end of the stable log.
  const uint64_t stable_end = h.log().Esl();
  ScanRequest req;
  for (;;) {
    Result<ScanResult> page = h.dc().Scan(req);
    REQUIRE(page.ok());
    for (const ScanItem& item : page->items) {
      INFO(item.key << " lsn " << item.lsn << " stable end " << stable_end);
      REQUIRE(item.lsn < stable_end);
    }
    if (!page->more || page->items.empty()) break;
    req.lower = page->items.back().key;
    req.lower_inclusive = false;
  }

  auto t = h.tm().Begin();
  auto all = t->ScanAll(tc::ScanOptions{});
  REQUIRE(all.ok());
  REQUIRE(t->Commit().ok());
  std::map<std::string, std::string> got;
  for (auto& kv : *all) got[kv.key] = kv.value;
  std::map<std::string, std::string> want;
  for (int w = 0; w < threads; ++w) {
    // The recovered prefix: acked, or one more (the in-doubt commit wholly).
    int last = acked[w];
    auto it = got.find("last/" + std::to_string(w));
    if (it != got.end()) last = std::stoi(it->second);
    INFO("thread " << w << " acked " << acked[w] << " attempted " << attempted[w] << " recovered " << last);
    REQUIRE(last >= acked[w]);
    REQUIRE(last <= attempted[w]);
    for (int n = 0; n <= last; ++n) {
      if (n == last) want[K("a", w, n)] = std::to_string(n);
      want[K("b", w, n)] = std::to_string(n);
      want[K("c", w, n)] = std::to_string(n);
    }
    if (last >= 0) want["last/" + std::to_string(w)] = std::to_string(last);
  }
  REQUIRE(got.size() == want.size());
  CHECK(got == want);
}

}  // namespace

TEST_CASE("txn: power loss (whole process, TC only, DC only) during concurrent commits",
          "[tc][txn][crash]") {
  for (uint64_t seed = 1; seed <= 3; ++seed) PowerLossRound(seed, 4, CrashMode3::kBoth);
  for (uint64_t seed = 1; seed <= 5; ++seed) PowerLossRound(seed, 4, CrashMode3::kTcOnly);
  for (uint64_t seed = 1; seed <= 3; ++seed) PowerLossRound(seed, 4, CrashMode3::kDcOnly);
}

TEST_CASE("txn: power loss during concurrent commits, many seeds", "[.][tc][txn][crash]") {
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const auto mode = static_cast<CrashMode3>(seed % 3);
    PowerLossRound(seed, 8, mode);
  }
}

}  // namespace deuteron::test
