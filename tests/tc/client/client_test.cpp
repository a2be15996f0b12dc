// The client library (tc/client/client.h): every test body runs over both
// connections, embedded and remote (a TcServer on loopback).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/tc/client/client_harness.h"

namespace deuteron::test {
namespace {

using client::Client;
using client::ScanIterator;
using client::ScanOptions;
using client::Transaction;

std::unique_ptr<Transaction> MustBegin(Client& c) {
  auto t = c.Begin();
  REQUIRE(t.ok());
  return std::move(t).value();
}

// Every key and value of a scan, or the error that stopped it.
std::vector<std::pair<std::string, std::string>> Collect(Transaction& t, ScanOptions o,
                                                         Status* status = nullptr) {
  std::vector<std::pair<std::string, std::string>> out;
  ScanIterator it = t.Scan(std::move(o));
  for (; it.Valid(); it.Next()) out.emplace_back(it.key(), it.value());
  if (status != nullptr) {
    *status = it.status();
  } else {
    CHECK(it.status().ok());
  }
  return out;
}

std::vector<std::string> Keys(const std::vector<std::pair<std::string, std::string>>& items) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : items) keys.push_back(k);
  return keys;
}

TEST_CASE("client: put, get, delete and read-your-writes", "[client]") {
  const ClientMode mode = GENERATE(ClientMode::kEmbedded, ClientMode::kRemote);
  INFO(ModeName(mode));
  ClientHarness h(mode);
  {
    auto t = MustBegin(h.client());
    CHECK(t->active());
    CHECK(t->Get("a").status().IsNotFound());
    REQUIRE(t->Put("a", "1").ok());
    REQUIRE(t->Put("b", "2").ok());
    auto a = t->Get("a");  // its own write
    REQUIRE(a.ok());
    CHECK(*a == "1");
    REQUIRE(t->Delete("b").ok());
    CHECK(t->Get("b").status().IsNotFound());
    REQUIRE(t->Commit().ok());
    CHECK_FALSE(t->active());
    CHECK(t->Get("a").status().code() == Code::kTransactionFinished);
    CHECK(t->Commit().code() == Code::kTransactionFinished);
  }
  auto t = MustBegin(h.client());
  auto a = t->Get("a");
  REQUIRE(a.ok());
  CHECK(*a == "1");
  CHECK(t->Get("b").status().IsNotFound());
  REQUIRE(t->Delete("a").ok());
  REQUIRE(t->Commit().ok());
  auto u = MustBegin(h.client());
  CHECK(u->Get("a").status().IsNotFound());
  // Over the TC's key limit: refused, the transaction stays usable.
  CHECK(u->Put(std::string(4096, 'k'), "v").code() == Code::kTooLarge);
  CHECK(u->active());
  REQUIRE(u->Put("c", "3").ok());
  REQUIRE(u->Commit().ok());
}

TEST_CASE("client: scan iterator pages through ranges, both directions", "[client]") {
  const ClientMode mode = GENERATE(ClientMode::kEmbedded, ClientMode::kRemote);
  INFO(ModeName(mode));
  ClientHarness h(mode);
  REQUIRE(h.client()
              .Run([](Transaction& t) {
                for (int i = 0; i < 10; ++i) {
                  RETURN_IF_ERROR(t.Put("k" + std::to_string(i), "v" + std::to_string(i)));
                }
                return Status::OK();
              })
              .ok());
  auto t = MustBegin(h.client());
  // This transaction's own writes merge into the scan.
  REQUIRE(t->Delete("k3").ok());
  REQUIRE(t->Put("k35", "new").ok());

  auto all = Collect(*t, {});
  CHECK(Keys(all) == std::vector<std::string>{"k0", "k1", "k2", "k35", "k4", "k5", "k6", "k7",
                                              "k8", "k9"});
  CHECK(all[3].second == "new");

  ScanOptions range;
  range.lower = "k2";
  range.upper = "k7";
  CHECK(Keys(Collect(*t, range)) == std::vector<std::string>{"k2", "k35", "k4", "k5", "k6"});
  range.lower_inclusive = false;
  range.upper_inclusive = true;
  CHECK(Keys(Collect(*t, range)) == std::vector<std::string>{"k35", "k4", "k5", "k6", "k7"});

  ScanOptions rev;
  rev.reverse = true;
  rev.upper = "k6";
  CHECK(Keys(Collect(*t, rev)) == std::vector<std::string>{"k5", "k4", "k35", "k2", "k1", "k0"});
  rev.limit = 4;  // over a page boundary
  CHECK(Keys(Collect(*t, rev)) == std::vector<std::string>{"k5", "k4", "k35", "k2"});

  ScanOptions limited;
  limited.limit = 3;  // exactly a page
  CHECK(Keys(Collect(*t, limited)) == std::vector<std::string>{"k0", "k1", "k2"});

  ScanOptions empty;
  empty.lower = "x";
  CHECK(Collect(*t, empty).empty());
  REQUIRE(t->Commit().ok());
}

