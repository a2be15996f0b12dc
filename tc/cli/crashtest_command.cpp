#include "tc/cli/crashtest_command.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>

#include <thrift/TOutput.h>

#include "common/fault_hooks.h"
#include "common/logging.h"
#include "tc/crash/crash_test.h"
#include "tc/crash/faults.h"
#include "tc/crash/history/history_check.h"

namespace deuteron::cli {
namespace {

struct CrashtestArgs {
  uint64_t cycles = 10;
  uint64_t seed = 0;  // 0: from the clock (printed)
  std::string faults = "kill";
  bool json = false;
  std::string dir;
  bool keep = false;
  uint32_t accounts = 32;
  uint32_t threads = 3;
  uint32_t think_ms = 0;
  uint64_t check_every = 10;
  uint64_t min_window_ms = 30, max_window_ms = 300;
  bool list_kill_points = false;
  bool check_crashed = false;
  uint32_t list_append_threads = 1;
  uint32_t range_threads = 0;
  std::string break_contract;
  bool until_violation = false;
  std::string kill_point_probability = "0.05";
  uint64_t io_fault_max_n = 40;
  std::string check_history;  // a saved list-append history to check offline
  // rpc: the most each rpc cycle's per-frame probabilities may be (each
  // drawn uniformly in [0, this]); the defaults are CrashOptions'.
  double rpc_delay = 0.2, rpc_drop = 0.02, rpc_reset = 0.02, rpc_duplicate = 0.05;
};

std::string Self() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

int RunCrashtest(const CrashtestArgs& a) {
  if (!a.check_history.empty()) return crash::CheckHistoryFile(a.check_history, stdout, stderr);
  if (a.list_kill_points) {
    for (const std::string& name : fault::KillPointNames()) std::printf("%s\n", name.c_str());
    return 0;
  }
  Result<std::vector<crash::FaultKind>> kinds = crash::ParseFaults(a.faults);
  if (!kinds.ok()) {
    std::fprintf(stderr, "deuteron crashtest: --faults: %s\n", std::string(kinds.status().message()).c_str());
    return 2;
  }
  for (crash::FaultKind k : *kinds) {
    if (crash::NeedsHooks(k) && !fault::HooksCompiled()) {
      std::fprintf(stderr,
                   "deuteron crashtest: fault \"%s\" needs a build with fault hooks (DEUTERON_FAULT_HOOKS: "
                   "the debug, asan or tsan preset)\n",
                   std::string(crash::FaultName(k)).c_str());
      return 2;
    }
  }
  crash::CrashOptions o;
  o.cycles = a.cycles;
  o.seed = a.seed != 0 ? a.seed
                       : static_cast<uint64_t>(
                             std::chrono::system_clock::now().time_since_epoch().count()) % 1000000007;
  o.faults = *kinds;
  o.program = Self();
  o.bank.accounts = a.accounts;
  o.bank.threads = a.threads;
  o.bank.think_ms = a.think_ms;
  o.check_every = a.check_every;
  o.kill_point_probability = a.kill_point_probability;
  o.io_fault_max_n = a.io_fault_max_n;
  o.check_crashed = a.check_crashed;
  o.list_append_threads = a.list_append_threads;
  o.range_threads = a.range_threads;
  o.break_contract = a.break_contract;
  o.until_violation = a.until_violation;
  o.rpc_faults.delay_p = a.rpc_delay;
  o.rpc_faults.drop_p = a.rpc_drop;
  o.rpc_faults.reset_p = a.rpc_reset;
  o.rpc_faults.duplicate_p = a.rpc_duplicate;
  if (!o.break_contract.empty()) {
    if (!fault::HooksCompiled()) {
      std::fprintf(stderr, "deuteron crashtest: --break needs a build with fault hooks\n");
      return 2;
    }
    if (!fault::ParseBreak(o.break_contract).ok()) {
      std::fprintf(stderr, "deuteron crashtest: --break: unknown contract break \"%s\"\n", o.break_contract.c_str());
      return 2;
    }
  }
  o.min_window = std::chrono::milliseconds(a.min_window_ms);
  o.max_window = std::chrono::milliseconds(a.max_window_ms);
  std::error_code ec;
  if (a.dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/deuteron-crashtest-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::fprintf(stderr, "deuteron crashtest: mkdtemp %s: %s\n", tmpl.c_str(), std::strerror(errno));
      return 1;
    }
    o.dir = tmpl;
  } else {
    o.dir = std::filesystem::absolute(a.dir, ec).string();
    std::filesystem::create_directories(o.dir, ec);
    if (ec || !std::filesystem::is_empty(o.dir, ec)) {
      std::fprintf(stderr, "deuteron crashtest: --dir %s must be a new or empty directory\n", a.dir.c_str());
      return 2;
    }
  }
  // The servers log to their files; this process's library lines and
  // Thrift's complaints about killed servers would bury the progress.
  if (std::getenv("DEUTERON_LOG") == nullptr) SetLogLevel(LogLevel::kWarn);
  apache::thrift::GlobalOutput.setOutputFunction([](const char*) {});
  const auto start = std::chrono::steady_clock::now();
  crash::CrashTest test(o);
  Result<crash::CrashReport> report = test.Run();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!report.ok()) {
    std::fprintf(stderr, "deuteron crashtest: seed %llu: %s\n", static_cast<unsigned long long>(o.seed),
                 report.status().ToString().c_str());
    std::fprintf(stderr, "deuteron crashtest: the servers' logs and data are in %s\n", o.dir.c_str());
    return 1;
  }
  const bool clean = report->violations.empty();
  if (a.json) {
    std::printf("%s\n", report->ToJson(o.faults).c_str());
  } else {
    std::printf("seed %llu: %llu cycles in %.1f s; %llu acknowledged transfers, %llu verified, %llu in "
                "doubt; recovery p50 %.0f ms, p99 %.0f ms; %zu violation%s\n",
                static_cast<unsigned long long>(o.seed), static_cast<unsigned long long>(report->cycles),
                seconds, static_cast<unsigned long long>(report->acknowledged),
                static_cast<unsigned long long>(report->verified),
                static_cast<unsigned long long>(report->unknown),
                crash::Percentile(report->recovery_ms, 0.5), crash::Percentile(report->recovery_ms, 0.99),
                report->violations.size(), report->violations.size() == 1 ? "" : "s");
    for (const std::string& v : report->violations) std::printf("  violation: %s\n", v.c_str());
  }
  std::fflush(stdout);
  std::fprintf(stderr, "deuteron crashtest: seed %llu, %.1f s\n", static_cast<unsigned long long>(o.seed),
               seconds);
  if (clean && a.dir.empty() && !a.keep) {
    std::filesystem::remove_all(o.dir, ec);
  } else {
    std::fprintf(stderr, "deuteron crashtest: the servers' logs and data are in %s\n", o.dir.c_str());
  }
  return clean ? 0 : 1;
}

}  // namespace

