// dc_server_load: a DC server under steady, well-behaved load (issue 38's
// last row). Starts a `deuteron dc` process (--server-bin, default the
// deuteron program beside this one) on a fresh directory with a memory
// budget, then runs 32 clients (--threads) for --set seconds=N, each its own
// RemoteDataComponent connection, each call drawn from a mix: 50% get, 20%
// multiGet of 16 keys, 20% apply of 16 upserts (256-byte values), 10% scan
// of up to 50 items, over 100,000 keys. Prints one JSON line per interval
// (workload "interval": calls/s and resident memory) and a final one
// (workload "mixed"): calls/s, p50/p99/max latency, errors, and the server process's resident memory
// (VmRSS sampled, VmHWM at the end) against its DC budget. Running it
// against another build (--server-bin) gives a before/after comparison on
// the same machine.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "common/random.h"
#include "protocol/remote_dc.h"

namespace deuteron::bench {
namespace {

constexpr char kBench[] = "dc_server_load";
constexpr uint64_t kKeys = 100'000;
constexpr size_t kValueSize = 256;

std::string Key(uint64_t k) { return fmt::format("k{:08}", k); }

// `field` (VmRSS, VmHWM) of process `pid`, in bytes; 0 when unknown.
uint64_t ProcStatusBytes(pid_t pid, const char* field) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string line;
  const std::string prefix = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return std::strtoull(line.c_str() + prefix.size(), nullptr, 10) * 1024;
  }
  return 0;
}

struct ServerProcess {
  pid_t pid = -1;
  uint16_t port = 0;
};

// Starts `bin dc --dir dir --listen 127.0.0.1:0 --memory-budget budget` and
// reads its port from the "serving ... on HOST:PORT" line.
ServerProcess StartServer(const std::string& bin, const std::string& dir, uint64_t budget) {
  int fds[2];
  if (pipe(fds) != 0) CheckOk(Status::IOError("pipe"), "start server");
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    const std::string b = std::to_string(budget);
    execl(bin.c_str(), bin.c_str(), "dc", "--dir", dir.c_str(), "--listen", "127.0.0.1:0",
          "--memory-budget", b.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  ServerProcess p;
  p.pid = pid;
  std::string out;
  char c;
  while (read(fds[0], &c, 1) == 1) {
    if (c != '\n') {
      out += c;
      continue;
    }
    const size_t on = out.find(" on 127.0.0.1:");
    if (on != std::string::npos) {
      p.port = static_cast<uint16_t>(std::atoi(out.c_str() + on + 14));
      break;
    }
    out.clear();
  }
  // Keep draining its stdout so that it never blocks on a full pipe.
  std::thread([fd = fds[0]] {
    char buf[4096];
    while (read(fd, buf, sizeof(buf)) > 0) {
    }
    close(fd);
  }).detach();
  if (p.port == 0) CheckOk(Status::IOError("the server printed no port"), "start server");
  return p;
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
  };
  ScratchDir scratch;
  BenchArgs args = ParseArgs(argc, argv, info, &scratch);
  const uint64_t seconds = args.quick ? 10 : args.SettingValue("seconds");
  const uint64_t budget = args.SettingValue("budget");
  const uint64_t interval_s = args.SettingValue("interval");
  const int threads = args.MaxThreads();

  std::string bin;
  if (const char* b = std::getenv("DEUTERON_SERVER_BIN"); b != nullptr) {
    bin = b;
  } else {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    self[n > 0 ? n : 0] = '\0';
    bin = std::string(self);
    bin = bin.substr(0, bin.rfind('/') + 1) + "deuteron";
  }
  const ServerProcess server = StartServer(bin, scratch.path() + "/store", budget);
  Progress("server {} pid {} port {}: {} clients for {} s", bin, server.pid, server.port, threads,
           seconds);

  Totals totals;
  LatencySet all(threads);
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  Stopwatch watch;
  for (int i = 0; i < threads; ++i) {
    clients.emplace_back(Client, i, server.port, &totals, all.ForThread(i), &stop);
  }
  uint64_t rss_peak_sampled = 0;
  uint64_t last_calls = 0;
  double last_t = 0;
  while (watch.Seconds() < static_cast<double>(seconds)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    rss_peak_sampled = std::max(rss_peak_sampled, ProcStatusBytes(server.pid, "VmRSS"));
    const double t = watch.Seconds();
    if (t - last_t >= static_cast<double>(interval_s)) {
      const uint64_t calls = totals.calls.load();
      ResultLine line(kBench, "interval", "dc_server", threads, calls - last_calls, t - last_t);
      line.Set("at_s", t).Set("rss_bytes", ProcStatusBytes(server.pid, "VmRSS"));
      line.Print();
      last_calls = calls;
      last_t = t;
    }
  }
  stop.store(true);
  for (auto& c : clients) c.join();
  const double elapsed = watch.Seconds();
  const uint64_t hwm = ProcStatusBytes(server.pid, "VmHWM");
  ResultLine line(kBench, "mixed", "dc_server", threads, totals.calls.load(), elapsed);
  line.SetLatenciesNs(all.Merged())
      .Set("errors", totals.errors.load())
      .Set("budget_bytes", budget)
      .Set("peak_rss_bytes", std::max(hwm, rss_peak_sampled))
      .Set("peak_rss_over_budget", Ratio(static_cast<double>(std::max(hwm, rss_peak_sampled)),
                                         static_cast<double>(budget)))
      .SetString("server_bin", bin);
  line.Print();
  kill(server.pid, SIGTERM);
  int status = 0;
  waitpid(server.pid, &status, 0);
  return totals.errors.load() == 0 ? 0 : 1;
}

}  // namespace
}  // namespace deuteron::bench

int main(int argc, char** argv) { return deuteron::bench::Run(argc, argv); }
