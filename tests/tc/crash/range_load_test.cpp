// The range workload (tc/crash/range_load.h) over an embedded store: with
// range locks it keeps every group within its cap; with the scan's range
// lock skipped (DEUTERON_BREAK=scan_lock_early, switched in process) two
// inserts into one group commit and the workload reports the phantom.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/fault_hooks.h"
#include "tc/crash/range_load.h"
#include "tests/tc/crash/crash_test_util.h"

namespace deuteron::crash {
namespace {

// Two threads on one group (every transaction meets the other's) until
// `deadline` or the first phantom; then the whole check.
std::vector<std::string> RunTwoThreads(client::Client& c, RangeWorkload& w, std::chrono::milliseconds length) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (uint64_t i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      Random64 rng(17 + i);
      while (!stop.load()) w.RunOne(c, rng).PermitUncheckedError();
    });
  }
  std::this_thread::sleep_for(length);
  stop.store(true);
  for (std::thread& t : threads) t.join();
  Status check = w.CheckAll(c);
  CHECK(check.ok());
  return w.TakeViolations();
}

TEST_CASE("range workload: with range locks every group stays within its cap", "[crash][range]") {
  const std::string dir = TempDir();
  {
    auto c = client::Client::OpenEmbedded(dir);
    REQUIRE(c.ok());
    RangeWorkload w(RangeOptions{.groups = 1, .cap = 1, .think_ms = 2});
    const std::vector<std::string> v = RunTwoThreads(**c, w, std::chrono::milliseconds(1500));
    for (const std::string& s : v) UNSCOPED_INFO(s);
    CHECK(v.empty());
    CHECK(w.committed() > 10);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("range workload: with scan_lock_early broken it reports a phantom", "[crash][range][break]") {
  if (!fault::HooksCompiled()) return;
  const std::string dir = TempDir();
  {
    auto c = client::Client::OpenEmbedded(dir);
    REQUIRE(c.ok());
    RangeWorkload w(RangeOptions{.groups = 1, .cap = 1, .think_ms = 2});
    fault::SetBreakForTest(fault::Break::kScanLockEarly);
    const std::vector<std::string> v = RunTwoThreads(**c, w, std::chrono::milliseconds(1500));
    fault::SetBreakForTest(fault::Break::kNone);
    REQUIRE_FALSE(v.empty());
    CHECK(v.front().find("phantom") != std::string::npos);
    // The check emptied the group that was over its cap: nothing to report again.
    CHECK(w.CheckAll(**c).ok());
    CHECK(w.TakeViolations().empty());
  }
  std::filesystem::remove_all(dir);
}

// The one violation CheckAll reports now (none: "").
std::string OneViolation(client::Client& c, RangeWorkload& w) {
  REQUIRE(w.CheckAll(c).ok());
  const std::vector<std::string> v = w.TakeViolations();
  for (const std::string& s : v) UNSCOPED_INFO(s);
  REQUIRE(v.size() <= 1);
  return v.empty() ? "" : v.front();
}

void PutDirectly(client::Client& c, const std::string& key) {
  REQUIRE(c.Run([&](client::Transaction& t) { return t.Put(key, "1"); }).ok());
}

void DeleteDirectly(client::Client& c, const std::string& key) {
  REQUIRE(c.Run([&](client::Transaction& t) { return t.Delete(key); }).ok());
}

// What a recovery could do wrong to the groups, done behind the workload's
// back: each must be reported by the next check, against what was
// committed (not only the cap, which none of these exceeds).
TEST_CASE("range workload: the groups are compared with what was committed", "[crash][range]") {
  const std::string dir = TempDir();
  {
    auto c = client::Client::OpenEmbedded(dir);
    REQUIRE(c.ok());
    client::Client& cl = **c;
    RangeWorkload w(RangeOptions{.groups = 1, .cap = 1, .think_ms = 0});
    Random64 rng(5);
    REQUIRE(w.RunOne(cl, rng).ok());  // inserts rg/0/0
    CHECK(OneViolation(cl, w).empty());
    REQUIRE(w.RunOne(cl, rng).ok());  // deletes it
    PutDirectly(cl, "rg/0/0");        // an acknowledged delete undone
    CHECK(OneViolation(cl, w).find("rg/0/0 is present, but an acknowledged transaction deleted it") !=
          std::string::npos);
    DeleteDirectly(cl, "rg/0/0");  // a key the last check found, gone
    CHECK(OneViolation(cl, w).find("rg/0/0 is missing: the last check found it") != std::string::npos);
    REQUIRE(w.RunOne(cl, rng).ok());  // inserts rg/0/1
    DeleteDirectly(cl, "rg/0/1");     // an acknowledged insert lost
    CHECK(OneViolation(cl, w).find("rg/0/1 is missing: an acknowledged transaction inserted it") !=
          std::string::npos);
    PutDirectly(cl, "rg/0/x");  // nothing inserted it
    CHECK(OneViolation(cl, w).find("rg/0/x is present, but no acknowledged or in-doubt transaction") !=
          std::string::npos);
    CHECK(OneViolation(cl, w).empty());  // the next check starts from what is there
    REQUIRE(w.RunOne(cl, rng).ok());     // deletes rg/0/x
    CHECK(OneViolation(cl, w).empty());
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace deuteron::crash
