// dc_server_load: a DC server under steady, well-behaved load (issue 38's
// last row). Starts a `deuteron dc` process (--server-bin, default the
// deuteron program beside this one) on a fresh directory with a memory
// budget, then runs 32 clients (--threads) for --set seconds=N, each its own
// RemoteDataComponent connection, each call drawn from a mix: 50% get, 20%
// multiGet of 16 keys, 20% apply of 16 upserts (256-byte values), 10% scan
// of up to 50 items, over 100,000 keys. Prints one JSON line per interval
// (workload "interval": calls/s and resident memory) and a final one
// (workload "mixed"): calls/s, p50/p99/max latency, errors. Every line
// carries the server process's peak resident memory so far (VmHWM of the
// child, `peak_rss_bytes`) beside its request memory limit and the process
// bound (`rss_bound_bytes`, protocol/protocol.md "The process bound": the
// resident memory once serving + 1.1 x the DC budget + 8 MiB + the request
// limit + per running call three frames and 64 values of 64 KiB); the
// program exits 1 when a line is over the bound or a call failed. Running
// it against another build (DEUTERON_SERVER_BIN; scripts/server_load_pair)
// gives a before/after comparison on the same machine;
// --set request_limit / max_frame are passed to the server only when they
// differ from its defaults, so a server older than those flags runs too.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "common/random.h"
#include "protocol/remote_dc.h"
#include "tc/cli/server_process.h"

