// common/fault_hooks.cpp compiled WITHOUT hooks (this binary builds it with
// DEUTERON_FAULT_HOOKS undefined, as a Release build does): nothing is
// compiled in, and any of the variables set refuses to start. The servers
// turn that NotSupported into one line and exit 2 (tc/cli/dc_command.cpp,
// tc_command.cpp).
#include <stdlib.h>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "common/fault_hooks.h"

namespace deuteron::fault {

static_assert(!HooksCompiled(), "this binary is built without the hooks");

TEST_CASE("fault hooks compiled out: nothing compiled in, variables refused",
          "[common][faulthooks]") {
  CHECK(KillPointNames().empty());
  SetBreakForTest(Break::kEslCheck);
  CHECK(!BrokenOnPurpose(Break::kEslCheck));  // a constant false
  DEUTERON_KILL_POINT(kDcFlushAfterWrite);  // compiles, to nothing

  Result<Env*> plain = SetUpFromEnvironment();
  REQUIRE(plain.ok());
  CHECK(*plain == Env::Posix());
  for (const char* var : {"DEUTERON_KILL_POINT", "DEUTERON_FAULT_ENV", "DEUTERON_BREAK"}) {
    INFO(var);
    setenv(var, "anything", 1);
    Result<Env*> r = SetUpFromEnvironment();
    unsetenv(var);
    CHECK(r.status().code() == Code::kNotSupported);
    CHECK(r.status().ToString().find(var) != std::string::npos);
  }
}

}  // namespace deuteron::fault
