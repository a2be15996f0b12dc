#include "tc/crash/crash_test.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <filesystem>
#include <functional>
#include <thread>
#include <utility>

#include "tc/crash/bitflip.h"
#include "tc/crash/history/isolation_checker.h"
#include "tc/crash/lsn_probe.h"
#include "tc/crash/run_program.h"

namespace deuteron::crash {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// stall: how long the disk takes no writes before the power loss.
constexpr uint64_t kMinStallMs = 350, kMaxStallMs = 1000;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

client::RemoteOptions ClientOptions(uint32_t threads) {
  client::RemoteOptions ro;
  ro.connect_timeout_ms = 1000;
  ro.send_timeout_ms = 5000;
  ro.recv_timeout_ms = 15000;
  ro.max_idle_connections = threads + 2;
  return ro;
}

}  // namespace

CrashTest::CrashTest(CrashOptions o)
    : o_(std::move(o)),
      cluster_(ClusterOptions{.program = o_.program,
                              .dir = o_.dir,
                              .env = o_.break_contract.empty()
                                         ? std::vector<std::string>{}
                                         : std::vector<std::string>{"DEUTERON_BREAK=" + o_.break_contract}}) {
  report_.seed = o_.seed;
  report_.break_contract = o_.break_contract;
}

CrashTest::~CrashTest() = default;

void CrashTest::Progress(const char* format, ...) {
  if (o_.progress == nullptr) return;
  va_list ap;
  va_start(ap, format);
  std::fputs("crashtest: ", o_.progress);
  std::vfprintf(o_.progress, format, ap);
  std::fputc('\n', o_.progress);
  std::fflush(o_.progress);
  va_end(ap);
}

void CrashTest::Violation(const std::string& what) {
  report_.violations.push_back(what);
  Progress("VIOLATION: %s", what.c_str());
}

Status CrashTest::StartBoth() {
  if (!cluster_.dc_running()) {
    if (Status s = cluster_.StartDc(); !s.ok()) return s;
  }
  if (!cluster_.tc_running()) {
    if (Status s = cluster_.StartTc(); !s.ok()) return s;
  }
  return Status::OK();
}

