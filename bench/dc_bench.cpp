// dc_bench: the data component with storage against Berkeley DB (issue 34).
// The DC (dc::Dc in process on the real file system, driven as the TC drives
// it: LSN-tagged upserts, the ESL behind them, periodic RSSPs, cleaning and
// checkpoints on) and Berkeley DB's B-tree (a locking environment, no
// transactional log) get the same keys, values, threads and memory, on the
// seeds' workloads, each in memory and with the budget at half the data
// (storage). Ratio lines `dc/bdb` judge the targets (3x throughput with
// storage on synthetic and dedup; 10x lower worst-case latency); every figure
// is a median over --rounds. bench/README.md ("dc_bench") says how each side
// is configured and what every field means.
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench/bench_util.h"
#include "bench/dc_bench_stores.h"
#include "dc/llama/op_phases.h"
#include "bench/dc_bench_workloads.h"
#include "common/env.h"
#include "common/heap.h"

namespace deuteron::bench {
namespace {

constexpr char kBench[] = "dc_bench";
constexpr double kThroughputTarget = 3.0;  // dc/bdb ops/s, storage, synthetic and dedup
constexpr double kLatencyTarget = 10.0;    // bdb max latency / dc max latency

// CPUs this process may run on (its affinity mask: `taskset -c 0,1` gives 2).
int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    return static_cast<int>(std::thread::hardware_concurrency());
  }
  return CPU_COUNT(&set);
}

uint64_t ProcRssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  }
  return 0;
}

// Samples the process's resident memory every 5 ms while a store is open
// and, while an ingest runs, prints one line per second.
class Monitor {
 public:
  explicit Monitor(uint64_t baseline) : baseline_(baseline) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~Monitor() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // Peak resident bytes above the baseline so far.
  uint64_t peak() const {
    const uint64_t p = peak_.load();
    return p > baseline_ ? p - baseline_ : 0;
  }
  // Per-second lines from the counters in `ops` (one per worker), labelled
  // by `label` (a ResultLine with the run's fields); null stops them.
  void SetIntervals(std::vector<std::atomic<uint64_t>>* ops, std::function<ResultLine(
      uint64_t ops, double seconds, int second)> label) {
    std::lock_guard<std::mutex> lock(mu_);
    ops_ = ops;
    label_ = std::move(label);
    second_ = 0;
    last_ops_ = 0;
    last_time_ = NowNanos();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(5));
      const uint64_t rss = ProcRssBytes();
      if (rss > peak_.load()) peak_.store(rss);
      if (ops_ != nullptr && NowNanos() - last_time_ >= 1'000'000'000) {
        uint64_t total = 0;
        for (auto& o : *ops_) total += o.load(std::memory_order_relaxed);
        const uint64_t now = NowNanos();
        ResultLine line = label_(total - last_ops_, static_cast<double>(now - last_time_) * 1e-9,
                                 ++second_);
        line.Set("rss_bytes", rss > baseline_ ? rss - baseline_ : 0);
        line.Print();
        last_ops_ = total;
        last_time_ = now;
      }
    }
  }

  const uint64_t baseline_;
  std::atomic<uint64_t> peak_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<std::atomic<uint64_t>>* ops_ = nullptr;
  std::function<ResultLine(uint64_t, double, int)> label_;
  int second_ = 0;
  uint64_t last_ops_ = 0, last_time_ = 0;
  std::thread thread_;
};

// One measured run's outcome, kept for the ratio lines.
struct Outcome {
  double ops_per_s = 0;
  double max_us = 0;
  double stddev_us = 0;
  uint64_t ops = 0;
  double seconds = 0;
};

struct Options {
  double scale = 1.0;
  uint64_t run_ms = 1000;
  uint64_t ingest_ms = 4000;
  size_t ingest_budget = size_t{16} << 20;
  uint64_t mem_factor = 8;
  StoreConfig store;  // dc knobs
  std::vector<std::string> modes;
  std::vector<std::string> systems;
};

bool failed = false;

