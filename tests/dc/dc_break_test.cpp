// The DC's contract breaks (common/fault_hooks.h, DEUTERON_BREAK) are real:
// each scenario below keeps its contract with no break in force, and
// visibly violates it with the break switched on in process
// (fault::SetBreakForTest). The crash harness relies on these switches to
// prove that it finds a broken contract.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/fault_hooks.h"
#include "common/random.h"
#include "protocol/data_component.h"
#include "tests/dc/dc_contract_util.h"
#include "tests/dc/dc_harness.h"

namespace deuteron::test {
namespace {

// Sets a break for one scope.
class BreakScope {
 public:
  explicit BreakScope(fault::Break b) { fault::SetBreakForTest(b); }
  ~BreakScope() { fault::SetBreakForTest(fault::Break::kNone); }
  BreakScope(const BreakScope&) = delete;
  BreakScope& operator=(const BreakScope&) = delete;
};

// One op per key: key i gets LSN i + 1.
std::vector<Op> OnePerKey(uint64_t n, Random64* rnd) {
  std::vector<Op> ops;
  for (uint64_t i = 0; i < n; ++i) {
    Op op;
    op.key = KeyName(i);
    op.lsn = i + 1;
    op.value = ValueFor(op.lsn, rnd);
    ops.push_back(std::move(op));
  }
  return ops;
}

// Contract 1: after a flush under ESL 50 and a crash, how many of the
// records above the ESL (LSNs 51..100) the DC still holds (0 when kept).
uint64_t RecordsAboveEslAfterCrash() {
  Random64 rnd(TestSeed());
  HarnessConfig config;
  std::unique_ptr<DcHarness> h = MakeHarness("in-process", config);
  const std::vector<Op> ops = OnePerKey(100, &rnd);
  ApplyAll(h->dc(), ops, 50, 10);
  RequireOk(h->dc()->ProposeRssp(51, 0));  // flushes under the ESL
  h->Crash();
  uint64_t above = 0;
  for (const Op& op : ops) {
    if (op.lsn > 50 && GetKey(h->dc(), op.key).found) ++above;
  }
  return above;
}

// Contract 2: a replayed older operation of a key over a newer one. Returns
// how many of the replayed operations the DC applied (0 when kept).
uint64_t OlderReplaysApplied(std::string* value_after) {
  Random64 rnd(TestSeed());
  HarnessConfig config;
  std::unique_ptr<DcHarness> h = MakeHarness("in-process", config);
  std::vector<Op> newer = OnePerKey(20, &rnd);
  for (Op& op : newer) op.lsn += 100;  // LSNs 101..120
  ApplyAll(h->dc(), newer, 0, 5);
  std::vector<Op> older = OnePerKey(20, &rnd);  // LSNs 1..20, other values
  for (Op& op : older) op.value = "old-" + op.value;
  const ApplyResult r = ApplyAll(h->dc(), older, 0, 5);
  *value_after = GetKey(h->dc(), KeyName(0)).value;
  return r.applied;
}

// Contract 3: an RSSP acknowledged, then a crash. Returns how many records
// below the RSSP the DC lost (0 when kept).
uint64_t RecordsBelowRsspLost() {
  Random64 rnd(TestSeed());
  HarnessConfig config;
  std::unique_ptr<DcHarness> h = MakeHarness("in-process", config);
  const std::vector<Op> ops = OnePerKey(60, &rnd);
  ApplyAll(h->dc(), ops, 60, 10);
  RequireOk(h->dc()->ProposeRssp(61, 0));
  h->Crash();
  REQUIRE(HealthOf(h->dc()).rssp == 61);  // acknowledged either way
  uint64_t lost = 0;
  for (const Op& op : ops) {
    if (!GetKey(h->dc(), op.key).found) ++lost;
  }
  return lost;
}

}  // namespace

TEST_CASE("DC break esl_check: records above the ESL reach the LSS", "[dc][break]") {
  REQUIRE(fault::HooksCompiled());
  CHECK(RecordsAboveEslAfterCrash() == 0);
  {
    BreakScope broken(fault::Break::kEslCheck);
    CHECK(RecordsAboveEslAfterCrash() > 0);
  }
}

TEST_CASE("DC break idempotence: an operation already reflected is applied again", "[dc][break]") {
  REQUIRE(fault::HooksCompiled());
  std::string value;
  CHECK(OlderReplaysApplied(&value) == 0);
  CHECK(value.rfind("old-", 0) != 0);
  {
    BreakScope broken(fault::Break::kIdempotence);
    CHECK(OlderReplaysApplied(&value) > 0);
    CHECK(value.rfind("old-", 0) == 0);  // the older value won
  }
}

TEST_CASE("DC break rssp_before_flush: an acknowledged RSSP loses what is below it",
          "[dc][break]") {
  REQUIRE(fault::HooksCompiled());
  CHECK(RecordsBelowRsspLost() == 0);
  {
    BreakScope broken(fault::Break::kRsspBeforeFlush);
    CHECK(RecordsBelowRsspLost() > 0);
  }
}

}  // namespace deuteron::test
