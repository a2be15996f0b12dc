// Random64: a small, fast, seeded pseudo-random generator for tests, fault
// injection and randomized data structures (never for anything secret).
//
// The generator is xoshiro256** with its state expanded from the 64-bit seed
// by splitmix64. Every output, including Uniform(), NextDouble() and Fill(),
// is defined by integer arithmetic only, so one seed gives the same sequence
// on every platform and compiler, which is what makes a printed seed replay a
// failure.
//
// TestSeed() picks a test's seed: DEUTERON_SEED from the environment if set
// (decimal or 0x-hex), otherwise one derived from the clock. Tests print it
// with INFO("seed " << seed) so a failure can be replayed.
//
// Thread safety: a Random64 is a value; give each thread its own.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace deuteron {

class Random64 {
 public:
  explicit Random64(uint64_t seed) {
    for (uint64_t& word : s_) word = SplitMix64(&seed);
    // splitmix64 is a bijection of a counter, so the four words are never all
    // zero (the one state xoshiro cannot leave).
  }

  // The next 64 uniformly distributed bits.
  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, n), without modulo bias.
  // REQUIRES: n > 0.
  uint64_t Uniform(uint64_t n) {
    // Reject the lowest (2^64 mod n) values so that the rest divide evenly.
    const uint64_t threshold = (0 - n) % n;
    for (;;) {
      const uint64_t r = Next();
      if (r >= threshold) return r % n;
    }
  }

  // True with probability 1/n.
  // REQUIRES: n > 0.
  bool OneIn(uint64_t n) { return Uniform(n) == 0; }

  // Uniform in [0, 1), with 53 random bits.
  double NextDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

  // Fills buf[0, n) with random bytes (each 8-byte group little-endian from
  // one Next(), so the bytes do not depend on the host's byte order).
  void Fill(char* buf, size_t n) {
    while (n > 0) {
      uint64_t r = Next();
      for (int i = 0; i < 8 && n > 0; ++i, --n) {
        *buf++ = static_cast<char>(r & 0xff);
        r >>= 8;
      }
    }
  }

  static uint64_t SplitMix64(uint64_t* state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  uint64_t s_[4];
};

// DEUTERON_SEED if set, else a clock-derived seed. A DEUTERON_SEED that is
// not a whole number aborts: silently using another seed would defeat a replay.
inline uint64_t TestSeed() {
  if (const char* env = std::getenv("DEUTERON_SEED"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    errno = 0;
    const unsigned long long seed = std::strtoull(env, &end, 0);
    if (*end != '\0' || errno != 0 || *env == '-') {
      std::fprintf(stderr, "DEUTERON_SEED=\"%s\" is not a number\n", env);
      std::abort();
    }
    return static_cast<uint64_t>(seed);
  }
  uint64_t t = static_cast<uint64_t>(
      std::chrono::system_clock::now().time_since_epoch().count());
  return Random64::SplitMix64(&t);
}

}  // namespace deuteron