void AddCrashtestCommand(CLI::App& app, Runner& runner) {
  auto a = std::make_shared<CrashtestArgs>();
  CLI::App* cmd = app.add_subcommand(
      "crashtest",
      "Runs the crash harness: N cycles, each running bank transfers against a `deuteron dc` and a\n"
      "`deuteron tc` on loopback, injecting one fault, restarting what died and checking every\n"
      "acknowledged commit, every in-doubt one (wholly or not at all) and the bank invariant;\n"
      "`deuteron check` on the stopped store every --check-every cycles and at the end. One seed\n"
      "(printed) makes every choice. Exits 0 only with no violation.");
  cmd->add_option("--cycles", a->cycles, "crash-recover cycles (1 to 1000000)")
      ->check(Within(1, 1000000))
      ->type_name("N");
  cmd->add_option("--seed", a->seed, "the seed of every choice (default: from the clock, printed)")
      ->type_name("S");
  cmd->add_option("--faults", a->faults,
                  "comma-separated fault kinds: kill, killpoint, powerloss, torn, bitflip, enospc, eio, "
                  "rpc, stall (all but kill, bitflip and rpc need a build with fault hooks)")
      ->type_name("LIST");
  cmd->add_flag("--list-kill-points", a->list_kill_points,
                "print the kill points compiled into this build, one per line, and exit");
  cmd->add_option("--kill-point-probability", a->kill_point_probability,
                  "killpoint: the chance of dying at each hit of any kill point, in (0,1]")
      ->check(CLI::Range(1e-9, 1.0).description(""))
      ->type_name("P");
  cmd->add_flag("--check-crashed", a->check_crashed,
                "also run `deuteron check` on the store after each kill of both servers, before the "
                "restart (counted, not a violation)");
  cmd->add_option("--break", a->break_contract,
                  "run the servers with DEUTERON_BREAK=NAME (esl_check, ack_before_sync, idempotence, "
                  "rssp_before_flush, scan_lock_early): a contract broken on purpose, which the run "
                  "must report (hooks builds only)")
      ->type_name("NAME");
  cmd->add_option("--check-history", a->check_history,
                  "check a saved list-append history (history.jsonl of a run directory) for isolation "
                  "anomalies and exit: prints the report as JSON; exit 0 clean, 1 anomalies, 2 unreadable "
                  "(tc/crash/history/history.md)")
      ->type_name("FILE");
  cmd->add_flag("--until-violation", a->until_violation, "end the run after the first cycle with a violation");
  cmd->add_option("--io-fault-max-n", a->io_fault_max_n,
                  "enospc, eio: the Nth write or sync after the server starts fails, N uniform in 1..this")
      ->check(Within(1, 1000000))
      ->type_name("N");
  for (auto [name, what, p] : {std::tuple{"--rpc-delay", "delays a frame (up to 20 ms)", &a->rpc_delay},
                                std::tuple{"--rpc-drop", "drops a frame (closing the connection)", &a->rpc_drop},
                                std::tuple{"--rpc-reset", "resets the connection", &a->rpc_reset},
                                std::tuple{"--rpc-duplicate", "sends a request again, late", &a->rpc_duplicate}}) {
    cmd->add_option(name, *p,
                    std::string("rpc: the highest per-frame probability that the proxy ") + what +
                        " (each rpc cycle draws its own uniformly in 0..this)")
        ->check(CLI::Range(0.0, 1.0).description(""))
        ->type_name("P");
  }
  cmd->add_flag("--json", a->json, "print the report as one JSON object on standard output");
  cmd->add_option("--dir", a->dir,
                  "a new or empty run directory, kept (default: a temporary one, removed when clean)")
      ->type_name("DIR");
  cmd->add_flag("--keep", a->keep, "keep the temporary run directory");
  cmd->add_option("--accounts", a->accounts, "bank accounts (2 to 100000)")
      ->check(Within(2, 100000))
      ->type_name("N");
  cmd->add_option("--threads", a->threads, "client threads (1 to 64)")->check(Within(1, 64))->type_name("N");
  cmd->add_option("--list-append-threads", a->list_append_threads,
                  "client threads running the list-append workload whose history is checked for "
                  "isolation anomalies after every recovery (0 to 16; 0: none)")
      ->check(Within(0, 16))
      ->type_name("N");
  cmd->add_option("--range-threads", a->range_threads,
                  "client threads running the range workload (each transaction scans a group of keys "
                  "and inserts into it or empties it; a group over its cap is a phantom), checked after "
                  "every recovery (0 to 16; 0: none)")
      ->check(Within(0, 16))
      ->type_name("N");
  cmd->add_option("--think-ms", a->think_ms,
                  "a transfer waits up to this long between its writes and its commit (0 to 10000)")
      ->check(Within(0, 10000))
      ->type_name("MS");
  cmd->add_option("--check-every", a->check_every,
                  "stop cleanly and run `deuteron check` every N cycles (0: only at the end)")
      ->type_name("N");
  cmd->add_option("--min-window-ms", a->min_window_ms, "shortest workload before a fault, in ms")
      ->check(Within(0, 600000))
      ->type_name("MS");
  cmd->add_option("--max-window-ms", a->max_window_ms, "longest workload before a fault, in ms")
      ->check(Within(1, 600000))
      ->type_name("MS");
  cmd->callback([a, &runner] {
    if (a->min_window_ms > a->max_window_ms) UsageError("--min-window-ms exceeds --max-window-ms");
    runner.Set([a] { return RunCrashtest(*a); });
  });
}

}  // namespace deuteron::cli
