// The embedded Database: one directory, the directory lock, reopen.
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "tc/database.h"
#include "tests/dc/dc_harness.h"

namespace deuteron::test {

TEST_CASE("database: open, commit, reopen; the directory lock refuses a second opener",
          "[tc][txn][database]") {
  std::unique_ptr<Env> env = NewMemEnv();
  tc::DatabaseOptions o;
  o.env = env.get();
  o.dc = InProcessHarness::Options(HarnessConfig{});
  o.log.segment_size = 64 << 10;
  o.log.buffer_size = 64 << 10;
  {
    Result<std::unique_ptr<tc::Database>> db = tc::Database::Open("/db", o);
    INFO(db.status().ToString());
    REQUIRE(db.ok());
    auto t = (*db)->Begin();
    REQUIRE(t->Put("k", "v").ok());
    REQUIRE(t->Commit().ok());
    Result<std::unique_ptr<tc::Database>> second = tc::Database::Open("/db", o);
    CHECK(second.status().IsBusy());
    REQUIRE((*db)->Checkpoint().ok());
    REQUIRE((*db)->Close().ok());
  }
  Result<std::unique_ptr<tc::Database>> db = tc::Database::Open("/db", o);
  INFO(db.status().ToString());
  REQUIRE(db.ok());
  auto t = (*db)->Begin();
  Result<std::string> v = t->Get("k");
  REQUIRE(v.ok());
  CHECK(*v == "v");
  REQUIRE(t->Commit().ok());
}

}  // namespace deuteron::test
