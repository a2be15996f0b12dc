// txn_bench: transactions of the TC (issue 29; bench/README.md, "txn_bench").
// Client threads run transactions of 4 operations on 100-byte values over a
// preloaded key space, each transaction begun, its operations run, then
// committed, in a loop, for --seconds per point. Per round, thread count
// (--threads), mix (--mix) and key distribution (--dist) one point; at each
// thread count, in the same round, the log alone (the log_bench `deuteron`
// system, bench/log_driver.h) commits one record holding 4 writes per
// commit: the same record a write-only transaction appends. Ratio line
// `txn/log` (write-only commits/s over the log's; target 0.5 at 64 clients).
//
// Modes (`system`; --only): `embedded` (tc::Database: TC and DC in this
// process, real files under the scratch directory), `log`, and (issue 30,
// bench/txn_bench_modes.h) `split` (the TC here, its DC a `deuteron dc`
// server on loopback) and `remote` (a `deuteron serve` through the client
// library), each with ratio lines against `embedded` measured in the same
// round.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bench/bench_util.h"
#include "bench/log_driver.h"
#include "bench/txn_bench_modes.h"
#include "bench/txn_system.h"
#include "bench/zipf.h"
#include "common/random.h"
#include "tc/commit_record.h"
#include "tc/database.h"

namespace deuteron::bench {
namespace {

constexpr const char* kBench = "txn_bench";
constexpr int kOpsPerTxn = 4;
constexpr size_t kValueSize = 100;
constexpr double kTarget = 0.5;  // txn/log commits/s, write-only, 64 clients
constexpr int kTargetThreads = 64;
constexpr uint64_t kReadPercent = 84;  // the Deuteronomy mix

// ------------------------------------------------------------------ workload

enum class Mix { kWrite, kDeuteronomy };
enum class Dist { kUniform, kZipf };

const char* MixName(Mix m) { return m == Mix::kWrite ? "write" : "deuteronomy"; }
const char* DistName(Dist d) { return d == Dist::kUniform ? "uniform" : "zipf"; }

// `n`'s last `width` decimal digits at `out`, zero-padded.
void PutDigits(uint64_t n, int width, char* out) {
  for (int i = width - 1; i >= 0; --i, n /= 10) out[i] = static_cast<char>('0' + n % 10);
}

// Keys are 16 bytes: "k" and 15 digits. (Made by hand, not with fmt: the
// clients' own work is charged to the system under test.)
std::string Key(uint64_t i) {
  std::string k(16, 'k');
  PutDigits(i, 15, k.data() + 1);
  return k;
}

// A 100-byte value naming its writer and write: "t" 3 digits "-" 16 digits
// "-", then filler.
std::string Value(int thread, uint64_t n) {
  std::string v(kValueSize, static_cast<char>('a' + n % 26));
  v[0] = 't';
  PutDigits(static_cast<uint64_t>(thread), 3, v.data() + 1);
  v[4] = '-';
  PutDigits(n, 16, v.data() + 5);
  v[21] = '-';
  return v;
}

// The commit record of a transaction of 4 upserts (what the log alone
// commits per commit, the same bytes a write-only transaction appends).
std::string FourWriteRecord(int thread, uint64_t n) {
  std::string keys[kOpsPerTxn];
  std::string values[kOpsPerTxn];
  std::vector<RecordOp> ops;
  for (int i = 0; i < kOpsPerTxn; ++i) {
    keys[i] = Key(n * kOpsPerTxn + static_cast<uint64_t>(i));
    values[i] = Value(thread, n);
    ops.push_back({RecordOpKind::kUpsert, Slice(keys[i]), Slice(values[i]), 0});
  }
  std::string payload;
  tc::EncodeCommitRecord(ops, &payload);
  return payload;
}

// ------------------------------------------------------------------ systems

// The TC's knobs, settable with --set NAME=VALUE.
std::vector<Setting> TxnSettings() {
  const tc::TxnOptions d = tc::DatabaseOptions{}.txn;  // the embedded store's
  return {{"coalesce_applies", "1: one committer applies the queued commits' batches at a time",
           0, 1, d.coalesce_applies ? 1u : 0u},
          {"lock_timeout_ms", "lock wait timeout", 1, 600000,
           static_cast<uint64_t>(d.lock_timeout.count())},
          {"dc_leaf_delta_threshold", "the DC's Bw-tree: consolidate a leaf past this many deltas",
           1, 64, dc::DcOptions{}.tree.leaf_delta_threshold},
          {"early_lock_release",
           "1: commits release their locks before durability (tc/txn.md); 0: at durability; "
           "2: each point twice on the same database, 0 (system embedded-noelr) then 1",
           0, 2, d.early_lock_release ? 1u : 0u}};
}

tc::TxnOptions TxnOptionsFrom(const BenchArgs& args) {
  tc::TxnOptions o = tc::DatabaseOptions{}.txn;
  o.coalesce_applies = args.SettingValue("coalesce_applies") != 0;
  o.lock_timeout = std::chrono::milliseconds(args.SettingValue("lock_timeout_ms"));
  o.early_lock_release = args.SettingValue("early_lock_release") != 0;
  return o;
}

// TC and DC in this process over one directory (tc::Database).
class EmbeddedSystem final : public TxnSystem {
 public:
  EmbeddedSystem(const std::string& dir, const wal::LogOptions& log, const tc::TxnOptions& txn,
                 const BenchArgs& args) {
    tc::DatabaseOptions o;
    o.log = log;
    o.txn = txn;
    o.dc.tree.leaf_delta_threshold = args.SettingValue("dc_leaf_delta_threshold");
    db_ = CheckOk(tc::Database::Open(dir, o), "open the embedded database");
  }
  ~EmbeddedSystem() override { CheckOk(db_->Close(), "close the embedded database"); }
  const char* name() const override { return "embedded"; }
  std::unique_ptr<BenchTxn> Begin() override {
    return std::make_unique<TcTxn>(db_->Begin());
  }
  void Report(const std::string& what) override {
    const tc::TxnStats s = db_->txn().stats();
    Progress("{}: {} commits, {} read-only, {} aborts, {} applies, {} esl sends, {} checkpoints, "
             "{} early lock releases, {} read-only durability waits",
             what, s.commits, s.read_only_commits, s.aborts, s.applies, s.esl_sends,
             s.checkpoints, s.early_releases, s.read_only_waits);
  }
  tc::Database& db() { return *db_; }

