// The log-only commit loop of log_bench, shared with txn_bench (which
// measures the log alone at each thread count as its baseline): a timed loop
// of commits on N threads, and the `deuteron` system, a wal::Log over
// Env::Posix() with a checkpointer thread that moves the durable RSSP to the
// ESL every 100 ms, so segments are recycled as they would be in service.
//
// Thread safety: RunCommitCell calls `record` and `commit` from its worker
// threads at once (each with its own thread index). LogSystem::Commit may be
// called from any threads; construction, Report and destruction from one.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "common/metrics.h"
#include "common/status.h"
#include "tc/wal/log.h"

namespace deuteron::bench {

// One cell: commits made, its wall time, per-commit latency (ns), and the
// whole process's CPU time and context switches (voluntary + involuntary,
// getrusage) during it.
struct CommitCell {
  uint64_t ops = 0;
  double seconds = 0;
  Histogram::Snapshot latency;
  double cpu_seconds = 0;
  uint64_t context_switches = 0;
  double ops_per_s() const { return Ratio(static_cast<double>(ops), seconds); }
  double p50_us() const { return static_cast<double>(latency.Percentile(50)) / 1000.0; }
};

// The bytes committer `thread` commits the `n`th time.
using RecordFn = std::function<std::string(int thread, uint64_t n)>;
using CommitFn = std::function<Status(int thread, const std::string& bytes)>;

// Runs `commit(thread, record(thread, n))` on `threads` threads for
// `seconds`, timing each commit (not the record's making). A failed commit
// ends the program.
CommitCell RunCommitCell(int threads, double seconds, const RecordFn& record,
                         const CommitFn& commit);

// The log's leader and polling knobs, settable with --set NAME=VALUE
// (writer_spin_us, committer_spin_us).
std::vector<Setting> LogSettings();
// The log options of the benchmarks (16 MiB segments, 4 MiB buffer, 4
// spares) with LogSettings() from `args`. REQUIRES: the program declared
// LogSettings().
wal::LogOptions BenchLogOptions(const BenchArgs& args);

// A wal::Log in `dir` and its checkpointer.
class LogSystem {
 public:
  LogSystem(const std::string& dir, const wal::LogOptions& options);
  ~LogSystem();
  LogSystem(const LogSystem&) = delete;
  LogSystem& operator=(const LogSystem&) = delete;

  // Append + WaitDurable.
  Status Commit(const std::string& bytes) { return log_->Commit(bytes).status(); }
  // The log's counters as a progress line.
  void Report(const std::string& what) const;
  wal::Log::Stats Stats() const { return log_->GetStats(); }

 private:
  std::unique_ptr<wal::Log> log_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread checkpointer_;
};

}  // namespace deuteron::bench
