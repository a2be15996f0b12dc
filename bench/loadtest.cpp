// loadtest: a split deployment under a sustained load (issue 30; run by
// scripts/loadtest; bench/README.md, "loadtest"). Starts a `deuteron dc`
// (with --dc-budget as its memory budget) and a `deuteron tc` against it (with
// --tc-budget as its memory budget, tc/server/tc_server.md), each
// a process on loopback in a fresh directory under the scratch directory, then
// runs --threads clients (default 64) through the client library for
// --seconds (default 600): transactions of 4 operations on 100-byte values
// over --keys keys (none preloaded) drawn from --dist (zipf: YCSB's scrambled
// Zipfian, theta 0.99, bench/zipf.h; or uniform), each operation a get with
// probability 0.84, else a put (the Deuteronomy mix). A transaction aborted by a lock
// (Deadlock, TimedOut) or by an unreachable server before its commit
// (Unavailable) is retried, same operations, with jittered backoff; a commit
// that fails Unavailable is in doubt and counted, not retried.
//
// Output: every --interval seconds one JSON line on stdout (`system`
// `split`, workload `interval`) with the commits of that interval, commits/s,
// the errors of each type so far and both servers' resident memory; at the
// end a `summary` line with the totals, errors by type, and each server's
// peak resident memory (VmHWM) against its budget: the DC's --dc-budget and
// the TC's --tc-budget, each passed to its server as its --memory-budget.
// Exit status 0 only when every error was a retryable abort and both peaks
// are within 1.1x their budgets.
#include <signal.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>

#include "bench/bench_util.h"
#include "bench/zipf.h"
#include "common/env.h"
#include "common/random.h"
#include "common/status.h"
#include "tc/cli/server_process.h"
#include "tc/client/client.h"

