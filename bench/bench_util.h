// Shared harness of the benchmark programs in bench/ (DESIGN.md, "Benchmark
// programs"): command-line flags, a scratch directory, result lines as JSON
// objects on standard output, progress on standard error, timers and
// per-thread latency histograms.
//
// Output contract: every result is ONE line on stdout holding one JSON object
// with at least bench, workload, system, threads, ops, seconds, ops_per_s,
// and, where latencies are measured, p50_us, p99_us, p999_us, max_us. A
// baseline measured in the same run is its own line with its own `system`.
// Everything else (progress, warnings) goes to stderr, so
// `llama_bench --quick > results.jsonl` keeps only results.
//
// Thread safety: BenchArgs and ScratchDir are used by the main thread.
// ResultLine is a value owned by one thread. Progress() and
// ResultLine::Print() may be called from any thread (each writes one whole
// line). LatencySet::ForThread(i) hands out one Histogram per worker thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include "common/metrics.h"
#include "common/status.h"

namespace deuteron::bench {

// A tuning option of the system measured, set by --set NAME=VALUE; `value`
// is its default, [min, max] its accepted range.
struct Setting {
  std::string name;
  std::string help;
  uint64_t min = 0;
  uint64_t max = 0;
  uint64_t value = 0;
};

// A program's own flag --NAME VALUE (a string the program parses itself),
// with its default `value`.
struct Flag {
  std::string name;  // without the dashes
  std::string help;
  std::string value;
};

// What a program tells the parser about itself, for --help.
struct ProgramInfo {
  std::string name;             // "llama_bench"
  std::string description;      // one paragraph
  std::vector<int> default_threads;
  // Names accepted by --only, each with a one-line explanation.
  std::vector<std::pair<std::string, std::string>> groups;
  // Whether the program repeats its measurements (--rounds N) and reports
  // medians; others reject the flag.
  bool takes_rounds = false;
  // Whether the program's data volume can be set (--records N); others
  // reject the flag.
  bool takes_records = false;
  // The options --set may change; none: the program rejects --set.
  std::vector<Setting> settings;
  // The program's own flags (--NAME VALUE), listed by --help.
  std::vector<Flag> flags;
};

struct BenchArgs {
  bool quick = false;
  // Scratch directory for the run's files; exists once ParseArgs returned.
  std::string dir;
  std::vector<int> threads;
  // Empty: every group runs.
  std::set<std::string> only;
  // Repetitions of each measurement (--rounds; 1 unless the program takes it).
  int rounds = 1;
  // Records per workload (--records; 0: the program's own default).
  size_t records = 0;
  // The program's settings, --set values applied over the defaults.
  std::vector<Setting> settings;
  // The program's own flags, given values over the defaults.
  std::vector<Flag> flags;