Result<std::unique_ptr<client::Client>> CrashTest::AwaitReady(milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  Status last = Status::Unavailable("no attempt");
  while (Clock::now() < deadline) {
    Result<std::unique_ptr<client::Client>> c =
        client::Client::Connect(cluster_.tc_address(), ClientOptions(o_.bank.threads));
    if (c.ok()) {
      last = (*c)->Run([](client::Transaction& t) -> Status {
        Status g = t.Get(AccountKey(0)).status();
        return g.code() == Code::kNotFound ? Status::OK() : g;  // served: not loaded yet
      });
      if (last.ok()) return c;
      if (!client::IsRetryable(last) && last.code() != Code::kShuttingDown) return last;
      // A TC that failed (fail-stop) serves nothing until it is restarted.
      if (last.message().find("the TC has failed") != std::string_view::npos) return last;
    } else {
      last = c.status();
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  return Status::Unavailable("no transaction served within " + std::to_string(timeout.count()) +
                             " ms of the restart: " + last.ToString());
}

Status CrashTest::RunLoad(Random64& rng, uint64_t cycle, const std::function<void()>& fault) {
  const auto span = static_cast<uint64_t>((o_.max_window - o_.min_window).count());
  const milliseconds window = o_.min_window + milliseconds(rng.Uniform(span + 1));
  const uint64_t load_seed = rng.Next();
  Result<std::unique_ptr<client::Client>> c =
      client::Client::Connect(cluster_.tc_address(), ClientOptions(o_.bank.threads));
  if (!c.ok()) return c.status();
  {
    TransferLoad load(c->get(), oracle_.get(), o_.bank, load_seed);
    std::atomic<bool> stop{false};
    std::vector<std::thread> lists;
    for (uint32_t i = 0; lists_ != nullptr && i < o_.list_append_threads; ++i) {
      lists.emplace_back([&, i] {
        Random64 list_rng(load_seed + 7919 * (i + 1));
        const uint64_t client_id = cycle * 64 + i;
        while (!stop.load(std::memory_order_relaxed)) {
          Status st = lists_->RunOne(**c, client_id, list_rng);
          if (!st.ok()) std::this_thread::sleep_for(milliseconds(2));
        }
      });
    }
    for (uint32_t i = 0; ranges_ != nullptr && i < o_.range_threads; ++i) {
      lists.emplace_back([&, i] {
        Random64 range_rng(load_seed + 104729 * (i + 1));
        while (!stop.load(std::memory_order_relaxed)) {
          if (!ranges_->RunOne(**c, range_rng).ok()) std::this_thread::sleep_for(milliseconds(2));
        }
      });
    }
    load.Start();
    std::this_thread::sleep_for(window);
    fault();
    stop.store(true);
    load.Stop();
    for (std::thread& t : lists) t.join();
  }
  return Status::OK();
}

Status CrashTest::Verify(client::Client& client, const std::string& what) {
  std::vector<std::string> others;
  if (lists_ != nullptr) others.push_back(lists_->options().key_prefix);
  if (ranges_ != nullptr) others.push_back(ranges_->options().prefix);
  Result<StoreContents> contents = ReadStore(client, o_.bank, others);
  if (!contents.ok()) return contents.status();
  report_.keys_checked += contents->keys;
  for (const std::string& p : contents->problems) Violation(what + ": " + p);
  const cli::BankVerdict v = oracle_->Verify(contents->balances);
  const uint64_t acked = oracle_->acknowledged();
  report_.acknowledged += acked;
  report_.unknown += oracle_->in_doubt();
  if (v.ok && contents->problems.empty()) {
    report_.verified += acked;
  } else if (!v.ok) {
    Violation(what + ": " + v.detail);
  }
  // The next cycle starts from what the store holds now (verified, or the
  // violation recorded and not counted twice).
  oracle_ = std::make_unique<cli::BankOracle>(contents->balances);
  if (Status f = CheckFutureRecords(what); !f.ok()) return f;
  if (ranges_ != nullptr) {
    Status r = ranges_->CheckAll(client);
    for (const std::string& v : ranges_->TakeViolations()) Violation(what + ": " + v);
    report_.range_txns = ranges_->committed();
    if (!r.ok()) return r;
  }
  if (lists_ != nullptr) return CheckLists(client, what);
  return Status::OK();
}

Status CrashTest::CheckFutureRecords(const std::string& what) {
  Result<FutureRecords> f =
      FindFutureRecords("127.0.0.1", cluster_.tc_port(), "127.0.0.1", cluster_.dc_port());
  if (!f.ok()) return f.status().WithContext("the LSN probe");
  ++report_.lsn_probes;
  if (f->count != 0) {
    std::string list;
    for (const std::string& e : f->examples) list += (list.empty() ? "" : ", ") + e;
    Violation(what + ": the DC holds " + std::to_string(f->count) + " key" + (f->count == 1 ? "" : "s") +
              " at an LSN at or above the TC's log tail " + std::to_string(f->log_tail) +
              " (records from a lost log tail; contract 1): " + list);
  }
  return Status::OK();
}

Status CrashTest::CheckLists(client::Client& client, const std::string& what) {
  if (Status s = lists_->ReadAll(client); !s.ok()) return s;
  const IsolationReport r = CheckHistory(*history_);
  report_.history_ops_checked = r.ops_checked;
  for (const std::string& a : r.anomalies) {
    if (anomalies_seen_.insert(a).second) Violation(what + ": list-append history: " + a);
  }
  return Status::OK();
}

Status CrashTest::StopAndCheck(const std::string& what) {
  if (cluster_.tc_running()) {
    if (Status s = cluster_.StopTc(); !s.ok()) Violation(what + ": clean stop of the TC: " + s.ToString());
  }
  if (cluster_.dc_running()) {
    if (Status s = cluster_.StopDc(); !s.ok()) Violation(what + ": clean stop of the DC: " + s.ToString());
  }
  for (const auto& [name, dir] : {std::pair<std::string, std::string>{"tc", cluster_.tc_dir()},
                                  {"dc", cluster_.dc_dir()}}) {
    const std::string out = o_.dir + "/check-" + name + ".out";
    Result<int> rc = RunProgram(o_.program, {"check", "--dir", dir, "--scratch", o_.dir}, out);
    if (!rc.ok()) return rc.status();
    ++report_.store_checks;
    if (*rc != 0) {
      Violation(what + ": deuteron check --dir " + dir + " exited " + std::to_string(*rc) +
                " (its output: " + out + ")");
      // Keep that output for the reader.
      std::error_code ec;
      std::filesystem::copy_file(out, out + "." + std::to_string(report_.store_checks),
                                 std::filesystem::copy_options::overwrite_existing, ec);
    }
  }
  return Status::OK();
}

Status CrashTest::KillCycle(Random64& rng, uint64_t cycle) {
  const uint64_t target = rng.Uniform(3);  // 0 the TC, 1 the DC, 2 both
  static constexpr const char* kTargets[] = {"tc", "dc", "both"};
  // What died is restarted at once, while the clients still run: a TC
  // whose DC died holds their calls up to its dc_wait (5 s), which would
  // otherwise all be spent before the restart (crash.md, "kill").
  const bool check_crashed = target == 2 && o_.check_crashed;
  Clock::time_point start{};
  Status restarted;
  Status s = RunLoad(rng, cycle, [&] {
    if (target != 1) cluster_.KillTc();
    if (target != 0) cluster_.KillDc();
    if (check_crashed) return;  // checked below while both are down
    start = Clock::now();
    restarted = StartBoth();
  });
  if (!s.ok()) return s;
  if (!restarted.ok()) return restarted;
  ++report_.faults[static_cast<size_t>(FaultKind::kKill)];
  if (target == 2 && o_.check_crashed) {
    // Both down: what `deuteron check` says of a crashed store (crash.md).
    for (const std::string& dir : {cluster_.tc_dir(), cluster_.dc_dir()}) {
      const std::string out = o_.dir + "/check-crashed.out";
      Result<int> rc = RunProgram(o_.program, {"check", "--dir", dir, "--scratch", o_.dir}, out);
      if (!rc.ok()) return rc.status();
      ++report_.crashed_store_checks;
      if (*rc != 0) {
        ++report_.crashed_store_check_failures;
        std::error_code ec;
        std::filesystem::copy_file(out, out + "." + std::to_string(report_.crashed_store_checks),
                                   std::filesystem::copy_options::overwrite_existing, ec);
        Progress("cycle %llu: deuteron check on the crashed %s failed (%s.%llu)",
                 static_cast<unsigned long long>(cycle), dir.c_str(), out.c_str(),
                 static_cast<unsigned long long>(report_.crashed_store_checks));
      }
    }
  }
  if (check_crashed) {
    start = Clock::now();
    if (Status r = StartBoth(); !r.ok()) return r;
  }
  Result<std::unique_ptr<client::Client>> c = AwaitReady(o_.recovery_timeout);
  if (!c.ok()) return c.status();
  const double ms = MsSince(start);
  report_.recovery_ms.push_back(ms);
  const uint64_t acked = oracle_->acknowledged(), doubt = oracle_->in_doubt();
  const std::string what = "cycle " + std::to_string(cycle) + " (kill " + kTargets[target] + ")";
  if (Status v = Verify(**c, what); !v.ok()) {
    Violation(what + ": reading the recovered store failed: " + v.ToString());
  }
  Progress("cycle %llu/%llu kill %s: %llu acknowledged, %llu in doubt; recovered in %.0f ms",
           static_cast<unsigned long long>(cycle), static_cast<unsigned long long>(o_.cycles),
           kTargets[target], static_cast<unsigned long long>(acked),
           static_cast<unsigned long long>(doubt), ms);
  return Status::OK();
}

Status CrashTest::BitflipCycle(Random64& rng, uint64_t cycle) {
  // Some committed work, then a clean stop: nothing is in doubt, so a
  // flipped bit is the only thing that can change what the store holds.
  Status s = RunLoad(rng, cycle, [] {});
  if (!s.ok()) return s;
  const std::string what = "cycle " + std::to_string(cycle) + " (bitflip)";
  if (Status st = cluster_.StopTc(); !st.ok()) Violation(what + ": clean stop of the TC: " + st.ToString());
  if (Status st = cluster_.StopDc(); !st.ok()) Violation(what + ": clean stop of the DC: " + st.ToString());
  const std::string backup = o_.dir + "/bitflip-backup";
  std::error_code ec;
  std::filesystem::create_directories(backup, ec);
  if (Status c = CopyTree(cluster_.tc_dir(), backup + "/tc"); !c.ok()) return c;
  if (Status c = CopyTree(cluster_.dc_dir(), backup + "/dc"); !c.ok()) return c;
  Result<Flip> flip = FlipRandomBit(cluster_.tc_dir(), cluster_.dc_dir(), rng);
  if (!flip.ok()) return flip.status();
  ++report_.faults[static_cast<size_t>(FaultKind::kBitflip)];
  // What `deuteron check` says of the damaged store (it checks every
  // buffer's checksum, also where the servers would read no record).
  for (const std::string& dir : {cluster_.tc_dir(), cluster_.dc_dir()}) {
    Result<int> rc = RunProgram(o_.program, {"check", "--no-tree", "--dir", dir}, o_.dir + "/check-bitflip.out");
    if (!rc.ok()) return rc.status();
    if (*rc != 0) ++report_.bitflips_found_by_check;
  }
  const auto start = Clock::now();
  // Outcomes: refused at start or an error when read (detected), or served
  // and verified (the flip hit bytes nothing reads). Served and wrong: a
  // violation (Verify records it).
  std::string detected;
  if (Status st = StartBoth(); !st.ok()) {
    detected = "refused at start: " + st.ToString();
  } else {
    Result<std::unique_ptr<client::Client>> c = AwaitReady(o_.recovery_timeout);
    if (!c.ok()) {
      detected = "no transaction served: " + c.status().ToString();
    } else {
      report_.recovery_ms.push_back(MsSince(start));
      if (Status v = Verify(**c, what + " at " + flip->ToString()); !v.ok()) {
        detected = "reading failed: " + v.ToString();
      }
    }
  }
  if (detected.empty()) {
    ++report_.bitflips_harmless;
    Progress("cycle %llu/%llu bitflip %s: recovered and verified (nothing read the flipped bit)",
             static_cast<unsigned long long>(cycle), static_cast<unsigned long long>(o_.cycles),
             flip->ToString().c_str());
  } else {
    ++report_.bitflips_detected;
    const size_t nl = detected.find('\n');
    Progress("cycle %llu/%llu bitflip %s: detected: %s", static_cast<unsigned long long>(cycle),
             static_cast<unsigned long long>(o_.cycles), flip->ToString().c_str(),
             detected.substr(0, nl).c_str());
  }
  // Put the store back as it was before the flip, either way, so that no
  // later cycle (nor `deuteron check`) meets this damage again. The copy
  // holds what was just verified (the read changed nothing).
  cluster_.KillTc();
  cluster_.KillDc();
  if (Status c = CopyTree(backup + "/tc", cluster_.tc_dir()); !c.ok()) return c;
  if (Status c = CopyTree(backup + "/dc", cluster_.dc_dir()); !c.ok()) return c;
  const auto restart = Clock::now();
  if (Status st = StartBoth(); !st.ok()) return st;
  Result<std::unique_ptr<client::Client>> c = AwaitReady(o_.recovery_timeout);
  if (!c.ok()) return c.status();
  report_.recovery_ms.push_back(MsSince(restart));
  if (Status v = Verify(**c, what + " (restored)"); !v.ok()) {
    Violation(what + ": reading the restored store failed: " + v.ToString());
  }
  return Status::OK();
}

bool CrashTest::CountKillPoint(const std::string& text) {
  static const std::string kLine = "deuteron: kill point ";
  const size_t at = text.find(kLine);
  if (at == std::string::npos) return false;
  const size_t end = text.find('\n', at);
  const std::string name =
      text.substr(at + kLine.size(), end == std::string::npos ? std::string::npos : end - at - kLine.size());
  ++report_.kill_points_hit;
  ++report_.kill_point_names[name];
  return true;
}

Status CrashTest::HookCycle(FaultKind kind, Random64& rng, uint64_t cycle) {
  // 0 the TC, 1 the DC, 2 both (power loss, torn writes and stalls only).
  const bool power = kind == FaultKind::kPowerLoss || kind == FaultKind::kTorn || kind == FaultKind::kStall;
  const uint64_t target = rng.Uniform(power ? 3 : 2);
  static constexpr const char* kTargets[] = {"tc", "dc", "both"};
  const bool on_tc = target != 1, on_dc = target != 0;
  const uint64_t fault_seed = rng.Next() % 1000000007;
  std::string env;
  std::string expect;  // the line the server writes as it dies of the fault
  switch (kind) {
    case FaultKind::kKillPoint:
      env = "DEUTERON_KILL_POINT=*:" + o_.kill_point_probability + ":" + std::to_string(fault_seed);
      expect = "deuteron: kill point";
      break;
    case FaultKind::kPowerLoss:
      env = "DEUTERON_FAULT_ENV=powerloss,seed:" + std::to_string(fault_seed);
      expect = "deuteron: power loss";
      break;
    case FaultKind::kTorn:
      env = "DEUTERON_FAULT_ENV=torn,seed:" + std::to_string(fault_seed);
      expect = "deuteron: torn write";
      break;
    case FaultKind::kStall:
      // Longer than the TC's checkpoint interval (300 ms), so that an RSSP
      // proposal (a DC flush) usually falls inside the stall: commits go on
      // reaching the DC while the log cannot move (crash.md, "stall").
      env = "DEUTERON_FAULT_ENV=powerloss,stall:" +
            std::to_string(kMinStallMs + rng.Uniform(kMaxStallMs - kMinStallMs + 1)) +
            ",seed:" + std::to_string(fault_seed);
      expect = "deuteron: power loss";
      break;
    case FaultKind::kEnospc:
    case FaultKind::kEio:
      env = "DEUTERON_FAULT_ENV=" + std::string(kind == FaultKind::kEnospc ? "enospc:" : "eio:") +
            std::to_string(1 + rng.Uniform(o_.io_fault_max_n)) + ",seed:" + std::to_string(fault_seed);
      break;
    default:
      return Status::InvalidArgument("not a hook fault");
  }
  const std::string what = "cycle " + std::to_string(cycle) + " (" + std::string(FaultName(kind)) +
                           " " + kTargets[target] + ", " + env + ")";
  // Restart the target with the fault armed (a clean stop first: the fault
  // is this cycle's only one).
  if (on_tc) {
    if (Status st = cluster_.StopTc(); !st.ok()) Violation(what + ": clean stop of the TC: " + st.ToString());
  }
  if (on_dc) {
    if (Status st = cluster_.StopDc(); !st.ok()) Violation(what + ": clean stop of the DC: " + st.ToString());
  }
  ++report_.faults[static_cast<size_t>(kind)];
  bool died_at_start = false;
  // A server may die of its fault while it starts (a kill point in its
  // recovery, a failed write): that is the fault, not a violation.
  auto start_armed = [&](bool dc) -> Status {
    Status st = dc ? cluster_.StartDc({env}) : cluster_.StartTc({env});
    if (st.ok()) return st;
    const std::string text(st.message());
    if (kind == FaultKind::kKillPoint && CountKillPoint(text)) {
      died_at_start = true;
      return Status::OK();
    }
    if (kind == FaultKind::kEnospc || kind == FaultKind::kEio) {
      died_at_start = true;  // it could not write at start and said so
      return Status::OK();
    }
    return st;
  };
  if (on_dc) {
    if (Status st = start_armed(true); !st.ok()) return st;
  }
  if (on_tc && !died_at_start) {
    if (Status st = start_armed(false); !st.ok()) return st;
  }
  // At the end of the window: collect how each armed server ended (killed
  // if still running), then bring back what is down, unarmed, while the
  // clients still run: a TC whose DC is down holds their calls up to its
  // dc_wait (5 s), which would otherwise all be spent before the restart.
  Clock::time_point start{};
  Status restarted;
  bool collected = false;
  auto collect_and_restart = [&] {
    collected = true;
    for (const bool dc : {false, true}) {
      if (dc ? !on_dc : !on_tc) continue;
      if (dc ? !cluster_.dc_running() : !cluster_.tc_running()) continue;
      const milliseconds wait = expect.empty() || kind == FaultKind::kKillPoint ? milliseconds(0)
                                                                                : milliseconds(10000);
      Result<std::string> line = dc ? cluster_.WaitDcLine(expect.empty() ? "deuteron: " : expect, wait)
                                    : cluster_.WaitTcLine(expect.empty() ? "deuteron: " : expect, wait);
      if (kind == FaultKind::kKillPoint) {
        if (line.ok()) CountKillPoint(*line);
      } else if (!expect.empty() && !line.ok()) {
        Violation(what + ": no \"" + expect + "\" line after SIGUSR2: " + line.status().ToString());
      } else if (expect.empty()) {
        if (dc ? cluster_.dc_running() : cluster_.tc_running()) ++report_.io_faults_survived;
        line.status().PermitUncheckedError();
      }
      if (dc) {
        cluster_.KillDc();
      } else {
        cluster_.KillTc();
      }
    }
    start = Clock::now();
    restarted = StartBoth();
  };
  if (!died_at_start && cluster_.tc_running()) {
    Status s = RunLoad(rng, cycle, [&] {
      if (power) {
        if (on_tc) cluster_.SignalTc(SIGUSR2);
        if (on_dc) cluster_.SignalDc(SIGUSR2);
      }
      collect_and_restart();
    });
    if (!s.ok()) Progress("%s: the workload could not start: %s", what.c_str(), s.ToString().c_str());
  }
  if (!collected) collect_and_restart();
  if (!restarted.ok()) return restarted;
  Result<std::unique_ptr<client::Client>> c = AwaitReady(o_.recovery_timeout);
  if (!c.ok() && (kind == FaultKind::kEnospc || kind == FaultKind::kEio) &&
      c.status().message().find("the TC has failed") != std::string_view::npos) {
    // The DC's I/O error reached the TC (e.g. in restart-to) and the TC
    // stopped itself, as it must; a failed TC is restarted.
    Progress("%s: the TC failed on the DC's error (%s); restarting it", what.c_str(),
             std::string(c.status().message()).substr(0, 160).c_str());
    ++report_.tc_fail_stops;
    cluster_.KillTc();
    if (Status r = StartBoth(); !r.ok()) return r;
    c = AwaitReady(o_.recovery_timeout);
  }
  if (!c.ok()) return c.status();
  const double ms = MsSince(start);
  report_.recovery_ms.push_back(ms);
  const uint64_t acked = oracle_->acknowledged(), doubt = oracle_->in_doubt();
  if (Status v = Verify(**c, what); !v.ok()) {
    Violation(what + ": reading the recovered store failed: " + v.ToString());
  }
  Progress("cycle %llu/%llu %s %s%s: %llu acknowledged, %llu in doubt; recovered in %.0f ms",
           static_cast<unsigned long long>(cycle), static_cast<unsigned long long>(o_.cycles),
           std::string(FaultName(kind)).c_str(), kTargets[target], died_at_start ? " (died starting)" : "",
           static_cast<unsigned long long>(acked), static_cast<unsigned long long>(doubt), ms);
  return Status::OK();
}

Status CrashTest::RpcCycle(Random64& rng, uint64_t cycle) {
  if (proxy_ == nullptr) return Status::Internal("no proxy");
  ProxyFaults f;
  auto draw = [&](double max) { return max * static_cast<double>(rng.Uniform(1001)) / 1000.0; };
  f.delay_p = draw(o_.rpc_faults.delay_p);
  f.max_delay = o_.rpc_faults.max_delay;
  f.drop_p = draw(o_.rpc_faults.drop_p);
  f.reset_p = draw(o_.rpc_faults.reset_p);
  f.duplicate_p = draw(o_.rpc_faults.duplicate_p);
  f.seed = rng.Next();
  const ProxyCounts before = proxy_->counts();
  proxy_->SetFaults(f);
  Status s = RunLoad(rng, cycle, [] {});
  proxy_->SetFaults(ProxyFaults());  // faithful again
  if (!s.ok()) return s;
  const ProxyCounts after = proxy_->counts();
  report_.faults[static_cast<size_t>(FaultKind::kRpc)] = after.delayed + after.dropped + after.reset + after.duplicated;
  report_.rpc = after;
  const auto start = Clock::now();
  Result<std::unique_ptr<client::Client>> c = AwaitReady(o_.recovery_timeout);
  if (!c.ok()) return c.status();
  const double ms = MsSince(start);  // not a recovery: nothing restarted
  const uint64_t acked = oracle_->acknowledged(), doubt = oracle_->in_doubt();
  char buf[160];
  std::snprintf(buf, sizeof(buf), "rpc delay %.3f drop %.3f reset %.3f duplicate %.3f", f.delay_p, f.drop_p,
                f.reset_p, f.duplicate_p);
  const std::string what = "cycle " + std::to_string(cycle) + " (" + buf + ")";
  if (Status v = Verify(**c, what); !v.ok()) {
    Violation(what + ": reading the store failed: " + v.ToString());
  }
  Progress("cycle %llu/%llu %s: %llu frames (%llu delayed, %llu dropped, %llu reset, %llu duplicated), "
           "%llu acknowledged, %llu in doubt; serving again in %.0f ms",
           static_cast<unsigned long long>(cycle), static_cast<unsigned long long>(o_.cycles), buf,
           static_cast<unsigned long long>(after.frames - before.frames),
           static_cast<unsigned long long>(after.delayed - before.delayed),
           static_cast<unsigned long long>(after.dropped - before.dropped),
           static_cast<unsigned long long>(after.reset - before.reset),
           static_cast<unsigned long long>(after.duplicated - before.duplicated),
           static_cast<unsigned long long>(acked), static_cast<unsigned long long>(doubt), ms);
  return Status::OK();
}

Result<CrashReport> CrashTest::Run() {
  Progress("seed %llu: %llu cycles in %s", static_cast<unsigned long long>(o_.seed),
           static_cast<unsigned long long>(o_.cycles), o_.dir.c_str());
  if (std::find(o_.faults.begin(), o_.faults.end(), FaultKind::kRpc) != o_.faults.end()) {
    // The DC's port is fixed by its first start; the proxy forwards to it.
    if (Status s = cluster_.StartDc(); !s.ok()) return s;
    Result<std::unique_ptr<RpcProxy>> p =
        RpcProxy::Start("127.0.0.1", 0, "127.0.0.1", cluster_.dc_port(), ProxyFaults());
    if (!p.ok()) return p.status();
    proxy_ = std::move(p).value();
    cluster_.set_tc_dc_port(proxy_->port());
  }
  if (Status s = StartBoth(); !s.ok()) return s;
  {
    Result<std::unique_ptr<client::Client>> c = AwaitReady(o_.recovery_timeout);
    if (!c.ok()) return c.status();
    if (Status s = LoadAccounts(**c, o_.bank); !s.ok()) return s;
  }
  oracle_ = std::make_unique<cli::BankOracle>(o_.bank.accounts, o_.bank.initial_balance);
  if (o_.list_append_threads > 0) {
    history_ = std::make_unique<History>();
    ListAppendOptions lo;
    lo.keys = 16;
    lists_ = std::make_unique<ListAppendWorkload>(lo, history_.get());
  }
  if (o_.range_threads > 0) ranges_ = std::make_unique<RangeWorkload>(o_.range);
  Random64 rng(o_.seed);
  std::vector<FaultKind> round;
  for (uint64_t cycle = 1; cycle <= o_.cycles; ++cycle) {
    // Each round of |faults| cycles uses every kind once, in a seeded order.
    if (round.empty()) {
      round = o_.faults;
      for (size_t i = round.size(); i > 1; --i) std::swap(round[i - 1], round[rng.Uniform(i)]);
    }
    const FaultKind kind = round.back();
    round.pop_back();
    Status s;
    switch (kind) {
      case FaultKind::kKill:
        s = KillCycle(rng, cycle);
        break;
      case FaultKind::kBitflip:
        s = BitflipCycle(rng, cycle);
        break;
      case FaultKind::kRpc:
        s = RpcCycle(rng, cycle);
        break;
      default:
        s = HookCycle(kind, rng, cycle);
    }
    if (!s.ok()) {
      Violation("cycle " + std::to_string(cycle) + " (" + std::string(FaultName(kind)) +
                "): the servers did not come back: " + s.ToString());
      if (report_.first_violation_cycle == 0) report_.first_violation_cycle = cycle;
      break;
    }
    report_.cycles = cycle;
    if (!report_.violations.empty() && report_.first_violation_cycle == 0) {
      report_.first_violation_cycle = cycle;
      if (o_.until_violation) break;
    }
    if (o_.check_every != 0 && cycle % o_.check_every == 0 && cycle != o_.cycles) {
      if (Status c = StopAndCheck("after cycle " + std::to_string(cycle)); !c.ok()) return c;
      if (Status r = StartBoth(); !r.ok()) {
        Violation("after cycle " + std::to_string(cycle) + ": a clean restart failed: " + r.ToString());
        break;
      }
    }
  }
  if (Status c = StopAndCheck("at the end"); !c.ok()) return c;
  if (history_ != nullptr) {
    if (Status h = history_->Save(o_.dir + "/history.jsonl"); !h.ok()) {
      Progress("saving the history: %s", h.ToString().c_str());
    }
  }
  Progress("%llu cycles, %zu violation%s", static_cast<unsigned long long>(report_.cycles),
           report_.violations.size(), report_.violations.size() == 1 ? "" : "s");
  return report_;
}

}  // namespace deuteron::crash
