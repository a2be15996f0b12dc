// The write-ahead log working normally: spans, reading from an LSN, group
// commit with many threads, truncation below the durable RSSP, recycling.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>
#include <vector>

#include "tests/tc/wal/wal_test_util.h"

namespace deuteron::wal::test {
namespace {

TEST_CASE("wal: commits get increasing spans and read back after reopen", "[wal]") {
  auto env = NewMemEnv();
  const LogOptions o = SmallOptions();
  std::vector<LogSpan> spans;
  {
    auto log = OpenLog(env.get(), o);
    REQUIRE(log->Esl() == SegmentStart(kFirstSegment, o.segment_size));
    for (uint64_t i = 0; i < 200; ++i) {
      Result<LogSpan> span = log->Commit(Payload("r", i, 10 + i * 7 % 300));
      REQUIRE(span.ok());
      REQUIRE(span->end == span->lsn + RecordSpan(10 + i * 7 % 300));
      if (!spans.empty()) REQUIRE(span->lsn >= spans.back().end);
      REQUIRE(log->Esl() >= span->end);
      spans.push_back(*span);
    }
    REQUIRE(log->Close().ok());
  }
  auto log = OpenLog(env.get(), o);
  REQUIRE(log->Esl() == spans.back().end);
  const std::vector<ReadBack> all = ReadAll(*log, log->DurableRssp());
  REQUIRE(all.size() == spans.size());
  for (size_t i = 0; i < all.size(); ++i) {
    REQUIRE(all[i].lsn == spans[i].lsn);
    REQUIRE(all[i].end == spans[i].end);
    REQUIRE(all[i].payload == Payload("r", i, 10 + i * 7 % 300));
  }
  // Reading from an LSN inside a record starts with that record.
  const std::vector<ReadBack> tail = ReadAll(*log, spans[120].lsn + 5);
  REQUIRE(tail.size() == 80);
  REQUIRE(tail.front().lsn == spans[120].lsn);
  // Too large, and after Close.
  REQUIRE(log->Append(std::string(log->MaxPayload() + 1, 'x')).status().code() == Code::kTooLarge);
  REQUIRE(log->Close().ok());
  REQUIRE(log->Append("late").status().code() == Code::kShuttingDown);
}

TEST_CASE("wal: group commit with 64 threads reads back each record once, in LSN order",
          "[wal][concurrency]") {
  auto env = NewMemEnv();
  LogOptions o = SmallOptions(64 << 10, 16 << 10);
  // The tests' short polling and leading, and the defaults (no polling; a
  // leader hands off as soon as the group holding its record is synced).
  const bool defaults = GENERATE(false, true);
  INFO("default writer_spin_us and committer_spin_us: " << defaults);
  if (defaults) {
    o.writer_spin_us = LogOptions{}.writer_spin_us;
    o.committer_spin_us = LogOptions{}.committer_spin_us;
  }
  constexpr int kThreads = 64;
  constexpr uint64_t kPerThread = 40;
  auto log = OpenLog(env.get(), o);
  std::vector<std::vector<LogSpan>> spans(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < kPerThread; ++i) {
        const uint64_t n = t * kPerThread + i;
        Result<LogSpan> span = log->Commit(Payload("t" + std::to_string(t), i, 16 + n % 200));
        if (!span.ok()) return;
        if (log->Esl() < span->end) return;  // acknowledged before durable: fails below
        spans[t].push_back(*span);
      }
    });
  }
  for (auto& th : threads) th.join();
  const Log::Stats stats = log->GetStats();
  WARN("64 threads" << (defaults ? " (defaults)" : "") << ": " << stats.records << " records in " << stats.groups << " groups, "
                      << stats.committer_sleeps << " sleeps, " << stats.space_waits
                      << " space waits");
  std::map<Lsn, std::pair<int, uint64_t>> expected;  // lsn -> (thread, i)
  for (int t = 0; t < kThreads; ++t) {
    REQUIRE(spans[t].size() == kPerThread);
    for (uint64_t i = 0; i < kPerThread; ++i) expected[spans[t][i].lsn] = {t, i};
  }
  REQUIRE(expected.size() == kThreads * kPerThread);  // spans are disjoint
  auto check = [&](const std::vector<ReadBack>& all) {
    REQUIRE(all.size() == expected.size());
    auto it = expected.begin();
    std::vector<uint64_t> next(kThreads, 0);
    for (const ReadBack& r : all) {
      REQUIRE(r.lsn == it->first);
      const auto [t, i] = it->second;
      REQUIRE(r.end == spans[t][i].end);
      REQUIRE(i == next[t]);  // each thread's records in its commit order
      ++next[t];
      REQUIRE(r.payload == Payload("t" + std::to_string(t), i, 16 + (t * kPerThread + i) % 200));
      ++it;
    }
  };
  check(ReadAll(*log, log->DurableRssp()));
  REQUIRE(log->Close().ok());
  auto reopened = OpenLog(env.get(), o);
  check(ReadAll(*reopened, reopened->DurableRssp()));
}

