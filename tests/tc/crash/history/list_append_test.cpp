// ListAppendWorkload (tc/crash/history/list_append.h) against real stores
// (embedded and remote, several threads): CheckHistory finds nothing; against
// deliberately broken stores: CheckHistory finds what they broke.
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/random.h"
#include "tc/crash/history/history.h"
#include "tc/crash/history/isolation_checker.h"
#include "tc/crash/history/list_append.h"
#include "tests/tc/client/client_harness.h"
#include "tests/tc/crash/history/mem_list_store.h"

namespace deuteron::crash {
namespace {

using deuteron::test::ClientHarness;
using deuteron::test::ClientMode;

size_t CountOutcome(const History& h, TxnOutcome o) {
  size_t n = 0;
  for (const HistoryTxn& t : h.transactions()) n += t.outcome == o;
  return n;
}

void Report(const IsolationReport& r) {
  for (const std::string& a : r.anomalies) UNSCOPED_INFO(a);
}

TEST_CASE("list append: lists are stored as comma-separated decimals", "[history][workload]") {
  CHECK(EncodeList({}) == "");
  CHECK(EncodeList({1, 22, 333}) == "1,22,333");
  auto l = ParseList("1,22,333");
  REQUIRE(l.ok());
  CHECK(*l == std::vector<uint64_t>{1, 22, 333});
  REQUIRE(ParseList("").ok());
  CHECK(ParseList("")->empty());
  for (const char* bad : {",", "1,", ",1", "1,,2", "a", "1;2", "-1", "99999999999999999999"}) {
    INFO(bad);
    CHECK(ParseList(bad).status().IsInvalidArgument());
  }
  CHECK_FALSE(CommitInDoubt(Status::Deadlock("d")));
  CHECK_FALSE(CommitInDoubt(Status::TransactionFinished("f")));
  CHECK(CommitInDoubt(Status::Unavailable("u")));
  CHECK(CommitInDoubt(Status::TimedOut("t")));
}

TEST_CASE("list append: concurrent clients of a real store leave a serializable history",
          "[history][workload]") {
  const ClientMode mode = GENERATE(ClientMode::kEmbedded, ClientMode::kRemote);
  INFO(deuteron::test::ModeName(mode));
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  ClientHarness harness(mode);
  History history;
  ListAppendOptions o;
  o.keys = 6;
  o.max_appends_per_key = 10;  // lists retire and fresh ones take their place
  ListAppendWorkload workload(o, &history);
  constexpr int kThreads = 4, kEach = 60;
  std::atomic<int> unexpected{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      Random64 rng(seed + static_cast<uint64_t>(i));
      for (int j = 0; j < kEach; ++j) {
        Status s = workload.RunOne(harness.client(), static_cast<uint64_t>(i), rng);
        // Lock conflicts abort some; nothing else should fail here.
        if (!s.ok() && s.code() != Code::kDeadlock && s.code() != Code::kTimedOut &&
            s.code() != Code::kTransactionFinished) {
          unexpected.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(workload.ReadAll(harness.client()).ok());
  CHECK(unexpected.load() == 0);
  CHECK(CountOutcome(history, TxnOutcome::kOk) > kThreads * kEach / 4);
  CHECK(CountOutcome(history, TxnOutcome::kInfo) == 0);
  size_t reads = 0, appends = 0;
  for (size_t i = 0; i + 1 < history.transactions().size(); ++i) {  // not ReadAll's
    for (const HistoryOp& op : history.transactions()[i].ops) {
      (op.kind == HistoryOp::Kind::kRead ? reads : appends) += 1;
    }
  }
  CHECK(reads > 0);
  CHECK(appends > 0);
  // No list got more appends than allowed; the final read saw every list.
  std::map<std::string, size_t> per_key;
  for (const HistoryTxn& t : history.transactions()) {
    for (const HistoryOp& op : t.ops) per_key[op.key] += op.kind == HistoryOp::Kind::kAppend;
  }
  CHECK(workload.keys_used() > o.keys);
  CHECK(per_key.size() == workload.keys_used());
  for (const auto& [key, n] : per_key) {
    INFO(key);
    CHECK(n <= o.max_appends_per_key);
  }
  CHECK(history.transactions().back().ops.size() == workload.keys_used());
  const IsolationReport r = CheckHistory(history);
  Report(r);
  CHECK(r.ok());
  CHECK(r.ops_checked > static_cast<size_t>(kThreads * kEach));
}

// A store that serves stale reads: each Get returns, half the time, a value
// of the key seen earlier instead of the current one. Appends made on a
// stale list overwrite newer elements.
class StaleReadStore final : public ListStore {
 public:
  StaleReadStore(ListStore& inner, uint64_t seed) : inner_(inner), rng_(seed) {}
  Result<std::unique_ptr<ListTxn>> Begin() override {
    ASSIGN_OR_RETURN(std::unique_ptr<ListTxn> txn, inner_.Begin());
    return std::unique_ptr<ListTxn>(new Txn(this, std::move(txn)));
  }

 private:
  class Txn final : public ListTxn {
   public:
    Txn(StaleReadStore* store, std::unique_ptr<ListTxn> inner) : store_(store), inner_(std::move(inner)) {}
    Result<std::string> Get(std::string_view key) override {
      Result<std::string> real = inner_->Get(key);
      if (!real.ok() && !real.status().IsNotFound()) return real;
      std::lock_guard<std::mutex> lock(store_->mu_);
      auto it = store_->seen_.find(std::string(key));
      if (it != store_->seen_.end() && store_->rng_.OneIn(2)) return it->second;
      if (real.ok() && (it == store_->seen_.end() || store_->rng_.OneIn(4))) store_->seen_[std::string(key)] = *real;
      return real;
    }
    Status Put(std::string_view key, std::string_view value) override { return inner_->Put(key, value); }
    Status Commit() override { return inner_->Commit(); }

   private:
    StaleReadStore* const store_;
    std::unique_ptr<ListTxn> inner_;
  };

  ListStore& inner_;
  std::mutex mu_;
  Random64 rng_;                              // guarded by mu_
  std::map<std::string, std::string> seen_;   // guarded by mu_
};

TEST_CASE("list append: the checker finds the anomalies of a store serving stale reads",
          "[history][workload]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  ClientHarness harness(ClientMode::kEmbedded);
  ClientListStore real(harness.client());
  StaleReadStore broken(real, seed);
  History history;
  ListAppendOptions o;
  o.keys = 4;
  ListAppendWorkload workload(o, &history);
  Random64 rng(seed);
  for (int i = 0; i < 100; ++i) REQUIRE(workload.RunOne(broken, 0, rng).ok());
  REQUIRE(workload.ReadAll(real).ok());  // an honest final read
  const IsolationReport r = CheckHistory(history);
  Report(r);
  CHECK_FALSE(r.ok());
  std::printf("stale reads: %s\n", ReportToJson(r).substr(0, 300).c_str());
  CHECK(r.count("lost-append") + r.count("incompatible-order") > 0);
}

// A store whose commits answer Unavailable: some after committing, some
// without. The workload records them "info", and the checker neither
// misses the committed ones nor blames the others.
class DoubtfulCommitStore final : public ListStore {
 public:
  explicit DoubtfulCommitStore(ListStore& inner) : inner_(inner) {}
  Result<std::unique_ptr<ListTxn>> Begin() override {
    ASSIGN_OR_RETURN(std::unique_ptr<ListTxn> txn, inner_.Begin());
    return std::unique_ptr<ListTxn>(new Txn(std::move(txn), n_++));
  }

 private:
  class Txn final : public ListTxn {
   public:
    Txn(std::unique_ptr<ListTxn> inner, uint64_t n) : inner_(std::move(inner)), n_(n) {}
    Result<std::string> Get(std::string_view key) override { return inner_->Get(key); }
    Status Put(std::string_view key, std::string_view value) override { return inner_->Put(key, value); }
    Status Commit() override {
      if (n_ % 3 == 1) {
        RETURN_IF_ERROR(inner_->Commit());
        return Status::Unavailable("the answer was lost (committed)");
      }
      if (n_ % 3 == 2) return Status::Unavailable("the answer was lost (not committed)");
      return inner_->Commit();
    }

   private:
    std::unique_ptr<ListTxn> inner_;
    const uint64_t n_;
  };
  ListStore& inner_;
  uint64_t n_ = 0;
};

TEST_CASE("list append: commits in doubt are recorded info and checked as maybe", "[history][workload]") {
  test::MemListStore mem;
  DoubtfulCommitStore store(mem);
  History history;
  ListAppendWorkload workload({}, &history);
  Random64 rng(7);
  for (int i = 0; i < 300; ++i) {
    Status s = workload.RunOne(store, 0, rng);
    CHECK((s.ok() || s.IsUnavailable()));
  }
  REQUIRE(workload.ReadAll(mem).ok());
  CHECK(CountOutcome(history, TxnOutcome::kInfo) == 200);
  const IsolationReport r = CheckHistory(history);
  Report(r);
  CHECK(r.ok());

  // The same history with the in-doubt commits claimed ok: the ones that did
  // not commit are now lost appends.
  std::vector<HistoryTxn> claimed = history.transactions();
  for (HistoryTxn& t : claimed) {
    if (t.outcome == TxnOutcome::kInfo) t.outcome = TxnOutcome::kOk;
  }
  CHECK(CheckHistory(claimed).count("lost-append") > 0);
}

}  // namespace
}  // namespace deuteron::crash
