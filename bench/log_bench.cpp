// log_bench: durable commits of the write-ahead log (tc/wal) against
// RocksDB's WAL and a raw append + fdatasync loop, on the same file system,
// in the same run (DESIGN.md, "Benchmark programs"; bench/README.md).
//
// Each committer appends one record and waits until it is durable, in a loop,
// for a fixed time per cell: committers {1, 4, 16, 64} x record sizes {64,
// 256, 1024, 4096} bytes. Systems (`system`):
//   deuteron   wal::Log over Env::Posix() (Commit = Append + WaitDurable); a
//              checkpointer thread moves the durable RSSP to the ESL every
//              100 ms, so segments are recycled as they would be in service.
//   rocksdb    Put(key, value) with WriteOptions::sync = true; the same bytes
//              per record (16-byte key + the rest as value), tuned for
//              concurrent commits (see RocksOptions).
//   fdatasync  one thread: pwrite at the end of a file + fdatasync, per record.
// Ratio lines: `deuteron/rocksdb` (commits/s; target 1.5 at 16 and 64
// committers with 256-byte records) and `deuteron/fdatasync` (p50 latency of
// one committer over the raw loop's; target <= 1.2). With --rounds N each
// round's ratio lines come first, then a `statistic: "median"` line per ratio.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include "bench/bench_util.h"
#include "bench/log_driver.h"
#include "common/env.h"
#include "tc/wal/log.h"

namespace deuteron::bench {
namespace {

constexpr const char* kBench = "log_bench";
const std::vector<size_t> kSizes = {64, 256, 1024, 4096};
constexpr double kThroughputTarget = 1.5;   // deuteron/rocksdb commits/s
constexpr size_t kTargetSize = 256;          // ... with 256-byte records
constexpr double kLatencyTarget = 1.2;       // deuteron/fdatasync p50, 1 committer

bool IsThroughputTarget(int threads, size_t size) {
  return size == kTargetSize && (threads == 16 || threads == 64);
}

using CellResult = CommitCell;

// The bytes of record `n` of committer `t`: a 16-byte key, then filler.
std::string RecordBytes(int t, uint64_t n, size_t size) {
  std::string r = fmt::format("{:04x}{:012x}", t, n);
  r.resize(size, static_cast<char>('a' + (n + static_cast<uint64_t>(t)) % 26));
  return r;
}

// Every committer appends `size`-byte records (RecordBytes).
CellResult RunCell(int threads, size_t size, double seconds, const CommitFn& commit) {
  return RunCommitCell(
      threads, seconds, [size](int t, uint64_t n) { return RecordBytes(t, n, size); }, commit);
}

// The log's counters over one cell (deuteron only): how commits grouped.
struct GroupFields {
  bool valid = false;
  uint64_t groups = 0, sleeps = 0, handoffs = 0;
};

GroupFields CellGroups(const wal::Log::Stats& before, const wal::Log::Stats& after) {
  return {true, after.groups - before.groups, after.committer_sleeps - before.committer_sleeps,
          after.leader_handoffs - before.leader_handoffs};
}

// Every line has the process's CPU time and context switches per commit
// (getrusage over the cell: all threads, the systems' background threads
// included); deuteron's add its group counters.
void PrintResult(const char* system, int threads, size_t size, int round, const CellResult& r,
                 const GroupFields& g = {}) {
  ResultLine line(kBench, fmt::format("commit{}", size), system, threads, r.ops, r.seconds);
  line.Set("record_bytes", uint64_t{size}).Set("round", round).SetLatenciesNs(r.latency);
  const double ops = static_cast<double>(std::max<uint64_t>(r.ops, 1));
  line.Set("cpu_us_per_commit", r.cpu_seconds * 1e6 / ops)
      .Set("csw_per_commit", static_cast<double>(r.context_switches) / ops);
  if (g.valid) {
    const double groups = static_cast<double>(std::max<uint64_t>(g.groups, 1));
    line.Set("groups", g.groups)
        .Set("commits_per_group", static_cast<double>(r.ops) / groups)
        .Set("sleeps_per_commit", static_cast<double>(g.sleeps) / ops)
        .Set("handoffs_per_group", static_cast<double>(g.handoffs) / groups);
  }
  line.Print();
  Progress("{} size={} threads={} round {}: {:.0f} commits/s, p50 {:.1f} us, {:.1f} cpu us and "
           "{:.2f} csw per commit{}",
           system, size, threads, round, r.ops_per_s(), r.p50_us(), r.cpu_seconds * 1e6 / ops,
           static_cast<double>(r.context_switches) / ops,
           g.valid ? fmt::format(", {:.1f} commits per group",
                                 static_cast<double>(r.ops) /
                                     static_cast<double>(std::max<uint64_t>(g.groups, 1)))
                   : "");
}

// ------------------------------------------------------------------ systems

// The deuteron system: the shared log driver (bench/log_driver.h).
class DeuteronSystem {
 public:
  DeuteronSystem(const std::string& dir, const wal::LogOptions& options) : log_(dir, options) {}
  Status Commit(const std::string& bytes) { return log_.Commit(bytes); }
  void Report(int round) const { log_.Report(fmt::format("deuteron round {}", round)); }
  wal::Log::Stats LogStats() const { return log_.Stats(); }

