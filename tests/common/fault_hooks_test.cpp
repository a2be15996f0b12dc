// common/fault_hooks.h in process: the kill point registry, a kill point
// firing at exactly its Nth hit (with a test callback instead of dying),
// breaks, and the parsing of the environment variables.
#include <stdlib.h>

#include <set>
#include <string>

#include <catch2/catch.hpp>

#include "common/fault_hooks.h"

namespace deuteron::fault {
namespace {

int g_fired = 0;
KillPoint g_fired_point = KillPoint::kCount;

void OnFire(KillPoint p) {
  ++g_fired;
  g_fired_point = p;
}

// Sets one variable for the scope.
class VarScope {
 public:
  VarScope(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~VarScope() { unsetenv(name_); }

 private:
  const char* name_;
};

}  // namespace

TEST_CASE("fault hooks: every kill point has one dotted name", "[common][faulthooks]") {
  REQUIRE(HooksCompiled());
  const std::vector<std::string> names = KillPointNames();
  REQUIRE(names.size() == static_cast<size_t>(KillPoint::kCount));
  std::set<std::string> seen;
  for (size_t i = 0; i < names.size(); ++i) {
    INFO(names[i]);
    CHECK(names[i] == KillPointName(static_cast<KillPoint>(i)));
    CHECK((names[i].rfind("dc.", 0) == 0 || names[i].rfind("tc.", 0) == 0));
    CHECK(names[i].find_first_not_of("abcdefghijklmnopqrstuvwxyz._") == std::string::npos);
    CHECK(seen.insert(names[i]).second);
  }
}

TEST_CASE("fault hooks: a kill point fires at exactly its Nth hit", "[common][faulthooks]") {
  REQUIRE(HooksCompiled());
  g_fired = 0;
  ArmKillPointForTest(KillPoint::kDcFlushAfterWrite, 3, &OnFire);
  DEUTERON_KILL_POINT(kDcFlushBeforeWrite);  // another point: not counted for it
  DEUTERON_KILL_POINT(kDcFlushAfterWrite);
  DEUTERON_KILL_POINT(kDcFlushAfterWrite);
  CHECK(g_fired == 0);
  DEUTERON_KILL_POINT(kDcFlushAfterWrite);
  CHECK(g_fired == 1);
  CHECK(g_fired_point == KillPoint::kDcFlushAfterWrite);
  DEUTERON_KILL_POINT(kDcFlushAfterWrite);
  CHECK(g_fired == 1);  // once
  CHECK(KillPointHits(KillPoint::kDcFlushAfterWrite) == 4);
  CHECK(KillPointHits(KillPoint::kDcFlushBeforeWrite) == 1);
  DisarmKillPointsForTest();
  DEUTERON_KILL_POINT(kDcFlushAfterWrite);
  CHECK(KillPointHits(KillPoint::kDcFlushAfterWrite) == 4);  // disarmed: one load, nothing else
}

TEST_CASE("fault hooks: breaks", "[common][faulthooks]") {
  REQUIRE(HooksCompiled());
  CHECK(!BrokenOnPurpose(Break::kEslCheck));
  SetBreakForTest(Break::kEslCheck);
  CHECK(BrokenOnPurpose(Break::kEslCheck));
  CHECK(!BrokenOnPurpose(Break::kIdempotence));
  SetBreakForTest(Break::kNone);
  CHECK(!BrokenOnPurpose(Break::kEslCheck));
  for (Break b : {Break::kEslCheck, Break::kAckBeforeSync, Break::kIdempotence,
                  Break::kRsspBeforeFlush, Break::kScanLockEarly}) {
    Result<Break> parsed = ParseBreak(BreakName(b));
    REQUIRE(parsed.ok());
    CHECK(*parsed == b);
  }
  CHECK(ParseBreak("none").status().IsInvalidArgument());
  CHECK(ParseBreak("esl").status().IsInvalidArgument());
}

TEST_CASE("fault hooks: malformed variables are InvalidArgument", "[common][faulthooks]") {
  REQUIRE(HooksCompiled());
  for (const char* v : {"x", "dc.flush.after_write", "dc.flush.after_write:0",
                        "dc.flush.after_write:-1", "no.point:1", "*:0:1", "*:2:1", "*:0.5",
                        "*:0.5:x", "*:abc:1"}) {
    INFO(v);
    VarScope scope("DEUTERON_KILL_POINT", v);
    CHECK(SetUpFromEnvironment().status().IsInvalidArgument());
  }
  for (const char* v : {"power", "enospc", "enospc:0", "eio:x", "seed:", "powerloss,,torn"}) {
    INFO(v);
    VarScope scope("DEUTERON_FAULT_ENV", v);
    CHECK(SetUpFromEnvironment().status().IsInvalidArgument());
  }
  VarScope scope("DEUTERON_BREAK", "all");
  CHECK(SetUpFromEnvironment().status().IsInvalidArgument());
}

// stall:MS (fault_hooks.md): only with powerloss or torn (a stall ends in
// the power loss; alone, or with enospc/eio only, nothing would end it), MS
// a number up to 60000. What a stall does in a running server is checked
// in tests/tc/cli/fault_hooks_test.cpp (it ends the process).
TEST_CASE("fault hooks: a malformed stall is InvalidArgument", "[common][faulthooks]") {
  REQUIRE(HooksCompiled());
  for (const char* v : {"stall:100", "stall:100,enospc:3", "eio:2,stall:1", "powerloss,stall:x",
                        "torn,stall:", "powerloss,stall", "powerloss,stall:60001",
                        "powerloss,stall:-5", "powerloss,stall:99999999999999999999"}) {
    INFO(v);
    VarScope scope("DEUTERON_FAULT_ENV", v);
    CHECK(SetUpFromEnvironment().status().IsInvalidArgument());
  }
}

}  // namespace deuteron::fault