 private:
  std::unique_ptr<tc::Database> db_;
};

// Loads keys 0..n-1 (100-byte values) in transactions of `batch` writes on
// two threads, then checkpoints (the log truncates). Not timed.
void Preload(TxnSystem* sys, uint64_t n, const std::function<Status()>& checkpoint) {
  constexpr uint64_t kBatch = 2000;
  Stopwatch sw;
  std::atomic<uint64_t> next{0};
  RunThreads(2, [&](int t) {
    for (;;) {
      const uint64_t start = next.fetch_add(kBatch);
      if (start >= n) break;
      std::unique_ptr<BenchTxn> txn = sys->Begin();
      for (uint64_t k = start; k < std::min(n, start + kBatch); ++k) {
        CheckOk(txn->Put(Key(k), Value(t, k)), "preload put");
      }
      CheckOk(txn->Commit(), "preload commit");
    }
  });
  CheckOk(checkpoint(), "checkpoint after the preload");
  Progress("preloaded {} keys in {:.1f} s", n, sw.Seconds());
}

// ------------------------------------------------------------------ points

struct PointResult {
  uint64_t commits = 0;
  uint64_t read_only = 0;  // commits of transactions that only read
  uint64_t deadlock = 0, timed_out = 0, other = 0;
  double seconds = 0;
  double cpu_seconds = 0;
  uint64_t voluntary_switches = 0;  // the process's, over the point
  Histogram::Snapshot commit_latency;  // the Commit call, ns
  Histogram::Snapshot txn_latency;     // Begin to committed, ns
  double ops_per_s() const { return Ratio(static_cast<double>(commits), seconds); }
};

struct Workload {
  Mix mix;
  Dist dist;
  uint64_t keys;
};

// `threads` clients run transactions for `seconds`. An abort (Deadlock,
// TimedOut; Unavailable or Busy count as `other`) starts a new transaction
// with new keys; any other error ends the program.
PointResult RunPoint(TxnSystem* sys, const Workload& w, const ScrambledZipf* zipf, int threads,
                     double seconds, uint64_t seed) {
  LatencySet commit_lat(threads), txn_lat(threads);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> commits{0}, read_only{0}, deadlock{0}, timed_out{0}, other{0};
  const double cpu0 = ProcessCpuSeconds();
  const uint64_t vcsw0 = ProcessVoluntarySwitches();
  Stopwatch sw;
  std::thread timer([&] {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop.store(true);
  });
  RunThreads(threads, [&](int t) {
    Random64 rng(seed * 1000 + static_cast<uint64_t>(t));
    Histogram* ch = commit_lat.ForThread(t);
    Histogram* th = txn_lat.ForThread(t);
    uint64_t n = 0, c = 0, ro = 0, dl = 0, to = 0, ot = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const uint64_t t0 = NowNanos();
      std::unique_ptr<BenchTxn> txn = sys->Begin();
      Status s;
      bool wrote = false;
      for (int i = 0; i < kOpsPerTxn && s.ok(); ++i) {
        const uint64_t k = w.dist == Dist::kZipf ? zipf->Next(&rng) : rng.Uniform(w.keys);
        if (w.mix == Mix::kWrite || rng.Uniform(100) >= kReadPercent) {
          s = txn->Put(Key(k), Value(t, n++));
          wrote = true;
        } else {
          s = txn->Get(Key(k));
        }
      }
      if (s.ok()) {
        const uint64_t c0 = NowNanos();
        s = txn->Commit();
        const uint64_t c1 = NowNanos();
        if (s.ok()) {
          ch->Record(c1 - c0);
          th->Record(c1 - t0);
          ++c;
          if (!wrote) ++ro;
          continue;
        }
      }
      switch (s.code()) {
        case Code::kDeadlock: ++dl; break;
        case Code::kTimedOut: ++to; break;
        case Code::kUnavailable:
        case Code::kBusy: ++ot; break;
        default: CheckOk(s, "transaction");
      }
    }
    commits += c;
    read_only += ro;
    deadlock += dl;
    timed_out += to;
    other += ot;
  });
  PointResult r;
  r.seconds = sw.Seconds();
  r.cpu_seconds = ProcessCpuSeconds() - cpu0;
  r.voluntary_switches = ProcessVoluntarySwitches() - vcsw0;
  timer.join();
  r.commits = commits.load();
  r.read_only = read_only.load();
  r.deadlock = deadlock.load();
  r.timed_out = timed_out.load();
  r.other = other.load();
  r.commit_latency = commit_lat.Merged();
  r.txn_latency = txn_lat.Merged();
  return r;
}

std::string WorkloadName(const Workload& w) {
  return fmt::format("{}_{}", MixName(w.mix), DistName(w.dist));
}

void PrintPoint(const char* system, const Workload& w, int threads, int round,
                const PointResult& r) {
  ResultLine line(kBench, WorkloadName(w), system, threads, r.commits, r.seconds);
  const uint64_t aborts = r.deadlock + r.timed_out + r.other;
  line.SetString("mix", MixName(w.mix))
      .SetString("dist", DistName(w.dist))
      .Set("keys", w.keys)
      .Set("round", round)
      .Set("read_only_commits", r.read_only)
      .Set("aborts_deadlock", r.deadlock)
      .Set("aborts_timed_out", r.timed_out)
      .Set("aborts_other", r.other)
      .Set("abort_rate", Ratio(static_cast<double>(aborts), static_cast<double>(aborts + r.commits)))
      .Set("cpu_util", Ratio(r.cpu_seconds, r.seconds))
      .Set("cpu_us_per_commit", Ratio(r.cpu_seconds * 1e6, static_cast<double>(r.commits)))
      .Set("vcsw_per_commit",
           Ratio(static_cast<double>(r.voluntary_switches), static_cast<double>(r.commits)))
      .SetLatenciesNs(r.commit_latency);
  if (r.txn_latency.count != 0) {
    line.Set("txn_p50_us", static_cast<double>(r.txn_latency.Percentile(50)) / 1000.0)
        .Set("txn_p99_us", static_cast<double>(r.txn_latency.Percentile(99)) / 1000.0);
  }
  line.Print();
  Progress("{} {} threads={} round {}: {:.0f} commits/s, aborts {} deadlock {} timed out {} "
           "other, commit p50 {:.1f} us p99 {:.1f} us",
           system, WorkloadName(w), threads, round, r.ops_per_s(), r.deadlock, r.timed_out,
           r.other, static_cast<double>(r.commit_latency.Percentile(50)) / 1000.0,
           static_cast<double>(r.commit_latency.Percentile(99)) / 1000.0);
}

// ------------------------------------------------------------------ ratios

struct RatioSeries {
  std::vector<double> ratios;
  uint64_t ops = 0;
  double seconds = 0;
};

void PrintRatio(const std::string& workload, int threads, int round, double ratio, uint64_t ops,
                double seconds, const std::vector<double>* rounds) {
  ResultLine line(kBench, workload, "txn/log", threads, ops, seconds);
  if (rounds != nullptr) {
    std::vector<double> v = *rounds;
    std::sort(v.begin(), v.end());
    line.SetString("statistic", "median")
        .Set("rounds", uint64_t{v.size()})
        .Set("ratio", ratio)
        .Set("ratio_min", v.front())
        .Set("ratio_max", v.back());
  } else {
    line.Set("round", round).Set("ratio", ratio);
  }
  const bool has_target = threads == kTargetThreads;
  if (has_target) line.Set("target", kTarget).SetBool("meets_target", ratio >= kTarget);
  line.Print();
  Progress("txn/log {} threads={} {}: {:.2f}{}", workload, threads,
           rounds != nullptr ? "median" : fmt::format("round {}", round), ratio,
           has_target ? fmt::format(" (target {:.1f}: {})", kTarget,
                                    ratio >= kTarget ? "met" : "MISSED")
                      : "");
}

// ------------------------------------------------------------------ main

template <typename T>
std::vector<T> ParseChoices(const ProgramInfo& info, const BenchArgs& args, const char* flag,
                            const std::vector<std::pair<std::string, T>>& names) {
  std::vector<T> out;
  for (const std::string& item : SplitList(args.FlagValue(flag))) {
    bool known = false;
    for (const auto& [name, value] : names) {
      if (item == name) {
        out.push_back(value);
        known = true;
      }
    }
    if (!known) UsageExit(info, fmt::format("unknown --{} value '{}'", flag, item));
  }
  if (out.empty()) UsageExit(info, fmt::format("--{} needs at least one value", flag));
  return out;
}

int Main(int argc, char** argv) {
  ProgramInfo info;
  info.name = kBench;
  info.description =
      "Transactions of 4 operations (100-byte values) over the embedded store (TC + DC in\n"
      "process, real files), client threads x mixes (write-only, the Deuteronomy mix of 84%\n"
      "reads) x key distributions (uniform, Zipfian 0.99): commits/s, aborts by cause,\n"
      "commit latency. At each thread count, in the same run, the log alone committing\n"
      "one 4-write record per commit (log_bench's deuteron system); ratio line txn/log\n"
      "(write-only; target 0.5 at 64 clients). split and remote: the same transactions\n"
      "through a deuteron dc / deuteron serve process on loopback, ratio lines\n"
      "split/embedded (target 0.5, deuteronomy_zipf, 16 clients) and remote/embedded.\n"
      "See bench/README.md.";
  info.default_threads = {1, 4, 16, 64};
  info.takes_rounds = true;
  info.settings = LogSettings();
  for (Setting& st : TxnSettings()) info.settings.push_back(std::move(st));
  for (Setting& st : ModeSettings()) info.settings.push_back(std::move(st));
  info.flags = {{"keys", "keys preloaded (not timed) and used (--quick: 100000)", "1000000"},
                {"seconds", "seconds per point (--quick: 0.5)", "2"},
                {"mix", "comma-separated: write (write-only), deuteronomy (84% reads)",
                 "write,deuteronomy"},
                {"dist", "comma-separated: uniform, zipf", "uniform,zipf"},
                {"deuteron", "the deuteron program for split and remote (default: next to this one)",
                 ""}};
  info.groups = {{"embedded", "transactions over tc::Database (TC and DC in this process)"},
                 {"log", "the log alone, one 4-write record per commit"},
                 {"split", "a TC here whose DC is a deuteron dc process on loopback"},
                 {"remote", "a deuteron serve process on loopback, through the client library"}};
  ScratchDir scratch;
  const BenchArgs args = ParseArgs(argc, argv, info, &scratch);

  uint64_t keys = 0;
  {
    const std::string& k = args.FlagValue("keys");
    char* end = nullptr;
    keys = std::strtoull(k.c_str(), &end, 10);
    if (k.empty() || *end != '\0' || keys < 2 || keys > 100'000'000) {
      UsageExit(info, fmt::format("bad --keys '{}' (2-100000000)", k));
    }
    if (args.quick && k == "1000000") keys = 100'000;
  }
  double seconds = 0;
  {
    const std::string& s = args.FlagValue("seconds");
    char* end = nullptr;
    seconds = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !(seconds > 0 && seconds <= 3600)) {
      UsageExit(info, fmt::format("bad --seconds '{}' (0-3600)", s));
    }
    if (args.quick && s == "2") seconds = 0.5;
  }
  const std::vector<Mix> mixes =
      ParseChoices<Mix>(info, args, "mix", {{"write", Mix::kWrite}, {"deuteronomy", Mix::kDeuteronomy}});
  const std::vector<Dist> dists =
      ParseChoices<Dist>(info, args, "dist", {{"uniform", Dist::kUniform}, {"zipf", Dist::kZipf}});
  const wal::LogOptions log_options = BenchLogOptions(args);
  Progress("txn_bench{}: {} keys, {} s per point, {} round(s), scratch {}",
           args.quick ? " --quick" : "", keys, seconds, args.rounds, scratch.path());

