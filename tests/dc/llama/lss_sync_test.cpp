// The LSS without sync_on_write (lss.h, LssOptions::sync_on_write): buffers
// are written without a sync, readable once written (Hi-Written), and only
// MakeStable syncs; a crash loses what was written and not synced, never
// what MakeStable returned for.
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "common/fault_env.h"
#include "common/random.h"
#include "dc/llama/lss.h"

#include "tests/dc/llama/lss_test_util.h"

namespace deuteron::llama {
namespace {

using namespace lss_test;

LssOptions LazyOptions(int io_threads) {
  LssOptions o = SmallLssOptions(io_threads);
  o.sync_on_write = false;
  return o;
}

TEST_CASE("without sync_on_write, written buffers are readable and only MakeStable syncs",
          "[dc][llama][lss][lss_sync]") {
  const int io_threads = GENERATE(0, 2);
  INFO("io_threads " << io_threads);
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  std::unique_ptr<Env> mem = NewMemEnv();
  FaultInjectionEnv fault(mem.get(), seed);
  const LssOptions o = LazyOptions(io_threads);
  std::vector<LssAddress> addrs;
  std::vector<std::string> payloads;
  {
    std::vector<Seen> seen;
    auto lss = OpenAndRecover(&fault, &seen, o);
    // Three buffers' worth of records, two a buffer; the last buffer stays
    // open until MakeWritten(Tail()).
    for (uint64_t i = 0; i < 6; ++i) {
      payloads.push_back(MakePayload(i, kFullRecordPayload / 2 - 64));
      Result<LssAddress> a = Put(lss.get(), RecordType::kBase, i + 1, payloads.back());
      REQUIRE(a.ok());
      addrs.push_back(*a);
    }
    REQUIRE(lss->MakeWritten(addrs[2] + 1).ok());
    // The segment file exists now (its creation synced its header).
    const uint64_t file_syncs = fault.OpCount(FaultInjectionEnv::Op::kSync);
    CHECK(lss->HiWritten() > addrs[2]);
    CHECK(lss->HiStable() <= addrs[0]);  // nothing synced yet
    for (size_t i = 0; i < 3; ++i) {
      CheckRead(lss.get(), addrs[i], Written{RecordType::kBase, i + 1, payloads[i]});
    }
    REQUIRE(lss->MakeStable(addrs[2] + 1).ok());
    CHECK(lss->HiStable() > addrs[2]);
    CHECK(lss->HiStable() == lss->HiWritten());
    // One sync for the segment file written, not one per buffer.
    CHECK(fault.OpCount(FaultInjectionEnv::Op::kSync) - file_syncs == 1);
    // The rest written, not synced, when the process dies: the third buffer
    // (in the same segment file) is written without a sync.
    const uint64_t stable_syncs = fault.OpCount(FaultInjectionEnv::Op::kSync);
    REQUIRE(lss->MakeWritten(lss->Tail()).ok());
    CHECK(fault.OpCount(FaultInjectionEnv::Op::kSync) == stable_syncs);
    CHECK(lss->HiWritten() > addrs[5]);
    CHECK(lss->HiStable() <= addrs[4]);
    for (size_t i = 3; i < 6; ++i) {
      CheckRead(lss.get(), addrs[i], Written{RecordType::kBase, i + 1, payloads[i]});
    }
    REQUIRE(fault.SimulateCrash(CrashMode::kDropUnsynced).ok());
  }
  std::vector<Seen> seen;
  auto lss = OpenAndRecover(&fault, &seen, o);
  // Exactly what MakeStable covered survives: the records up to addrs[2],
  // and addrs[3], which shared its buffer (two records a buffer).
  REQUIRE(seen.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(seen[i].address == addrs[i]);
    CHECK(seen[i].payload == payloads[i]);
  }
  CHECK(lss->HiStable() == lss->HiWritten());
  Result<LssAddress> a = Put(lss.get(), RecordType::kBase, 9, "after the crash");
  REQUIRE(a.ok());
  REQUIRE(lss->MakeStable(lss->Tail()).ok());
  CheckRead(lss.get(), *a, Written{RecordType::kBase, 9, "after the crash"});
}

TEST_CASE("without sync_on_write, a failed sync fails the store", "[dc][llama][lss][lss_sync]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  std::unique_ptr<Env> mem = NewMemEnv();
  FaultInjectionEnv fault(mem.get(), seed);
  std::vector<Seen> seen;
  auto lss = OpenAndRecover(&fault, &seen, LazyOptions(1));
  Result<LssAddress> a = Put(lss.get(), RecordType::kBase, 1, "x");
  REQUIRE(a.ok());
  REQUIRE(lss->MakeWritten(lss->Tail()).ok());
  fault.FailNth(FaultInjectionEnv::Op::kSync, 1, Code::kIOError);
  CHECK_FALSE(lss->MakeStable(lss->Tail()).ok());
  CHECK(lss->HiStable() <= *a);
  // Failed for good (I6): what was written may not be on disk.
  CHECK_FALSE(lss->MakeStable(lss->Tail()).ok());
  CHECK_FALSE(lss->Reserve(RecordSpan(8)).ok());
}

TEST_CASE("records read back with one read or two", "[dc][llama][lss][lss_sync]") {
  std::unique_ptr<Env> mem = NewMemEnv();
  std::vector<Seen> seen;
  auto lss = OpenAndRecover(mem.get(), &seen, LazyOptions(0));
  // Under the read-ahead, across it, and a whole buffer's worth.
  const size_t sizes[] = {1, 4096 - kRecordHeaderSize, 4096 - kRecordHeaderSize + 1, 10000,
                          kFullRecordPayload};
  std::vector<std::pair<LssAddress, Written>> done;
  PageId pid = 1;
  for (size_t n : sizes) {
    Written w{RecordType::kDelta, pid, MakePayload(pid, n)};
    Result<LssAddress> a = Put(lss.get(), w.type, w.pid, w.payload);
    REQUIRE(a.ok());
    done.emplace_back(*a, w);
    ++pid;
  }
  REQUIRE(lss->MakeWritten(lss->Tail()).ok());
  for (const auto& [a, w] : done) CheckRead(lss.get(), a, w);
}

}  // namespace
}  // namespace deuteron::llama