 private:
  LogSystem log_;
};

// RocksDB tuned for many concurrent synchronous commits: pipelined writes
// (the WAL write of one group overlaps the memtable insert of the previous),
// concurrent memtable inserts (the default), a memtable large enough that no
// flush or compaction runs during a cell, no compression.
rocksdb::Options RocksOptions() {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.enable_pipelined_write = true;
  o.allow_concurrent_memtable_write = true;
  o.write_buffer_size = 512ull << 20;
  o.max_write_buffer_number = 4;
  o.disable_auto_compactions = true;
  o.compression = rocksdb::kNoCompression;
  o.max_total_wal_size = 4ull << 30;
  return o;
}

class RocksSystem {
 public:
  explicit RocksSystem(const std::string& dir) {
    rocksdb::DB* db = nullptr;
    const rocksdb::Status s = rocksdb::DB::Open(RocksOptions(), dir, &db);
    if (!s.ok()) CheckOk(Status::IOError("rocksdb open: " + s.ToString()), "rocksdb");
    db_.reset(db);
    wo_.sync = true;
  }
  Status Commit(const std::string& bytes) {
    const rocksdb::Slice key(bytes.data(), 16), value(bytes.data() + 16, bytes.size() - 16);
    const rocksdb::Status s = db_->Put(wo_, key, value);
    if (!s.ok()) return Status::IOError("rocksdb put: " + s.ToString());
    return Status::OK();
  }
  void Report(int) const {}

 private:
  std::unique_ptr<rocksdb::DB> db_;
  rocksdb::WriteOptions wo_;
};

// One writer: pwrite at the end of the file, fdatasync.
class FdatasyncSystem {
 public:
  explicit FdatasyncSystem(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) CheckOk(Status::FromErrno(errno, "open " + path), "fdatasync baseline");
  }
  ~FdatasyncSystem() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  Status Commit(const std::string& bytes) {
    if (::pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(end_)) !=
        static_cast<ssize_t>(bytes.size())) {
      return Status::FromErrno(errno, "pwrite " + path_);
    }
    end_ += bytes.size();
    if (::fdatasync(fd_) != 0) return Status::FromErrno(errno, "fdatasync " + path_);
    return Status::OK();
  }

 private:
  const std::string path_;
  int fd_ = -1;
  uint64_t end_ = 0;
};

// ------------------------------------------------------------------ ratios

struct RatioKey {
  std::string system;  // "deuteron/rocksdb" or "deuteron/fdatasync"
  int threads;
  size_t size;
  bool operator<(const RatioKey& o) const {
    return std::tie(system, threads, size) < std::tie(o.system, o.threads, o.size);
  }
};

struct RatioSeries {
  std::vector<double> ratios;
  uint64_t ops = 0;
  double seconds = 0;
};

// Prints a ratio line; `lower_is_better` for latency ratios.
void PrintRatio(const RatioKey& k, int round, double ratio, const CellResult& ours,
                bool has_target, double target, bool lower_is_better, const RatioSeries* median) {
  ResultLine line(kBench, fmt::format("commit{}", k.size), k.system, k.threads,
                  median != nullptr ? median->ops : ours.ops,
                  median != nullptr ? median->seconds : ours.seconds);
  line.Set("record_bytes", uint64_t{k.size});
  if (median != nullptr) {
    std::vector<double> v = median->ratios;
    std::sort(v.begin(), v.end());
    line.SetString("statistic", "median")
        .Set("rounds", uint64_t{v.size()})
        .Set("ratio", ratio)
        .Set("ratio_min", v.front())
        .Set("ratio_max", v.back());
  } else {
    line.Set("round", round).Set("ratio", ratio);
  }
  const bool meets = lower_is_better ? ratio <= target : ratio >= target;
  if (has_target) line.Set("target", target).SetBool("meets_target", meets);
  line.Print();
  Progress("{} size={} threads={} {}: {:.2f}{}", k.system, k.size, k.threads,
           median != nullptr ? "median" : fmt::format("round {}", round), ratio,
           has_target ? fmt::format(" (target {}{:.1f}: {})", lower_is_better ? "<= " : "",
                                    target, meets ? "met" : "MISSED")
                      : "");
}

