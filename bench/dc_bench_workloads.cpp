// dc_bench's workloads (dc_bench_workloads.h).
#include "bench/dc_bench_workloads.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "common/coding.h"
#include "dc/llama/op_phases.h"

namespace deuteron::bench {
namespace {

// A bijective 64-bit mix (SplitMix64's finalizer).
uint64_t Mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void AppendBigEndian(uint64_t v, std::string* out) {
  for (int b = 7; b >= 0; --b) out->push_back(static_cast<char>((v >> (8 * b)) & 0xff));
}

// Preload order: a permutation of [0, n) (multiplication by a prime larger
// than any record count is a bijection mod n).
constexpr uint64_t kPermutePrime = 2'147'483'647;  // 2^31 - 1
uint64_t Permute(uint64_t j, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(j) * kPermutePrime) % n);
}

constexpr std::array<const char*, 16> kFirst = {
    "james", "mary", "robert", "patricia", "john", "jennifer", "michael", "linda",
    "david", "elizabeth", "william", "barbara", "richard", "susan", "joseph", "jessica"};
constexpr std::array<const char*, 16> kLast = {
    "smith", "johnson", "williams", "brown", "jones", "garcia", "miller", "davis",
    "rodriguez", "martinez", "hernandez", "lopez", "gonzalez", "wilson", "anderson", "thomas"};
constexpr std::array<const char*, 8> kDomain = {"gmail", "yahoo", "hotmail", "outlook",
                                                "aol", "icloud", "mail", "proton"};

}  // namespace