TEST_CASE("wal: records nobody waits for become durable, and Append laps the ring alone",
          "[wal]") {
  auto env = NewMemEnv();
  LogOptions o = SmallOptions(16 << 10, 4096);
  o.flush_interval_us = 200;
  auto log = OpenLog(env.get(), o);
  // No WaitDurable: the background flusher writes it.
  Result<LogSpan> span = log->Append("unwaited");
  REQUIRE(span.ok());
  for (int i = 0; i < 5000 && log->Esl() < span->end; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(log->Esl() >= span->end);
  REQUIRE(log->GetStats().flusher_leads > 0);
  // Appends alone lap the 4 KiB ring many times: a committer short of ring
  // space leads the write of what is filled.
  Lsn last = kNullLsn;
  for (uint64_t i = 0; i < 200; ++i) {
    Result<LogSpan> s = log->Append(Payload("a", i, 200));
    REQUIRE(s.ok());
    last = s->end;
  }
  REQUIRE(log->WaitDurable(last).ok());
  REQUIRE(log->Close().ok());
  auto reopened = OpenLog(env.get(), o);
  const std::vector<ReadBack> all = ReadAll(*reopened, reopened->DurableRssp());
  REQUIRE(all.size() == 201);
  REQUIRE(all.front().payload == "unwaited");
  for (size_t i = 1; i < all.size(); ++i) REQUIRE(all[i].payload == Payload("a", i - 1, 200));
}

TEST_CASE("wal: truncation below the durable RSSP, and recovery after it", "[wal]") {
  auto env = NewMemEnv();
  LogOptions o = SmallOptions(4096, 4096);
  o.spare_segments = 1;
  std::vector<LogSpan> spans;
  auto log = OpenLog(env.get(), o);
  for (uint64_t i = 0; i < 100; ++i) {
    Result<LogSpan> span = log->Commit(Payload("r", i, 200));
    REQUIRE(span.ok());
    spans.push_back(*span);
  }
  const Lsn rssp = spans[50].lsn + 3;
  const uint64_t first = SegmentOf(rssp, o.segment_size);
  REQUIRE(first >= kFirstSegment + 2);
  REQUIRE(log->SetDurableRssp(log->Esl() + 1).code() == Code::kInvalidArgument);
  REQUIRE(log->SetDurableRssp(rssp).ok());
  REQUIRE(log->DurableRssp() == rssp);
  REQUIRE(log->SetDurableRssp(rssp - 1).code() == Code::kInvalidArgument);
  for (uint64_t s = kFirstSegment; s < first; ++s) {
    REQUIRE_FALSE(env->FileExists(JoinPath(kDir, SegmentFileName(s))));
  }
  REQUIRE(env->FileExists(JoinPath(kDir, SegmentFileName(first))));
  const Log::Stats stats = log->GetStats();
  REQUIRE(stats.segments_recycled + stats.segments_deleted == first - kFirstSegment);
  REQUIRE(log->NewReader(spans[0].lsn).status().code() == Code::kNotFound);
  std::vector<ReadBack> from = ReadAll(*log, rssp);
  REQUIRE(from.size() == 50);
  REQUIRE(from.front().lsn == spans[50].lsn);
  REQUIRE(log->Close().ok());

  auto reopened = OpenLog(env.get(), o);
  REQUIRE(reopened->DurableRssp() == rssp);
  REQUIRE(reopened->Esl() == spans.back().end);
  from = ReadAll(*reopened, reopened->DurableRssp());
  REQUIRE(from.size() == 50);
  for (size_t i = 0; i < from.size(); ++i) REQUIRE(from[i].payload == Payload("r", 50 + i, 200));
  // The log goes on after the truncation and recovery.
  REQUIRE(reopened->Commit("after").ok());
  REQUIRE(ReadAll(*reopened, rssp).size() == 51);
}

TEST_CASE("wal: a recycled segment never resurrects an old record", "[wal]") {
  auto env = NewMemEnv();
  LogOptions o = SmallOptions(4096, 4096);
  o.spare_segments = 4;
  auto log = OpenLog(env.get(), o);
  // Phase A fills several segments; the RSSP then releases them as spares.
  for (uint64_t i = 0; i < 100; ++i) REQUIRE(log->Commit(Payload("A", i, 200)).ok());
  const Lsn a_end = log->Esl();
  REQUIRE(log->SetDurableRssp(a_end).ok());
  REQUIRE(log->GetStats().segments_recycled > 0);
  // Phase B: records of the same size, so they sit at the same offsets as old
  // A records in the recycled files, and stop mid-segment with A records after.
  const uint64_t per_segment = o.segment_size / RecordSpan(200);
  const uint64_t b_count = 2 * per_segment + per_segment / 2;
  for (uint64_t i = 0; i < b_count; ++i) REQUIRE(log->Commit(Payload("B", i, 200)).ok());
  const Lsn b_end = log->Esl();
  REQUIRE(log->GetStats().segments_recycled > 0);
  REQUIRE(log->Close().ok());

  auto reopened = OpenLog(env.get(), o);
  REQUIRE(reopened->Esl() == b_end);
  const std::vector<ReadBack> all = ReadAll(*reopened, reopened->DurableRssp());
  REQUIRE(all.size() == b_count);
  for (size_t i = 0; i < all.size(); ++i) REQUIRE(all[i].payload == Payload("B", i, 200));
}

}  // namespace
}  // namespace deuteron::wal::test
