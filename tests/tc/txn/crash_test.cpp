// Power loss during a concurrent workload (FaultInjectionEnv drops the
// unsynced writes of the TC's log and the DC's LSS at a random moment):
// after recovery every acknowledged commit is present with its exact
// effects, an unacknowledged one is wholly present or wholly absent, and
// nothing else appears.
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

// tc_only: the TC's log loses its unsynced writes and the TC restarts while
// the DC keeps running; otherwise TC and DC lose power together.
void PowerLossRound(uint64_t seed, int threads, bool tc_only) {
  tc::TxnOptions o = TcHarness::Defaults();
  o.checkpoint_log_bytes = 16 << 10;  // checkpoints race with the workload too
  TcHarness h(false, seed, o);
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
          s.PermitUncheckedError();
          break;  // the log or the TC failed: the crash happened
        }
        acked[w] = n;
      }
    });
  }
  std::mt19937_64 rng(seed);
  std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 80));
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

TEST_CASE("txn: power loss (whole process, and TC only) during concurrent commits", "[tc][txn][crash]") {
  for (uint64_t seed = 1; seed <= 3; ++seed) PowerLossRound(seed, 4, false);
  for (uint64_t seed = 1; seed <= 3; ++seed) PowerLossRound(seed, 4, true);
}

TEST_CASE("txn: power loss during concurrent commits, many seeds", "[.][tc][txn][crash]") {
  for (uint64_t seed = 1; seed <= 50; ++seed) PowerLossRound(seed, 8, seed % 2 == 0);
}

}  // namespace deuteron::test