  // Whether the group of workloads `group` should run (--only).
  bool Wants(std::string_view group) const;
  // The value of setting `name`. REQUIRES: the program declared it.
  uint64_t SettingValue(std::string_view name) const;
  // The value of the program's flag `name`. REQUIRES: the program declared it.
  const std::string& FlagValue(std::string_view name) const;
  int MaxThreads() const;
};

// Owns the scratch directory: a fresh mkdtemp directory under /tmp when
// --dir is not given (removed with everything in it on destruction), or the
// --dir path (created if absent; only what the program put there is removed,
// by the program itself).
class ScratchDir {
 public:
  ScratchDir() = default;
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  // Creates or adopts the directory.
  Status Init(const std::string& requested);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool owned_ = false;
};

// Parses argv: --quick, --help, --dir PATH, --threads (or --clients) LIST (comma-separated
// positive integers), --only LIST (comma-separated group names). On --help
// prints usage to stdout and exits 0; on a bad flag prints usage to stderr and
// exits 2. `scratch` is initialized from --dir.
BenchArgs ParseArgs(int argc, char** argv, const ProgramInfo& info, ScratchDir* scratch);

// Prints `message` and the usage on stderr and exits 2 (a bad value of a
// program's own flag).
[[noreturn]] void UsageExit(const ProgramInfo& info, std::string_view message);

// Comma-separated items of `s`, empty ones dropped.
std::vector<std::string> SplitList(std::string_view s);

// Exits with status 1 after printing `what` and the error, when !s.ok().
void CheckOk(const Status& s, std::string_view what);
template <typename T>
T CheckOk(Result<T> r, std::string_view what) {
  CheckOk(r.status(), what);
  return std::move(r).value();
}

// Seconds since the program's first call into the harness, for progress.
double ProgramSeconds();

// One progress line on stderr, prefixed with the program's elapsed time.
void ProgressLine(std::string_view text);
template <typename... A>
void Progress(fmt::format_string<A...> format, A&&... args) {
  ProgressLine(fmt::format(format, std::forward<A>(args)...));
}

class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  void Restart() { start_ = std::chrono::steady_clock::now(); }
  uint64_t ElapsedNanos() const {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now() - start_)
                                     .count());
  }
  double Seconds() const { return static_cast<double>(ElapsedNanos()) * 1e-9; }

 private:
  std::chrono::steady_clock::time_point start_;
};

// CPU seconds (user + system) used by the whole process so far.
double ProcessCpuSeconds();

// Voluntary context switches (a thread blocked: futex waits, I/O) of the
// whole process so far, all threads together.
uint64_t ProcessVoluntarySwitches();

// Runs fn(0) .. fn(n - 1) on n threads and joins them.
void RunThreads(int n, const std::function<void(int)>& fn);

// Removes `path` and everything under it; a failure is reported on stderr.
void RemoveTree(const std::string& path);

// `explicit_path` when not empty, else `deuteron` in the directory of this
// program (/proc/self/exe; the build puts every program in build/<preset>/bin/).
// NotFound when it is not an executable file. Run it as a child process with
// tc/cli/server_process.h.
Result<std::string> FindDeuteron(const std::string& explicit_path);

// Nanoseconds on a monotonic clock, for timing one operation.
inline uint64_t NowNanos() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// One Histogram (values in nanoseconds) per worker thread, so threads never
// share a histogram's lines; Merged() sums them once the workers are joined.
class LatencySet {
 public:
  explicit LatencySet(int threads);
  Histogram* ForThread(int i) { return histograms_[static_cast<size_t>(i)].get(); }
  Histogram::Snapshot Merged() const;

 private:
  std::vector<std::unique_ptr<Histogram>> histograms_;
};

// One result line. The constructor takes the required fields; ops_per_s is
// computed. Fields print in the order they were set.
class ResultLine {
 public:
  ResultLine(std::string_view bench, std::string_view workload, std::string_view system,
             int threads, uint64_t ops, double seconds);

  ResultLine& Set(std::string_view key, double value);
  ResultLine& Set(std::string_view key, uint64_t value);
  ResultLine& Set(std::string_view key, int64_t value);
  ResultLine& Set(std::string_view key, int value) { return Set(key, int64_t{value}); }
  ResultLine& SetString(std::string_view key, std::string_view value);
  ResultLine& SetBool(std::string_view key, bool value);
  // p50_us, p99_us, p999_us, max_us (and mean_us) from a histogram of
  // nanoseconds; nothing when it is empty.
  ResultLine& SetLatenciesNs(const Histogram::Snapshot& ns);

  std::string ToJson() const;
  // Writes ToJson() and a newline to stdout and flushes it.
  void Print() const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;  // key, encoded value
};

// The ratio a / b, 0 when b is 0 (JSON has no infinities).
inline double Ratio(double a, double b) { return b == 0 ? 0.0 : a / b; }

// The median of `v` (the mean of the two middle values when even).
// REQUIRES: !v.empty().
double Median(std::vector<double> v);

constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace deuteron::bench
