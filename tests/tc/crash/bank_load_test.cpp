// The bank workload over an embedded store: transfers recorded in the
// oracle verify against what the store holds, and ReadStore reports every
// kind of key or balance that must not be there.
#include <filesystem>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "tc/crash/bank_load.h"
#include "tests/tc/crash/crash_test_util.h"

namespace deuteron::crash {
namespace {

struct Store {
  Store() : dir(TempDir()) {
    auto c = client::Client::OpenEmbedded(dir);
    REQUIRE(c.ok());
    client = std::move(c).value();
  }
  ~Store() {
    client.reset();
    std::filesystem::remove_all(dir);
  }
  Status Put(const std::string& k, const std::string& v) {
    return client->Run([&](client::Transaction& t) { return t.Put(k, v); });
  }
  std::string dir;
  std::unique_ptr<client::Client> client;
};

bool Mentions(const StoreContents& c, const std::string& text) {
  for (const std::string& p : c.problems) {
    if (p.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST_CASE("transfers recorded in the oracle match the store, with the total kept", "[crash]") {
  Store s;
  BankOptions o;
  o.accounts = 8;
  o.threads = 3;
  REQUIRE(LoadAccounts(*s.client, o).ok());
  cli::BankOracle oracle(o.accounts, o.initial_balance);
  TransferLoad load(s.client.get(), &oracle, o, 7);
  load.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  load.Stop();
  CHECK(load.acknowledged() > 0);
  CHECK(load.in_doubt() == 0);  // nothing failed
  Result<StoreContents> c = ReadStore(*s.client, o, {});
  REQUIRE(c.ok());
  CHECK(c->problems.empty());
  CHECK(c->keys == o.accounts);
  const cli::BankVerdict v = oracle.Verify(c->balances);
  INFO(v.detail);
  CHECK(v.ok);
  // A store that lost one transfer's effect no longer verifies.
  std::vector<int64_t> off = c->balances;
  off[0] += 1;
  off[1] -= 1;
  CHECK_FALSE(oracle.Verify(off).ok);
  // The oracle started afresh from what was read verifies it.
  CHECK(cli::BankOracle(c->balances).Verify(c->balances).ok);
}

TEST_CASE("ReadStore reports missing and unknown keys, bad and negative balances", "[crash]") {
  Store s;
  BankOptions o;
  o.accounts = 4;
  REQUIRE(LoadAccounts(*s.client, o).ok());
  Result<StoreContents> clean = ReadStore(*s.client, o, {});
  REQUIRE(clean.ok());
  CHECK(clean->problems.empty());
  CHECK(clean->balances == std::vector<int64_t>(4, o.initial_balance));

  REQUIRE(s.client->Run([&](client::Transaction& t) { return t.Delete(AccountKey(2)); }).ok());
  REQUIRE(s.Put(AccountKey(1), "-5").ok());
  REQUIRE(s.Put(AccountKey(3), "12x").ok());
  REQUIRE(s.Put("zzz", "1").ok());
  REQUIRE(s.Put(AccountKey(9), "1").ok());
  REQUIRE(s.Put("la/1", "[]").ok());
  Result<StoreContents> bad = ReadStore(*s.client, o, {});
  REQUIRE(bad.ok());
  CHECK(Mentions(*bad, "account " + AccountKey(2) + " is missing"));
  CHECK(Mentions(*bad, "negative balance -5"));
  CHECK(Mentions(*bad, "\"12x\", not a balance"));
  CHECK(Mentions(*bad, "\"zzz\""));
  CHECK(Mentions(*bad, "\"" + AccountKey(9) + "\""));
  CHECK(Mentions(*bad, "\"la/1\""));
  CHECK(bad->balances.size() == 4);
  // Another workload's prefix is left alone.
  Result<StoreContents> other = ReadStore(*s.client, o, {"la/"});
  REQUIRE(other.ok());
  CHECK_FALSE(Mentions(*other, "la/1"));
  CHECK(other->keys == bad->keys);
}

}  // namespace
}  // namespace deuteron::crash
