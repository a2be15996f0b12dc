// Recovery of the write-ahead log: a torn tail is cut at every byte offset of
// the last record, a flipped bit before the tail is Corruption naming the
// segment and offset, and a power loss never loses what the ESL covered.
#include <catch2/catch.hpp>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "common/fault_env.h"
#include "tests/tc/wal/wal_test_util.h"

namespace deuteron::wal::test {
namespace {

const std::string kSegment1 = JoinPath(kDir, SegmentFileName(kFirstSegment));

// A log of `n` records committed one at a time in segment 1; returns spans.
std::vector<LogSpan> WriteRecords(Env* env, const LogOptions& o, uint64_t n) {
  auto log = OpenLog(env, o);
  std::vector<LogSpan> spans;
  for (uint64_t i = 0; i < n; ++i) {
    Result<LogSpan> span = log->Commit(Payload("r", i, 40 + i % 50));
    REQUIRE(span.ok());
    spans.push_back(*span);
  }
  REQUIRE(log->Close().ok());
  REQUIRE(SegmentOf(spans.back().lsn, o.segment_size) == kFirstSegment);
  return spans;
}

struct SavedLog {
  std::string meta;
  std::string segment;  // segment 1
};

SavedLog Save(Env* env) {
  Result<std::string> meta = ReadFileToString(env, JoinPath(kDir, kMetaFileName));
  Result<std::string> segment = ReadFileToString(env, kSegment1);
  REQUIRE(meta.ok());
  REQUIRE(segment.ok());
  return SavedLog{*meta, *segment};
}

// A fresh MemEnv holding `meta` and segment 1 with `segment` as its bytes.
std::unique_ptr<Env> EnvWith(const std::string& meta, const std::string& segment) {
  auto env = NewMemEnv();
  REQUIRE(env->CreateDirs(kDir).ok());
  REQUIRE(WriteStringToFile(env.get(), meta, JoinPath(kDir, kMetaFileName), true).ok());
  REQUIRE(WriteStringToFile(env.get(), segment, kSegment1, true).ok());
  return env;
}

TEST_CASE("wal: a torn tail at every byte offset of the last record is cut", "[wal][recovery]") {
  auto env = NewMemEnv();
  const LogOptions o = SmallOptions();
  const std::vector<LogSpan> spans = WriteRecords(env.get(), o, 30);
  const SavedLog saved = Save(env.get());
  const LogSpan last = spans.back();
  const uint64_t base = SegmentStart(kFirstSegment, o.segment_size);
  for (const char fill : {'\0', '\xab'}) {  // zeros, or bytes of an older use of the file
    // Every byte of the header and payload (the alignment padding after the
    // payload is not part of the record).
    const uint64_t record_bytes = kRecordHeaderSize + 40 + (spans.size() - 1) % 50;
    for (uint64_t cut = 0; cut < record_bytes; ++cut) {
      INFO("cut " << cut << " fill " << int(fill));
      std::string torn = saved.segment;
      std::fill(torn.begin() + static_cast<long>(last.lsn - base + cut),
                torn.begin() + static_cast<long>(last.lsn - base + record_bytes), fill);
      auto crashed = EnvWith(saved.meta, torn);
      auto log = OpenLog(crashed.get(), o);
      REQUIRE(log->Esl() == last.lsn);
      const std::vector<ReadBack> all = ReadAll(*log, log->DurableRssp());
      REQUIRE(all.size() == spans.size() - 1);
      for (size_t i = 0; i < all.size(); ++i) REQUIRE(all[i].payload == Payload("r", i, 40 + i % 50));
      // Writing resumes where the tail was cut, and survives a reopen.
      Result<LogSpan> again = log->Commit("again");
      REQUIRE(again.ok());
      REQUIRE(again->lsn == last.lsn);
      REQUIRE(log->Close().ok());
      auto reopened = OpenLog(crashed.get(), o);
      REQUIRE(ReadAll(*reopened, reopened->DurableRssp()).back().payload == "again");
    }
  }
}

TEST_CASE("wal: a flipped bit before the tail is Corruption naming segment and offset",
          "[wal][recovery]") {
  auto env = NewMemEnv();
  const LogOptions o = SmallOptions();
  const std::vector<LogSpan> spans = WriteRecords(env.get(), o, 40);
  const SavedLog saved = Save(env.get());
  const LogSpan victim = spans[20];
  const uint64_t offset = victim.lsn % o.segment_size;
  // A bit in the header checksum, the position, the length, and the payload.
  for (const uint64_t at : {uint64_t{1}, uint64_t{9}, uint64_t{17}, kRecordHeaderSize + 3}) {
    INFO("byte " << at << " of the record");
    std::string bad = saved.segment;
    bad[offset + at] = static_cast<char>(bad[offset + at] ^ 0x10);
    auto damaged = EnvWith(saved.meta, bad);
    Result<std::unique_ptr<Log>> log = Log::Open(damaged.get(), kDir, o);
    REQUIRE(log.status().code() == Code::kCorruption);
    const std::string msg = log.status().ToString();
    INFO(msg);
    REQUIRE(msg.find(DescribePosition(victim.lsn, o.segment_size)) != std::string::npos);
    // Nothing was cut: the damaged file is as it was.
    REQUIRE(*ReadFileToString(damaged.get(), kSegment1) == bad);
  }
}

// Committers run until a simulated power loss; every commit acknowledged
// before it is read back after recovery.
void PowerLoss(CrashMode mode, uint64_t seed) {
  auto mem = NewMemEnv();
  FaultInjectionEnv env(mem.get(), seed);
  const LogOptions o = SmallOptions(8192, 4096);
  std::set<std::string> acked;
  {
    KillableEnv process(&env);
    auto log = OpenLog(&process, o);
    constexpr int kThreads = 8;
    std::vector<std::vector<std::string>> done(kThreads);
    std::atomic<uint64_t> count{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (uint64_t i = 0;; ++i) {
          const std::string p = Payload("t" + std::to_string(t), i, 30 + (i * 13 + t) % 150);
          Result<LogSpan> span = log->Commit(p);
          if (!span.ok()) return;
          done[t].push_back(p);
          count.fetch_add(1);
        }
      });
    }
    const uint64_t target = 100 + seed % 300;
    while (count.load() < target) std::this_thread::yield();
    process.Kill();
    REQUIRE(env.SimulateCrash(mode).ok());
    for (auto& th : threads) th.join();
    REQUIRE(log->Close().code() == Code::kIOError);
    for (const auto& d : done) acked.insert(d.begin(), d.end());
  }
  auto log = OpenLog(&env, o);
  std::set<std::string> found;
  for (const ReadBack& r : ReadAll(*log, log->DurableRssp())) {
    REQUIRE(found.insert(r.payload).second);
  }
  for (const std::string& p : acked) {
    INFO("acknowledged record " << p << " lost, seed " << seed);
    REQUIRE(found.count(p) == 1);
  }
}

TEST_CASE("wal: power loss never loses a record the ESL covered", "[wal][recovery][crash]") {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    PowerLoss(CrashMode::kDropUnsynced, seed);
    PowerLoss(CrashMode::kTearUnsynced, seed + 100);
  }
}

TEST_CASE("wal: power loss, many seeds", "[.][wal][recovery][crash]") {
  for (uint64_t seed = 1000; seed < 1100; ++seed) {
    PowerLoss(seed % 2 == 0 ? CrashMode::kDropUnsynced : CrashMode::kTearUnsynced, seed);
  }
}

}  // namespace
}  // namespace deuteron::wal::test