namespace deuteron::bench {
namespace {

constexpr const char* kBench = "loadtest";
constexpr int kOpsPerTxn = 4;
constexpr size_t kValueSize = 100;
constexpr uint64_t kReadPercent = 84;
constexpr double kBudgetSlack = 1.1;  // peak resident memory at most 10% over the budget
constexpr size_t kCodes = static_cast<size_t>(Code::kMaxCode);

struct Counters {
  std::atomic<uint64_t> commits{0};
  std::atomic<uint64_t> retries{0};    // transactions run again after a retryable abort
  std::atomic<uint64_t> in_doubt{0};   // commits that failed Unavailable
  std::array<std::atomic<uint64_t>, kCodes> errors{};  // by Code, every failed call
};

bool RetryableAbort(const Status& s) {
  return s.code() == Code::kDeadlock || s.code() == Code::kTimedOut ||
         s.code() == Code::kUnavailable;
}

uint64_t ParseU64Flag(const ProgramInfo& info, const BenchArgs& args, const char* name,
                      uint64_t min, uint64_t max) {
  const std::string& v = args.FlagValue(name);
  char* end = nullptr;
  const uint64_t n = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < min || n > max) {
    UsageExit(info, fmt::format("bad --{} '{}' ({}-{})", name, v, min, max));
  }
  return n;
}

std::string Key(uint64_t i) { return fmt::format("k{:015}", i); }

// One client: transactions until `stop`, each retried while it aborts
// retryably. Other errors end the client (counted).
// `zipf` null: uniform keys.
void RunClient(client::Client* c, int thread, uint64_t keys, const ScrambledZipf* zipf,
               const std::atomic<bool>& stop, Counters* n) {
  Random64 rng(0x10AD + static_cast<uint64_t>(thread));
  std::string value(kValueSize, 'v');
  uint64_t seq = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    struct Op {
      bool read;
      std::string key;
    };
    Op ops[kOpsPerTxn];
    for (Op& op : ops) {
      op.read = rng.Uniform(100) < kReadPercent;
      op.key = Key(zipf != nullptr ? zipf->Next(&rng) : rng.Uniform(keys));
    }
    for (int attempt = 0;; ++attempt) {
      Status s;
      bool committing = false;
      {
        auto t = c->Begin();
        if (!t.ok()) {
          s = t.status();
        } else {
          for (const Op& op : ops) {
            if (op.read) {
              Result<std::string> r = (*t)->Get(op.key);
              if (!r.ok() && !r.status().IsNotFound()) s = r.status();
            } else {
              fmt::format_to(value.begin(), "t{:03}-{:016}-", thread, ++seq);
              s = (*t)->Put(op.key, value);
            }
            if (!s.ok()) break;
          }
          if (s.ok()) {
            committing = true;
            s = (*t)->Commit();
          }
        }
      }
      if (s.ok()) {
        n->commits.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      n->errors[static_cast<size_t>(s.code())].fetch_add(1, std::memory_order_relaxed);
      if (committing && s.IsUnavailable()) {
        n->in_doubt.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      if (!RetryableAbort(s)) {
        Progress("client {}: {} (not retryable; this client stops)", thread, s.ToString());
        return;
      }
      if (stop.load(std::memory_order_relaxed)) break;
      n->retries.fetch_add(1, std::memory_order_relaxed);
      const uint64_t cap_us = std::min<uint64_t>(100'000, 500ull << std::min(attempt, 8));
      std::this_thread::sleep_for(std::chrono::microseconds(rng.Uniform(cap_us + 1)));
    }
  }
}

std::string ErrorsText(const Counters& n) {
  std::string out;
  for (size_t i = 1; i < kCodes; ++i) {
    const uint64_t v = n.errors[i].load();
    if (v == 0) continue;
    if (!out.empty()) out += ", ";
    out += fmt::format("{} {}", CodeName(static_cast<Code>(i)), v);
  }
  return out.empty() ? "none" : out;
}

void SetErrors(ResultLine* line, const Counters& n) {
  for (size_t i = 1; i < kCodes; ++i) {
    const uint64_t v = n.errors[i].load();
    if (v != 0) line->Set(fmt::format("errors_{}", CodeName(static_cast<Code>(i))), v);
  }
  line->Set("retries", n.retries.load()).Set("commits_in_doubt", n.in_doubt.load());
}

int Main(int argc, char** argv) {
  ProgramInfo info;
  info.name = kBench;
  info.description =
      "A split deployment (deuteron dc + deuteron tc, processes on loopback) under --threads\n"
      "clients (client library) for --seconds: the Deuteronomy mix (4 operations, 84% reads,\n"
      "100-byte values, Zipfian keys), retryable aborts retried. Prints commits/s every\n"
      "--interval seconds, errors by type, and each server's peak resident memory against\n"
      "its budget (at most 10% over). Exit 0 only when all errors were retryable aborts and\n"
      "both servers kept within their budgets. See bench/README.md, \"loadtest\".";
  info.default_threads = {64};
  info.flags = {{"seconds", "how long the clients run (--quick: 10)", "600"},
                {"interval", "seconds per commits/s line", "10"},
                {"keys", "keys the clients draw from (none preloaded)", "1000000"},
                {"dist", "key distribution: zipf (scrambled Zipfian 0.99) or uniform", "zipf"},
                {"dc-budget", "the DC server's memory budget, bytes (deuteron dc --memory-budget)",
                 "134217728"},
                {"tc-budget", "the TC server's memory budget, bytes (deuteron tc --memory-budget)",
                 "134217728"},
                {"deuteron", "the deuteron program (default: next to this one)", ""}};
  ScratchDir scratch;
  const BenchArgs args = ParseArgs(argc, argv, info, &scratch);
  if (args.threads.size() != 1) UsageExit(info, "--threads takes one client count");
  const int clients = args.threads[0];
  uint64_t seconds = ParseU64Flag(info, args, "seconds", 1, 7 * 86400);
  if (args.quick && args.FlagValue("seconds") == "600") seconds = 10;
  const uint64_t interval = ParseU64Flag(info, args, "interval", 1, 3600);
  const uint64_t keys = ParseU64Flag(info, args, "keys", 2, 1'000'000'000);
  const std::string& dist = args.FlagValue("dist");
  if (dist != "zipf" && dist != "uniform") UsageExit(info, "--dist takes zipf or uniform");
  std::unique_ptr<ScrambledZipf> zipf;
  if (dist == "zipf") zipf = std::make_unique<ScrambledZipf>(keys);
  const uint64_t dc_budget = ParseU64Flag(info, args, "dc-budget", 16ull << 20, 1ull << 40);
  const uint64_t tc_budget = ParseU64Flag(info, args, "tc-budget", 8ull << 20, 1ull << 40);
  const std::string deuteron = CheckOk(FindDeuteron(args.FlagValue("deuteron")), "find deuteron");

  const std::string dc_dir = JoinPath(scratch.path(), "dc");
  const std::string tc_dir = JoinPath(scratch.path(), "tc");
  const auto start_timeout = std::chrono::seconds(120);
  auto dc = CheckOk(cli::ServerProcess::StartServing(deuteron,
                                         {"dc", "--dir", dc_dir, "--listen", "127.0.0.1:0",
                                          "--memory-budget", std::to_string(dc_budget)},
                                         start_timeout),
                    "start deuteron dc");
  Progress("{}", dc->first_line());
  auto tc = CheckOk(
      cli::ServerProcess::StartServing(deuteron,
                           {"tc", "--dir", tc_dir, "--dc", fmt::format("127.0.0.1:{}", dc->port()),
                            "--listen", "127.0.0.1:0", "--memory-budget", std::to_string(tc_budget)},
                           start_timeout),
      "start deuteron tc");
  Progress("{}", tc->first_line());
  Progress("loadtest: {} clients for {} s, {} keys ({}), DC budget {:.0f} MiB, TC budget {:.0f} MiB",
           clients, seconds, keys, dist, static_cast<double>(dc_budget) / kMiB,
           static_cast<double>(tc_budget) / kMiB);

  // What each server holds before any client: the binary, its libraries,
  // threads and buffers (part of the peak the budget is checked against).
  const uint64_t dc_start = dc->RssBytes(), tc_start = tc->RssBytes();
  client::RemoteOptions ro;
  ro.max_idle_connections = static_cast<size_t>(clients);
  auto client = CheckOk(client::Client::Connect(fmt::format("127.0.0.1:{}", tc->port()), ro),
                        "connect to deuteron tc");
  Counters n;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&, t] { RunClient(client.get(), t, keys, zipf.get(), stop, &n); });
  }
  Stopwatch total;
  uint64_t last_commits = 0;
  double last_t = 0;
  uint64_t dc_peak = 0, tc_peak = 0;
  const double cpu0 = ProcessCpuSeconds();
  for (uint64_t tick = 1; last_t < static_cast<double>(seconds); ++tick) {
    const double next = std::min(static_cast<double>(tick * interval), static_cast<double>(seconds));
    std::this_thread::sleep_for(std::chrono::duration<double>(next - total.Seconds()));
    const double now = total.Seconds();
    const uint64_t commits = n.commits.load();
    dc_peak = std::max(dc_peak, dc->PeakRssBytes());
    tc_peak = std::max(tc_peak, tc->PeakRssBytes());
    ResultLine line(kBench, "interval", "split", clients, commits - last_commits, now - last_t);
    line.Set("t_s", now)
        .Set("commits_total", commits)
        .Set("dc_rss_mib", static_cast<double>(dc->RssBytes()) / kMiB)
        .Set("tc_rss_mib", static_cast<double>(tc->RssBytes()) / kMiB);
    SetErrors(&line, n);
    line.Print();
    Progress("t={:.0f}s: {:.0f} commits/s, DC resident {:.1f} MiB (peak {:.1f}), TC {:.1f} MiB "
             "(peak {:.1f}), errors: {}",
             now, Ratio(static_cast<double>(commits - last_commits), now - last_t),
             static_cast<double>(dc->RssBytes()) / kMiB, static_cast<double>(dc_peak) / kMiB,
             static_cast<double>(tc->RssBytes()) / kMiB, static_cast<double>(tc_peak) / kMiB,
             ErrorsText(n));
    last_commits = commits;
    last_t = now;
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  const double elapsed = total.Seconds();
  const double client_cpu = ProcessCpuSeconds() - cpu0;
  CheckOk(client->Close(), "close the client");
  client.reset();
  dc_peak = std::max(dc_peak, dc->PeakRssBytes());
  tc_peak = std::max(tc_peak, tc->PeakRssBytes());
  const int tc_rc = tc->Stop(SIGTERM);
  const int dc_rc = dc->Stop(SIGTERM);

  uint64_t other_errors = 0;
  for (size_t i = 1; i < kCodes; ++i) {
    const Code c = static_cast<Code>(i);
    if (c != Code::kDeadlock && c != Code::kTimedOut && c != Code::kUnavailable) {
      other_errors += n.errors[i].load();
    }
  }
  const bool dc_ok = static_cast<double>(dc_peak) <= kBudgetSlack * static_cast<double>(dc_budget);
  const bool tc_ok = static_cast<double>(tc_peak) <= kBudgetSlack * static_cast<double>(tc_budget);
  const bool ok = other_errors == 0 && n.in_doubt.load() == 0 && dc_ok && tc_ok && tc_rc == 0 &&
                  dc_rc == 0;
  ResultLine line(kBench, "summary", "split", clients, n.commits.load(), elapsed);
  SetErrors(&line, n);
  line.Set("errors_not_retryable", other_errors)
      .Set("client_cpu_util", Ratio(client_cpu, elapsed))
      .Set("dc_start_rss_mib", static_cast<double>(dc_start) / kMiB)
      .Set("dc_peak_rss_mib", static_cast<double>(dc_peak) / kMiB)
      .Set("dc_budget_mib", static_cast<double>(dc_budget) / kMiB)
      .Set("dc_peak_over_budget", Ratio(static_cast<double>(dc_peak), static_cast<double>(dc_budget)))
      .SetBool("dc_within_budget", dc_ok)
      .Set("tc_start_rss_mib", static_cast<double>(tc_start) / kMiB)
      .Set("tc_peak_rss_mib", static_cast<double>(tc_peak) / kMiB)
      .Set("tc_budget_mib", static_cast<double>(tc_budget) / kMiB)
      .Set("tc_peak_over_budget", Ratio(static_cast<double>(tc_peak), static_cast<double>(tc_budget)))
      .SetBool("tc_within_budget", tc_ok)
      .Set("dc_exit", dc_rc)
      .Set("tc_exit", tc_rc)
      .SetBool("passed", ok);
  line.Print();
  Progress("loadtest: {} commits in {:.0f} s ({:.0f}/s); errors: {}; {} retries, {} commits in "
           "doubt; DC peak {:.1f} MiB of {:.0f} ({}), TC peak {:.1f} MiB of {:.0f} ({}); "
           "servers exited {} (dc) {} (tc): {}",
           n.commits.load(), elapsed, Ratio(static_cast<double>(n.commits.load()), elapsed),
           ErrorsText(n), n.retries.load(), n.in_doubt.load(), static_cast<double>(dc_peak) / kMiB,
           static_cast<double>(dc_budget) / kMiB, dc_ok ? "within 1.1x" : "OVER 1.1x",
           static_cast<double>(tc_peak) / kMiB, static_cast<double>(tc_budget) / kMiB,
           tc_ok ? "within 1.1x" : "OVER 1.1x", dc_rc, tc_rc, ok ? "PASSED" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace deuteron::bench

int main(int argc, char** argv) { return deuteron::bench::Main(argc, argv); }
