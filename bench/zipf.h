// ScrambledZipf: key indexes in [0, n) drawn from a Zipfian distribution
// (YCSB's generator, Gray et al., "Quickly generating billion-record
// synthetic databases"), with the popular ranks scattered over the key space
// by a hash, as YCSB's ScrambledZipfianGenerator does, so that the hot keys
// do not sit next to each other. theta 0.99 is YCSB's default.
//
// Thread safety: a value; Next() only reads it (the caller passes its own
// generator), so one instance may serve many threads.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/random.h"

namespace deuteron::bench {

class ScrambledZipf {
 public:
  // REQUIRES: n >= 2, 0 < theta < 1. O(n) to build (the zeta sum).
  explicit ScrambledZipf(uint64_t n, double theta = 0.99) : n_(n) {
    double zetan = 0;
    for (uint64_t i = 1; i <= n; ++i) zetan += 1.0 / std::pow(static_cast<double>(i), theta);
    zetan_ = zetan;
    const double zeta2 = 1.0 + 1.0 / std::pow(2.0, theta);
    alpha_ = 1.0 / (1.0 - theta);
    eta_ = (1.0 - std::pow(2.0 / static_cast<double>(n), 1.0 - theta)) / (1.0 - zeta2 / zetan_);
    half_pow_theta_ = 1.0 + std::pow(0.5, theta);
  }

  uint64_t Next(Random64* rng) const { return Scramble(Rank(rng)); }

  // The Zipfian rank (0 the most popular).
  uint64_t Rank(Random64* rng) const {
    const double u = rng->NextDouble();
    const double uz = u * zetan_;
    if (uz < 1.0) return 0;
    if (uz < half_pow_theta_) return 1;
    const auto r = static_cast<uint64_t>(static_cast<double>(n_) *
                                         std::pow(eta_ * u - eta_ + 1.0, alpha_));
    return r < n_ ? r : n_ - 1;
  }

 private:
  // splitmix64's finalizer, modulo n.
  uint64_t Scramble(uint64_t rank) const {
    uint64_t z = rank + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (z ^ (z >> 31)) % n_;
  }

  const uint64_t n_;
  double zetan_ = 0;
  double alpha_ = 0;
  double eta_ = 0;
  double half_pow_theta_ = 0;
};

}  // namespace deuteron::bench
