// Transactions over the in-process DC (and the remote one where tagged):
// read-your-writes, abort, scans merged with the write set, range locks
// against phantoms, ESL when idle, checkpoints, recovery.
#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "tc/commit_record.h"
#include "tests/tc/txn/tc_harness.h"

namespace deuteron::test {
namespace {

using tc::ScanOptions;
using tc::Transaction;

std::string Key(int i) {
  char buf[16];
  snprintf(buf, sizeof buf, "k%05d", i);
  return buf;
}

void CommitPuts(tc::TxnManager& tm, const std::map<std::string, std::string>& kv) {
  auto t = tm.Begin();
  for (const auto& [k, v] : kv) REQUIRE(t->Put(k, v).ok());
  Status s = t->Commit();
  INFO(s.ToString());
  REQUIRE(s.ok());
}

std::optional<std::string> Read(tc::TxnManager& tm, const std::string& key) {
  auto t = tm.Begin();
  Result<std::string> r = t->Get(key);
  REQUIRE((r.ok() || r.status().IsNotFound()));
  REQUIRE(t->Commit().ok());
  if (!r.ok()) return std::nullopt;
  return *r;
}

std::map<std::string, std::string> ScanAll(tc::TxnManager& tm) {
  auto t = tm.Begin();
  Result<std::vector<tc::KeyValue>> r = t->ScanAll(ScanOptions{});
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  REQUIRE(t->Commit().ok());
  std::map<std::string, std::string> m;
  for (auto& kv : *r) m[kv.key] = kv.value;
  return m;
}

}  // namespace

TEST_CASE("txn: commit record round trip and corruption", "[tc][txn]") {
  const std::string big(300, 'x');
  std::vector<RecordOp> ops = {{RecordOpKind::kUpsert, "a", "1", 0},
                               {RecordOpKind::kDelete, "b", "", 0},
                               {RecordOpKind::kUpsert, "c", big, 0}};
  std::string payload;
  tc::EncodeCommitRecord(ops, &payload);
  std::vector<RecordOp> back;
  REQUIRE(tc::DecodeCommitRecord(payload, 100, &back).ok());
  REQUIRE(back.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(back[i].kind == ops[i].kind);
    CHECK(back[i].key == ops[i].key);
    CHECK(back[i].value == ops[i].value);
    CHECK(back[i].lsn == 100 + i);
  }
  for (size_t cut = 0; cut < payload.size(); ++cut) {
    Status s = tc::DecodeCommitRecord(Slice(payload.data(), cut), 1, &back);
    CHECK(s.IsCorruption());
  }
  std::string newer = payload;
  newer[0] = 9;
  CHECK(tc::DecodeCommitRecord(newer, 1, &back).code() == Code::kNotSupported);
}

TEST_CASE("txn: reads see the transaction's own writes", "[tc][txn]") {
  TcHarness h;
  CommitPuts(h.tm(), {{"a", "old"}, {"b", "b0"}});
  auto t = h.tm().Begin();
  REQUIRE(*t->Get("a") == "old");
  REQUIRE(t->Put("a", "new").ok());
  REQUIRE(t->Put("c", "c1").ok());
  REQUIRE(t->Delete("b").ok());
  CHECK(*t->Get("a") == "new");
  CHECK(*t->Get("c") == "c1");
  CHECK(t->Get("b").status().IsNotFound());
  auto all = t->ScanAll(ScanOptions{});
  REQUIRE(all.ok());
  REQUIRE(all->size() == 2);
  CHECK((*all)[0].key == "a");
  CHECK((*all)[0].value == "new");
  CHECK((*all)[1].key == "c");
  // Not yet visible to others: the write set stays private until commit.
  REQUIRE(t->Commit().ok());
  CHECK(Read(h.tm(), "a") == "new");
  CHECK(Read(h.tm(), "b") == std::nullopt);
  CHECK(Read(h.tm(), "c") == "c1");
  CHECK(t->Get("a").status().code() == Code::kTransactionFinished);
  CHECK(t->Commit().code() == Code::kTransactionFinished);
}

TEST_CASE("txn: an aborted transaction leaves nothing, a read-only one logs nothing",
          "[tc][txn]") {
  TcHarness h;
  CommitPuts(h.tm(), {{"a", "1"}});
  const uint64_t tail = h.log().Tail();
  const uint64_t applies = h.dc().GetStats()->applies;
  {
    auto t = h.tm().Begin();
    REQUIRE(t->Put("a", "2").ok());
    REQUIRE(t->Put("z", "9").ok());
    REQUIRE(t->Delete("a").ok());
    t->Abort();
  }
  {
    auto t = h.tm().Begin();  // destroyed active: aborts
    REQUIRE(t->Put("y", "9").ok());
  }
  {
    auto t = h.tm().Begin();
    REQUIRE(*t->Get("a") == "1");
    REQUIRE(t->ScanAll(ScanOptions{}).ok());
    REQUIRE(t->Commit().ok());
  }
  CHECK(h.log().Tail() == tail);
  CHECK(h.dc().GetStats()->applies == applies);
  CHECK(ScanAll(h.tm()) == std::map<std::string, std::string>{{"a", "1"}});
  h.Reopen();
  CHECK(ScanAll(h.tm()) == std::map<std::string, std::string>{{"a", "1"}});
}

TEST_CASE("txn: scans merge the write set with the DC (bounds, reverse, limit)", "[tc][txn]") {
  TcHarness h;
  std::mt19937_64 rng(7);
  std::map<std::string, std::string> committed;
  for (int i = 0; i < 60; i += 2) committed[Key(i)] = "d" + std::to_string(i);
  CommitPuts(h.tm(), committed);
  for (int round = 0; round < 20; ++round) {
    auto t = h.tm().Begin();
    std::map<std::string, std::string> model = committed;
    for (int w = 0; w < 10; ++w) {
      std::string k = Key(static_cast<int>(rng() % 64));
      if (rng() % 3 == 0) {
        REQUIRE(t->Delete(k).ok());
        model.erase(k);
      } else {
        REQUIRE(t->Put(k, "w" + std::to_string(w)).ok());
        model[k] = "w" + std::to_string(w);
      }
    }
    for (int q = 0; q < 20; ++q) {
      ScanOptions o;
      if (rng() % 4 != 0) o.lower = Key(static_cast<int>(rng() % 64));
      if (rng() % 4 != 0) o.upper = Key(static_cast<int>(rng() % 64));
      o.lower_inclusive = rng() % 2 == 0;
      o.upper_inclusive = rng() % 2 == 0;
      o.reverse = rng() % 2 == 0;
      o.limit = rng() % 3 == 0 ? 0 : rng() % 12;
      std::vector<tc::KeyValue> want;
      for (const auto& [k, v] : model) {
        if (o.lower && (o.lower_inclusive ? k < *o.lower : k <= *o.lower)) continue;
        if (o.upper && (o.upper_inclusive ? k > *o.upper : k >= *o.upper)) continue;
        want.push_back({k, v});
      }
      if (o.reverse) std::reverse(want.begin(), want.end());
      if (o.limit != 0 && want.size() > o.limit) want.resize(o.limit);
      Result<std::vector<tc::KeyValue>> got = t->ScanAll(o);
      REQUIRE(got.ok());
      REQUIRE(got->size() == want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        CHECK((*got)[i].key == want[i].key);
        CHECK((*got)[i].value == want[i].value);
      }
    }
    if (rng() % 2 == 0) {
      REQUIRE(t->Commit().ok());
      committed = model;
    } else {
      t->Abort();
    }
  }
  CHECK(ScanAll(h.tm()) == committed);
}

TEST_CASE("txn: a scan's range lock keeps inserts out until it finishes (no phantom)",
          "[tc][txn]") {
  for (bool remote : {false, true}) {
    TcHarness h(remote);
    CommitPuts(h.tm(), {{Key(10), "a"}, {Key(12), "b"}, {Key(30), "c"}});
    ScanOptions o;
    o.lower = Key(10);
    o.upper = Key(20);
    auto scanner = h.tm().Begin();
    auto first = scanner->ScanAll(o);
    REQUIRE(first.ok());
    REQUIRE(first->size() == 2);

    ThreadErrors errors;
    std::atomic<bool> inserted{false};
    std::thread writer([&] {
      auto w = h.tm().Begin();
      errors.Expect(w->Put(Key(15), "phantom").ok(), "put");
      errors.Expect(w->Commit().ok(), "commit");
      inserted = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK_FALSE(inserted.load());
    auto second = scanner->ScanAll(o);
    REQUIRE(second.ok());
    CHECK(second->size() == 2);
    REQUIRE(scanner->Commit().ok());
    writer.join();
    CHECK(inserted.load());
    auto t = h.tm().Begin();
    auto third = t->ScanAll(o);
    REQUIRE(third.ok());
    CHECK(third->size() == 3);
    errors.CheckNone();
    REQUIRE(t->Commit().ok());
  }
}

TEST_CASE("txn: a scan waits for a writer holding X on a key in its range", "[tc][txn]") {
  TcHarness h;
  CommitPuts(h.tm(), {{Key(1), "a"}});
  auto w = h.tm().Begin();
  REQUIRE(w->Put(Key(5), "x").ok());
  ThreadErrors errors;
  std::atomic<bool> scanned{false};
  size_t seen = 0;
  std::thread scanner([&] {
    auto t = h.tm().Begin();
    ScanOptions o;
    o.upper = Key(9);
    o.upper_inclusive = true;
    auto r = t->ScanAll(o);
    if (errors.Expect(r.ok(), r.status().ToString())) seen = r->size();
    errors.Expect(t->Commit().ok(), "commit");
    scanned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_FALSE(scanned.load());
  REQUIRE(w->Commit().ok());
  scanner.join();
  CHECK(seen == 2);
  errors.CheckNone();
}

TEST_CASE("txn: the ESL reaches the DC within a bounded delay when idle", "[tc][txn]") {
  // Applies carry no ESL here: only the idle path can send it.
  tc::TxnOptions o = TcHarness::Defaults();
  o.piggyback_esl = false;
  TcHarness h(false, 1, o);
  CommitPuts(h.tm(), {{"a", "1"}});
  CommitPuts(h.tm(), {{"b", "2"}});
  const uint64_t want = h.log().Esl() - 1;
  bool reached = false;
  for (int i = 0; i < 200 && !reached; ++i) {
    reached = h.dc().Health()->esl >= want;
    if (!reached) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(reached);
}

TEST_CASE("txn: commits survive a clean reopen and a power loss", "[tc][txn][recovery]") {
  for (bool crash : {false, true}) {
    TcHarness h;
    std::map<std::string, std::string> model;
    for (int i = 0; i < 50; ++i) {
      auto t = h.tm().Begin();
      for (int j = 0; j < 3; ++j) {
        std::string k = Key((i * 7 + j * 13) % 40);
        if ((i + j) % 5 == 0) {
          REQUIRE(t->Delete(k).ok());
          model.erase(k);
        } else {
          REQUIRE(t->Put(k, "v" + std::to_string(i)).ok());
          model[k] = "v" + std::to_string(i);
        }
      }
      REQUIRE(t->Commit().ok());
    }
    if (crash) {
      h.Crash();
    } else {
      h.Reopen();
    }
    CHECK(ScanAll(h.tm()) == model);
    // Recovery again over a recovered store changes nothing.
    h.Crash();
    CHECK(ScanAll(h.tm()) == model);
  }
}

TEST_CASE("txn: a checkpoint truncates the log and recovery replays from its RSSP",
          "[tc][txn][recovery]") {
  TcHarness h;
  std::map<std::string, std::string> model;
  for (int i = 0; i < 300; ++i) model[Key(i)] = std::string(100, static_cast<char>('a' + i % 26));
  for (auto it = model.begin(); it != model.end();) {
    auto t = h.tm().Begin();
    for (int j = 0; j < 10 && it != model.end(); ++j, ++it) REQUIRE(t->Put(it->first, it->second).ok());
    REQUIRE(t->Commit().ok());
  }
  const uint64_t before = h.log().DurableRssp();
  Status s = h.tm().Checkpoint();
  INFO(s.ToString());
  REQUIRE(s.ok());
  CHECK(h.log().DurableRssp() > before);
  CHECK(h.log().DurableRssp() <= h.log().Esl());
  CHECK(h.dc().Health()->rssp == h.log().DurableRssp());
  CommitPuts(h.tm(), {{Key(0), "after"}});
  model[Key(0)] = "after";
  h.Crash();
  CHECK(h.tm().stats().replayed_ops == 1);
  CHECK(ScanAll(h.tm()) == model);
}

TEST_CASE("txn: checkpoints by time while the log grows", "[tc][txn][recovery]") {
  tc::TxnOptions o = TcHarness::Defaults();
  o.checkpoint_interval = std::chrono::milliseconds(10);
  TcHarness h(false, 1, o);
  CommitPuts(h.tm(), {{"a", "1"}});
  bool advanced = false;
  for (int i = 0; i < 400 && !advanced; ++i) {
    advanced = h.log().DurableRssp() >= h.log().Esl();
    if (!advanced) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(advanced);
  CHECK(h.tm().stats().checkpoints >= 1);
}

TEST_CASE("txn: scheduled checkpoints keep the log bounded", "[tc][txn][recovery]") {
  tc::TxnOptions o = TcHarness::Defaults();
  o.checkpoint_log_bytes = 32 << 10;
  TcHarness h(false, 1, o);
  for (int i = 0; i < 400; ++i) CommitPuts(h.tm(), {{Key(i % 50), std::string(200, 'x')}});
  bool advanced = false;
  for (int i = 0; i < 200 && !advanced; ++i) {
    advanced = h.tm().stats().checkpoints > 0;
    if (!advanced) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(advanced);
  CHECK(h.log().Tail() - h.log().DurableRssp() < (256u << 10));
}

}  // namespace deuteron::test

namespace deuteron::test {

TEST_CASE("txn: a transaction over the DC's batch limit commits and replays in batches",
          "[tc][txn][recovery]") {
  TcHarness h;
  std::map<std::string, std::string> model;
  auto t = h.tm().Begin();
  for (int i = 0; i < 1000; ++i) {
    model[Key(i)] = std::to_string(i);
    REQUIRE(t->Put(Key(i), std::to_string(i)).ok());
  }
  Status s = t->Commit();
  INFO(s.ToString());
  REQUIRE(s.ok());
  REQUIRE(h.tm().health().ok());
  CHECK(ScanAll(h.tm()) == model);
  h.Crash();
  CHECK(h.tm().stats().replayed_ops == 1000);
  CHECK(ScanAll(h.tm()) == model);
}

}  // namespace deuteron::test
