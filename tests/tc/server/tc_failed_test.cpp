// What a client is told of a TC that has failed for good (its log failed):
// the failure's own code (here IOError), which the client library does not
// retry, never Unavailable ("try again later"): the TC serves nothing until
// an operator restarts it (protocol/protocol.md, "Errors").
// Thread safety: single-threaded test over an in-process TC server.
#include <chrono>
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "common/fault_env.h"
#include "tc/client/client.h"
#include "tc/database.h"
#include "tc/server/tc_server.h"

namespace deuteron::test {
namespace {

TEST_CASE("tc server: a TC whose log failed answers with the failure's code, not Unavailable, "
          "and the client does not retry it",
          "[tc_server][failed]") {
  std::unique_ptr<Env> mem = NewMemEnv();
  FaultInjectionEnv env(mem.get(), 1);
  tc::DatabaseOptions dbo;
  dbo.env = &env;
  dbo.txn.checkpoint_log_bytes = 0;
  dbo.txn.checkpoint_interval = std::chrono::milliseconds(0);
  dbo.dc.checkpoint_interval_bytes = 0;
  dbo.dc.checkpoint_interval_ms = 0;
  auto db = tc::Database::Open("/db", dbo);
  REQUIRE(db.ok());
  tc::TcServerOptions so;
  so.port = 0;
  auto server = std::make_unique<tc::TcServer>(&(*db)->txn(), so);
  REQUIRE(server->Start().ok());
  auto c = client::Client::Connect("127.0.0.1:" + std::to_string(server->port()));
  REQUIRE(c.ok());
  client::Client& client = **c;
  REQUIRE(client.Run([](client::Transaction& t) { return t.Put("a", "1"); }).ok());

  // The commit's log sync fails: the outcome is in doubt, the TC fails.
  env.FailNth(FaultInjectionEnv::Op::kSync, 1, ::deuteron::Code::kIOError);
  Status s = client.Run([](client::Transaction& t) { return t.Put("b", "2"); }, client::RetryOptions{1});
  INFO(s.ToString());
  REQUIRE_FALSE(s.ok());
  REQUIRE_FALSE((*db)->txn().health().ok());

  // Every later call: the log's failure, which Run does not retry.
  int tries = 0;
  Status after = client.Run([&](client::Transaction& t) {
    ++tries;
    return t.Get("a").status();
  });
  INFO(after.ToString());
  CHECK(after.code() == ::deuteron::Code::kIOError);
  CHECK(after.message().find("the TC has failed") != std::string_view::npos);
  CHECK_FALSE(client::IsRetryable(after));
  CHECK(tries <= 1);

  CHECK(client.Close().ok());
  server->Stop();
  (*db)->Close().PermitUncheckedError();  // a failed TC's close may report the failure
}

}  // namespace
}  // namespace deuteron::test
