// The demo's expected-state oracle (tc/cli/bank_oracle.h): it passes exactly
// the stores that hold every acknowledged transfer and each in-doubt one
// wholly or not at all.
#include "tc/cli/bank_oracle.h"

#include <vector>

#include <catch2/catch.hpp>

namespace deuteron::cli {
namespace {

TEST_CASE("bank oracle: acknowledged transfers must all be there", "[tc][cli][demo]") {
  BankOracle o(4, 100);
  CHECK(o.total() == 400);
  o.Acknowledged({0, 1, 30});
  o.Acknowledged({1, 2, 50});
  CHECK(o.acknowledged() == 2);
  CHECK(o.Verify({70, 80, 150, 100}).ok);
  // One transfer missing: the total still holds, the balances do not.
  const BankVerdict missing = o.Verify({70, 130, 100, 100});
  CHECK(!missing.ok);
  CHECK(missing.detail.find("account 1 holds 130, expected 80") == 0);
  // Money made or lost.
  CHECK(o.Verify({70, 80, 150, 101}).detail.find("total balance 401") == 0);
  CHECK(!o.Verify({70, 80, 150}).ok);
}

TEST_CASE("bank oracle: in-doubt transfers wholly there or wholly absent", "[tc][cli][demo]") {
  BankOracle o(5, 100);
  o.Acknowledged({0, 1, 10});
  o.InDoubt({1, 2, 7});
  o.InDoubt({2, 3, 5});
  CHECK(o.in_doubt() == 2);
  // Neither, either, both.
  BankVerdict v = o.Verify({90, 110, 100, 100, 100});
  CHECK(v.ok);
  CHECK(v.in_doubt_committed == 0);
  CHECK(o.Verify({90, 103, 107, 100, 100}).in_doubt_committed == 1);
  CHECK(o.Verify({90, 110, 95, 105, 100}).in_doubt_committed == 1);
  v = o.Verify({90, 103, 102, 105, 100});
  CHECK(v.ok);
  CHECK(v.in_doubt_committed == 2);
  // Half of an in-doubt transfer (its debit without its credit, balanced by
  // a wrong credit elsewhere): no subset explains it.
  v = o.Verify({90, 103, 100, 107, 100});
  CHECK(!v.ok);
  CHECK(v.detail.find("match no set of them") != std::string::npos);
  // An account no in-doubt transfer touched must be exact.
  CHECK(!o.Verify({91, 110, 100, 100, 99}).ok);
}

}  // namespace
}  // namespace deuteron::cli
