// Bank transfers under strict 2PL: concurrent transfers (with deadlocks and
// retries) and auditing scans keep the total constant and no balance
// negative, over the in-process and the remote DC, and across a reopen.
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

bool Retryable(const Status& s) { return s.code() == Code::kDeadlock || s.code() == Code::kTimedOut; }

// One transfer; false when it must be retried (the transaction was aborted).
bool Transfer(tc::TxnManager& tm, int from, int to, int64_t amount, std::atomic<uint64_t>* done,
              ThreadErrors* errors) {
  auto t = tm.Begin();
  Result<std::string> a = t->Get(Account(from));
  if (!a.ok()) return !errors->Expect(Retryable(a.status()), a.status().ToString());
  Result<std::string> b = t->Get(Account(to));
  if (!b.ok()) return !errors->Expect(Retryable(b.status()), b.status().ToString());
  const int64_t av = std::stoll(*a), bv = std::stoll(*b);
  if (av < amount) {
    errors->Expect(t->Commit().ok(), "read-only commit");
    return true;
  }
  Status s = t->Put(Account(from), std::to_string(av - amount));
  if (s.ok()) s = t->Put(Account(to), std::to_string(bv + amount));
  if (!s.ok()) return !errors->Expect(Retryable(s), s.ToString());
  s = t->Commit();
  errors->Expect(s.ok(), "commit: " + s.ToString());
  done->fetch_add(1);
  return true;
}

// Sum and minimum over a serializable scan of every account.
void Audit(tc::TxnManager& tm, int accounts, bool* retry, ThreadErrors* errors) {
  auto t = tm.Begin();
  tc::ScanOptions o;
  o.lower = "acct";
  o.upper = "acct~";
  Result<std::vector<tc::KeyValue>> r = t->ScanAll(o);
  *retry = !r.ok();
  if (!r.ok()) {
    errors->Expect(Retryable(r.status()), r.status().ToString());
    return;
  }
  errors->Expect(t->Commit().ok(), "audit commit");
  errors->Expect(r->size() == static_cast<size_t>(accounts), "audit saw " + std::to_string(r->size()));
  int64_t sum = 0;
  for (const tc::KeyValue& kv : *r) {
    const int64_t v = std::stoll(kv.value);
    errors->Expect(v >= 0, kv.key + " negative: " + kv.value);
    sum += v;
  }
  errors->Expect(sum == kInitial * accounts, "total " + std::to_string(sum));
}

void RunBank(bool remote, int accounts, int threads, std::chrono::milliseconds duration,
             bool coalesce = true) {
  tc::TxnOptions o = TcHarness::Defaults();
  o.coalesce_applies = coalesce;
  TcHarness h(remote, 1, o);
  for (int base = 0; base < accounts; base += 100) {
    auto t = h.tm().Begin();
    for (int i = base; i < std::min(accounts, base + 100); ++i) {
      REQUIRE(t->Put(Account(i), std::to_string(kInitial)).ok());
    }
    REQUIRE(t->Commit().ok());
  }
  ThreadErrors errors;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> transfers{0}, audits{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < threads; ++w) {
    workers.emplace_back([&, w] {
      std::mt19937_64 rng(w + 1);
      while (!stop.load()) {
        if (w == 0) {
          bool retry = true;
          Audit(h.tm(), accounts, &retry, &errors);
          if (!retry) audits.fetch_add(1);
          continue;
        }
        const int from = static_cast<int>(rng() % accounts);
        int to = static_cast<int>(rng() % accounts);
        if (to == from) to = (to + 1) % accounts;
        const int64_t amount = static_cast<int64_t>(rng() % 150);  // sometimes too much
        while (!Transfer(h.tm(), from, to, amount, &transfers, &errors) && !stop.load()) {
        }
      }
    });
  }
  std::this_thread::sleep_for(duration);
  stop = true;
  for (auto& t : workers) t.join();
  INFO("transfers " << transfers.load() << " audits " << audits.load());
  CHECK(transfers.load() > 0);
  if (remote && coalesce) {
    // The round trip lets commits queue behind a leader: fewer Apply calls.
    tc::TxnStats st = h.tm().stats();
    INFO("commits " << st.commits << " applies " << st.applies);
    CHECK(st.applies < st.commits);
  }
  CHECK(audits.load() > 0);
  bool retry = false;
  Audit(h.tm(), accounts, &retry, &errors);
  REQUIRE_FALSE(retry);
  h.Reopen();
  Audit(h.tm(), accounts, &retry, &errors);
  REQUIRE_FALSE(retry);
  h.Crash();
  Audit(h.tm(), accounts, &retry, &errors);
  REQUIRE_FALSE(retry);
  errors.CheckNone();
}

}  // namespace

TEST_CASE("txn: bank transfers keep the total (in-process DC)", "[tc][txn][bank]") {
  RunBank(false, 200, 8, std::chrono::milliseconds(1000));
  RunBank(false, 200, 8, std::chrono::milliseconds(500), /*coalesce=*/false);
}

TEST_CASE("txn: bank transfers keep the total (remote DC on loopback)", "[tc][txn][bank]") {
  RunBank(true, 200, 8, std::chrono::milliseconds(1500));
}

TEST_CASE("txn: bank transfers, 1000 accounts, 16 threads, long", "[.][tc][txn][bank]") {
  RunBank(false, 1000, 16, std::chrono::seconds(10));
  RunBank(true, 1000, 16, std::chrono::seconds(10));
}

}  // namespace deuteron::test