namespace deuteron::bench {
namespace {

constexpr char kBench[] = "dc_server_load";
constexpr uint64_t kKeys = 100'000;
constexpr size_t kValueSize = 256;

std::string Key(uint64_t k) { return fmt::format("k{:08}", k); }

// CPU seconds (user + system) process `pid` has used; 0 when unknown.
double ProcCpuSeconds(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  std::getline(in, stat);
  const size_t close = stat.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string skip;
  for (int i = 3; i < 14; ++i) fields >> skip;  // state .. cmajflt (fields 3-13)
  uint64_t utime = 0, stime = 0;
  fields >> utime >> stime;
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The server's defaults (dc::DcServerOptions, deuteron dc --help).
constexpr uint64_t kDefaultRequestLimit = uint64_t{128} << 20;
constexpr uint64_t kDefaultMaxFrame = uint64_t{64} << 20;
constexpr uint64_t kServerIoThreads = 4;      // deuteron dc --io-threads default
constexpr uint64_t kServerWorkerThreads = 4;  // server::ServerOptions::worker_threads

// The process bound of protocol/protocol.md ("The process bound").
uint64_t RssBound(uint64_t start_rss, uint64_t budget, uint64_t request_limit, uint64_t max_frame) {
  constexpr uint64_t kSlice = 64 * (uint64_t{64} << 10);  // 64 values of the tree's largest
  return start_rss + budget + budget / 10 + (uint64_t{8} << 20) + request_limit +
         (kServerIoThreads + kServerWorkerThreads) * (3 * max_frame + kSlice) +
         kServerIoThreads * 64 * 1024;
}

// Starts `bin dc --dir dir --listen 127.0.0.1:0 --memory-budget budget`
// (with --request-memory-limit and --max-frame-size when not the defaults);
// its port is read from its "serving ... on HOST:PORT" line.
std::unique_ptr<cli::ServerProcess> StartServer(const std::string& bin, const std::string& dir, uint64_t budget,
                                                uint64_t request_limit, uint64_t max_frame) {
  std::vector<std::string> args = {"dc", "--dir", dir, "--listen", "127.0.0.1:0",
                                   "--memory-budget", std::to_string(budget)};
  if (request_limit != kDefaultRequestLimit) {
    args.push_back("--request-memory-limit");
    args.push_back(std::to_string(request_limit));
  }
  if (max_frame != kDefaultMaxFrame) {
    args.push_back("--max-frame-size");
    args.push_back(std::to_string(max_frame));
  }
  return CheckOk(cli::ServerProcess::StartServing(bin, args, std::chrono::seconds(120)), "start server");
}

struct Totals {
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> next_lsn{1};
};

void Client(int id, uint16_t port, Totals* totals, Histogram* all, std::atomic<bool>* stop) {
  protocol::RemoteOptions o;
  o.port = port;
  o.max_connections = 1;
  auto dc = CheckOk(protocol::RemoteDataComponent::Connect(o), "connect");
  Random64 rnd(static_cast<uint64_t>(id) * 7919 + 1);
  const std::string value(kValueSize, static_cast<char>('a' + id % 26));
  while (!stop->load(std::memory_order_relaxed)) {
    const uint64_t dice = rnd.Uniform(100);
    const uint64_t start = NowNanos();
    Status s;
    if (dice < 50) {
      s = dc->Get(Slice(Key(rnd.Uniform(kKeys)))).status();
    } else if (dice < 70) {
      std::vector<std::string> keys;
      for (int i = 0; i < 16; ++i) keys.push_back(Key(rnd.Uniform(kKeys)));
      std::vector<Slice> slices(keys.begin(), keys.end());
      s = dc->MultiGet(slices).status();
    } else if (dice < 90) {
      std::vector<std::string> keys;
      for (int i = 0; i < 16; ++i) keys.push_back(Key(rnd.Uniform(kKeys)));
      const uint64_t first = totals->next_lsn.fetch_add(16);
      std::vector<RecordOp> ops;
      for (int i = 0; i < 16; ++i) {
        ops.push_back(RecordOp{RecordOpKind::kUpsert, Slice(keys[i]), Slice(value), first + i});
      }
      s = dc->Apply(ops, first + 15, 0).status();
    } else {
      ScanRequest r;
      r.lower = Key(rnd.Uniform(kKeys));
      r.limit = 50;
      s = dc->Scan(r).status();
    }
    const uint64_t took = NowNanos() - start;
    all->Record(took);
    totals->calls.fetch_add(1, std::memory_order_relaxed);
    if (!s.ok()) totals->errors.fetch_add(1, std::memory_order_relaxed);
  }
}

int Run(int argc, char** argv) {
  ProgramInfo info;
  info.name = kBench;
  info.description =
      "32 well-behaved clients with a mixed load against a `deuteron dc` process: calls/s,\n"
      "p50/p99/max, and the server's resident memory against its DC budget, as JSON lines.";
  info.default_threads = {32};
  info.settings = {
      {"seconds", "how long the load runs (--quick: 10)", 1, 86400, 60},
      {"budget", "the DC's --memory-budget in bytes", 0, uint64_t{1} << 40, 32 << 20},
      {"interval", "seconds between interval lines", 1, 3600, 10},
      {"request_limit", "the server's --request-memory-limit in bytes", 64, uint64_t{1} << 40,
       kDefaultRequestLimit},
      {"max_frame", "the server's --max-frame-size in bytes", 64, uint32_t{0xffffffff},
       kDefaultMaxFrame},
  };
  ScratchDir scratch;
  BenchArgs args = ParseArgs(argc, argv, info, &scratch);
  const uint64_t seconds = args.quick ? 10 : args.SettingValue("seconds");
  const uint64_t budget = args.SettingValue("budget");
  const uint64_t interval_s = args.SettingValue("interval");
  const uint64_t request_limit = args.SettingValue("request_limit");
  const uint64_t max_frame = args.SettingValue("max_frame");
  const int threads = args.MaxThreads();

  std::string bin;
  if (const char* b = std::getenv("DEUTERON_SERVER_BIN"); b != nullptr) {
    bin = b;
  } else {
    bin = CheckOk(FindDeuteron(""), "find deuteron");
  }
  const std::unique_ptr<cli::ServerProcess> server =
      StartServer(bin, scratch.path() + "/store", budget, request_limit, max_frame);
  const uint64_t start_rss = server->RssBytes();  // once it printed its serving line
  const uint64_t bound = RssBound(start_rss, budget, request_limit, max_frame);
  bool over_bound = false;
  // Every line: the server's peak resident memory so far against the bound.
  auto set_memory = [&](ResultLine& line, uint64_t peak) {
    line.Set("budget_bytes", budget)
        .Set("request_memory_limit_bytes", request_limit)
        .Set("peak_rss_bytes", peak)
        .Set("rss_bound_bytes", bound)
        .Set("start_rss_bytes", start_rss)
        .SetBool("within_bound", peak <= bound);
    if (peak > bound) over_bound = true;
  };
  Progress("server {} pid {} port {}: {} clients for {} s", bin, server->pid(), server->port(), threads,
           seconds);

  Totals totals;
  LatencySet all(threads);
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  const double cpu_start = ProcCpuSeconds(server->pid());
  Stopwatch watch;
  for (int i = 0; i < threads; ++i) {
    clients.emplace_back(Client, i, server->port(), &totals, all.ForThread(i), &stop);
  }
  uint64_t rss_peak_sampled = 0;
  uint64_t last_calls = 0;
  double last_t = 0;
  while (watch.Seconds() < static_cast<double>(seconds)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    rss_peak_sampled = std::max(rss_peak_sampled, server->RssBytes());
    const double t = watch.Seconds();
    if (t - last_t >= static_cast<double>(interval_s)) {
      const uint64_t calls = totals.calls.load();
      ResultLine line(kBench, "interval", "dc_server", threads, calls - last_calls, t - last_t);
      line.Set("at_s", t).Set("rss_bytes", server->RssBytes());
      set_memory(line, std::max(server->PeakRssBytes(), rss_peak_sampled));
      line.Print();
      last_calls = calls;
      last_t = t;
    }
  }
  stop.store(true);
  for (auto& c : clients) c.join();
  const double elapsed = watch.Seconds();
  const uint64_t peak = std::max(server->PeakRssBytes(), rss_peak_sampled);
  ResultLine line(kBench, "mixed", "dc_server", threads, totals.calls.load(), elapsed);
  line.SetLatenciesNs(all.Merged()).Set("errors", totals.errors.load());
  set_memory(line, peak);
  // The server's CPU per call: what the machine's load does not change much.
  const double server_cpu = ProcCpuSeconds(server->pid()) - cpu_start;
  line.Set("peak_rss_over_budget", Ratio(static_cast<double>(peak), static_cast<double>(budget)))
      .Set("server_cpu_s", server_cpu)
      .Set("server_cpu_us_per_call",
           Ratio(server_cpu * 1e6, static_cast<double>(totals.calls.load())))
      .SetString("server_bin", bin);
  line.Print();
  server->Stop(SIGTERM);
  if (over_bound) Progress("the server's peak resident memory passed the bound {}", bound);
  return totals.errors.load() == 0 && !over_bound ? 0 : 1;
}

}  // namespace
}  // namespace deuteron::bench

int main(int argc, char** argv) { return deuteron::bench::Run(argc, argv); }