  std::unique_ptr<ScrambledZipf> zipf;
  if (std::find(dists.begin(), dists.end(), Dist::kZipf) != dists.end()) {
    zipf = std::make_unique<ScrambledZipf>(keys);
  }
  std::unique_ptr<EmbeddedSystem> embedded;
  if (args.Wants("embedded")) {
    // A fresh store each run, also under a --dir that an earlier run used.
    RemoveTree(JoinPath(scratch.path(), "embedded"));
    embedded = std::make_unique<EmbeddedSystem>(JoinPath(scratch.path(), "embedded"), log_options,
                                                TxnOptionsFrom(args), args);
    Preload(embedded.get(), keys, [&] { return embedded->db().Checkpoint(); });
  }
  std::vector<std::unique_ptr<ModeSystem>> modes =
      StartModes(args, scratch.path(), log_options, TxnOptionsFrom(args));
  for (std::unique_ptr<ModeSystem>& m : modes) {
    Progress("{}: preloading", m->name());
    Preload(m.get(), keys, [&] { return m->Checkpoint(); });
  }

  // (workload, threads) -> the rounds' txn/log ratios.
  std::map<std::tuple<std::string, int>, RatioSeries> series;
  ModeRatios mode_ratios(kBench);
  uint64_t seed = 1;
  for (int round = 1; round <= args.rounds; ++round) {
    for (int threads : args.threads) {
      CommitCell log_cell;
      bool have_log = false;
      auto run_log = [&] {
        if (!args.Wants("log")) return;
        const std::string dir = JoinPath(scratch.path(), fmt::format("log-{}-{}", round, threads));
        double cpu_seconds = 0;
        uint64_t vcsw = 0;
        {
          LogSystem log(dir, log_options);
          const double cpu0 = ProcessCpuSeconds();
          const uint64_t vcsw0 = ProcessVoluntarySwitches();
          log_cell = RunCommitCell(threads, seconds, FourWriteRecord,
                                   [&](int, const std::string& b) { return log.Commit(b); });
          cpu_seconds = ProcessCpuSeconds() - cpu0;
          vcsw = ProcessVoluntarySwitches() - vcsw0;
          log.Report(fmt::format("log threads={} round {}", threads, round));
        }
        RemoveTree(dir);
        have_log = true;
        ResultLine line(kBench, "commit4", "log", threads, log_cell.ops, log_cell.seconds);
        line.Set("record_bytes", uint64_t{FourWriteRecord(0, 0).size()})
            .Set("round", round)
            .Set("cpu_util", Ratio(cpu_seconds, log_cell.seconds))
            .Set("cpu_us_per_commit", Ratio(cpu_seconds * 1e6, static_cast<double>(log_cell.ops)))
            .Set("vcsw_per_commit",
                 Ratio(static_cast<double>(vcsw), static_cast<double>(log_cell.ops)))
            .SetLatenciesNs(log_cell.latency);
        line.Print();
        Progress("log threads={} round {}: {:.0f} commits/s, p50 {:.1f} us", threads, round,
                 log_cell.ops_per_s(), log_cell.p50_us());
      };
      std::map<std::string, PointResult> points;
      std::map<std::string, std::map<std::string, PointResult>> mode_points;  // system, workload
      auto run_modes = [&] {
        for (std::unique_ptr<ModeSystem>& m : modes) {
          for (Mix mix : mixes) {
            for (Dist dist : dists) {
              const Workload w{mix, dist, keys};
              const PointResult r = RunPoint(m.get(), w, zipf.get(), threads, seconds, seed++);
              PrintPoint(m->name(), w, threads, round, r);
              mode_points[m->name()][WorkloadName(w)] = r;
            }
          }
          m->Report(fmt::format("{} threads={} round {}", m->name(), threads, round));
        }
      };
      auto run_txn = [&] {
        if (embedded == nullptr) return;
        for (Mix mix : mixes) {
          for (Dist dist : dists) {
            const Workload w{mix, dist, keys};
            if (args.SettingValue("early_lock_release") == 2) {
              // Before and after in one run: locks held to durability, then
              // released early, on the same database and thread count.
              embedded->db().txn().SetEarlyLockRelease(false);
              const PointResult off = RunPoint(embedded.get(), w, zipf.get(), threads, seconds, seed++);
              PrintPoint("embedded-noelr", w, threads, round, off);
              points[WorkloadName(w) + "-noelr"] = off;
              embedded->db().txn().SetEarlyLockRelease(true);
            }
            const PointResult r = RunPoint(embedded.get(), w, zipf.get(), threads, seconds, seed++);
            PrintPoint(embedded->name(), w, threads, round, r);
            points[WorkloadName(w)] = r;
          }
        }
        embedded->Report(fmt::format("embedded threads={} round {}", threads, round));
      };
      // Alternate the order, so that a drift in the disk's speed falls on both.
      if (round % 2 == 1) {
        run_log();
        run_txn();
        run_modes();
      } else {
        run_modes();
        run_txn();
        run_log();
      }
      for (const auto& [mode, by_workload] : mode_points) {
        for (const auto& [name, r] : by_workload) {
          const auto e = points.find(name);
          if (e == points.end()) continue;
          mode_ratios.Add(mode, name, threads, round, r.commits, r.seconds, r.ops_per_s(),
                          e->second.ops_per_s());
        }
      }
      if (!have_log) continue;
      for (const auto& [name, r] : points) {
        if (name.rfind("write_", 0) != 0) continue;  // write-only points only
        const double ratio = Ratio(r.ops_per_s(), log_cell.ops_per_s());
        PrintRatio(name, threads, round, ratio, r.commits, r.seconds, nullptr);
        RatioSeries& s = series[{name, threads}];
        s.ratios.push_back(ratio);
        s.ops += r.commits;
        s.seconds += r.seconds;
      }
    }
  }
  if (args.rounds > 1) {
    for (const auto& [k, s] : series) {
      PrintRatio(std::get<0>(k), std::get<1>(k), 0, Median(s.ratios), s.ops, s.seconds,
                 &s.ratios);
    }
  }
  if (args.rounds > 1) mode_ratios.PrintMedians();
  modes.clear();
  embedded.reset();
  RemoveTree(JoinPath(scratch.path(), "embedded"));
  Progress("done");
  return 0;
}

}  // namespace
}  // namespace deuteron::bench

int main(int argc, char** argv) { return deuteron::bench::Main(argc, argv); }
