#include "common/random.h"

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace deuteron {
namespace {

TEST_CASE("Random64 is deterministic for a seed", "[common][random]") {
  // Golden values from an independent model of splitmix64 + xoshiro256**:
  // a changed sequence would silently change what every printed seed replays.
  Random64 zero(0);
  CHECK(zero.Next() == 0x99ec5f36cb75f2b4u);
  CHECK(zero.Next() == 0xbf6e1f784956452au);
  CHECK(zero.Next() == 0x1a5f849d4933e6e0u);
  Random64 r42(42);
  CHECK(r42.Next() == 0x15780b2e0c2ec716u);
  CHECK(r42.Next() == 0x6104d9866d113a7eu);
  CHECK(r42.Next() == 0xae17533239e499a1u);

  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 a(seed), b(seed), c(seed + 1);
  int same_as_other_seed = 0;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t x = a.Next();
    REQUIRE(x == b.Next());
    if (x == c.Next()) ++same_as_other_seed;
  }
  CHECK(same_as_other_seed == 0);
}

TEST_CASE("Random64 Uniform stays in range and covers it", "[common][random]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rnd(seed);
  for (uint64_t n : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{7}, uint64_t{1000},
                     (uint64_t{1} << 63) + 1, UINT64_MAX}) {
    INFO("n " << n);
    for (int i = 0; i < 1000; ++i) REQUIRE(rnd.Uniform(n) < n);
  }
  CHECK(rnd.Uniform(1) == 0);
  CHECK(rnd.OneIn(1));

  // 100,000 draws into 10 buckets: each expects 10,000 with a standard
  // deviation under 100, so +-1,000 only fails on a real bias.
  std::vector<int> buckets(10, 0);
  for (int i = 0; i < 100000; ++i) ++buckets[rnd.Uniform(10)];
  for (int count : buckets) {
    CHECK(count > 9000);
    CHECK(count < 11000);
  }

  for (int i = 0; i < 1000; ++i) {
    const double d = rnd.NextDouble();
    REQUIRE(d >= 0.0);
    REQUIRE(d < 1.0);
  }
}

TEST_CASE("Random64 Fill is the little-endian bytes of Next", "[common][random]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 a(seed), b(seed);
  std::string buf(13, '\0');
  a.Fill(buf.data(), buf.size());
  const uint64_t w0 = b.Next();
  const uint64_t w1 = b.Next();
  for (size_t i = 0; i < buf.size(); ++i) {
    const uint64_t w = i < 8 ? w0 : w1;
    INFO("byte " << i);
    CHECK(static_cast<uint8_t>(buf[i]) == static_cast<uint8_t>(w >> (8 * (i % 8))));
  }
  CHECK(a.Next() == b.Next());  // a partial word still consumes one Next()
}

TEST_CASE("TestSeed honours DEUTERON_SEED", "[common][random]") {
  std::optional<std::string> saved;
  if (const char* env = std::getenv("DEUTERON_SEED")) saved = env;

  REQUIRE(setenv("DEUTERON_SEED", "12345", 1) == 0);
  CHECK(TestSeed() == 12345u);
  REQUIRE(setenv("DEUTERON_SEED", "0x10", 1) == 0);
  CHECK(TestSeed() == 16u);
  REQUIRE(setenv("DEUTERON_SEED", "18446744073709551615", 1) == 0);
  CHECK(TestSeed() == UINT64_MAX);

  if (saved) {
    REQUIRE(setenv("DEUTERON_SEED", saved->c_str(), 1) == 0);
  } else {
    REQUIRE(unsetenv("DEUTERON_SEED") == 0);
  }
}

}  // namespace
}  // namespace deuteron
