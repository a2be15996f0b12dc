// CheckHistory (tc/crash/history/isolation_checker.h) on hand-built
// histories: each anomaly kind is reported as that kind (and nothing else),
// serializable histories report nothing.
#include <chrono>
#include <ctime>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/random.h"
#include "tc/crash/history/history.h"
#include "tc/crash/history/isolation_checker.h"
#include "tc/crash/history/list_append.h"
#include "tests/tc/crash/history/mem_list_store.h"

namespace deuteron::crash {
namespace {

using Counts = std::map<std::string, size_t>;

HistoryOp A(const char* key, uint64_t v) { return HistoryOp::Append(key, v); }
HistoryOp R(const char* key, std::vector<uint64_t> list) { return HistoryOp::Read(key, std::move(list)); }

HistoryTxn Txn(uint64_t id, std::vector<HistoryOp> ops, TxnOutcome outcome = TxnOutcome::kOk,
               int64_t start = -1, int64_t end = -1) {
  HistoryTxn t;
  t.id = id;
  t.outcome = outcome;
  t.ops = std::move(ops);
  t.start_us = start;
  t.end_us = end;
  return t;
}

IsolationReport Check(const std::vector<HistoryTxn>& txns) {
  IsolationReport r = CheckHistory(txns);
  for (const std::string& a : r.anomalies) UNSCOPED_INFO(a);
  return r;
}

TEST_CASE("checker: serializable histories report nothing", "[history][checker]") {
  auto r = Check({
      Txn(1, {A("x", 1), R("y", {})}, TxnOutcome::kOk, 0, 10),
      Txn(2, {R("x", {1}), A("x", 2), R("x", {1, 2})}, TxnOutcome::kOk, 11, 20),
      Txn(3, {A("y", 3)}, TxnOutcome::kOk, 5, 30),  // concurrent with 1 and 2
      Txn(4, {A("y", 99)}, TxnOutcome::kFail, 5, 6),  // failed, never seen
      Txn(5, {A("y", 100)}, TxnOutcome::kInfo, 7, 8),  // in doubt, never seen
      Txn(6, {A("x", 4)}, TxnOutcome::kInfo, 7, 8),  // in doubt, seen: committed
      Txn(7, {R("x", {1, 2, 4}), R("y", {3}), R("z", {})}, TxnOutcome::kOk, 40, 50),
      Txn(8, {R("x", {1, 2, 77})}, TxnOutcome::kFail, 40, 50),  // a failed read is not evidence
  });
  CHECK(r.ok());
  CHECK(r.counts.empty());
  CHECK(r.txns_checked == 8);
  CHECK(r.ops_checked == 13);
}

TEST_CASE("checker: G0, a write cycle", "[history][checker]") {
  auto r = Check({
      Txn(1, {A("x", 1), A("y", 4)}),
      Txn(2, {A("x", 2), A("y", 3)}),
      Txn(3, {R("x", {1, 2}), R("y", {3, 4})}),
  });
  CHECK(r.counts == Counts{{"G0", 1}});
  REQUIRE(r.anomalies.size() == 1);
  CHECK(r.anomalies[0].find("-ww->") != std::string::npos);
  CHECK(r.anomalies[0].find("T1") != std::string::npos);
  CHECK(r.anomalies[0].find("T2") != std::string::npos);
}

TEST_CASE("checker: an in-doubt transaction that was read takes part in cycles", "[history][checker]") {
  auto r = Check({
      Txn(1, {A("x", 1), A("y", 4)}, TxnOutcome::kInfo),
      Txn(2, {A("x", 2), A("y", 3)}),
      Txn(3, {R("x", {1, 2}), R("y", {3, 4})}),
  });
  CHECK(r.counts == Counts{{"G0", 1}});
}

TEST_CASE("checker: G1c, circular information flow", "[history][checker]") {
  auto r = Check({
      Txn(1, {A("x", 1), R("y", {2})}),
      Txn(2, {A("y", 2), R("x", {1})}),
  });
  CHECK(r.counts == Counts{{"G1c", 1}});
  REQUIRE(r.anomalies.size() == 1);
  CHECK(r.anomalies[0].find("-wr->") != std::string::npos);
}

TEST_CASE("checker: G-single, read skew", "[history][checker]") {
  auto r = Check({
      Txn(1, {R("x", {}), R("y", {2})}),
      Txn(2, {A("x", 1), A("y", 2)}),
      Txn(3, {R("x", {1})}),
  });
  CHECK(r.counts == Counts{{"G-single", 1}});
  REQUIRE(r.anomalies.size() == 1);
  CHECK(r.anomalies[0] == "G-single: cycle T1 -rw-> T2 -wr-> T1");
}

TEST_CASE("checker: G2, write skew", "[history][checker]") {
  auto r = Check({
      Txn(1, {R("x", {}), A("y", 2)}),
      Txn(2, {R("y", {}), A("x", 1)}),
      Txn(3, {R("x", {1}), R("y", {2})}),
  });
  CHECK(r.counts == Counts{{"G2", 1}});
  REQUIRE(r.anomalies.size() == 1);
  CHECK(r.anomalies[0] == "G2: cycle T1 -rw-> T2 -rw-> T1");
}

TEST_CASE("checker: G1a, a read of a failed transaction's append", "[history][checker]") {
  auto r = Check({
      Txn(1, {A("x", 1)}, TxnOutcome::kFail),
      Txn(2, {R("x", {1})}),
  });
  CHECK(r.counts == Counts{{"G1a", 1}});
}

TEST_CASE("checker: G1b, an intermediate read", "[history][checker]") {
  auto r = Check({
      Txn(1, {A("x", 1), A("x", 2)}),
      Txn(2, {R("x", {1})}),
      Txn(3, {R("x", {1, 2})}),
  });
  // T2 also read x before T1's second append: T2 -rw-> T1 -wr-> T2.
  CHECK(r.counts == Counts{{"G1b", 1}, {"G-single", 1}});
}

TEST_CASE("checker: incompatible orders", "[history][checker]") {
  auto r = Check({
      Txn(1, {A("x", 1)}),
      Txn(2, {A("x", 2)}),
      Txn(3, {R("x", {1, 2})}),
      Txn(4, {R("x", {2})}),
  });
  CHECK(r.counts == Counts{{"incompatible-order", 1}});
}

TEST_CASE("checker: duplicate elements and garbage reads", "[history][checker]") {
  CHECK(Check({Txn(1, {A("x", 1)}), Txn(2, {R("x", {1, 1})})}).counts == Counts{{"duplicate-elements", 1}});
  CHECK(Check({Txn(1, {R("x", {99})})}).counts == Counts{{"garbage-read", 1}});
  // An element appended to another key.
  CHECK(Check({Txn(1, {A("y", 5)}), Txn(2, {R("x", {5})})}).counts == Counts{{"garbage-read", 1}});
  CHECK(Check({Txn(1, {A("x", 1)}), Txn(2, {A("y", 1)})}).counts == Counts{{"duplicate-append", 1}});
}

TEST_CASE("checker: lost appends use only recorded real time", "[history][checker]") {
  // Acknowledged at 10, missing from a read that began at 20.
  auto lost = Check({
      Txn(1, {A("x", 1)}, TxnOutcome::kOk, 0, 10),
      Txn(2, {R("x", {})}, TxnOutcome::kOk, 20, 30),
  });
  CHECK(lost.counts == Counts{{"lost-append", 1}});
  // Missing from a longer read too (the version order does not hold it).
  auto lost2 = Check({
      Txn(1, {A("x", 1)}, TxnOutcome::kOk, 0, 10),
      Txn(2, {A("x", 2)}, TxnOutcome::kOk, 0, 10),
      Txn(3, {R("x", {2})}, TxnOutcome::kOk, 20, 30),
  });
  CHECK(lost2.counts == Counts{{"lost-append", 1}});
  // The read began before the acknowledgement: it may precede the append.
  CHECK(Check({
                  Txn(1, {A("x", 1)}, TxnOutcome::kOk, 0, 10),
                  Txn(2, {R("x", {})}, TxnOutcome::kOk, 5, 30),
              })
            .ok());
  // No times recorded: no real-time inference.
  CHECK(Check({Txn(1, {A("x", 1)}), Txn(2, {R("x", {})})}).ok());
  // In doubt: may not have committed.
  CHECK(Check({
                  Txn(1, {A("x", 1)}, TxnOutcome::kInfo, 0, 10),
                  Txn(2, {R("x", {})}, TxnOutcome::kOk, 20, 30),
              })
            .ok());
}

TEST_CASE("checker: a transaction's reads agree with its own writes", "[history][checker]") {
  CHECK(Check({Txn(1, {A("x", 1), R("x", {})})}).counts == Counts{{"internal", 1}});
  CHECK(Check({Txn(1, {R("x", {}), A("x", 1), R("x", {1, 1})})}).counts.count("internal") == 1);
  CHECK(Check({Txn(1, {R("x", {}), A("x", 1), R("x", {1})})}).ok());
}

TEST_CASE("checker: many anomalies are counted, a few listed", "[history][checker]") {
  std::vector<HistoryTxn> txns;
  for (uint64_t i = 0; i < 20; ++i) {
    txns.push_back(Txn(2 * i + 1, {A("x", i + 1)}, TxnOutcome::kFail));
    txns.push_back(Txn(2 * i + 2, {R("y", {})}));
  }
  std::vector<uint64_t> all;
  for (uint64_t i = 0; i < 20; ++i) all.push_back(i + 1);
  txns.push_back(Txn(100, {R("x", all)}));
  auto r = Check(txns);
  CHECK(r.count("G1a") == 20);
  CHECK(r.anomalies.size() == IsolationReport::kMaxListedPerKind);
  CHECK(ReportToJson(r).find("\"G1a\":20") != std::string::npos);
}

// The checker's speed on a generated serializable history (the figure in
// history.md): 100,000 transactions of the workload over an in-memory serial
// store. Hidden from CI.
TEST_CASE("checker: speed on a 100k-transaction history", "[history][checker][.][bench]") {
  for (const uint32_t keys : {1000u, 100u}) {
    History h;
    test::MemListStore store;
    ListAppendOptions o;
    o.keys = keys;
    ListAppendWorkload w(o, &h);
    Random64 rng(42);
    for (int i = 0; i < 100000; ++i) REQUIRE(w.RunOne(store, static_cast<uint64_t>(i % 8), rng).ok());
    REQUIRE(w.ReadAll(store).ok());
    // Wall time and this process's CPU time (the machine may be shared).
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    const IsolationReport r = CheckHistory(h);
    const double cpu = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(r.ok());
    std::printf("checker: %zu txns, %zu ops, %u keys: wall %.3f s (%.0f txns/s), cpu %.3f s (%.0f txns/s)\n",
                r.txns_checked, r.ops_checked, keys, s, static_cast<double>(r.txns_checked) / s, cpu,
                static_cast<double>(r.txns_checked) / cpu);
  }
}

}  // namespace
}  // namespace deuteron::crash
