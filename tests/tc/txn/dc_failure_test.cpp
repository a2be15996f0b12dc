// The DC fails while the TC runs (tc/txn.md, "DC recovery"): the DC server
// process dies (its files lose their unsynced writes) and comes back, or
// someone else restarts it. The TC keeps running: clients see only
// retryable errors (Unavailable while the DC is away), a commit whose record
// is durable is reported committed, and once the DC is back the TC has
// restarted it to its ESL and replayed, so every acknowledged commit is
// there and nothing else.
#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/tc/txn/bank_accounts.h"
#include "tests/tc/txn/tc_harness.h"

namespace deuteron::test {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

std::string Counter(int w) { return "count/" + std::to_string(w); }

tc::TxnOptions Options() {
  tc::TxnOptions o = TcHarness::Defaults();
  o.dc_wait = milliseconds(300);
  o.dc_probe_interval = milliseconds(20);
  o.lock_timeout = milliseconds(2000);
  return o;
}

// What a client may see while the DC fails: lock conflicts, and the DC's
// absence.
bool RetryableWhileDcFails(const Status& s) {
  return s.code() == Code::kDeadlock || s.code() == Code::kTimedOut || s.code() == Code::kUnavailable;
}

// Waits (up to 10 s) until the TC serves again after a DC recovery.
void WaitServing(tc::TxnManager& tm) {
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (!tm.health().ok() && Clock::now() < until) std::this_thread::sleep_for(milliseconds(5));
  INFO(tm.health().ToString());
  REQUIRE(tm.health().ok());
}

void Fund(TcHarness& h, int accounts, int threads) {
  auto t = h.tm().Begin();
  for (int i = 0; i < accounts; ++i) REQUIRE(t->Put(Account(i), std::to_string(kInitial)).ok());
  for (int w = 0; w < threads; ++w) REQUIRE(t->Put(Counter(w), "0").ok());
  REQUIRE(t->Commit().ok());
}

// Worker w moves money between random accounts; every transfer also bumps
// its own counter, so the counter says how many of its transfers committed.
// acked[w] counts the commits reported OK; a commit reported Unavailable
// left nothing behind (it never reached the log).
struct Bank {
  TcHarness& h;
  int accounts;
  int threads;
  ThreadErrors errors;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> unavailable{0};
  std::vector<int64_t> acked;
  std::vector<std::thread> workers;

  Bank(TcHarness& harness, int n, int t) : h(harness), accounts(n), threads(t), acked(t, 0) {}

  // One transfer; its outcome.
  Status Transfer(int w, std::mt19937_64& rng) {
    const int from = static_cast<int>(rng() % accounts);
    const int to = (from + 1 + static_cast<int>(rng() % (accounts - 1))) % accounts;
    auto t = h.tm().Begin();
    Result<std::string> a = t->Get(Account(from));
    if (!a.ok()) return a.status();
    Result<std::string> b = t->Get(Account(to));
    if (!b.ok()) return b.status();
    const int64_t amount = std::min<int64_t>(std::stoll(*a), static_cast<int64_t>(rng() % 50));
    if (Status s = t->Put(Account(from), std::to_string(std::stoll(*a) - amount)); !s.ok()) return s;
    if (Status s = t->Put(Account(to), std::to_string(std::stoll(*b) + amount)); !s.ok()) return s;
    if (Status s = t->Put(Counter(w), std::to_string(acked[w] + 1)); !s.ok()) return s;
    return t->Commit();
  }

  void Start() {
    for (int w = 0; w < threads; ++w) {
      workers.emplace_back([this, w] {
        std::mt19937_64 rng(w + 7);
        while (!stop.load()) {
          Status s = Transfer(w, rng);
          if (s.ok()) {
            ++acked[w];
          } else {
            if (s.code() == Code::kUnavailable) unavailable.fetch_add(1);
            errors.Expect(RetryableWhileDcFails(s), "worker " + std::to_string(w) + ": " + s.ToString());
          }
        }
      });
    }
  }

  void Stop() {
    stop = true;
    for (auto& t : workers) t.join();
    workers.clear();
  }

