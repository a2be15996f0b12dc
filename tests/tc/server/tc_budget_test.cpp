// The TC server's memory budget (tc/server/tc_budget.h, tc/server/tc_server.md
// "The memory budget"), in process: a transaction that grows past what the
// budget holds is refused UNAVAILABLE and stays as it was, a small
// transaction is still served from the reserve, a write set past the
// per-transaction limit gets TOO_LARGE, and what a connection held comes
// back when it closes.
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "tests/tc/client/client_harness.h"
#include "tests/tc/server/tc_thrift_client.h"

namespace deuteron::test {
namespace {

using Code = ThriftTc::Code;
namespace proto = ::deuteron::protocol;

bool Eventually(const std::function<bool()>& cond) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST_CASE("tc server: a transaction past the memory budget is refused, small ones still served",
          "[tc_server][tc_budget]") {
  tc::TcServerOptions so;
  so.service.memory_budget = 1 << 20;
  ClientHarness h(ClientMode::kRemote, so);
  const tc::TcBudget& budget = h.server().budget();
  REQUIRE(h.client().Run([](client::Transaction& t) { return t.Put("warm", "up"); }).ok());
  REQUIRE(Eventually([&] { return h.server().open_transactions() == 0; }));
  const size_t baseline = budget.used();  // the client's idle connections' sessions

  ThriftTc hog(h.port());
  REQUIRE(hog.ok());
  int64_t txn = 0;
  REQUIRE(hog.Begin(&txn) == proto::ErrorCode::OK);
  const std::string value(4096, 'v');
  int puts = 0;
  Code code = proto::ErrorCode::OK;
  while (puts < 1000 && (code = hog.Put(txn, "hog/" + std::to_string(puts), value)) == proto::ErrorCode::OK) {
    ++puts;
  }
  INFO("puts before the refusal: " << puts);
  CHECK(code == proto::ErrorCode::UNAVAILABLE);
  // A large transaction stops at three quarters of the budget.
  CHECK(budget.used() <= budget.limit() - budget.reserve());
  CHECK(budget.used() >= budget.limit() / 2);
  CHECK(budget.refusals() >= 1);
  // The refused transaction is as it was: still open, its writes there.
  CHECK(hog.Get(txn, "hog/0") == proto::ErrorCode::OK);

  // A small transaction fits in the reserve.
  CHECK(h.client().Run([](client::Transaction& t) { return t.Put("small", "ok"); }).ok());

  // The hog leaves: everything it held comes back.
  hog.Close();
  CHECK(Eventually([&] { return budget.used() == baseline; }));
  CHECK(budget.peak() <= budget.limit());
}

TEST_CASE("tc server: a write set past the transaction limit gets TOO_LARGE and stays open",
          "[tc_server][tc_budget]") {
  tc::TcServerOptions so;
  so.service.memory_budget = 0;  // not enforced: only the per-transaction limit refuses
  ClientHarness h(ClientMode::kRemote, so);
  ThriftTc c(h.port());
  REQUIRE(c.ok());
  int64_t txn = 0;
  REQUIRE(c.Begin(&txn) == proto::ErrorCode::OK);
  const std::string value(60 << 10, 'v');
  int puts = 0;
  Code code = proto::ErrorCode::OK;
  while (puts < 100 && (code = c.Put(txn, "big/" + std::to_string(puts), value)) == proto::ErrorCode::OK) {
    ++puts;
  }
  INFO("puts before TOO_LARGE: " << puts);
  CHECK(code == proto::ErrorCode::TOO_LARGE);
  CHECK(puts >= 8);    // about 1 MiB: the log's largest record
  CHECK(puts <= 20);
  CHECK(h.server().budget().refusals() == 0);
  // Still active: a small write fits, and the whole commits.
  CHECK(c.Put(txn, "big/last", "x") == proto::ErrorCode::OK);
  CHECK(c.Commit(txn) == proto::ErrorCode::OK);
  // Rewriting a key replaces its share instead of adding to it.
  REQUIRE(c.Begin(&txn) == proto::ErrorCode::OK);
  for (int i = 0; i < 100; ++i) REQUIRE(c.Put(txn, "same", value) == proto::ErrorCode::OK);
  CHECK(c.Commit(txn) == proto::ErrorCode::OK);
  proto::TcStats stats;
  REQUIRE(c.Stats(&stats) == proto::ErrorCode::OK);
  CHECK(stats.memory_budget == 0);
  CHECK(stats.memory_used > 0);  // the sessions
}

}  // namespace
}  // namespace deuteron::test
