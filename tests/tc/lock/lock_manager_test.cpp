#include "tc/lock/lock_manager.h"

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/tc/lock/lock_test_util.h"

namespace deuteron::tc {
namespace {

using testing::Async;
using testing::ReadyWithin;
using testing::WaitForWaiters;
using namespace std::chrono_literals;

constexpr LockMode S = LockMode::kShared;
constexpr LockMode X = LockMode::kExclusive;

LockManager::Options ShortTimeout(std::chrono::milliseconds ms = 50ms) {
  LockManager::Options options;
  options.lock_timeout = ms;
  return options;
}

KeyRange Range(std::optional<std::string> lo, std::optional<std::string> hi) {
  return KeyRange{std::move(lo), std::move(hi)};
}

// The three kinds of request a transaction makes on key "k".
enum class Kind { kRecS, kRecX, kRangeS };

Status Acquire(LockManager& lm, TxnId txn, Kind kind) {
  switch (kind) {
    case Kind::kRecS: return lm.LockKey(txn, "k", S);
    case Kind::kRecX: return lm.LockKey(txn, "k", X);
    case Kind::kRangeS: return lm.LockRange(txn, Range("j", "l"));
  }
  return Status::Internal("unreachable");
}

TEST_CASE("compatibility matrix: every pair of modes, different and same transactions",
          "[tc][lock]") {
  const Kind kinds[] = {Kind::kRecS, Kind::kRecX, Kind::kRangeS};
  // compatible[a][b] for different transactions.
  const bool compatible[3][3] = {
      {true, false, true},
      {false, false, false},
      {true, false, true},
  };
  for (int a = 0; a < 3; a++) {
    for (int b = 0; b < 3; b++) {
      INFO("held " << a << ", requested " << b);
      {
        LockManager lm(ShortTimeout());
        REQUIRE(Acquire(lm, 1, kinds[a]).ok());
        Status s = Acquire(lm, 2, kinds[b]);
        if (compatible[a][b]) {
          CHECK(s.ok());
        } else {
          CHECK(s.code() == Code::kTimedOut);
        }
        lm.ReleaseAll(1);
        lm.ReleaseAll(2);
      }
      {
        // One transaction never conflicts with itself.
        LockManager lm(ShortTimeout());
        REQUIRE(Acquire(lm, 1, kinds[a]).ok());
        CHECK(Acquire(lm, 1, kinds[b]).ok());
        lm.ReleaseAll(1);
      }
    }
  }
}

TEST_CASE("re-entrant acquisition is a no-op", "[tc][lock]") {
  LockManager lm(ShortTimeout());
  REQUIRE(lm.LockKey(1, "a", X).ok());
  REQUIRE(lm.LockKey(1, "a", X).ok());
  REQUIRE(lm.LockKey(1, "a", S).ok());
  CHECK(lm.HoldsKey(1, "a", X));
  REQUIRE(lm.LockRange(1, Range("b", "f")).ok());
  REQUIRE(lm.LockRange(1, Range("c", "d")).ok());
  lm.ReleaseAll(1);
  // One release frees everything, however often it was acquired.
  CHECK_FALSE(lm.HoldsKey(1, "a", S));
  CHECK(lm.LockKey(2, "a", X).ok());
  CHECK(lm.LockKey(2, "c", X).ok());
  lm.ReleaseAll(2);
}

TEST_CASE("range lock bounds: lo inclusive, hi exclusive, open ends", "[tc][lock]") {
  struct Case {
    std::optional<std::string> lo, hi;
    std::string key;
    bool inside;
  };
  const std::vector<Case> cases = {
      {"b", "d", "b", true},          {"b", "d", "c", true},       {"b", "d", "czzz", true},
      {"b", "d", "d", false},         {"b", "d", "a", false},      {"b", "d", "dd", false},
      {"b", "d", std::string("b\0", 2), true},                     {std::nullopt, "d", "", true},
      {std::nullopt, "d", "d", false}, {"b", std::nullopt, "zzzz", true},
      {"b", std::nullopt, "a", false}, {std::nullopt, std::nullopt, "", true},
      {std::string("\xff", 1), std::nullopt, std::string("\xff\x01", 2), true},
      {std::string("\x80", 1), std::nullopt, "z", false},
  };
  for (const Case& c : cases) {
    INFO("range [" << c.lo.value_or("-inf") << ", " << c.hi.value_or("+inf") << ") key '"
                   << c.key << "'");
    {
      // A scan first: an insert, a delete or an update of the key (all X) waits.
      LockManager lm(ShortTimeout());
      REQUIRE(lm.LockRange(1, Range(c.lo, c.hi)).ok());
      Status s = lm.LockKey(2, c.key, X);
      CHECK(s.ok() == !c.inside);
      if (c.inside) CHECK(s.code() == Code::kTimedOut);
      // A point read never conflicts with a scan (outside, txn 2 holds X).
      CHECK(lm.LockKey(3, c.key, S).ok() == c.inside);
      lm.ReleaseAll(1);
      lm.ReleaseAll(2);
      lm.ReleaseAll(3);
    }
    {
      // The writer first (the DC may already hold its write): the scan waits.
      LockManager lm(ShortTimeout());
      REQUIRE(lm.LockKey(2, c.key, X).ok());
      Status s = lm.LockRange(1, Range(c.lo, c.hi));
      CHECK(s.ok() == !c.inside);
      if (c.inside) CHECK(s.code() == Code::kTimedOut);
      lm.ReleaseAll(1);
      lm.ReleaseAll(2);
    }
  }
}

TEST_CASE("an inverted range is refused, an empty one conflicts with nothing", "[tc][lock]") {
  LockManager lm(ShortTimeout());
  CHECK(lm.LockRange(1, Range("d", "b")).code() == Code::kInvalidArgument);
  REQUIRE(lm.LockKey(2, "c", X).ok());
  CHECK(lm.LockRange(1, Range("c", "c")).ok());  // [c, c) holds no key, not even c
  for (TxnId t : {1, 2}) lm.ReleaseAll(t);
}

TEST_CASE("a scan waits for an X lock inside its range and goes when it is released",
          "[tc][lock]") {
  LockManager lm;
  REQUIRE(lm.LockKey(1, "c", X).ok());  // a committing insert or delete
  REQUIRE(lm.LockKey(1, "x", X).ok());  // outside: irrelevant
  auto scan = Async([&] { return lm.LockRange(2, Range("b", "d")); });
  REQUIRE(WaitForWaiters(lm, 1));
  CHECK_FALSE(ReadyWithin(scan, 20));
  lm.ReleaseAll(1);
  REQUIRE(ReadyWithin(scan, 5000));
  CHECK(scan.get().ok());
  lm.ReleaseAll(2);
}

TEST_CASE("inserts and deletes inside a held range wait until the scan releases",
          "[tc][lock]") {
  LockManager lm;
  REQUIRE(lm.LockRange(1, Range("b", "d")).ok());
  auto insert = Async([&] { return lm.LockKey(2, "bb", X); });   // a key never seen
  auto remove = Async([&] { return lm.LockKey(3, "c", X); });
  auto outside = Async([&] { return lm.LockKey(4, "d", X); });
  REQUIRE(ReadyWithin(outside, 5000));
  CHECK(outside.get().ok());
  REQUIRE(WaitForWaiters(lm, 2));
  CHECK_FALSE(ReadyWithin(insert, 20));
  CHECK_FALSE(ReadyWithin(remove, 0));
  lm.ReleaseAll(1);
  REQUIRE(ReadyWithin(insert, 5000));
  REQUIRE(ReadyWithin(remove, 5000));
  CHECK(insert.get().ok());
  CHECK(remove.get().ok());
  for (TxnId t : {2, 3, 4}) lm.ReleaseAll(t);
}

TEST_CASE("upgrade S to X waits for the other readers and holds back later ones",
          "[tc][lock]") {
  LockManager lm;
  REQUIRE(lm.LockKey(1, "a", S).ok());
  SECTION("alone: immediate") {
    REQUIRE(lm.LockKey(1, "a", X).ok());
    CHECK(lm.HoldsKey(1, "a", X));
  }
  SECTION("with another reader") {
    REQUIRE(lm.LockKey(2, "a", S).ok());
    auto upgrade = Async([&] { return lm.LockKey(1, "a", X); });
    REQUIRE(WaitForWaiters(lm, 1));
    // A reader arriving after the upgrade waits behind it.
    auto late_reader = Async([&] { return lm.LockKey(3, "a", S); });
    REQUIRE(WaitForWaiters(lm, 2));
    CHECK_FALSE(lm.HoldsKey(1, "a", X));
    lm.ReleaseAll(2);
    REQUIRE(ReadyWithin(upgrade, 5000));
    CHECK(upgrade.get().ok());
    CHECK(lm.HoldsKey(1, "a", X));
    CHECK_FALSE(ReadyWithin(late_reader, 20));
    lm.ReleaseAll(1);
    REQUIRE(ReadyWithin(late_reader, 5000));
    CHECK(late_reader.get().ok());
    lm.ReleaseAll(3);
  }
  lm.ReleaseAll(1);
}

TEST_CASE("FIFO: a writer is not starved by readers arriving after it", "[tc][lock]") {
  LockManager lm;
  REQUIRE(lm.LockKey(1, "a", S).ok());
  auto writer = Async([&] { return lm.LockKey(2, "a", X); });
  REQUIRE(WaitForWaiters(lm, 1));
  auto reader = Async([&] { return lm.LockKey(3, "a", S); });
  REQUIRE(WaitForWaiters(lm, 2));
  CHECK_FALSE(ReadyWithin(reader, 20));
  lm.ReleaseAll(1);
  REQUIRE(ReadyWithin(writer, 5000));
  CHECK(writer.get().ok());
  CHECK_FALSE(ReadyWithin(reader, 20));
  lm.ReleaseAll(2);
  REQUIRE(ReadyWithin(reader, 5000));
  CHECK(reader.get().ok());
  lm.ReleaseAll(3);
}

TEST_CASE("FIFO between ranges and keys: a scan does not pass an earlier writer",
          "[tc][lock]") {
  LockManager lm;
  REQUIRE(lm.LockKey(1, "c", S).ok());
  auto writer = Async([&] { return lm.LockKey(2, "c", X); });
  REQUIRE(WaitForWaiters(lm, 1));
  auto scan = Async([&] { return lm.LockRange(3, Range("a", "z")); });
  REQUIRE(WaitForWaiters(lm, 2));
  lm.ReleaseAll(1);
  REQUIRE(ReadyWithin(writer, 5000));
  CHECK(writer.get().ok());
  CHECK_FALSE(ReadyWithin(scan, 20));
  lm.ReleaseAll(2);
  REQUIRE(ReadyWithin(scan, 5000));
  CHECK(scan.get().ok());
  lm.ReleaseAll(3);
}

TEST_CASE("two-way deadlock: the youngest gets Deadlock, the other proceeds", "[tc][lock]") {
  LockManager lm;
  REQUIRE(lm.LockKey(1, "a", X).ok());
  REQUIRE(lm.LockKey(2, "b", X).ok());
  SECTION("the youngest closes the cycle") {
    auto older = Async([&] { return lm.LockKey(1, "b", X); });
    REQUIRE(WaitForWaiters(lm, 1));
    Status s = lm.LockKey(2, "a", X);
    CHECK(s.code() == Code::kDeadlock);
    CHECK_FALSE(ReadyWithin(older, 20));
    lm.ReleaseAll(2);
    REQUIRE(ReadyWithin(older, 5000));
    CHECK(older.get().ok());
  }
  SECTION("the oldest closes the cycle: the waiting youngest is woken") {
    auto younger = Async([&] { return lm.LockKey(2, "a", X); });
    REQUIRE(WaitForWaiters(lm, 1));
    auto older = Async([&] { return lm.LockKey(1, "b", X); });
    REQUIRE(ReadyWithin(younger, 5000));
    CHECK(younger.get().code() == Code::kDeadlock);
    CHECK_FALSE(ReadyWithin(older, 20));
    lm.ReleaseAll(2);
    REQUIRE(ReadyWithin(older, 5000));
    CHECK(older.get().ok());
  }
  CHECK(lm.stats().deadlocks == 1);
  lm.ReleaseAll(1);
}

TEST_CASE("three-way deadlock: the youngest in the cycle is the victim", "[tc][lock]") {
  // Ids 5, 9, 7 hold a, b, c; each then wants the next one's key. Which
  // transaction closes the cycle varies; the victim is always 9.
  const TxnId ids[3] = {5, 9, 7};
  const char* keys[3] = {"a", "b", "c"};
  const int closer = GENERATE(0, 1, 2);
  INFO("closer " << closer);
  LockManager lm;
  for (int i = 0; i < 3; i++) REQUIRE(lm.LockKey(ids[i], keys[i], X).ok());
  std::future<Status> calls[3];
  size_t waiting = 0;
  for (int step = 1; step <= 3; step++) {
    const int i = (closer + step) % 3;  // the closer goes last
    calls[i] = Async([&, i] { return lm.LockKey(ids[i], keys[(i + 1) % 3], X); });
    if (step < 3) REQUIRE(WaitForWaiters(lm, ++waiting));
  }
  REQUIRE(ReadyWithin(calls[1], 5000));
  CHECK(calls[1].get().code() == Code::kDeadlock);
  CHECK_FALSE(ReadyWithin(calls[0], 20));
  CHECK_FALSE(ReadyWithin(calls[2], 0));
  lm.ReleaseAll(9);
  // 5 gets b; 7 still waits for a, held by 5.
  REQUIRE(ReadyWithin(calls[0], 5000));
  CHECK(calls[0].get().ok());
  CHECK_FALSE(ReadyWithin(calls[2], 20));
  lm.ReleaseAll(5);
  REQUIRE(ReadyWithin(calls[2], 5000));
  CHECK(calls[2].get().ok());
  lm.ReleaseAll(7);
  CHECK(lm.stats().deadlocks == 1);
}

TEST_CASE("deadlock through upgrades and through a range lock", "[tc][lock]") {
  LockManager lm;
  SECTION("two readers upgrading") {
    REQUIRE(lm.LockKey(1, "a", S).ok());
    REQUIRE(lm.LockKey(2, "a", S).ok());
    auto older = Async([&] { return lm.LockKey(1, "a", X); });
    REQUIRE(WaitForWaiters(lm, 1));
    CHECK(lm.LockKey(2, "a", X).code() == Code::kDeadlock);
    CHECK(lm.HoldsKey(2, "a", S));  // a failed upgrade keeps the S lock
    lm.ReleaseAll(2);
    REQUIRE(ReadyWithin(older, 5000));
    CHECK(older.get().ok());
    lm.ReleaseAll(1);
  }
  SECTION("a scan and a writer") {
    REQUIRE(lm.LockRange(3, Range("m", "n")).ok());
    REQUIRE(lm.LockKey(4, "b", X).ok());
    auto scanner = Async([&] { return lm.LockKey(3, "b", X); });
    REQUIRE(WaitForWaiters(lm, 1));
    CHECK(lm.LockKey(4, "m5", X).code() == Code::kDeadlock);
    lm.ReleaseAll(4);
    REQUIRE(ReadyWithin(scanner, 5000));
    CHECK(scanner.get().ok());
    lm.ReleaseAll(3);
  }
}

TEST_CASE("a lock wait times out with TimedOut and withdraws its request", "[tc][lock]") {
  LockManager lm(ShortTimeout(100ms));
  REQUIRE(lm.LockKey(1, "a", S).ok());
  const auto start = std::chrono::steady_clock::now();
  Status s = lm.LockKey(2, "a", X);
  CHECK(s.code() == Code::kTimedOut);
  CHECK(std::chrono::steady_clock::now() - start >= 100ms);
  CHECK(lm.stats().timeouts == 1);
  CHECK(lm.NumWaiting() == 0);
  // The withdrawn X no longer holds back readers.
  CHECK(lm.LockKey(3, "a", S).ok());
  // A timed-out range request no longer holds back writers.
  REQUIRE(lm.LockKey(4, "q", X).ok());
  CHECK(lm.LockRange(5, Range("p", "r")).code() == Code::kTimedOut);
  CHECK(lm.LockKey(6, "p", X).ok());
  for (TxnId t = 1; t <= 6; t++) lm.ReleaseAll(t);
}

}  // namespace
}  // namespace deuteron::tc