  // Every acknowledged transfer is there (counters), no other one, and the
  // total holds.
  void Check() {
    auto t = h.tm().Begin();
    tc::ScanOptions o;
    o.lower = "acct";
    o.upper = "acct~";
    Result<std::vector<tc::KeyValue>> all = t->ScanAll(o);
    INFO(all.status().ToString());
    REQUIRE(all.ok());
    REQUIRE(all->size() == static_cast<size_t>(accounts));
    int64_t sum = 0;
    for (const tc::KeyValue& kv : *all) {
      CHECK(std::stoll(kv.value) >= 0);
      sum += std::stoll(kv.value);
    }
    CHECK(sum == kInitial * accounts);
    for (int w = 0; w < threads; ++w) {
      Result<std::string> c = t->Get(Counter(w));
      REQUIRE(c.ok());
      INFO("worker " << w);
      CHECK(std::stoll(*c) == acked[w]);
    }
    REQUIRE(t->Commit().ok());
  }
};

}  // namespace

TEST_CASE("txn dc failure: the DC process dies under 16 transferring threads and comes back",
          "[tc][txn][dcfail]") {
  TcHarness h(/*remote=*/true, 1, Options());
  Fund(h, 200, 16);
  Bank bank(h, 200, 16);
  bank.Start();
  std::this_thread::sleep_for(milliseconds(300));
  const uint64_t inc_before = h.tm().incarnation();
  h.StopDc();  // kill -9 and power loss of the DC's files
  std::this_thread::sleep_for(milliseconds(500));  // longer than dc_wait
  CHECK_FALSE(h.tm().health().ok());               // recovering, not failed
  CHECK(h.tm().health().IsUnavailable());
  h.StartDc();
  WaitServing(h.tm());
  std::this_thread::sleep_for(milliseconds(300));
  bank.Stop();
  bank.errors.CheckNone();
  tc::TxnStats st = h.tm().stats();
  INFO("commits " << st.commits << " unavailable " << bank.unavailable.load() << " recoveries "
                  << st.dc_recoveries << " replayed " << st.replayed_ops);
  CHECK(bank.unavailable.load() > 0);  // the clients did see the DC away
  CHECK(st.dc_recoveries >= 1);
  CHECK(h.tm().incarnation() > inc_before);
  bank.Check();
  // And across a crash of everything (redo from the log alone).
  h.Crash();
  bank.Check();
}

TEST_CASE("txn dc failure: a commit while the DC is down is committed and reads wait then get Unavailable",
          "[tc][txn][dcfail]") {
  tc::TxnOptions o = Options();
  // The commit, not a probe or the idle ESL send, finds the DC gone.
  o.dc_probe_interval = milliseconds(0);
  o.esl_interval = milliseconds(60000);
  TcHarness h(/*remote=*/true, 1, o);
  {
    auto t = h.tm().Begin();
    REQUIRE(t->Put("a", "1").ok());
    REQUIRE(t->Commit().ok());
  }
  h.StopDc();
  {
    // Its Apply finds the DC gone; its record is durable: committed.
    auto t = h.tm().Begin();
    REQUIRE(t->Put("a", "2").ok());
    REQUIRE(t->Put("b", "2").ok());
    Status s = t->Commit();
    INFO(s.ToString());
    CHECK(s.ok());
  }
  CHECK(h.tm().health().IsUnavailable());
  {
    auto t = h.tm().Begin();
    const auto start = Clock::now();
    Result<std::string> r = t->Get("a");
    const auto waited = Clock::now() - start;
    INFO(r.status().ToString());
    CHECK(r.status().IsUnavailable());
    CHECK(waited >= milliseconds(290));
    CHECK(waited < milliseconds(3000));
  }
  {
    auto t = h.tm().Begin();
    Result<std::vector<tc::KeyValue>> r = t->ScanAll(tc::ScanOptions{});
    CHECK(r.status().IsUnavailable());
  }
  {
    // A commit now waits for the DC, then fails having appended nothing.
    auto t = h.tm().Begin();
    REQUIRE(t->Put("c", "3").ok());
    Status s = t->Commit();
    INFO(s.ToString());
    CHECK(s.IsUnavailable());
  }
  CHECK(h.tm().stats().dc_unavailable >= 3);
  CHECK(h.tm().Checkpoint().IsUnavailable());
  h.StartDc();
  WaitServing(h.tm());
  auto t = h.tm().Begin();
  Result<std::string> a = t->Get("a");
  Result<std::string> b = t->Get("b");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(*a == "2");  // the DC lost it with its power; the replay restored it
  CHECK(*b == "2");
  CHECK(t->Get("c").status().IsNotFound());
  REQUIRE(t->Commit().ok());
  REQUIRE(h.tm().Checkpoint().ok());
}