// Runs `threads` workers on `run` for `ms`; prints the result line.
Outcome Measure(KvStore* store, WorkloadRun* run, const std::string& mode, int threads,
                uint64_t ms, int round, uint64_t budget, Monitor* monitor) {
  std::vector<OpTally> tallies(static_cast<size_t>(threads));
  std::vector<std::atomic<uint64_t>> counters(static_cast<size_t>(threads));
  LatencySet latencies(threads);
  const bool ingest = run->spec().mix == Mix::kIngest;
  if (ingest) {
    monitor->SetIntervals(&counters, [&](uint64_t ops, double seconds, int second) {
      ResultLine line(kBench, run->spec().name, store->name(), threads, ops, seconds);
      line.SetString("mode", mode).SetString("phase", "interval").Set("second", second)
          .Set("round", round).Set("data_bytes", run->DataBytes()).Set("budget_bytes",
                                                                        uint64_t{budget});
      return line;
    });
  }
  std::atomic<bool> stop{false};
  const double cpu0 = ProcessCpuSeconds();
  Stopwatch sw;
  std::thread timer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    stop.store(true);
  });
  RunThreads(threads, [&](int t) {
    Random64 rng(0xdcbe00 + static_cast<uint64_t>(t) * 7919 + static_cast<uint64_t>(round));
    OpTally* tally = &tallies[static_cast<size_t>(t)];
    Histogram* h = latencies.ForThread(t);
    std::atomic<uint64_t>& counter = counters[static_cast<size_t>(t)];
    // At least one operation, even on a thread scheduled late.
    do {
      run->Step(store, t, &rng, h, tally);
      counter.store(tally->ops, std::memory_order_relaxed);
    } while (!stop.load(std::memory_order_relaxed) && tally->errors == 0);
  });
  const double seconds = sw.Seconds();
  timer.join();
  if (ingest) monitor->SetIntervals(nullptr, nullptr);
  const double cpu = ProcessCpuSeconds() - cpu0;
  OpTally sum;
  for (const OpTally& t : tallies) {
    sum.ops += t.ops;
    sum.reads += t.reads;
    sum.writes += t.writes;
    sum.scans += t.scans;
    sum.scan_items += t.scan_items;
    sum.misses += t.misses;
    sum.errors += t.errors;
    sum.sum_sq_ns += t.sum_sq_ns;
    if (sum.first_error.empty()) sum.first_error = t.first_error;
    for (const OpTally::SlowOp& op : t.slowest) sum.NoteSlow(op.ns, op.phases);
  }
  const Histogram::Snapshot lat = latencies.Merged();
  const double n = static_cast<double>(std::max<uint64_t>(lat.count, 1));
  const double mean = static_cast<double>(lat.sum) / n;
  const double var = std::max(0.0, sum.sum_sq_ns / n - mean * mean);
  Outcome out;
  out.ops = sum.ops;
  out.seconds = seconds;
  out.ops_per_s = Ratio(static_cast<double>(sum.ops), seconds);
  out.max_us = static_cast<double>(lat.max) / 1000.0;
  out.stddev_us = std::sqrt(var) / 1000.0;

  ResultLine line(kBench, run->spec().name, store->name(), threads, sum.ops, seconds);
  line.SetString("mode", mode).SetString("phase", "run").Set("round", round);
  line.SetLatenciesNs(lat);
  line.Set("stddev_us", out.stddev_us);
  // Where the slowest operations waited (dc: llama::OpPhase timings, inclusive;
  // the rest of an operation's time is its own work or the scheduler's).
  std::string slowest;
  for (const OpTally::SlowOp& op : sum.slowest) {
    if (!slowest.empty()) slowest += ' ';
    slowest += fmt::format("{}us[{}]", op.ns / 1000, op.phases);
  }
  line.SetString("slowest_ops", slowest);
  line.Set("cores", UsableCores())
      .Set("cpu_util", Ratio(cpu, seconds))
      .Set("budget_bytes", uint64_t{budget})
      .Set("data_bytes", run->DataBytes())
      .Set("records", static_cast<uint64_t>(run->records()) + run->fresh())
      .Set("reads", sum.reads)
      .Set("writes", sum.writes);
  if (sum.scans != 0) line.Set("scans", sum.scans).Set("scan_items", sum.scan_items);
  const uint64_t peak = monitor->peak();
  line.Set("heap_in_use_bytes", HeapBytesInUse()).Set("heap_resident_bytes", HeapBytesResident());
  line.Set("peak_rss_bytes", peak)
      .Set("peak_rss_over_budget", Ratio(static_cast<double>(peak), static_cast<double>(budget)) - 1);
  const uint64_t allowance = store->RssAllowance();
  line.Set("rss_allowance_bytes", allowance)
      .Set("peak_rss_over_budget_after_allowance",
           Ratio(static_cast<double>(peak > allowance ? peak - allowance : 0),
                 static_cast<double>(budget)) - 1);
  store->AddCounters(&line, run->DataBytes());
  if (sum.misses != 0 || sum.errors != 0) {
    line.Set("misses", sum.misses).Set("errors", sum.errors);
    Progress("{} {} {}: {} misses, {} errors ({})", store->name(), run->spec().name, mode,
             sum.misses, sum.errors, sum.first_error);
    // Berkeley DB without transactions may read a key that a concurrent put
    // is overwriting as absent (bench/README.md): reported, not fatal. The
    // DC must never miss.
    if (sum.errors != 0 || std::string_view(store->name()) == "dc") failed = true;
  }
  line.Print();
  return out;
}

