#include "tc/cli/demo_command.h"

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <thrift/TOutput.h>

#include "common/logging.h"
#include "common/random.h"
#include "common/status.h"
#include "protocol/remote_dc.h"
#include "tc/cli/bank_oracle.h"
#include "tc/cli/server_process.h"
#include "tc/client/client.h"

namespace deuteron::cli {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr const char* kDescription =
    "Shows the whole system in under a minute: starts a DC server and a TC server\n"
    "as two processes on loopback in a fresh directory, drives bank transfers\n"
    "through the client library from several threads, kills both servers with\n"
    "SIGKILL mid-run, restarts them, shows the recovery, and verifies that every\n"
    "acknowledged transfer survived and the total balance is unchanged. Exits 0\n"
    "only when that verification holds.";

constexpr int64_t kInitialBalance = 1000;
constexpr milliseconds kServerStartTimeout{60000};

struct Options {
  double seconds = 20;  // of transfers before the crash
  uint32_t accounts = 10000;
  uint32_t threads = 4;
  std::string dir;  // empty: a fresh one under $TMPDIR, removed after a pass
  bool keep = false;
  // The TC's checkpoint interval: short, so the crash finds an RSSP.
  std::chrono::milliseconds checkpoint_interval{5000};
};

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string AccountKey(uint32_t i) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "acct-%07u", i);
  return buf;
}

bool ParseBalance(const std::string& s, int64_t* out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

std::string Self() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

std::string Human(double bytes) {
  char buf[32];
  if (bytes >= 1024.0 * 1024.0) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", bytes / 1024.0 / 1024.0);
  } else if (bytes >= 1024.0) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", bytes / 1024.0);
  } else {
    std::snprintf(buf, sizeof(buf), "%.0f B", bytes);
  }
  return buf;
}

// Narrative lines on standard output; the progress line on standard error,
// redrawn in place on a terminal, else a plain line every two seconds.
class Progress {
 public:
  Progress() : live_(isatty(STDERR_FILENO) != 0) {}

  void Update(const std::string& text) {
    if (live_) {
      std::fprintf(stderr, "\r\x1b[K%s", text.c_str());
      std::fflush(stderr);
      shown_ = true;
    } else if (SecondsSince(last_plain_) >= 2.0) {
      std::fprintf(stderr, "%s\n", text.c_str());
      last_plain_ = Clock::now();
    }
  }
  // Ends the live line (before narrative is printed).
  void Clear() {
    if (live_ && shown_) std::fputs("\r\x1b[K", stderr);
    shown_ = false;
  }

 private:
  const bool live_;
  bool shown_ = false;
  Clock::time_point last_plain_ = Clock::now() - std::chrono::seconds(10);
};

void Say(const char* format, ...) __attribute__((format(printf, 1, 2)));
void Say(const char* format, ...) {
  va_list ap;
  va_start(ap, format);
  std::vprintf(format, ap);
  va_end(ap);
  std::fflush(stdout);
}

// What the transfer threads did, counted as they go.
struct Counters {
  std::atomic<uint64_t> acknowledged{0};
  std::atomic<uint64_t> in_doubt{0};
  std::atomic<uint64_t> lock_aborts{0};   // Deadlock or TimedOut: the transfer is dropped
  std::atomic<uint64_t> declined{0};      // not enough money: aborted by the client
  std::atomic<uint64_t> failures{0};      // other errors (the servers gone)
};

class Demo {
 public:
  explicit Demo(Options o) : o_(std::move(o)), oracle_(o_.accounts, kInitialBalance) {}

  int Run();

 private:
  Status StartDc();
  Status StartTc();
  Status Connect();
  Status LoadAccounts();
  Result<std::vector<int64_t>> ReadBalances();
  void Transfers(uint32_t thread);
  void PollDcStats();
  void RunWorkload();
  void Crash();
  int Fail(const std::string& what, const Status& s);

