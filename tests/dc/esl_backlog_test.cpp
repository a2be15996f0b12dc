// EslBacklog (dc/esl_backlog.h): the account of records above the ESL.
#include "dc/esl_backlog.h"

#include <string>

#include <catch2/catch.hpp>

namespace deuteron::dc {
namespace {

constexpr size_t kEntry = kAboveEslEntryOverhead;

TEST_CASE("EslBacklog holds batches until the ESL passes their highest LSN", "[dc][backlog]") {
  EslBacklog b(1000, ~size_t{0});
  REQUIRE(b.Reserve(10, 20, 100, 0).ok());
  REQUIRE(b.Reserve(10, 30, 200, 0).ok());
  CHECK(b.bytes() == 300 + 2 * kEntry);
  b.Release(19);  // below the first batch's highest LSN: nothing goes
  CHECK(b.bytes() == 300 + 2 * kEntry);
  b.Release(20);
  CHECK(b.bytes() == 200 + kEntry);
  b.Release(5);  // lower: ignored
  CHECK(b.bytes() == 200 + kEntry);
  b.Release(100);
  CHECK(b.bytes() == 0);
}

TEST_CASE("EslBacklog refuses past its limit, naming the ESL that frees what it holds",
          "[dc][backlog]") {
  EslBacklog b(1000, ~size_t{0});
  REQUIRE(b.Reserve(10, 50, 500, 0).ok());
  REQUIRE(b.Reserve(10, 40, 200, 0).ok());
  const size_t held = b.bytes();
  Status s = b.Reserve(10, 60, 300, 0);
  INFO(s.ToString());
  REQUIRE(s.IsBusy());
  CHECK(b.bytes() == held);  // a refused batch holds nothing
  CHECK(s.ToString().find("setEsl to >= 50 frees them") != std::string::npos);
  CHECK(s.ToString().find("above ESL 10") != std::string::npos);
  // A reservation made with an ESL read before an advance is released
  // against the advance: the ESL moved past the first two.
  b.Release(50);
  REQUIRE(b.Reserve(10, 60, 300, 0).ok());
  CHECK(b.bytes() == 300 + kEntry);
  // The ESL moved past a whole batch before it was reserved: nothing held.
  REQUIRE(b.Reserve(10, 45, 300, 0).ok());
  CHECK(b.bytes() == 300 + kEntry);
}

TEST_CASE("EslBacklog: a batch alone over the limit names the ESL that lets it in",
          "[dc][backlog]") {
  EslBacklog b(1000, ~size_t{0});
  Status s = b.Reserve(7, 99, 2000, 0);
  INFO(s.ToString());
  REQUIRE(s.IsBusy());
  CHECK(s.ToString().find("setEsl to >= 99 lets it in") != std::string::npos);
  CHECK(b.bytes() == 0);
}

TEST_CASE("EslBacklog refuses while the cache is over its limit and anything is held",
          "[dc][backlog]") {
  EslBacklog b(1000, 5000);
  REQUIRE(b.Reserve(0, 10, 100, 9000).ok());  // nothing held yet: the cache is not ours
  Status s = b.Reserve(0, 20, 100, 9000);
  INFO(s.ToString());
  REQUIRE(s.IsBusy());
  CHECK(s.ToString().find("setEsl to >= 10 frees them") != std::string::npos);
  REQUIRE(b.Reserve(0, 20, 100, 5000).ok());
}

TEST_CASE("EslBacklog: reset forgets everything, at a lower ESL too; limit 0 holds nothing",
          "[dc][backlog]") {
  EslBacklog b(1000, ~size_t{0});
  b.Release(100);
  REQUIRE(b.Reserve(100, 150, 100, 0).ok());
  b.Reset(50);  // restart-to 50
  CHECK(b.bytes() == 0);
  // Records between 50 and 100 are above the ESL again.
  REQUIRE(b.Reserve(50, 80, 100, 0).ok());
  CHECK(b.bytes() == 100 + kEntry);

  EslBacklog none(0, 0);
  REQUIRE(none.Reserve(0, 10, size_t{1} << 40, ~size_t{0}).ok());
  CHECK(none.bytes() == 0);
}

}  // namespace
}  // namespace deuteron::dc