std::vector<WorkloadSpec> AllWorkloads() {
  // Record counts give about 16 MiB of key + value bytes each at scale 1.
  return {
      {"synthetic", "synthetic", Mix::kSynthetic, KeyStyle::kOrdered8, 1'000'000, 8},
      {"dedup", "dedup", Mix::kDedup, KeyStyle::kHash20, 260'000, 44},
      {"xbox", "xbox", Mix::kXbox, KeyStyle::kXbox, 13'000, 1200},
      {"ycsb_a_random", "ycsb_a", Mix::kYcsbA, KeyStyle::kRandom8, 1'000'000, 8},
      {"ycsb_a_email", "ycsb_a", Mix::kYcsbA, KeyStyle::kEmail, 420'000, 8},
      {"ycsb_c_random", "ycsb_c", Mix::kYcsbC, KeyStyle::kRandom8, 1'000'000, 8},
      {"ycsb_c_email", "ycsb_c", Mix::kYcsbC, KeyStyle::kEmail, 420'000, 8},
      {"ycsb_e_random", "ycsb_e", Mix::kYcsbE, KeyStyle::kRandom8, 1'000'000, 8},
      {"ycsb_e_email", "ycsb_e", Mix::kYcsbE, KeyStyle::kEmail, 420'000, 8},
      {"ingest", "ingest", Mix::kIngest, KeyStyle::kIngest16, 0, 100},
  };
}

void MakeKey(KeyStyle style, uint64_t index, std::string* out) {
  out->clear();
  switch (style) {
    case KeyStyle::kOrdered8:
      AppendBigEndian(index, out);
      return;
    case KeyStyle::kRandom8:
      AppendBigEndian(Mix64(index), out);
      return;
    case KeyStyle::kHash20: {
      AppendBigEndian(Mix64(index), out);
      AppendBigEndian(Mix64(index ^ 0x5bd1e995u), out);
      AppendBigEndian(Mix64(index ^ 0x27d4eb2du), out);
      out->resize(20);
      return;
    }
    case KeyStyle::kXbox: {
      const uint64_t h = Mix64(index);
      fmt::format_to(std::back_inserter(*out),
                     "xbl.title{:04}.user{:016x}.profile.achievements.progress.stat{:010}.",
                     h % 2000, Mix64(h), index);
      out->resize(94, 'v');
      return;
    }
    case KeyStyle::kEmail: {
      const uint64_t h = Mix64(index);
      fmt::format_to(std::back_inserter(*out), "{}.{}{}@{}.com", kFirst[h % 16],
                     kLast[(h >> 4) % 16], index, kDomain[(h >> 8) % 8]);
      return;
    }
    case KeyStyle::kIngest16:
      AppendBigEndian(Mix64(index), out);
      AppendBigEndian(Mix64(~index), out);
      return;
  }
}

void MakeValue(uint64_t index, uint64_t version, size_t size, std::string* out) {
  out->resize(size);
  char word[8];
  EncodeFixed64(word, index * 1'000'003 + version);
  for (size_t i = 0; i < size; ++i) (*out)[i] = word[i % 8];
}

WorkloadRun::WorkloadRun(const WorkloadSpec& spec, size_t records)
    : spec_(spec), records_(records) {
  std::string key;
  size_t sum = 0;
  const size_t sample = 64;
  for (size_t i = 0; i < sample; ++i) {
    MakeKey(spec.keys, i * 997, &key);
    sum += key.size();
  }
  avg_key_bytes_ = sum / sample;
  if (records_ >= 2 && spec.mix != Mix::kSynthetic && spec.mix != Mix::kDedup) {
    zipf_ = std::make_unique<ScrambledZipf>(records_);
  }
}

uint64_t WorkloadRun::DataBytes() const {
  return (records_ + fresh()) * (avg_key_bytes_ + spec_.value_size);
}

Status WorkloadRun::Load(KvStore* store, int t, size_t lo, size_t hi) {
  std::string key, value;
  for (size_t j = lo; j < hi; ++j) {
    const uint64_t i = Permute(j, records_);
    MakeKey(spec_.keys, i, &key);
    MakeValue(i, 0, spec_.value_size, &value);
    Status s = store->Put(t, key, value);
    if (!s.ok()) return s;
  }
  return Status::OK();
}

uint64_t WorkloadRun::Existing(Random64* rng) const {
  if (zipf_ != nullptr) return zipf_->Next(rng);
  return rng->Uniform(records_);
}

void OpTally::NoteSlow(uint64_t ns, std::string phases) {
  SlowOp op{ns, std::move(phases)};
  auto at = std::find_if(slowest.begin(), slowest.end(),
                         [&](const SlowOp& s) { return s.ns < ns; });
  slowest.insert(at, std::move(op));
  if (slowest.size() > kSlowestKept) slowest.pop_back();
}

void WorkloadRun::Step(KvStore* store, int t, Random64* rng, Histogram* h, OpTally* tally) {
  thread_local std::string key, value, got;
  bool found = false;
  Status s;
  const llama::OpPhaseTimes phases0 = llama::ThreadOpPhases();
  const uint64_t t0 = NowNanos();
  switch (spec_.mix) {
    case Mix::kSynthetic: {
      const uint64_t hot = std::max<uint64_t>(records_ / 5, 1);
      const uint64_t i = rng->Uniform(100) < 95 ? rng->Uniform(hot)
                                                 : hot + rng->Uniform(records_ - hot);
      MakeKey(spec_.keys, i, &key);
      if (rng->Uniform(6) != 0) {
        s = store->Get(t, key, &got, &found);
        ++tally->reads;
        if (s.ok() && !found) ++tally->misses;
      } else {
        MakeValue(i, tally->ops + 1, spec_.value_size, &value);
        s = store->Put(t, key, value);
        ++tally->writes;
      }
      break;
    }
    case Mix::kDedup: {
      // 1 / 2.2 of the chunks are new: every operation reads, those insert.
      const bool is_new = rng->Uniform(22) < 10;
      const uint64_t i = is_new ? Fresh() : rng->Uniform(records_);
      MakeKey(spec_.keys, i, &key);
      s = store->Get(t, key, &got, &found);
      ++tally->reads;
      if (s.ok() && !found) {
        if (!is_new) ++tally->misses;
        MakeValue(i, 0, spec_.value_size, &value);
        s = store->Put(t, key, value);
        ++tally->writes;
      }
      break;
    }
    case Mix::kXbox:
    case Mix::kYcsbA:
    case Mix::kYcsbC: {
      const uint64_t i = Existing(rng);
      MakeKey(spec_.keys, i, &key);
      const bool read = spec_.mix == Mix::kYcsbC     ? true
                        : spec_.mix == Mix::kYcsbA   ? rng->Uniform(2) == 0
                                                     : rng->Uniform(17) < 15;  // 7.5:1
      if (read) {
        s = store->Get(t, key, &got, &found);
        ++tally->reads;
        if (s.ok() && !found) ++tally->misses;
      } else {
        MakeValue(i, tally->ops + 1, spec_.value_size, &value);
        s = store->Put(t, key, value);
        ++tally->writes;
      }
      break;
    }
    case Mix::kYcsbE: {
      if (rng->Uniform(100) < 95) {
        MakeKey(spec_.keys, Existing(rng), &key);
        size_t read = 0;
        s = store->Scan(t, key, 1 + rng->Uniform(100), &read);
        ++tally->scans;
        tally->scan_items += read;
        if (s.ok() && read == 0) ++tally->misses;  // the start key exists
      } else {
        const uint64_t i = Fresh();
        MakeKey(spec_.keys, i, &key);
        MakeValue(i, 0, spec_.value_size, &value);
        s = store->Put(t, key, value);
        ++tally->writes;
      }
      break;
    }
    case Mix::kIngest: {
      const uint64_t i = Fresh();
      MakeKey(spec_.keys, i, &key);
      MakeValue(i, 0, spec_.value_size, &value);
      s = store->Put(t, key, value);
      ++tally->writes;
      break;
    }
  }
  const uint64_t ns = NowNanos() - t0;
  h->Record(ns);
  if (tally->slowest.size() < OpTally::kSlowestKept || ns > tally->slowest.back().ns) {
    tally->NoteSlow(ns, llama::OpPhaseDiff(phases0, llama::ThreadOpPhases()));
  }
  tally->sum_sq_ns += static_cast<double>(ns) * static_cast<double>(ns);
  ++tally->ops;
  if (!s.ok()) {
    if (tally->errors++ == 0) tally->first_error = s.ToString();
  }
}

}  // namespace deuteron::bench