TEST_CASE("txn dc failure: an idle TC notices a DC that restarted and replays",
          "[tc][txn][dcfail]") {
  TcHarness h(/*remote=*/true, 1, Options());
  for (int i = 0; i < 50; ++i) {
    auto t = h.tm().Begin();
    REQUIRE(t->Put("k" + std::to_string(i), std::to_string(i)).ok());
    REQUIRE(t->Commit().ok());
  }
  // Down and up between two probes' worth of idleness; no call of the TC's
  // failed in between, yet the DC lost what it held in memory.
  h.StopDc();
  h.StartDc();
  std::this_thread::sleep_for(milliseconds(100));  // a few probe intervals
  WaitServing(h.tm());
  CHECK(h.tm().stats().dc_recoveries >= 1);
  auto t = h.tm().Begin();
  for (int i = 0; i < 50; ++i) {
    Result<std::string> r = t->Get("k" + std::to_string(i));
    INFO(i << " " << r.status().ToString());
    REQUIRE(r.ok());
    CHECK(*r == std::to_string(i));
  }
  REQUIRE(t->Commit().ok());
}

TEST_CASE("txn dc failure: a rogue RestartTo mid-load; the TC takes the DC back",
          "[tc][txn][dcfail]") {
  for (bool remote : {false, true}) {
    INFO("remote " << remote);
    TcHarness h(remote, 1, Options());
    Fund(h, 100, 8);
    Bank bank(h, 100, 8);
    // Real read-modify-write transfers: reads are fenced (tc/txn.md, "Read
    // fences"), so none reads the DC between the rogue restart and the TC
    // taking it back, and the total holds.
    bank.Start();
    std::this_thread::sleep_for(milliseconds(200));
    const uint64_t inc_before = h.tm().incarnation();
    // Another client restarts the DC to where it stands: it drops the DC's
    // cache (committed operations not yet flushed among them) and fences
    // the TC's incarnation off.
    Result<DcHealth> health = h.dc().Health();
    REQUIRE(health.ok());
    Result<DcReady> rogue = h.dc().RestartTo(health->esl);
    INFO(rogue.status().ToString());
    REQUIRE(rogue.ok());
    std::this_thread::sleep_for(milliseconds(300));
    WaitServing(h.tm());
    bank.Stop();
    bank.errors.CheckNone();
    CHECK(h.tm().incarnation() > rogue->incarnation);
    CHECK(h.tm().incarnation() > inc_before);
    CHECK(h.tm().stats().dc_recoveries >= 1);
    bank.Check();
  }
}

TEST_CASE("txn dc failure: DC deaths under load, long", "[.][tc][txn][dcfail]") {
  TcHarness h(/*remote=*/true, 3, Options());
  Fund(h, 1000, 16);
  Bank bank(h, 1000, 16);
  bank.Start();
  std::mt19937_64 rng(3);
  for (int round = 0; round < 20; ++round) {
    std::this_thread::sleep_for(milliseconds(100 + rng() % 400));
    h.StopDc();
    std::this_thread::sleep_for(milliseconds(rng() % 600));
    h.StartDc();
  }
  WaitServing(h.tm());
  std::this_thread::sleep_for(milliseconds(200));
  bank.Stop();
  bank.errors.CheckNone();
  bank.Check();
}

}  // namespace deuteron::test
