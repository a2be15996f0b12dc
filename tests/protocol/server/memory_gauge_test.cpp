// MemoryGauge: reservations are granted within the limit, first come first
// served; plain charges always succeed and hold reservations back; a
// cancelled reservation is never granted.
#include "protocol/server/memory_gauge.h"

#include <catch2/catch.hpp>

#include <vector>

namespace deuteron::server {
namespace {

TEST_CASE("Reservations are granted within the limit, in order", "[server][gauge]") {
  MemoryGauge g(100);
  std::vector<int> granted;
  uint64_t t1 = 0, t2 = 0, t3 = 0;
  CHECK(g.TryReserve(60, [] {}, &t1));
  CHECK(g.used() == 60);
  CHECK(!g.TryReserve(50, [&] { granted.push_back(2); }, &t2));
  // A small one that would fit waits behind the big one (no starvation).
  CHECK(!g.TryReserve(10, [&] { granted.push_back(3); }, &t3));
  CHECK(g.waiting() == 2);
  g.Release(60);
  CHECK(granted == std::vector<int>{2, 3});
  CHECK(g.used() == 60);
  CHECK(g.peak() == 60);
  g.Release(60);
  CHECK(g.used() == 0);
}

TEST_CASE("Plain charges pass the limit and hold reservations back", "[server][gauge]") {
  MemoryGauge g(100);
  g.Charge(150);
  CHECK(g.used() == 150);
  CHECK(g.peak() == 150);
  bool granted = false;
  uint64_t t = 0;
  CHECK(!g.TryReserve(10, [&] { granted = true; }, &t));
  g.Release(60);  // 90 + 10 fits
  CHECK(granted);
  CHECK(g.used() == 100);
}

TEST_CASE("A cancelled reservation is never granted; one granted cannot be cancelled",
          "[server][gauge]") {
  MemoryGauge g(100);
  uint64_t t0 = 0, t1 = 0, t2 = 0;
  CHECK(g.TryReserve(100, [] {}, &t0));
  bool first = false, second = false;
  CHECK(!g.TryReserve(80, [&] { first = true; }, &t1));
  CHECK(!g.TryReserve(20, [&] { second = true; }, &t2));
  CHECK(g.Cancel(t1));
  CHECK(!first);
  g.Release(100);
  CHECK(second);
  CHECK(!g.Cancel(t2));  // granted already: its holder releases it
  CHECK(g.used() == 20);
}

TEST_CASE("A reservation over the limit is granted when nothing else is held", "[server][gauge]") {
  MemoryGauge g(100);
  uint64_t t = 0;
  CHECK(g.TryReserve(150, [] {}, &t));
  CHECK(g.used() == 150);
}

}  // namespace
}  // namespace deuteron::server
