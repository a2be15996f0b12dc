// The LSS under crashes and damage: crash at every I/O, crashes during
// concurrent writes, damaged buffers, bad records (lss.h; lss_format.md).
#include "dc/llama/lss.h"

#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "common/fault_env.h"
#include "common/random.h"
#include "tests/dc/llama/lss_test_util.h"

namespace deuteron::llama {
namespace {

using namespace lss_test;

// ---------------------------------------------------------------- crashes

struct CrashWorkload {
  std::map<LssAddress, Written> written;
  LssAddress hi_stable = 0;  // highest Hi-Stable reported before the crash
};

// Opens, recovers and writes; stops at the first error (the injected one).
void RunWorkload(Env* env, uint64_t seed, CrashWorkload* w) {
  Result<std::unique_ptr<LogStructuredStore>> r = LogStructuredStore::Open(env, kDir, SmallLssOptions());
  if (!r.ok()) return;
  std::unique_ptr<LogStructuredStore> lss = std::move(r).value();
  Status s = lss->Recover(kNullAddress, [](LssAddress, const RecordHeader&, Slice, bool) {
    return Status::OK();
  });
  if (!s.ok()) return;
  Random64 rnd(seed);
  for (uint64_t i = 1; i <= 60; ++i) {
    const size_t len = rnd.OneIn(6) ? 30000 + rnd.Uniform(30000) : rnd.Uniform(3000);
    Written rec{TypeFor(i), i, MakePayload(i, len)};
    Result<Reservation> res = lss->Reserve(RecordSpan(len));
    if (!res.ok()) return;
    if (rnd.OneIn(7)) {
      lss->Void(*res);
      continue;
    }
    RecordHeader h;
    h.type = rec.type;
    h.length = static_cast<uint32_t>(len);
    h.pid = rec.pid;
    EncodeRecord(h, rec.payload, res->dst);
    lss->Commit(*res);
    w->written[res->address] = rec;
    if (rnd.OneIn(4)) {
      if (!lss->MakeStable(lss->Tail()).ok()) return;
      w->hi_stable = lss->HiStable();
    }
  }
  if (lss->MakeStable(lss->Tail()).ok()) w->hi_stable = lss->HiStable();
}

void CheckAfterCrash(Env* env, const CrashWorkload& w) {
  std::vector<Seen> seen;
  auto lss = OpenAndRecover(env, &seen);
  std::map<LssAddress, const Seen*> by_address;
  for (const Seen& s : seen) {
    INFO("address " << s.address);
    // Nothing invalid surfaces: every record is one that was committed.
    auto it = w.written.find(s.address);
    REQUIRE(it != w.written.end());
    CHECK(s.header.type == it->second.type);
    CHECK(s.header.pid == it->second.pid);
    CHECK(s.payload == it->second.payload);
    by_address[s.address] = &s;
  }
  for (const auto& [a, rec] : w.written) {
    if (a < w.hi_stable) {
      INFO("stable record at " << a << " lost, Hi-Stable was " << w.hi_stable);
      CHECK(by_address.count(a) == 1);
    }
  }
  CHECK(lss->HiStable() >= w.hi_stable);
  // The store works after recovery, and a further restart sees the new record.
  Result<LssAddress> a = Put(lss.get(), RecordType::kBase, 424242, "after the crash");
  REQUIRE(a.ok());
  REQUIRE(lss->MakeStable(lss->Tail()).ok());
  lss.reset();
  std::vector<Seen> again;
  lss = OpenAndRecover(env, &again);
  REQUIRE(!again.empty());
  CHECK(again.back().address == *a);
  CHECK(again.size() == seen.size() + 1);
}

void CrashAtEveryIo(CrashMode mode, uint64_t stride) {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed << " mode " << static_cast<int>(mode));
  uint64_t count;
  {
    std::unique_ptr<Env> mem = NewMemEnv();
    FaultInjectionEnv fault(mem.get(), seed);
    CrashWorkload w;
    RunWorkload(&fault, seed, &w);
    REQUIRE(!w.written.empty());
    count = fault.OpCount(FaultInjectionEnv::Op::kAny);
    REQUIRE(count > 25);  // opens, writes, syncs, directory syncs, reads
  }
  for (uint64_t n = 1; n <= count + 1; n += stride) {
    INFO("crash at I/O " << n << " of " << count);
    std::unique_ptr<Env> mem = NewMemEnv();
    FaultInjectionEnv fault(mem.get(), seed + n);
    fault.FailNth(FaultInjectionEnv::Op::kAny, n, Code::kIOError);
    CrashWorkload w;
    RunWorkload(&fault, seed, &w);
    fault.ClearFailures();
    REQUIRE(fault.SimulateCrash(mode).ok());
    CheckAfterCrash(&fault, w);
  }
}

TEST_CASE("crash at every I/O, unsynced data dropped", "[dc][llama][lss][crash]") {
  CrashAtEveryIo(CrashMode::kDropUnsynced, 1);
}

TEST_CASE("crash at every I/O, unsynced data torn", "[dc][llama][lss][crash]") {
  CrashAtEveryIo(CrashMode::kTearUnsynced, 1);
}

// Writers race I/O threads when the failure hits, so buffers complete out of
// order around it; whatever the crash leaves, recovery keeps every record
// below the reported Hi-Stable and surfaces nothing else.
void CrashDuringConcurrentWrites(int rounds) {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rnd(seed);
  for (int round = 0; round < rounds; ++round) {
    const uint64_t n = 1 + rnd.Uniform(120);
    const CrashMode mode = rnd.OneIn(2) ? CrashMode::kDropUnsynced : CrashMode::kTearUnsynced;
    INFO("round " << round << " crash at I/O " << n << " mode " << static_cast<int>(mode));
    std::unique_ptr<Env> mem = NewMemEnv();
    FaultInjectionEnv fault(mem.get(), seed + round);
    CrashWorkload w;
    std::mutex mu;
    {
      std::vector<Seen> seen;
      auto lss = OpenAndRecover(&fault, &seen, SmallLssOptions(/*io_threads=*/2));
      fault.FailNth(FaultInjectionEnv::Op::kAny, n, Code::kIOError);
      std::vector<std::thread> writers;
      for (int t = 0; t < 3; ++t) {
        writers.emplace_back([&, t] {
          Random64 r(seed + round * 10 + t);
          for (uint64_t i = 0; i < 60; ++i) {
            const uint64_t id = (static_cast<uint64_t>(round) << 40) | (uint64_t(t) << 20) | i;
            const size_t len = r.OneIn(5) ? 20000 + r.Uniform(20000) : r.Uniform(2000);
            Written rec{RecordType::kBase, id + 1, MakePayload(id, len)};
            Result<Reservation> res = lss->Reserve(RecordSpan(len));
            if (!res.ok()) return;
            RecordHeader h;
            h.type = rec.type;
            h.length = static_cast<uint32_t>(len);
            h.pid = rec.pid;
            EncodeRecord(h, rec.payload, res->dst);
            {
              std::lock_guard<std::mutex> l(mu);
              w.written[res->address] = rec;
            }
            lss->Commit(*res);
            if (r.OneIn(6)) {
              if (!lss->MakeStable(res->address + res->size).ok()) return;
              const LssAddress hi = lss->HiStable();
              std::lock_guard<std::mutex> l(mu);
              w.hi_stable = std::max(w.hi_stable, hi);
            }
          }
        });
      }
      for (std::thread& t : writers) t.join();
      if (lss->MakeStable(lss->Tail()).ok()) w.hi_stable = std::max(w.hi_stable, lss->HiStable());
    }
    fault.ClearFailures();
    REQUIRE(fault.SimulateCrash(mode).ok());
    CheckAfterCrash(&fault, w);
  }
}

TEST_CASE("crash during concurrent writes", "[dc][llama][lss][crash][concurrency]") {
  CrashDuringConcurrentWrites(15);
}

TEST_CASE("crash with random failures, many seeds", "[dc][llama][lss][crash][.]") {
  CrashDuringConcurrentWrites(1000);
  for (int i = 0; i < 50; ++i) {
    CrashAtEveryIo(CrashMode::kTearUnsynced, 1);
    CrashAtEveryIo(CrashMode::kDropUnsynced, 1);
  }
}

// ---------------------------------------------------------------- damage

// Writes `n` stable buffers of one full record each; returns their addresses.
std::vector<LssAddress> WriteStableBuffers(Env* env, int n) {
  std::vector<Seen> seen;
  auto lss = OpenAndRecover(env, &seen);
  std::vector<LssAddress> addrs;
  for (int i = 0; i < n; ++i) {
    Result<LssAddress> a = Put(lss.get(), RecordType::kBase, static_cast<PageId>(i + 1),
                               MakePayload(i, 10000));
    REQUIRE(a.ok());
    REQUIRE(lss->MakeStable(lss->Tail()).ok());
    addrs.push_back(*a);
  }
  return addrs;
}

TEST_CASE("damage in a stable buffer followed by later buffers is Corruption",
          "[dc][llama][lss][crash]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  std::unique_ptr<Env> mem = NewMemEnv();
  FaultInjectionEnv fault(mem.get(), seed);
  const std::vector<LssAddress> addrs = WriteStableBuffers(&fault, 8);
  // Buffer 3 (bases 4096 + i * 12288): damage it.
  const LssAddress base = addrs[2] - kBufferHeaderSize;
  REQUIRE(base == 4096 + 2 * 12288);
  const bool header = GENERATE(false, true);
  REQUIRE(fault
              .CorruptRange(SegPath(0), base + (header ? 8 : 500), header ? 8 : 100, 3)
              .ok());
  auto lss = MustOpen(&fault);
  std::vector<Seen> seen;
  Status s = Collect(lss.get(), &seen);
  INFO(s.ToString());
  CHECK(s.IsCorruption());
  CHECK(s.ToString().find("segment 0 offset " + std::to_string(base)) != std::string::npos);
  CHECK(seen.size() == 2);
  // Nothing was cut: the damage is still there for a second look.
  CHECK(lss->Reserve(64).status().IsInvalidArgument());
  lss.reset();
  lss = MustOpen(&fault);
  CHECK(Collect(lss.get(), &seen).IsCorruption());
}

TEST_CASE("damage in the last buffer is a torn tail", "[dc][llama][lss][crash]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  std::unique_ptr<Env> mem = NewMemEnv();
  FaultInjectionEnv fault(mem.get(), seed);
  const std::vector<LssAddress> addrs = WriteStableBuffers(&fault, 5);
  const LssAddress last = addrs.back() - kBufferHeaderSize;
  REQUIRE(fault.CorruptRange(SegPath(0), last + 700, 16, 2).ok());
  std::vector<Seen> seen;
  auto lss = OpenAndRecover(&fault, &seen);
  REQUIRE(seen.size() == 4);
  for (size_t i = 0; i < 4; ++i) CHECK(seen[i].address == addrs[i]);
  CHECK(lss->HiStable() == last);
  Result<uint64_t> size = fault.GetFileSize(SegPath(0));
  REQUIRE(size.ok());
  CHECK(*size == last);  // cut
  Result<LssAddress> a = Put(lss.get(), RecordType::kBase, 99, "x");
  REQUIRE(a.ok());
  CHECK(*a == last + kBufferHeaderSize);
  REQUIRE(lss->MakeStable(lss->Tail()).ok());
  lss.reset();
  seen.clear();
  lss = OpenAndRecover(&fault, &seen);
  REQUIRE(seen.size() == 5);
  CHECK(seen.back().payload == "x");
}

// Issue 35: the owner records a Hi-Stable it was given (the DC, in dc.meta);
// damage below it is Corruption even in the last buffer, and a torn buffer
// at or above it is still cut.
TEST_CASE("damage below the recorded stable point is Corruption even in the last buffer",
          "[dc][llama][lss][crash]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  std::unique_ptr<Env> mem = NewMemEnv();
  FaultInjectionEnv fault(mem.get(), seed);
  const std::vector<LssAddress> addrs = WriteStableBuffers(&fault, 5);
  const LssAddress last = addrs.back() - kBufferHeaderSize;
  LssAddress stable = kNullAddress;
  {
    std::vector<Seen> seen;
    auto lss = OpenAndRecover(&fault, &seen);
    stable = lss->HiStable();
  }
  REQUIRE(stable > last);
  REQUIRE(fault.CorruptRange(SegPath(0), last + 700, 8, 2).ok());
  LssOptions o = SmallLssOptions();
  SECTION("the damaged buffer lies below the stable point") {
    o.stable_floor = stable;
    auto lss = MustOpen(&fault, o);
    std::vector<Seen> seen;
    Status s = Collect(lss.get(), &seen);
    INFO(s.ToString());
    CHECK(s.IsCorruption());
    CHECK(s.ToString().find("segment 0 offset " + std::to_string(last)) != std::string::npos);
    lss.reset();
    // Nothing was cut: the next open finds the same damage.
    Result<uint64_t> size = fault.GetFileSize(SegPath(0));
    REQUIRE(size.ok());
    CHECK(*size > last);
  }
  SECTION("the damaged buffer begins at the stable point: a torn tail") {
    o.stable_floor = last;
    std::vector<Seen> seen;
    auto lss = OpenAndRecover(&fault, &seen, o);
    CHECK(seen.size() == 4);
    CHECK(lss->HiStable() == last);
  }
}

TEST_CASE("ReadRecord names the segment and offset of a bad record", "[dc][llama][lss]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  std::unique_ptr<Env> mem = NewMemEnv();
  FaultInjectionEnv fault(mem.get(), seed);
  std::vector<Seen> seen;
  auto lss = OpenAndRecover(&fault, &seen);
  std::vector<LssAddress> addrs;
  for (int i = 0; i < 30; ++i) {
    Result<LssAddress> a = Put(lss.get(), RecordType::kBase, 1, MakePayload(i, 20000));
    REQUIRE(a.ok());
    addrs.push_back(*a);
  }
  REQUIRE(lss->MakeStable(lss->Tail()).ok());
  const LssAddress a = addrs[20];
  REQUIRE(SegmentOf(a, kSeg) >= 1);
  REQUIRE(fault.CorruptRange(SegPath(SegmentOf(a, kSeg)), OffsetInSegment(a, kSeg) + 100, 4, 1).ok());
  std::string payload;
  Result<RecordHeader> h = lss->ReadRecord(a, &payload);
  CHECK(h.status().IsCorruption());
  const std::string expect = "segment " + std::to_string(SegmentOf(a, kSeg)) + " offset " +
                             std::to_string(OffsetInSegment(a, kSeg)) + ": record: checksum mismatch";
  INFO(h.status().ToString());
  CHECK(h.status().ToString().find(expect) != std::string::npos);
  CHECK(lss->ReadRecord(addrs[19], &payload).ok());
}

// ---------------------------------------------------------------- errors

}  // namespace
}  // namespace deuteron::llama
