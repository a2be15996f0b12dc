// The fault list of `deuteron crashtest --faults` and the JSON report.
#include <catch2/catch.hpp>

#include "tc/crash/crash_report.h"
#include "tc/crash/faults.h"

namespace deuteron::crash {
namespace {

TEST_CASE("fault lists parse in order; unknown and repeated names are refused", "[crash]") {
  Result<std::vector<FaultKind>> all = ParseFaults("kill,killpoint,powerloss,torn,bitflip,enospc,eio,rpc,stall");
  REQUIRE(all.ok());
  REQUIRE(all->size() == kFaultKinds);
  for (size_t i = 0; i < kFaultKinds; ++i) CHECK(static_cast<size_t>((*all)[i]) == i);
  Result<std::vector<FaultKind>> two = ParseFaults("bitflip,kill");
  REQUIRE(two.ok());
  CHECK(*two == std::vector<FaultKind>{FaultKind::kBitflip, FaultKind::kKill});
  CHECK(ParseFaults("kill,kill").status().code() == Code::kInvalidArgument);
  CHECK(ParseFaults("kill,nuke").status().code() == Code::kInvalidArgument);
  CHECK(ParseFaults("").status().code() == Code::kInvalidArgument);
  CHECK(ParseFaults("kill,").status().code() == Code::kInvalidArgument);
  CHECK_FALSE(NeedsHooks(FaultKind::kKill));
  CHECK_FALSE(NeedsHooks(FaultKind::kBitflip));
  CHECK_FALSE(NeedsHooks(FaultKind::kRpc));
  CHECK(NeedsHooks(FaultKind::kKillPoint));
  CHECK(NeedsHooks(FaultKind::kEnospc));
  CHECK(NeedsHooks(FaultKind::kStall));
}

TEST_CASE("the report is one JSON object with every field the issue names", "[crash]") {
  CrashReport r;
  r.seed = 42;
  r.cycles = 3;
  r.faults[static_cast<size_t>(FaultKind::kKill)] = 2;
  r.faults[static_cast<size_t>(FaultKind::kBitflip)] = 1;
  r.acknowledged = 10;
  r.verified = 10;
  r.recovery_ms = {30, 10, 20};
  r.violations = {"a \"quoted\"\nline"};
  const std::string j = r.ToJson({FaultKind::kKill, FaultKind::kBitflip});
  CHECK(j.front() == '{');
  CHECK(j.back() == '}');
  for (const char* field : {"\"seed\":42", "\"cycles\":3", "\"faults\":{\"kill\":2,\"bitflip\":1}",
                            "\"kill_points_hit\":0", "\"acknowledged\":10", "\"verified\":10",
                            "\"unknown\":0", "\"keys_checked\":0", "\"history_ops_checked\":0",
                            "\"recovery_ms_p50\":20.0", "\"recovery_ms_p99\":30.0",
                            "\"violations\":[\"a \\\"quoted\\\"\\nline\"]"}) {
    INFO(j << " lacks " << field);
    CHECK(j.find(field) != std::string::npos);
  }
}

TEST_CASE("percentiles are nearest-rank", "[crash]") {
  CHECK(Percentile({}, 0.5) == 0);
  CHECK(Percentile({5}, 0.99) == 5);
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  CHECK(Percentile(v, 0.50) == 50);
  CHECK(Percentile(v, 0.99) == 99);
  CHECK(Percentile(v, 1.0) == 100);
}

}  // namespace
}  // namespace deuteron::crash
