// A real DC process crash under a running TC (tc/txn.md, "DC recovery"):
// `deuteron dc` is killed with SIGKILL while a TxnManager commits through a
// RemoteDataComponent, and started again on the same port from the same
// directory. The TC keeps running: commits whose records are durable are
// reported committed, the TC restarts the new DC process to its ESL and
// replays, and every acknowledged commit reads back.
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "protocol/remote_dc.h"
#include "tc/txn_manager.h"
#include "tc/wal/log.h"
#include "tests/tc/cli/dc_child.h"

namespace deuteron {
namespace {

std::string Key(int i) { return "key" + std::to_string(i % 300); }

}  // namespace

TEST_CASE("a TC survives kill -9 of its deuteron dc process and replays into the new one",
          "[tc][cli][dcfail]") {
  const std::string dir = TempDir();
  auto child = std::make_unique<Child>(std::vector<std::string>{"dc", "--dir", dir, "--listen", "127.0.0.1:0"});
  const uint16_t port = StartDc(child.get());

  std::unique_ptr<Env> mem = NewMemEnv();
  wal::LogOptions lo;
  lo.segment_size = 1 << 20;
  lo.buffer_size = 1 << 20;
  Result<std::unique_ptr<wal::Log>> log = wal::Log::Open(mem.get(), "/log", lo);
  REQUIRE(log.ok());
  protocol::RemoteOptions ro;
  ro.port = port;
  ro.connect_timeout_ms = 200;
  Result<std::unique_ptr<protocol::RemoteDataComponent>> remote = protocol::RemoteDataComponent::Connect(ro);
  REQUIRE(remote.ok());
  tc::TxnOptions o;
  o.dc_wait = std::chrono::milliseconds(300);
  o.dc_probe_interval = std::chrono::milliseconds(20);
  o.checkpoint_log_bytes = 64 << 10;  // checkpoints (DC RSSPs) happen before the kill
  Result<std::unique_ptr<tc::TxnManager>> tm = tc::TxnManager::Open(remote->get(), log->get(), o);
  INFO(tm.status().ToString());
  REQUIRE(tm.ok());

  // One writer: commit i sets Key(i) = i. acked holds what each key must read.
  std::map<std::string, std::string> acked;
  std::atomic<bool> stop{false};
  std::atomic<int> unavailable{0}, other_errors{0};
  std::string last_error;
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) {
      auto t = (*tm)->Begin();
      if (!t->Put(Key(i), std::to_string(i)).ok()) {
        ++other_errors;
        continue;
      }
      Status s = t->Commit();
      if (s.ok()) {
        acked[Key(i)] = std::to_string(i);
      } else if (s.IsUnavailable()) {
        ++unavailable;  // nothing was appended: the key keeps its value
      } else {
        last_error = s.ToString();
        ++other_errors;
      }
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  CHECK(child->Stop(SIGKILL) == -1);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // longer than dc_wait
  CHECK((*tm)->health().IsUnavailable());
  child = std::make_unique<Child>(
      std::vector<std::string>{"dc", "--dir", dir, "--listen", "127.0.0.1:" + std::to_string(port)});
  CHECK(StartDc(child.get()) == port);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!(*tm)->health().ok() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE((*tm)->health().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  stop = true;
  writer.join();
  INFO("acked keys " << acked.size() << " unavailable " << unavailable.load() << " last error "
                     << last_error);
  CHECK(other_errors.load() == 0);
  CHECK(unavailable.load() > 0);
  CHECK((*tm)->stats().dc_recoveries >= 1);
  auto t = (*tm)->Begin();
  for (const auto& [k, v] : acked) {
    Result<std::string> got = t->Get(k);
    INFO(k << ": " << got.status().ToString());
    REQUIRE(got.ok());
    CHECK(*got == v);
  }
  REQUIRE(t->Commit().ok());
  REQUIRE((*tm)->Close().ok());
  tm->reset();
  remote->reset();
  CHECK(child->Stop(SIGTERM) == 0);
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace deuteron
