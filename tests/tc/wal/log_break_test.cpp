// DEUTERON_BREAK=ack_before_sync (common/fault_hooks.h) is real: with no
// break every commit the log acknowledged survives a power loss; with the
// break switched on in process, acknowledged commits are lost.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "common/fault_env.h"
#include "common/fault_hooks.h"
#include "tests/tc/wal/wal_test_util.h"

namespace deuteron::wal::test {
namespace {

// Commits `n` records (each acknowledged), loses power, reopens; returns
// how many acknowledged records are missing.
size_t AcknowledgedLost(size_t n) {
  auto mem = NewMemEnv();
  FaultInjectionEnv env(mem.get(), 1);
  const LogOptions o = SmallOptions(64 << 10, 8 << 10);
  std::vector<std::string> acked;
  {
    auto log = OpenLog(&env, o);
    for (size_t i = 0; i < n; ++i) {
      const std::string p = Payload("r", i, 40);
      Result<LogSpan> span = log->Commit(p);
      REQUIRE(span.ok());
      acked.push_back(p);
    }
    // Power lost with the log open; its close afterwards finds the files
    // crashed and changes nothing.
    REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
  }
  auto log = OpenLog(&env, o);
  std::set<std::string> found;
  for (const ReadBack& r : ReadAll(*log, log->DurableRssp())) found.insert(r.payload);
  size_t lost = 0;
  for (const std::string& p : acked) lost += found.count(p) == 0 ? 1 : 0;
  return lost;
}

}  // namespace

TEST_CASE("wal break ack_before_sync: acknowledged commits are lost at a power loss",
          "[wal][break]") {
  REQUIRE(fault::HooksCompiled());
  CHECK(AcknowledgedLost(20) == 0);
  fault::SetBreakForTest(fault::Break::kAckBeforeSync);
  const size_t lost = AcknowledgedLost(20);
  fault::SetBreakForTest(fault::Break::kNone);
  CHECK(lost > 0);
}

}  // namespace deuteron::wal::test
