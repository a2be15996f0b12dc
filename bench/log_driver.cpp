#include "bench/log_driver.h"

#include <sys/resource.h>

#include <atomic>
#include <chrono>

#include "common/env.h"

namespace deuteron::bench {
namespace {

struct Usage {
  double cpu_seconds = 0;
  uint64_t context_switches = 0;
};

Usage ProcessUsage() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  auto secs = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
  };
  return {secs(ru.ru_utime) + secs(ru.ru_stime),
          static_cast<uint64_t>(ru.ru_nvcsw) + static_cast<uint64_t>(ru.ru_nivcsw)};
}

}  // namespace

CommitCell RunCommitCell(int threads, double seconds, const RecordFn& record,
                         const CommitFn& commit) {
  LatencySet latencies(threads);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ops{0};
  const Usage before = ProcessUsage();
  Stopwatch sw;
  std::thread timer([&] {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop.store(true);
  });
  RunThreads(threads, [&](int t) {
    Histogram* h = latencies.ForThread(t);
    uint64_t n = 0;
    for (; !stop.load(std::memory_order_relaxed); ++n) {
      const std::string bytes = record(t, n);
      const uint64_t t0 = NowNanos();
      CheckOk(commit(t, bytes), "commit");
      h->Record(NowNanos() - t0);
    }
    ops.fetch_add(n);
  });
  CommitCell r;
  r.seconds = sw.Seconds();
  const Usage after = ProcessUsage();
  r.cpu_seconds = after.cpu_seconds - before.cpu_seconds;
  r.context_switches = after.context_switches - before.context_switches;
  timer.join();
  r.ops = ops.load();
  r.latency = latencies.Merged();
  return r;
}

std::vector<Setting> LogSettings() {
  const wal::LogOptions d;
  return {{"writer_spin_us",
           "how long a leader whose record is durable keeps writing filled groups before it "
           "hands the leadership on",
           0, 100000, d.writer_spin_us},
          {"committer_spin_us", "how long a waiting committer polls the ESL before it sleeps", 0,
           100000, d.committer_spin_us}};
}

wal::LogOptions BenchLogOptions(const BenchArgs& args) {
  wal::LogOptions o;
  o.segment_size = 16ull << 20;
  o.buffer_size = 4ull << 20;
  o.spare_segments = 4;
  o.writer_spin_us = static_cast<uint32_t>(args.SettingValue("writer_spin_us"));
  o.committer_spin_us = static_cast<uint32_t>(args.SettingValue("committer_spin_us"));
  return o;
}

LogSystem::LogSystem(const std::string& dir, const wal::LogOptions& options) {
  log_ = CheckOk(wal::Log::Open(Env::Posix(), dir, options), "open wal");
  checkpointer_ = std::thread([this] {
    std::unique_lock<std::mutex> l(mu_);
    while (!cv_.wait_for(l, std::chrono::milliseconds(100), [this] { return done_; })) {
      CheckOk(log_->SetDurableRssp(log_->Esl()), "wal SetDurableRssp");
    }
  });
}

LogSystem::~LogSystem() {
  {
    std::lock_guard<std::mutex> l(mu_);
    done_ = true;
  }
  cv_.notify_all();
  checkpointer_.join();
  CheckOk(log_->Close(), "close wal");
}

void LogSystem::Report(const std::string& what) const {
  const wal::Log::Stats st = log_->GetStats();
  Progress("{}: {} records in {} groups, {} syncs, {} sleeps, {} hand-offs, {} recycled, "
           "{} created",
           what, st.records, st.groups, st.syncs, st.committer_sleeps, st.leader_handoffs,
           st.segments_recycled, st.segments_created);
}

}  // namespace deuteron::bench