TEST_CASE("client: a transaction aborts when it goes out of scope", "[client]") {
  const ClientMode mode = GENERATE(ClientMode::kEmbedded, ClientMode::kRemote);
  INFO(ModeName(mode));
  ClientHarness h(mode);
  {
    auto t = MustBegin(h.client());
    REQUIRE(t->Put("x", "uncommitted").ok());
  }  // destroyed: aborted, its X lock on x released
  auto t = MustBegin(h.client());
  const auto start = std::chrono::steady_clock::now();
  CHECK(t->Get("x").status().IsNotFound());  // neither the write nor a lock wait
  REQUIRE(t->Put("x", "2").ok());
  CHECK(std::chrono::steady_clock::now() - start < ClientHarness::kLockTimeout / 2);
  REQUIRE(t->Commit().ok());

  // Explicit Abort is idempotent, and finishes the transaction.
  auto u = MustBegin(h.client());
  REQUIRE(u->Put("x", "3").ok());
  u->Abort();
  u->Abort();
  CHECK_FALSE(u->active());
  CHECK(u->Put("x", "4").code() == Code::kTransactionFinished);
  auto v = MustBegin(h.client());
  auto x = v->Get("x");
  REQUIRE(x.ok());
  CHECK(*x == "2");
}

TEST_CASE("client: Run retries a deadlock until both transactions commit", "[client]") {
  const ClientMode mode = GENERATE(ClientMode::kEmbedded, ClientMode::kRemote);
  INFO(ModeName(mode));
  ClientHarness h(mode);
  REQUIRE(h.client()
              .Run([](Transaction& t) {
                RETURN_IF_ERROR(t.Put("a", "0"));
                return t.Put("b", "0");
              })
              .ok());
  // Each reads one key, waits until the other has read the other, then
  // writes the key the other read: a deadlock on the first attempt.
  std::atomic<int> read{0};
  std::atomic<int> calls{0};
  auto body = [&](const char* mine, const char* theirs) {
    return [&, mine, theirs](Transaction& t) -> Status {
      const int call = calls.fetch_add(1);
      auto v = t.Get(mine);
      if (!v.ok()) return v.status();
      if (call < 2) {
        read.fetch_add(1);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        while (read.load() < 2 && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      }
      return t.Put(theirs, std::string(mine) + "-won");
    };
  };
  Status s1, s2;
  std::thread t1([&] { s1 = h.client().Run(body("a", "b")); });
  std::thread t2([&] { s2 = h.client().Run(body("b", "a")); });
  t1.join();
  t2.join();
  CHECK(s1.ok());
  CHECK(s2.ok());
  CHECK(calls.load() >= 3);  // at least one of them ran again

  // A non-retryable error from fn is returned at once, after an abort.
  int runs = 0;
  Status s = h.client().Run([&](Transaction& t) {
    ++runs;
    RETURN_IF_ERROR(t.Put("a", "never"));
    return Status::InvalidArgument("the caller's own error");
  });
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(runs == 1);
  auto t = MustBegin(h.client());
  auto a = t->Get("a");
  REQUIRE(a.ok());
  CHECK(*a != "never");
}

std::string Account(int i) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "acct%03d", i);
  return buf;
}

TEST_CASE("client: bank transfers from 8 threads keep the total", "[client]") {
  const ClientMode mode = GENERATE(ClientMode::kEmbedded, ClientMode::kRemote);
  INFO(ModeName(mode));
  ClientHarness h(mode);
  constexpr int kAccounts = 100, kThreads = 8;
  constexpr int64_t kInitial = 1000;
  REQUIRE(h.client()
              .Run([&](Transaction& t) {
                for (int i = 0; i < kAccounts; ++i) RETURN_IF_ERROR(t.Put(Account(i), std::to_string(kInitial)));
                return Status::OK();
              })
              .ok());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> transfers{0}, failures{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(static_cast<uint32_t>(w + 1));
      std::uniform_int_distribution<int> pick(0, kAccounts - 1);
      while (!stop.load()) {
        const int from = pick(rng), to = pick(rng);
        if (from == to) continue;
        const int64_t amount = rng() % 50;
        Status s = h.client().Run([&](Transaction& t) -> Status {
          auto a = t.Get(Account(from));
          if (!a.ok()) return a.status();
          auto b = t.Get(Account(to));
          if (!b.ok()) return b.status();
          const int64_t av = std::stoll(*a), bv = std::stoll(*b);
          if (av < amount) return Status::OK();
          RETURN_IF_ERROR(t.Put(Account(from), std::to_string(av - amount)));
          return t.Put(Account(to), std::to_string(bv + amount));
        });
        if (s.ok()) {
          transfers.fetch_add(1);
        } else {
          failures.fetch_add(1);
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  stop.store(true);
  for (auto& t : threads) t.join();
  INFO("transfers " << transfers.load());
  CHECK(failures.load() == 0);
  CHECK(transfers.load() > 0);

  int64_t total = 0;
  int count = 0;
  REQUIRE(h.client()
              .Run([&](Transaction& t) {
                total = 0;
                count = 0;
                ScanOptions o;
                o.lower = "acct";
                o.upper = "acct~";
                ScanIterator it = t.Scan(o);
                for (; it.Valid(); it.Next()) {
                  total += std::stoll(it.value());
                  CHECK(std::stoll(it.value()) >= 0);
                  ++count;
                }
                return it.status();
              })
              .ok());
  CHECK(count == kAccounts);
  CHECK(total == kAccounts * kInitial);
}

}  // namespace
}  // namespace deuteron::test
