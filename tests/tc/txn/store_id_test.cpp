// A store is one identity (tc/txn.md, "Store identity"): the TC's log and
// the DC record the store id; a fresh DC adopts its first TC's, and a TC
// pointed at another store's DC is refused with StoreMismatch, in process
// and over the wire, without changing the DC.
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "dc/dc.h"
#include "dc/dc_server.h"
#include "protocol/remote_dc.h"
#include "tc/txn_manager.h"
#include "tc/wal/log.h"
#include "tests/dc/dc_harness.h"

namespace deuteron::test {
namespace {

std::unique_ptr<wal::Log> OpenLog(Env* env, const std::string& dir) {
  wal::LogOptions lo;
  lo.segment_size = 64 << 10;
  lo.buffer_size = 64 << 10;
  Result<std::unique_ptr<wal::Log>> log = wal::Log::Open(env, dir, lo);
  INFO(log.status().ToString());
  REQUIRE(log.ok());
  return std::move(log).value();
}

tc::TxnOptions Quiet() {
  tc::TxnOptions o;
  o.checkpoint_log_bytes = 0;
  o.checkpoint_interval = std::chrono::milliseconds(0);
  return o;
}

}  // namespace

TEST_CASE("store id: a fresh DC adopts its TC's; another store's TC is refused",
          "[tc][txn][storeid]") {
  std::unique_ptr<Env> env = NewMemEnv();
  Result<std::unique_ptr<dc::Dc>> d = dc::Dc::Open(env.get(), "/dc", InProcessHarness::Options(HarnessConfig{}));
  REQUIRE(d.ok());
  dc::Dc& dc = **d;
  CHECK(dc.ready().store_id.nil());
  std::unique_ptr<wal::Log> mine = OpenLog(env.get(), "/mine");
  std::unique_ptr<wal::Log> other = OpenLog(env.get(), "/other");
  REQUIRE_FALSE(mine->store_id().nil());
  REQUIRE(mine->store_id() != other->store_id());

  std::unique_ptr<dc::DcServer> server;
  std::unique_ptr<protocol::RemoteDataComponent> client;
  DataComponent* target = &dc;
  const bool remote = GENERATE(false, true);
  INFO("remote " << remote);
  if (remote) {
    dc::DcServerOptions so;
    so.io_threads = 1;
    so.worker_threads = 2;
    server = std::make_unique<dc::DcServer>(&dc, so);
    REQUIRE(server->Start().ok());
    protocol::RemoteOptions ro;
    ro.port = server->port();
    Result<std::unique_ptr<protocol::RemoteDataComponent>> rc = protocol::RemoteDataComponent::Connect(ro);
    REQUIRE(rc.ok());
    client = std::move(rc).value();
    target = client.get();
  }
  {
    Result<std::unique_ptr<tc::TxnManager>> tm = tc::TxnManager::Open(target, mine.get(), Quiet());
    INFO(tm.status().ToString());
    REQUIRE(tm.ok());
    CHECK(dc.ready().store_id == mine->store_id());
    Result<DcHealth> h = target->Health();
    REQUIRE(h.ok());
    CHECK(h->store_id == mine->store_id());
    CHECK(h->instance != 0);
    auto t = (*tm)->Begin();
    REQUIRE(t->Put("k", "mine").ok());
    REQUIRE(t->Commit().ok());
    REQUIRE((*tm)->Close().ok());
  }
  const uint64_t incarnation = dc.ready().incarnation;
  Result<std::unique_ptr<tc::TxnManager>> tm = tc::TxnManager::Open(target, other.get(), Quiet());
  INFO(tm.status().ToString());
  REQUIRE(tm.status().code() == Code::kStoreMismatch);
  const std::string msg(tm.status().message());
  CHECK(msg.find(mine->store_id().ToString()) != std::string::npos);
  CHECK(msg.find(other->store_id().ToString()) != std::string::npos);
  // Refused before anything changed: same incarnation, same store, same data.
  CHECK(dc.ready().incarnation == incarnation);
  CHECK(dc.ready().store_id == mine->store_id());
  Result<ReadResult> r = dc.Get("k");
  REQUIRE(r.ok());
  CHECK(r->value == "mine");
  // The store id survives the DC's crash and reopen (dc.meta).
  client.reset();
  if (server != nullptr) server->Stop();
  dc.TEST_SkipCloseOnDestroy();
  d->reset();
  d = dc::Dc::Open(env.get(), "/dc", InProcessHarness::Options(HarnessConfig{}));
  REQUIRE(d.ok());
  CHECK((*d)->ready().store_id == mine->store_id());
  CHECK((*d)->RestartToStore((*d)->ready().max_durable_lsn, other->store_id()).status().code() ==
        Code::kStoreMismatch);
}

}  // namespace deuteron::test