  const Options o_;
  BankOracle oracle_;
  Progress progress_;
  std::string self_, dir_;
  std::unique_ptr<ServerProcess> dc_, tc_;
  uint16_t dc_port_ = 0, tc_port_ = 0;
  std::unique_ptr<client::Client> client_;
  std::unique_ptr<protocol::RemoteDataComponent> dc_stats_;
  bool have_dc_stats_ = false;
  DcStats last_dc_stats_;
  Counters counters_;
  std::atomic<bool> stop_{false};
  std::vector<std::vector<uint32_t>> latencies_us_;  // one per thread
  double workload_s_ = 0;
  double dc_start_s_ = 0, tc_start_s_ = 0;
  std::string dc_restart_line_;
};

int Demo::Fail(const std::string& what, const Status& s) {
  progress_.Clear();
  std::fprintf(stderr, "deuteron demo: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::fprintf(stderr, "deuteron demo: the servers' logs are in %s\n", dir_.c_str());
  return 1;
}

Status Demo::StartDc() {
  const auto start = Clock::now();
  Result<std::unique_ptr<ServerProcess>> p = ServerProcess::Start(
      self_, {"dc", "--dir", dir_ + "/dc", "--listen", "127.0.0.1:0"}, dir_ + "/dc.log");
  if (!p.ok()) return p.status();
  dc_ = std::move(p).value();
  Result<std::string> line = dc_->WaitForLine("deuteron dc: serving", kServerStartTimeout);
  if (!line.ok()) return line.status();
  dc_port_ = ServingPort(*line);
  if (dc_port_ == 0) return Status::Internal("no port in: " + *line);
  dc_start_s_ = SecondsSince(start);
  dc_restart_line_ = *line;
  protocol::RemoteOptions ro;
  ro.port = dc_port_;
  ro.max_connections = 1;
  Result<std::unique_ptr<protocol::RemoteDataComponent>> stats = protocol::RemoteDataComponent::Connect(ro);
  if (!stats.ok()) return stats.status();
  dc_stats_ = std::move(stats).value();
  return Status::OK();
}

Status Demo::StartTc() {
  const auto start = Clock::now();
  Result<std::unique_ptr<ServerProcess>> p = ServerProcess::Start(
      self_,
      {"tc", "--dir", dir_ + "/tc", "--dc", "127.0.0.1:" + std::to_string(dc_port_), "--listen",
       "127.0.0.1:0", "--checkpoint-interval-ms", std::to_string(o_.checkpoint_interval.count())},
      dir_ + "/tc.log");
  if (!p.ok()) return p.status();
  tc_ = std::move(p).value();
  Result<std::string> line = tc_->WaitForLine("deuteron tc: serving", kServerStartTimeout);
  if (!line.ok()) return line.status();
  tc_port_ = ServingPort(*line);
  if (tc_port_ == 0) return Status::Internal("no port in: " + *line);
  tc_start_s_ = SecondsSince(start);
  return Status::OK();
}

Status Demo::Connect() {
  client::RemoteOptions ro;
  ro.max_idle_connections = o_.threads + 2;
  ro.connect_timeout_ms = 1000;
  Result<std::unique_ptr<client::Client>> c =
      client::Client::Connect("127.0.0.1:" + std::to_string(tc_port_), ro);
  if (!c.ok()) return c.status();
  client_ = std::move(c).value();
  return Status::OK();
}

Status Demo::LoadAccounts() {
  constexpr uint32_t kBatch = 500;
  const std::string balance = std::to_string(kInitialBalance);
  for (uint32_t first = 0; first < o_.accounts; first += kBatch) {
    const uint32_t end = std::min(o_.accounts, first + kBatch);
    Status s = client_->Run([&](client::Transaction& t) -> Status {
      for (uint32_t i = first; i < end; ++i) {
        if (Status p = t.Put(AccountKey(i), balance); !p.ok()) return p;
      }
      return Status::OK();
    });
    if (!s.ok()) return s;
    progress_.Update("  loading accounts: " + std::to_string(end) + " of " +
                     std::to_string(o_.accounts));
  }
  progress_.Clear();
  return Status::OK();
}

Result<std::vector<int64_t>> Demo::ReadBalances() {
  std::vector<int64_t> balances;
  Status s = client_->Run([&](client::Transaction& t) -> Status {
    balances.clear();
    client::ScanOptions so;
    so.lower = "acct-";
    so.upper = "acct.";
    client::ScanIterator it = t.Scan(so);
    for (; it.Valid(); it.Next()) {
      int64_t b = 0;
      if (it.key() != AccountKey(static_cast<uint32_t>(balances.size())) ||
          !ParseBalance(it.value(), &b)) {
        return Status::Corruption("unexpected account " + it.key() + " = " + it.value());
      }
      balances.push_back(b);
    }
    return it.status();
  });
  if (!s.ok()) return s;
  return balances;
}

// One client thread: random transfers until stop_. A transfer reads both
// balances, moves up to 100 when the payer has it, and commits; a commit
// that fails is in doubt (the crash may have cut its reply off).
void Demo::Transfers(uint32_t thread) {
  Random64 rng(0x5eed0000 + thread);
  std::vector<uint32_t>& latencies = latencies_us_[thread];
  while (!stop_.load(std::memory_order_relaxed)) {
    Transfer t;
    t.from = static_cast<uint32_t>(rng.Uniform(o_.accounts));
    t.to = static_cast<uint32_t>(rng.Uniform(o_.accounts - 1));
    if (t.to >= t.from) ++t.to;
    t.amount = static_cast<int64_t>(rng.Uniform(100)) + 1;
    auto failed = [&](const Status& s) {
      if (s.code() == Code::kDeadlock || s.code() == Code::kTimedOut) {
        counters_.lock_aborts.fetch_add(1, std::memory_order_relaxed);
      } else {
        counters_.failures.fetch_add(1, std::memory_order_relaxed);
        std::this_thread::sleep_for(milliseconds(5));  // the servers are gone: don't spin
      }
    };
    Result<std::unique_ptr<client::Transaction>> begun = client_->Begin();
    if (!begun.ok()) {
      failed(begun.status());
      continue;
    }
    client::Transaction& txn = **begun;
    Result<std::string> from = txn.Get(AccountKey(t.from));
    if (!from.ok()) {
      failed(from.status());
      continue;
    }
    Result<std::string> to = txn.Get(AccountKey(t.to));
    if (!to.ok()) {
      failed(to.status());
      continue;
    }
    int64_t a = 0, b = 0;
    if (!ParseBalance(*from, &a) || !ParseBalance(*to, &b)) {
      failed(Status::Corruption("a balance is not a number"));
      continue;
    }
    if (a < t.amount) {
      txn.Abort();
      counters_.declined.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (Status s = txn.Put(AccountKey(t.from), std::to_string(a - t.amount)); !s.ok()) {
      failed(s);
      continue;
    }
    if (Status s = txn.Put(AccountKey(t.to), std::to_string(b + t.amount)); !s.ok()) {
      failed(s);
      continue;
    }
    const auto start = Clock::now();
    if (Status s = txn.Commit(); s.ok()) {
      oracle_.Acknowledged(t);
      counters_.acknowledged.fetch_add(1, std::memory_order_relaxed);
      latencies.push_back(static_cast<uint32_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count()));
    } else {
      oracle_.InDoubt(t);
      counters_.in_doubt.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

void Demo::PollDcStats() {
  if (dc_stats_ == nullptr) return;
  Result<DcStats> s = dc_stats_->GetStats();
  if (s.ok()) {
    last_dc_stats_ = *s;
    have_dc_stats_ = true;
  }
}

void Demo::RunWorkload() {
  latencies_us_.assign(o_.threads, {});
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (uint32_t i = 0; i < o_.threads; ++i) threads.emplace_back([this, i] { Transfers(i); });
  auto last_poll = Clock::now() - std::chrono::seconds(1);
  // Run the planned time, and longer (up to a minute) until something committed.
  while (SecondsSince(start) < o_.seconds ||
         (counters_.acknowledged.load() < 10 && SecondsSince(start) < o_.seconds + 60)) {
    std::this_thread::sleep_for(milliseconds(100));
    if (SecondsSince(last_poll) >= 0.25) {
      PollDcStats();
      last_poll = Clock::now();
    }
    const double t = SecondsSince(start);
    const uint64_t acked = counters_.acknowledged.load();
    char line[256];
    std::snprintf(line, sizeof(line),
                  "  transfers: %5.1f s  %llu acknowledged (%.0f/s), %llu lock aborts; "
                  "DC flushed to lsn %llu; crash in %.1f s",
                  t, static_cast<unsigned long long>(acked), t > 0 ? static_cast<double>(acked) / t : 0.0,
                  static_cast<unsigned long long>(counters_.lock_aborts.load()),
                  static_cast<unsigned long long>(last_dc_stats_.max_durable_lsn),
                  std::max(0.0, o_.seconds - t));
    progress_.Update(line);
  }
  workload_s_ = SecondsSince(start);
  // The crash, while the threads are still committing.
  const pid_t dc_pid = dc_->pid(), tc_pid = tc_->pid();
  dc_->Kill();
  tc_->Kill();
  stop_.store(true);
  for (std::thread& t : threads) t.join();
  const uint64_t acked_before = counters_.acknowledged.load();
  progress_.Clear();
  Say("  %llu transfers acknowledged in %.1f s (%.0f/s) by %u client threads; %llu aborted by "
      "lock conflicts, %llu declined (not enough money)\n",
      static_cast<unsigned long long>(acked_before), workload_s_,
      static_cast<double>(acked_before) / workload_s_, o_.threads,
      static_cast<unsigned long long>(counters_.lock_aborts.load()),
      static_cast<unsigned long long>(counters_.declined.load()));
  Say("\n2. Crash: SIGKILL to deuteron dc (pid %d) and deuteron tc (pid %d) mid-run.\n",
      static_cast<int>(dc_pid), static_cast<int>(tc_pid));
  Say("  commits whose replies the crash cut off: %llu (in doubt: each must be wholly there or "
      "wholly absent)\n",
      static_cast<unsigned long long>(counters_.in_doubt.load()));
  if (have_dc_stats_) {
    Say("  the DC's last stats before the crash: ESL %llu, RSSP %llu, pages flushed up to lsn %llu, "
        "%llu page flushes (%s), %s written to its log-structured store\n",
        static_cast<unsigned long long>(last_dc_stats_.esl),
        static_cast<unsigned long long>(last_dc_stats_.rssp),
        static_cast<unsigned long long>(last_dc_stats_.max_durable_lsn),
        static_cast<unsigned long long>(last_dc_stats_.flushes),
        Human(static_cast<double>(last_dc_stats_.flush_bytes)).c_str(),
        Human(static_cast<double>(last_dc_stats_.lss_bytes_written)).c_str());
  }
}

std::string Percentile(std::vector<uint32_t>& sorted, double p) {
  if (sorted.empty()) return "-";
  const size_t i = std::min(sorted.size() - 1, static_cast<size_t>(p * static_cast<double>(sorted.size())));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f ms", sorted[i] / 1000.0);
  return buf;
}

int Demo::Run() {
  self_ = Self();
  if (self_.empty()) return Fail("find this program", Status::IOError("readlink /proc/self/exe"));
  std::error_code ec;
  if (o_.dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/deuteron-demo-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      return Fail("make a directory", Status::FromErrno(errno, tmpl));
    }
    dir_ = tmpl;
  } else {
    dir_ = o_.dir;
    std::filesystem::create_directories(dir_, ec);
    if (ec || !std::filesystem::is_empty(dir_, ec)) {
      std::fprintf(stderr, "deuteron demo: --dir %s must be a new or empty directory\n", dir_.c_str());
      return 2;
    }
  }
  const auto demo_start = Clock::now();
  Say("deuteron demo: a bank on Deuteron, crashed and recovered (directory %s)\n\n", dir_.c_str());
  Say("1. Start a data component (DC) server and a transactional component (TC) server,\n"
      "   two processes on loopback; the TC keeps the log, the DC the Bw-tree on LLAMA.\n");
  if (Status s = StartDc(); !s.ok()) return Fail("start deuteron dc", s);
  Say("  deuteron dc: pid %d on 127.0.0.1:%u, ready in %.2f s (log: %s/dc.log)\n",
      static_cast<int>(dc_->pid()), dc_port_, dc_start_s_, dir_.c_str());
  if (Status s = StartTc(); !s.ok()) return Fail("start deuteron tc", s);
  Say("  deuteron tc: pid %d on 127.0.0.1:%u, ready in %.2f s (log: %s/tc.log)\n",
      static_cast<int>(tc_->pid()), tc_port_, tc_start_s_, dir_.c_str());
  if (Status s = Connect(); !s.ok()) return Fail("connect to the TC", s);
  const auto load_start = Clock::now();
  if (Status s = LoadAccounts(); !s.ok()) return Fail("load the accounts", s);
  Say("  loaded %u accounts of %lld each (total %lld) in %.2f s\n", o_.accounts,
      static_cast<long long>(kInitialBalance), static_cast<long long>(oracle_.total()),
      SecondsSince(load_start));
  Say("  now %u client threads transfer money between random accounts for %.0f s,\n"
      "  each transfer one serializable transaction (read both, write both, commit)\n",
      o_.threads, o_.seconds);

  RunWorkload();
  client_.reset();  // its connections died with the TC
  dc_stats_.reset();

  Say("\n3. Restart both servers: each recovers from what it made durable.\n");
  if (Status s = StartDc(); !s.ok()) return Fail("restart deuteron dc", s);
  const size_t paren = dc_restart_line_.find('(');
  Say("  deuteron dc: recovered in %.2f s from its checkpoint and log-structured store %s\n",
      dc_start_s_, paren == std::string::npos ? "" : dc_restart_line_.substr(paren).c_str());
  if (Status s = StartTc(); !s.ok()) return Fail("restart deuteron tc", s);
  Result<DcStats> replay = dc_stats_->GetStats();
  if (!replay.ok()) return Fail("read the DC's stats", replay.status());
  const uint64_t replayed = replay->ops_applied + replay->ops_skipped;
  if (replay->rssp == 0) {
    Say("  deuteron tc: recovered in %.2f s: no checkpoint yet, so redo of its whole log (to lsn "
        "%llu): %llu operations replayed, %llu re-applied, %llu skipped as already durable in "
        "the DC\n",
        tc_start_s_, static_cast<unsigned long long>(replay->esl),
        static_cast<unsigned long long>(replayed),
        static_cast<unsigned long long>(replay->ops_applied),
        static_cast<unsigned long long>(replay->ops_skipped));
  } else {
    Say("  deuteron tc: recovered in %.2f s: redo of the log from the checkpoint (RSSP, lsn %llu) "
        "to its end (lsn %llu, %s): %llu operations replayed, %llu re-applied, %llu skipped as "
        "already durable in the DC\n",
        tc_start_s_, static_cast<unsigned long long>(replay->rssp),
        static_cast<unsigned long long>(replay->esl),
        Human(static_cast<double>(replay->esl > replay->rssp ? replay->esl - replay->rssp : 0)).c_str(),
        static_cast<unsigned long long>(replayed),
        static_cast<unsigned long long>(replay->ops_applied),
        static_cast<unsigned long long>(replay->ops_skipped));
  }

  Say("\n4. Verify: read every account back and compare with what the clients were told.\n");
  if (Status s = Connect(); !s.ok()) return Fail("connect to the restarted TC", s);
  const auto verify_start = Clock::now();
  Result<std::vector<int64_t>> balances = ReadBalances();
  if (!balances.ok()) return Fail("read the accounts back", balances.status());
  const BankVerdict verdict = oracle_.Verify(*balances);
  const double verify_s = SecondsSince(verify_start);
  client_.reset();

  Say("\n5. Stop both servers cleanly (SIGTERM).\n");
  Result<int> tc_exit = tc_->Stop(std::chrono::seconds(30));
  Result<int> dc_exit = dc_->Stop(std::chrono::seconds(30));
  const bool clean = tc_exit.ok() && *tc_exit == 0 && dc_exit.ok() && *dc_exit == 0;
  Say("  %s\n", clean ? "both exited cleanly" : "a server did not shut down cleanly (see its log)");

  std::vector<uint32_t> all;
  for (const auto& v : latencies_us_) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  const uint64_t acked = oracle_.acknowledged();
  Say("\nSummary\n");
  Say("  workload        %u accounts, %u client threads, %.1f s before the crash\n", o_.accounts,
      o_.threads, workload_s_);
  Say("  transfers       %llu acknowledged (%.0f/s), %llu in doubt at the crash, %llu lock "
      "aborts\n",
      static_cast<unsigned long long>(acked), static_cast<double>(acked) / workload_s_,
      static_cast<unsigned long long>(oracle_.in_doubt()),
      static_cast<unsigned long long>(counters_.lock_aborts.load()));
  Say("  commit latency  p50 %s, p99 %s, max %s (client side, durable on return)\n",
      Percentile(all, 0.50).c_str(), Percentile(all, 0.99).c_str(),
      Percentile(all, 1.0).c_str());
  Say("  recovery        DC %.2f s, TC %.2f s (%llu log operations replayed)\n", dc_start_s_,
      tc_start_s_, static_cast<unsigned long long>(replayed));
  Say("  read back       %zu accounts in %.2f s, total balance %lld\n", balances->size(), verify_s,
      static_cast<long long>(oracle_.total()));
  Say("  whole demo      %.1f s\n", SecondsSince(demo_start));
  if (!verdict.ok) {
    Say("\nverification: FAILED: %s\n", verdict.detail.c_str());
    Say("the servers' logs and data are kept in %s\n", dir_.c_str());
    return 1;
  }
  Say("\nverification: OK: all %llu acknowledged transfers survived the crash; of %llu in doubt, "
      "%zu committed and %llu did not; total balance %lld unchanged\n",
      static_cast<unsigned long long>(acked), static_cast<unsigned long long>(oracle_.in_doubt()),
      verdict.in_doubt_committed,
      static_cast<unsigned long long>(oracle_.in_doubt() - verdict.in_doubt_committed),
      static_cast<long long>(oracle_.total()));
  if (o_.dir.empty() && !o_.keep) {
    std::filesystem::remove_all(dir_, ec);
  } else {
    Say("the servers' logs and data are in %s\n", dir_.c_str());
  }
  return clean ? 0 : 1;
}

}  // namespace

void AddDemoCommand(CLI::App& app, Runner& runner) {
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("demo", kDescription);
  cmd->add_option("--seconds", o->seconds, "seconds of transfers before the crash (0.5 to 3600)")
      ->check(CLI::Range(0.5, 3600.0).description(""))
      ->type_name("S");
  cmd->add_option("--accounts", o->accounts, "bank accounts (2 to 1000000)")
      ->check(Within(2, 1000000))
      ->type_name("N");
  cmd->add_option("--threads", o->threads, "client threads (1 to 64)")->check(Within(1, 64))->type_name("N");
  cmd->add_option("--dir", o->dir,
                  "a new or empty directory to use and keep (default: a fresh temporary one, removed "
                  "when the verification passes)")
      ->type_name("DIR");
  AddDurationOption(cmd, "--checkpoint-interval,--checkpoint-interval-ms", &o->checkpoint_interval,
                    std::chrono::milliseconds(1),
                    "the TC's checkpoint interval, 1ms to 1d (bare number: milliseconds)");
  cmd->add_flag("--keep", o->keep, "keep the temporary directory (the servers' logs and data)");
  cmd->callback([o, &runner] {
    if (o->checkpoint_interval.count() <= 0 || o->checkpoint_interval > std::chrono::hours(24)) {
      UsageError("--checkpoint-interval takes 1ms to 1d");
    }
    runner.Set([o] {
      // The servers log to their files; this process's library lines and
      // Thrift's complaints about the killed servers would only clutter.
      if (std::getenv("DEUTERON_LOG") == nullptr) SetLogLevel(LogLevel::kWarn);
      apache::thrift::GlobalOutput.setOutputFunction([](const char*) {});
      Demo demo(*o);
      return demo.Run();
    });
  });
}

}  // namespace deuteron::cli
