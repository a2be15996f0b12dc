// Early lock release (tc/txn.md, "Early lock release"): a commit releases its
// locks once its record is appended and applied, before it is durable. What
// must hold, with the log's fdatasync held open (FaultInjectionEnv's
// HoldSyncs): a transaction that read or overwrote early-released data is
// not acknowledged before that data is durable, and a crash in that window
// loses the early committer and every dependent, none of them acknowledged.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "tests/tc/txn/tc_harness.h"

namespace deuteron::test {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Waits up to 5 s for `cond`.
template <typename Cond>
bool Eventually(Cond&& cond) {
  const auto until = Clock::now() + std::chrono::seconds(5);
  while (!cond()) {
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

// One transaction on its own thread; `read` and `done` say how far it got.
struct Client {
  std::thread thread;
  std::atomic<bool> read{false};
  std::atomic<bool> done{false};
  std::string seen;  // what its read returned
  Status status;     // its commit's outcome

  ~Client() {
    if (thread.joinable()) thread.join();
    status.PermitUncheckedError();
  }
};

void Put(tc::TxnManager& tm, const std::string& k, const std::string& v) {
  auto t = tm.Begin();
  REQUIRE(t->Put(k, v).ok());
  REQUIRE(t->Commit().ok());
}

// The window: with syncs held, the writer sets "k" = "1" and blocks in its
// commit; a read-write transaction reads "k" and writes "k2"; a read-only
// one reads "k". Both readers see "1" only because the writer released its
// locks early, and all three wait for the held sync.
void OpenWindow(TcHarness& h, Client* writer, Client* rw, Client* ro) {
  Put(h.tm(), "k", "0");
  h.log_env().HoldSyncs();
  writer->thread = std::thread([&h, writer] {
    auto t = h.tm().Begin();
    Status s = t->Put("k", "1");
    writer->read = true;
    writer->status = s.ok() ? t->Commit() : s;
    writer->done = true;
  });
  REQUIRE(Eventually([&] { return writer->read.load(); }));
  rw->thread = std::thread([&h, rw] {
    auto t = h.tm().Begin();
    Result<std::string> v = t->Get("k");
    rw->seen = v.ok() ? *v : v.status().ToString();
    rw->read = true;
    Status s = v.ok() ? t->Put("k2", "after " + *v) : v.status();
    rw->status = s.ok() ? t->Commit() : s;
    rw->done = true;
  });
  ro->thread = std::thread([&h, ro] {
    auto t = h.tm().Begin();
    Result<std::string> v = t->Get("k");
    ro->seen = v.ok() ? *v : v.status().ToString();
    ro->read = true;
    ro->status = v.ok() ? t->Commit() : v.status();
    ro->done = true;
  });
  REQUIRE(Eventually([&] { return rw->read.load() && ro->read.load(); }));
  CHECK(rw->seen == "1");
  CHECK(ro->seen == "1");
  // The read-write one released early too (its record is appended and
  // applied); the read-only one waits for the writer's record.
  REQUIRE(Eventually([&] { return h.tm().stats().early_releases >= 2; }));
  REQUIRE(Eventually([&] { return h.tm().stats().read_only_waits >= 1; }));
  std::this_thread::sleep_for(milliseconds(50));
  CHECK_FALSE(writer->done.load());
  CHECK_FALSE(rw->done.load());
  CHECK_FALSE(ro->done.load());
}

}  // namespace

TEST_CASE("txn early lock release: dependents are acknowledged only after the data they read is durable",
          "[tc][txn][elr]") {
  TcHarness h(/*remote=*/false, 1);
  Client writer, rw, ro;
  OpenWindow(h, &writer, &rw, &ro);
  h.log_env().ReleaseSyncs();
  writer.thread.join();
  rw.thread.join();
  ro.thread.join();
  CHECK(writer.status.ok());
  CHECK(rw.status.ok());
  CHECK(ro.status.ok());
  h.Crash();
  auto t = h.tm().Begin();
  CHECK(*t->Get("k") == "1");
  CHECK(*t->Get("k2") == "after 1");
  REQUIRE(t->Commit().ok());
}

TEST_CASE("txn early lock release: a crash before durability loses the early committer and its dependents, none acknowledged",
          "[tc][txn][elr]") {
  TcHarness h(/*remote=*/false, 2);
  Client writer, rw, ro;
  OpenWindow(h, &writer, &rw, &ro);
  // Power loss while the group's sync is held: the records never reach the
  // disk; the held sync then finds its file crashed and fails.
  REQUIRE(h.log_env().SimulateCrash(CrashMode::kDropUnsynced).ok());
  h.log_env().ReleaseSyncs();
  writer.thread.join();
  rw.thread.join();
  ro.thread.join();
  INFO(writer.status.ToString() << " / " << rw.status.ToString() << " / " << ro.status.ToString());
  CHECK_FALSE(writer.status.ok());
  CHECK_FALSE(rw.status.ok());
  CHECK_FALSE(ro.status.ok());
  h.Crash();
  auto t = h.tm().Begin();
  Result<std::string> k = t->Get("k");
  REQUIRE(k.ok());
  CHECK(*k == "0");
  CHECK(t->Get("k2").status().IsNotFound());
  REQUIRE(t->Commit().ok());
}

TEST_CASE("txn early lock release: off, a reader waits for the writer's durability",
          "[tc][txn][elr]") {
  tc::TxnOptions o = TcHarness::Defaults();
  o.early_lock_release = false;
  TcHarness h(/*remote=*/false, 3, o);
  Put(h.tm(), "k", "0");
  h.log_env().HoldSyncs();
  Client writer, reader;
  writer.thread = std::thread([&] {
    auto t = h.tm().Begin();
    Status s = t->Put("k", "1");
    writer.read = true;
    writer.status = s.ok() ? t->Commit() : s;
    writer.done = true;
  });
  REQUIRE(Eventually([&] { return writer.read.load(); }));
  reader.thread = std::thread([&] {
    auto t = h.tm().Begin();
    Result<std::string> v = t->Get("k");
    reader.seen = v.ok() ? *v : v.status().ToString();
    reader.read = true;
    reader.status = v.ok() ? t->Commit() : v.status();
  });
  std::this_thread::sleep_for(milliseconds(100));
  CHECK_FALSE(reader.read.load());  // still waiting for the writer's X lock
  CHECK(h.tm().stats().early_releases == 0);
  h.log_env().ReleaseSyncs();
  writer.thread.join();
  reader.thread.join();
  CHECK(writer.status.ok());
  CHECK(reader.status.ok());
  CHECK(reader.seen == "1");
}

}  // namespace deuteron::test