// Opens system `system` fresh in `dir`, preloads, runs every thread count
// (ingest: a fresh store per thread count), and closes it.
std::vector<Outcome> RunSystem(const std::string& system, const WorkloadSpec& spec,
                               const std::string& mode, size_t records, size_t budget,
                               const BenchArgs& args, const Options& o, int round,
                               const std::string& dir) {
  std::vector<Outcome> outcomes;
  const bool ingest = spec.mix == Mix::kIngest;
  const size_t stores = ingest ? args.threads.size() : 1;
  for (size_t si = 0; si < stores; ++si) {
    const std::string store_dir = dir + "/" + system + std::to_string(si);
    CheckOk(Env::Posix()->CreateDirs(store_dir), "create store dir");
    PurgeHeap();
    const uint64_t baseline = ProcRssBytes();
    StoreConfig config = o.store;
    config.dir = store_dir;
    config.budget_bytes = budget;
    config.max_threads = args.MaxThreads();
    std::unique_ptr<KvStore> store =
        CheckOk(system == "dc" ? OpenDcStore(config) : OpenBdbStore(config), "open " + system);
    WorkloadRun run(spec, records);
    {
      Monitor monitor(baseline);
      if (records != 0) {
        const int lt = args.MaxThreads();
        Stopwatch sw;
        std::vector<Status> st(static_cast<size_t>(lt));
        RunThreads(lt, [&](int t) {
          st[static_cast<size_t>(t)] = run.Load(store.get(), t, records * static_cast<size_t>(t) / lt,
                                                records * static_cast<size_t>(t + 1) / lt);
        });
        for (Status& s : st) CheckOk(s, "load " + system);
        ResultLine line(kBench, spec.name, system, lt, records, sw.Seconds());
        line.SetString("mode", mode).SetString("phase", "load").Set("round", round)
            .Set("budget_bytes", uint64_t{budget}).Set("data_bytes", run.DataBytes())
            .Set("peak_rss_bytes", monitor.peak());
        store->AddCounters(&line, run.DataBytes());  // the preload's page loads, ...
        // What the allocator holds now (one store is open at a time): handed
        // out, and resident (with its fragmentation and freed pages).
        line.Set("heap_in_use_bytes", HeapBytesInUse()).Set("heap_resident_bytes", HeapBytesResident());
        line.Print();
      }
      const std::vector<int> threads =
          ingest ? std::vector<int>{args.threads[si]} : args.threads;
      for (int t : threads) {
        outcomes.push_back(Measure(store.get(), &run, mode, t, ingest ? o.ingest_ms : o.run_ms,
                                   round, budget, &monitor));
      }
    }
    CheckOk(store->Close(), "close " + system);
    store.reset();
    RemoveTree(store_dir);
  }
  return outcomes;
}

void PrintRatio(const WorkloadSpec& spec, const std::string& mode, int threads,
                const std::string& metric, const std::vector<double>& ratios, uint64_t ops,
                double seconds, double target) {
  ResultLine line(kBench, spec.name, "dc/bdb", threads, ops, seconds);
  const double median = Median(ratios);
  line.SetString("mode", mode).SetString("metric", metric).SetString("statistic", "median")
      .Set("rounds", static_cast<int>(ratios.size())).Set("ratio", median)
      .Set("ratio_min", *std::min_element(ratios.begin(), ratios.end()))
      .Set("ratio_max", *std::max_element(ratios.begin(), ratios.end()));
  if (target > 0) line.Set("target", target).Set("meets_target", median >= target ? 1 : 0);
  line.Print();
}