int Main(int argc, char** argv) {
  ProgramInfo info;
  info.name = kBench;
  info.description =
      "Durable commits: the write-ahead log (tc/wal) against RocksDB's WAL (sync=true,\n"
      "pipelined writes) and a raw append + fdatasync loop, same file system, same run.\n"
      "Committers x record sizes 64/256/1024/4096 B, each committer appending one record\n"
      "and waiting until it is durable, in a loop. Ratio lines deuteron/rocksdb (commits/s;\n"
      "target 1.5 at 16 and 64 committers, 256 B) and deuteron/fdatasync (1-committer p50;\n"
      "target <= 1.2). --rounds N adds median ratio lines. See bench/README.md.";
  info.default_threads = {1, 4, 16, 64};
  info.takes_rounds = true;
  info.settings = LogSettings();
  info.groups = {{"deuteron", "the write-ahead log (tc/wal)"},
                 {"rocksdb", "RocksDB Put with WriteOptions::sync = true"},
                 {"fdatasync", "one writer: append + fdatasync"}};
  ScratchDir scratch;
  const BenchArgs args = ParseArgs(argc, argv, info, &scratch);
  const double cell_seconds = args.quick ? 0.3 : 2.0;
  Progress("log_bench{}: {} s per cell, {} round(s), scratch {}", args.quick ? " --quick" : "",
           cell_seconds, args.rounds, scratch.path());

  std::map<RatioKey, RatioSeries> series;
  for (int round = 1; round <= args.rounds; ++round) {
    std::map<std::tuple<std::string, int, size_t>, CellResult> cells;
    // Every cell of one system on one store (a log or a DB) in `name`-<round>.
    auto run_store = [&](const char* name, auto make) {
      if (!args.Wants(name)) return;
      const std::string dir = JoinPath(scratch.path(), fmt::format("{}-{}", name, round));
      {
        auto sys = make(dir);
        for (size_t size : kSizes) {
          for (int threads : args.threads) {
            wal::Log::Stats before;
            if constexpr (requires { sys->LogStats(); }) before = sys->LogStats();
            const CellResult r = RunCell(threads, size, cell_seconds,
                                         [&](int, const std::string& b) { return sys->Commit(b); });
            GroupFields g;
            if constexpr (requires { sys->LogStats(); }) g = CellGroups(before, sys->LogStats());
            PrintResult(name, threads, size, round, r, g);
            cells[{name, threads, size}] = r;
          }
        }
        sys->Report(round);
      }
      RemoveTree(dir);
    };
    auto run_deuteron = [&] {
      run_store("deuteron", [&](const std::string& d) {
        return std::make_unique<DeuteronSystem>(d, BenchLogOptions(args));
      });
    };
    auto run_rocksdb = [&] {
      run_store("rocksdb", [](const std::string& d) { return std::make_unique<RocksSystem>(d); });
    };
    auto run_fdatasync = [&] {
      if (!args.Wants("fdatasync")) return;
      for (size_t size : kSizes) {
        FdatasyncSystem sys(JoinPath(scratch.path(), fmt::format("raw-{}", round)));
        const CellResult r = RunCell(1, size, cell_seconds,
                                     [&](int, const std::string& b) { return sys.Commit(b); });
        PrintResult("fdatasync", 1, size, round, r);
        cells[{"fdatasync", 1, size}] = r;
      }
    };
    // Alternate the order, so that a drift in the disk's speed falls on all.
    if (round % 2 == 1) {
      run_fdatasync();
      run_deuteron();
      run_rocksdb();
    } else {
      run_rocksdb();
      run_deuteron();
      run_fdatasync();
    }

    for (size_t size : kSizes) {
      for (int threads : args.threads) {
        auto ours = cells.find({"deuteron", threads, size});
        if (ours == cells.end()) continue;
        if (auto base = cells.find({"rocksdb", threads, size}); base != cells.end()) {
          const RatioKey k{"deuteron/rocksdb", threads, size};
          const double ratio = Ratio(ours->second.ops_per_s(), base->second.ops_per_s());
          PrintRatio(k, round, ratio, ours->second, IsThroughputTarget(threads, size),
                     kThroughputTarget, false, nullptr);
          RatioSeries& s = series[k];
          s.ratios.push_back(ratio);
          s.ops += ours->second.ops;
          s.seconds += ours->second.seconds;
        }
        if (threads != 1) continue;
        if (auto base = cells.find({"fdatasync", 1, size}); base != cells.end()) {
          const RatioKey k{"deuteron/fdatasync", 1, size};
          const double ratio = Ratio(ours->second.p50_us(), base->second.p50_us());
          PrintRatio(k, round, ratio, ours->second, true, kLatencyTarget, true, nullptr);
          RatioSeries& s = series[k];
          s.ratios.push_back(ratio);
          s.ops += ours->second.ops;
          s.seconds += ours->second.seconds;
        }
      }
    }
  }
  if (args.rounds > 1) {
    for (const auto& [k, s] : series) {
      const bool latency = k.system == "deuteron/fdatasync";
      PrintRatio(k, 0, Median(s.ratios), CellResult{}, latency || IsThroughputTarget(k.threads, k.size),
                 latency ? kLatencyTarget : kThroughputTarget, latency, &s);
    }
  }
  Progress("done");
  return 0;
}

}  // namespace
}  // namespace deuteron::bench

int main(int argc, char** argv) { return deuteron::bench::Main(argc, argv); }
