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

}  // namespace
}  // namespace deuteron::crash