int Run(int argc, char** argv) {
  ProgramInfo info;
  info.name = kBench;
  info.description =
      "The DC (dc::Dc on the real file system, driven as the TC drives it) against\n"
      "Berkeley DB's B-tree (locking environment, no log) with the same keys, values,\n"
      "threads and memory, in memory and with the budget at half the data (storage).\n"
      "Ratio lines dc/bdb (medians over --rounds): throughput (target 3x with storage on\n"
      "synthetic and dedup) and worst-case latency (target 10x lower, synthetic, ingest).";
  info.default_threads = {1, 2};
  info.takes_rounds = true;
  info.groups = {{"synthetic", "8-byte keys and values, 5:1 reads:updates, 95% on the lowest 20%"},
                 {"dedup", "20-byte hash keys, 44-byte values, read then insert if absent"},
                 {"xbox", "~94-byte dotted keys, 1200-byte values, 7.5:1 gets:sets, Zipfian"},
                 {"ycsb_a", "YCSB A (50% read, 50% update, Zipfian), random and email keys"},
                 {"ycsb_c", "YCSB C (reads, Zipfian), random and email keys"},
                 {"ycsb_e", "YCSB E (95% scans of 1-100, 5% inserts), random and email keys"},
                 {"ingest", "random inserts of 16-byte keys, 100-byte values; per-second lines"}};
  info.settings = {
      {"scale_pct", "records per workload, percent of 16 MiB of keys and values each", 1, 10000,
       25},
      {"run_ms", "milliseconds per measured run (workload, mode, threads, system)", 10, 600000,
       1000},
      {"ingest_ms", "milliseconds per ingest run", 10, 3600000, 3000},
      {"ingest_budget_mb", "the ingest's budget in storage mode, MiB", 1, 65536, 16},
      {"mem_factor", "in-memory mode: budget = this x the data size", 2, 64, 8},
      {"lss_buffer_kb", "DC: LSS flush buffer size, KiB (at least 512: one record of the largest size must fit)", 512, 65536, 1024},
      {"lss_segment_mb", "DC: LSS segment size, MiB (a power of two)", 1, 1024, 16},
      {"esl_us", "DC: the ESL moves every this many microseconds", 10, 1000000, 1000},
      {"clean_bg", "DC: 1 cleans on LLAMA's own thread, 0 on the flushing thread", 0, 1, 1},
      {"heap_tuned", "1: the allocator set up as deuteron dc sets it (decay 1 s, purges over the budget)", 0, 1, 1},
      {"evict_nowait", "DC: 1 the evictor waits for writes only far over budget, 0 for every batch", 0, 1, 1},
      {"warm_sweeps", "DC: clock sweeps an inner page survives untouched (1: as a leaf)", 1, 127, 4},
      {"rssp_ms", "DC: an RSSP is proposed at least every this many milliseconds", 1, 600000,
       1000},
      {"rssp_log_mb", "DC: ... and once this many MiB of keys and values were put since", 1,
       65536, 16},
  };
  info.flags = {{"modes", "comma-separated: mem, storage", "mem,storage"},
                {"systems", "comma-separated: dc, bdb", "dc,bdb"}};
  ScratchDir scratch;
  BenchArgs args = ParseArgs(argc, argv, info, &scratch);
  Options o;
  llama::EnableOpPhaseTiming(true);  // the slowest_ops field
  o.scale = static_cast<double>(args.SettingValue("scale_pct")) / 100.0;
  o.run_ms = args.SettingValue("run_ms");
  o.ingest_ms = args.SettingValue("ingest_ms");
  o.ingest_budget = static_cast<size_t>(args.SettingValue("ingest_budget_mb")) << 20;
  o.mem_factor = args.SettingValue("mem_factor");
  o.store.lss_buffer_bytes = static_cast<size_t>(args.SettingValue("lss_buffer_kb")) << 10;
  o.store.lss_segment_bytes = static_cast<size_t>(args.SettingValue("lss_segment_mb")) << 20;
  o.store.esl_period_us = args.SettingValue("esl_us");
  o.store.clean_in_background = args.SettingValue("clean_bg") != 0;
  o.store.heap_purge = args.SettingValue("heap_tuned") != 0;
  if (o.store.heap_purge) {
    // As `deuteron dc` does (dc/dc.md, "The memory budget"): freed pages go
    // back to the OS after 1 s instead of 10, for both systems (one allocator).
    Status s = ConfigureHeapRetention(HeapRetention{});
    if (!s.ok() && s.code() != Code::kNotSupported) Progress("allocator settings: {}", s.ToString());
  }
  o.store.evict_without_waiting = args.SettingValue("evict_nowait") != 0;
  o.store.warm_page_sweeps = static_cast<uint8_t>(args.SettingValue("warm_sweeps"));
  o.store.rssp_period_ms = args.SettingValue("rssp_ms");
  o.store.rssp_log_bytes = args.SettingValue("rssp_log_mb") << 20;
  if (args.quick) {
    o.scale = std::min(o.scale, 0.05);
    o.run_ms = std::min<uint64_t>(o.run_ms, 300);
    o.ingest_ms = std::min<uint64_t>(o.ingest_ms, 1000);
    o.ingest_budget = std::min<size_t>(o.ingest_budget, size_t{4} << 20);
  }
  o.modes = SplitList(args.FlagValue("modes"));
  o.systems = SplitList(args.FlagValue("systems"));
  for (const std::string& m : o.modes) {
    if (m != "mem" && m != "storage") UsageExit(info, "--modes: mem or storage");
  }
  for (const std::string& s : o.systems) {
    if (s != "dc" && s != "bdb") UsageExit(info, "--systems: dc or bdb");
  }
  if (o.modes.empty() || o.systems.empty()) UsageExit(info, "--modes and --systems: not empty");

  for (const WorkloadSpec& spec : AllWorkloads()) {
    if (!args.Wants(spec.group)) continue;
    const size_t records =
        static_cast<size_t>(static_cast<double>(spec.records) * o.scale);
    for (const std::string& mode : o.modes) {
      // The data size: the preload's key and value bytes; the ingest's is
      // what it reaches, several times its storage budget.
      const uint64_t data = WorkloadRun(spec, records).DataBytes();
      size_t budget = 0;
      if (spec.mix == Mix::kIngest) {
        budget = mode == "storage" ? o.ingest_budget : o.ingest_budget * 32;
      } else {
        budget = mode == "storage" ? static_cast<size_t>(data / 2)
                                   : static_cast<size_t>(data * o.mem_factor);
      }
      // outcomes[system][round][threads index]
      std::map<std::string, std::vector<std::vector<Outcome>>> outcomes;
      for (int round = 1; round <= args.rounds; ++round) {
        std::vector<std::string> order = o.systems;
        if (round % 2 == 0) std::reverse(order.begin(), order.end());
        for (const std::string& system : order) {
          Progress("{} {} round {}: {} ({} records, budget {:.1f} MiB)", spec.name, mode, round,
                   system, records, static_cast<double>(budget) / kMiB);
          outcomes[system].push_back(RunSystem(system, spec, mode, records, budget, args, o,
                                               round, scratch.path()));
        }
      }
      if (outcomes.count("dc") == 0 || outcomes.count("bdb") == 0) continue;
      for (size_t ti = 0; ti < args.threads.size(); ++ti) {
        std::vector<double> tput, max_lat, sd_lat;
        uint64_t ops = 0;
        double seconds = 0;
        for (int r = 0; r < args.rounds; ++r) {
          const Outcome& d = outcomes["dc"][static_cast<size_t>(r)][ti];
          const Outcome& b = outcomes["bdb"][static_cast<size_t>(r)][ti];
          tput.push_back(Ratio(d.ops_per_s, b.ops_per_s));
          max_lat.push_back(Ratio(b.max_us, d.max_us));
          sd_lat.push_back(Ratio(b.stddev_us, d.stddev_us));
          ops += d.ops;
          seconds += d.seconds;
        }
        const bool storage = mode == "storage";
        const bool tput_target =
            storage && (spec.mix == Mix::kSynthetic || spec.mix == Mix::kDedup);
        const bool lat_target = spec.mix == Mix::kSynthetic || spec.mix == Mix::kIngest;
        const int threads = args.threads[ti];
        PrintRatio(spec, mode, threads, "ops_per_s", tput, ops, seconds,
                   tput_target ? kThroughputTarget : 0);
        PrintRatio(spec, mode, threads, "max_latency_lower", max_lat, ops, seconds,
                   lat_target ? kLatencyTarget : 0);
        PrintRatio(spec, mode, threads, "stddev_latency_lower", sd_lat, ops, seconds, 0);
      }
    }
  }
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace deuteron::bench

int main(int argc, char** argv) { return deuteron::bench::Run(argc, argv); }
