#include "tc/cli/tc_command.h"

#include <pthread.h>
#include <signal.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "common/dir_lock.h"
#include "common/env.h"
#include "common/fault_hooks.h"
#include "common/heap.h"
#include "common/status.h"
#include "protocol/remote_dc.h"
#include "tc/cli/progress.h"
#include "tc/database.h"
#include "tc/server/tc_server.h"
#include "tc/txn_manager.h"
#include "tc/wal/log.h"

namespace deuteron::cli {
namespace {

struct Args {
  std::string dir;
  HostPort listen{"127.0.0.1", 7400};
  HostPort dc;
  uint64_t budget = 0, max_connections = 256;
  std::chrono::milliseconds idle_timeout{600'000};
  std::chrono::milliseconds lock_timeout{10'000};
  std::chrono::milliseconds checkpoint_interval{60'000};
  std::string secret_file;
  std::string secret;  // loaded at run time
  // The TC server's memory budget (tc/server/tc_server.md, "The memory
  // budget"; `tc`: --memory-budget, `serve`: --tc-memory-budget) and the
  // server layer's limits (protocol/protocol.md, "Limits").
  uint64_t tc_budget = tc::TcServiceOptions{}.memory_budget;
  uint64_t max_txn_bytes = 0;
  uint64_t max_frame = tc::TcServerOptions{}.max_frame_size;
  uint64_t request_memory = tc::TcServerOptions{}.request_memory_limit;
  uint64_t worker_threads = static_cast<uint64_t>(tc::TcServerOptions{}.worker_threads);
  uint64_t io_threads = static_cast<uint64_t>(tc::TcServerOptions{}.io_threads);
};

// The options `serve` and `tc` share.
void AddCommonOptions(CLI::App* cmd, Args* a) {
  cmd->add_option("--dir", a->dir, "data directory (created if absent)")->required()->type_name("DIR");
  AddAddressOption(cmd, "--listen", &a->listen, "address to serve on; port 0 picks a free port, printed at start");
  cmd->add_option("--max-connections", a->max_connections, "connections served at once")
      ->check(Within(1, uint64_t{1} << 20))->type_name("N");
  AddDurationOption(cmd, "--idle-timeout,--idle-timeout-s", &a->idle_timeout, std::chrono::seconds(1),
                    "close connections idle this long, aborting their transactions (bare number: seconds)");
  AddDurationOption(cmd, "--lock-timeout,--lock-timeout-ms", &a->lock_timeout, std::chrono::milliseconds(1),
                    "a lock wait longer than this fails TIMED_OUT, 1ms to 1h (bare number: milliseconds)");
  AddDurationOption(cmd, "--checkpoint-interval,--checkpoint-interval-ms", &a->checkpoint_interval,
                    std::chrono::milliseconds(1),
                    "checkpoint (advance the RSSP) at least this often while the log grows, 1ms to 1d "
                    "(bare number: milliseconds)");
  cmd->add_option("--secret-file", a->secret_file,
                  "the shared secret every client (and, for tc, the DC server) must present; else "
                  "$DEUTERON_SECRET. Required to listen on an address other than loopback")
      ->type_name("PATH");
  AddSizeOption(cmd, "--max-transaction-bytes", &a->max_txn_bytes,
                "most bytes of one transaction's writes (as its commit record encodes them); more gets "
                "TOO_LARGE (0: the most the log takes in one record, about 1 MiB)");
  AddSizeOption(cmd, "--max-frame-size", &a->max_frame, "largest request or reply frame, payload bytes");
  AddSizeOption(cmd, "--request-memory-limit", &a->request_memory,
                "bytes held for requests being read, run and answered, server-wide (at least "
                "--max-frame-size); over it the server reads no more until some is released");
  cmd->add_option("--worker-threads", a->worker_threads,
                  "threads that run calls (each call may wait for a lock: more lock waits at once queue)")
      ->check(Within(1, 4096))->type_name("N");
  cmd->add_option("--io-threads", a->io_threads, "event loops (1 to 256), each one thread")
      ->check(Within(1, 256))->type_name("N");
}

void CheckCommon(const Args& a) {
  if (a.idle_timeout.count() <= 0 || a.idle_timeout > std::chrono::hours(24 * 365)) {
    UsageError("--idle-timeout takes 1ms to 365d");
  }
  if (a.lock_timeout.count() <= 0 || a.lock_timeout > std::chrono::hours(1)) {
    UsageError("--lock-timeout takes 1ms to 1h");
  }
  if (a.checkpoint_interval.count() <= 0 || a.checkpoint_interval > std::chrono::hours(24)) {
    UsageError("--checkpoint-interval takes 1ms to 1d");
  }
  if (a.max_frame < 64 || a.max_frame > UINT32_MAX) UsageError("--max-frame-size takes 64 B to 4294967295 B");
  if (a.request_memory < a.max_frame) UsageError("--request-memory-limit must be at least --max-frame-size");
}

// The TC budget must hold the log's buffers (charged at start) and leave
// room for transactions: at least twice the buffers.
void CheckTcBudget(const Args& a, const char* flag) {
  const uint64_t buffers = wal::LogOptions{}.buffer_size;
  if (a.tc_budget != 0 && a.tc_budget < 2 * buffers) {
    UsageError(std::string(flag) + " must be 0 (none) or at least " + std::to_string(2 * buffers >> 20) +
               " MiB (twice the log's buffer)");
  }
}

class Command {
 public:
  explicit Command(const char* name) : name_(name) {}

  // Loads the secret; false (printed) when it cannot.
  bool LoadSecretInto(Args* a) const {
    Result<std::string> s = LoadSecret(a->secret_file);
    if (!s.ok()) {
      std::fprintf(stderr, "deuteron %s: %s\n", name_, std::string(s.status().message()).c_str());
      return false;
    }
    a->secret = std::move(s).value();
    return true;
  }

  // Serves `tm` until SIGINT or SIGTERM; the server is stopped on return.
  int Serve(tc::TxnManager* tm, uint64_t log_buffer_bytes, const Args& a, const sigset_t& signals) const {
    tc::TcServerOptions so;
    so.host = a.listen.host;
    so.port = a.listen.port;
    so.max_connections = a.max_connections;
    so.idle_timeout = a.idle_timeout;
    so.shared_secret = a.secret;
    so.max_frame_size = static_cast<uint32_t>(a.max_frame);
    so.request_memory_limit = a.request_memory;
    so.worker_threads = static_cast<int>(a.worker_threads);
    so.io_threads = static_cast<int>(a.io_threads);
    so.service.memory_budget = a.tc_budget;
    so.service.memory_reserved = log_buffer_bytes;  // the log's ring, allocated at open
    tc::TcServer server(tm, so);
    if (Status s = server.Start(); !s.ok()) {
      std::fprintf(stderr, "deuteron %s: listen %s: %s\n", name_, a.listen.ToString().c_str(),
                   s.ToString().c_str());
      return 1;
    }
    std::printf("deuteron %s: serving %s on %s:%u\n", name_, a.dir.c_str(), a.listen.host.c_str(),
                static_cast<unsigned>(server.port()));
    std::fflush(stdout);
    int sig = 0;
    sigwait(&signals, &sig);
    std::printf("deuteron %s: %s, shutting down\n", name_, sig == SIGINT ? "SIGINT" : "SIGTERM");
    std::fflush(stdout);
    server.Stop();
    return 0;
  }

  const char* name() const { return name_; }

 private:
  const char* const name_;
};

// Blocks the shutdown signals in every thread (threads inherit the mask);
// the main thread takes them with sigwait once the server runs.
sigset_t BlockShutdownSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// A progress line for the replay of Open's recovery. The TxnManager keeps
// the callback and calls it again from its own thread when it later
// recovers a DC: those calls, after Finish, do nothing. The line starts at
// the first call, when the replay does: its rate and estimate are the
// replay's, not diluted by the opening before it (the DC's recovery, which
// took 2 s of a 3.4 s open in the pty test, and made the first estimate an
// hour). No replay, no line.
class ReplayProgress {
 public:
  explicit ReplayProgress(const char* what) : progress_(std::make_shared<Shared>(what)) {}
  std::function<void(uint64_t, uint64_t)> callback() const {
    return [p = progress_](uint64_t done, uint64_t total) {
      std::lock_guard<std::mutex> l(p->mu);
      if (p->finished) return;
      if (!p->line.has_value()) p->line.emplace(p->what, total, Progress::kBytes);
      p->line->SetTotal(total);
      p->line->Update(done);
    };
  }
  void Finish() {
    std::lock_guard<std::mutex> l(progress_->mu);
    progress_->finished = true;
    if (progress_->line.has_value()) progress_->line->Finish();
  }

 private:
  struct Shared {
    explicit Shared(const char* w) : what(w) {}
    const std::string what;
    std::mutex mu;
    bool finished = false;          // GUARDED_BY(mu)
    std::optional<Progress> line;   // GUARDED_BY(mu)
  };
  std::shared_ptr<Shared> progress_;
};

int Closed(const char* name, const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "deuteron %s: close: %s\n", name, s.ToString().c_str());
    return 1;
  }
  std::printf("deuteron %s: closed cleanly\n", name);
  return 0;
}


int RunServe(Args& a) {
  const Command cmd("serve");
  // First, before any thread starts (common/fault_hooks.h).
  Result<Env*> env = fault::SetUpFromEnvironment();
  if (!env.ok()) {
    std::fprintf(stderr, "deuteron serve: %s\n", env.status().ToString().c_str());
    return 2;
  }
  if (!cmd.LoadSecretInto(&a)) return 1;
  if (Status s = CheckStoreDir(a.dir, StoreKind::kServe); !s.ok()) {
    std::fprintf(stderr, "deuteron serve: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const sigset_t signals = BlockShutdownSignals();
  tc::DatabaseOptions o;
  o.env = *env;
  o.dc.llama.memory_budget = a.budget;
  o.txn.lock_timeout = a.lock_timeout;
  o.txn.checkpoint_interval = a.checkpoint_interval;
  o.txn.max_write_set_bytes = a.max_txn_bytes;
  ReplayProgress progress("serve: replaying the log");
  o.txn.replay_progress = progress.callback();
  Result<std::unique_ptr<tc::Database>> db = tc::Database::Open(a.dir, o);
  progress.Finish();
  if (!db.ok()) {
    std::fprintf(stderr, "deuteron serve: open %s: %s\n", a.dir.c_str(), db.status().ToString().c_str());
    return 1;
  }
  const int rc = cmd.Serve(&(*db)->txn(), o.log.buffer_size, a, signals);
  const int closed = Closed("serve", (*db)->Close());
  return rc != 0 ? rc : closed;
}

int RunTc(Args& a) {
  const Command cmd("tc");
  Result<Env*> hooked = fault::SetUpFromEnvironment();  // first: before any thread starts
  if (!hooked.ok()) {
    std::fprintf(stderr, "deuteron tc: %s\n", hooked.status().ToString().c_str());
    return 2;
  }
  if (!cmd.LoadSecretInto(&a)) return 1;
  if (Status s = CheckStoreDir(a.dir, StoreKind::kTc); !s.ok()) {
    std::fprintf(stderr, "deuteron tc: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const sigset_t signals = BlockShutdownSignals();
  Env* env = *hooked;
  auto fail = [](const char* what, const std::string& where, const Status& s) {
    std::fprintf(stderr, "deuteron tc: %s %s: %s\n", what, where.c_str(), s.ToString().c_str());
    return 1;
  };
  if (Status s = env->CreateDirs(a.dir); !s.ok()) return fail("create", a.dir, s);
  Result<std::unique_ptr<DirLock>> lock = DirLock::Acquire(env, a.dir);
  if (!lock.ok()) return fail("lock", a.dir, lock.status());
  // Freed memory goes back to the OS within about a second (what the TC
  // held for clients that left): its budget bounds what it holds.
  if (Status s = ConfigureHeapRetention(HeapRetention{}); !s.ok() && s.code() != Code::kNotSupported) {
    std::fprintf(stderr, "deuteron tc: allocator settings: %s\n", s.ToString().c_str());
  }
  Result<std::unique_ptr<wal::Log>> log = wal::Log::Open(env, a.dir + "/log", wal::LogOptions());
  if (!log.ok()) return fail("open the log in", a.dir, log.status());
  protocol::RemoteOptions ro;
  ro.host = a.dc.host;
  ro.port = a.dc.port;
  ro.secret = a.secret;
  const std::string dc_where = a.dc.ToString();
  Result<std::unique_ptr<protocol::RemoteDataComponent>> dc = protocol::RemoteDataComponent::Connect(ro);
  if (!dc.ok()) return fail("connect to the DC at", dc_where, dc.status());
  tc::TxnOptions to;
  to.lock_timeout = a.lock_timeout;
  to.checkpoint_interval = a.checkpoint_interval;
  to.max_write_set_bytes = a.max_txn_bytes;
  ReplayProgress progress("tc: replaying the log");
  to.replay_progress = progress.callback();
  Result<std::unique_ptr<tc::TxnManager>> tm = tc::TxnManager::Open(dc->get(), log->get(), to);
  progress.Finish();
  if (!tm.ok()) return fail("recover against the DC at", dc_where, tm.status());
  const int rc = cmd.Serve(tm->get(), wal::LogOptions{}.buffer_size, a, signals);
  Status s = (*tm)->Close();
  Status l = (*log)->Close();
  // The first failure is the one reported. (Left unread, the log's OK
  // status aborted a checked build: a failed TC died at SIGTERM.)
  if (s.ok()) s = std::move(l); else l.PermitUncheckedError();
  return rc != 0 ? rc : Closed("tc", s);
}

}  // namespace

void AddServeCommand(CLI::App& app, Runner& runner) {
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Runs the transactional store in one process: opens (and recovers) the TC and DC in DIR, then\n"
      "serves the TC protocol (Thrift, framed binary) on HOST:PORT, for clients such as the C++\n"
      "client library (Client::Connect) and `deuteron shell`. Ctrl-C or SIGTERM shuts it down cleanly.");
  AddCommonOptions(cmd, a.get());
  AddSizeOption(cmd, "--memory-budget", &a->budget, "the DC's cache budget (0: none)");
  AddSizeOption(cmd, "--tc-memory-budget", &a->tc_budget,
                "the TC's memory budget: sessions, open transactions' writes and locks, the log's buffer; "
                "a begin or call over it is refused UNAVAILABLE (0: none)");
  cmd->callback([a, &runner] {
    CheckCommon(*a);
    CheckTcBudget(*a, "--tc-memory-budget");
    runner.Set([a] { return RunServe(*a); });
  });
}

void AddTcCommand(CLI::App& app, Runner& runner) {
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "tc",
      "Runs a transactional component whose data component is a `deuteron dc` server at --dc: keeps\n"
      "its log in DIR, recovers (restarting the DC to the log's end and replaying), then serves the\n"
      "TC protocol on HOST:PORT. Ctrl-C or SIGTERM shuts it down cleanly.");
  AddCommonOptions(cmd, a.get());
  AddAddressOption(cmd, "--dc", &a->dc, "the `deuteron dc` server")->required();
  AddSizeOption(cmd, "--memory-budget", &a->tc_budget,
                "the TC's memory budget: sessions, open transactions' writes and locks, the log's buffer; "
                "a begin or call over it is refused UNAVAILABLE (0: none)");
  cmd->callback([a, &runner] {
    CheckCommon(*a);
    CheckTcBudget(*a, "--memory-budget");
    if (a->dc.port == 0) UsageError("--dc needs a port other than 0");
    runner.Set([a] { return RunTc(*a); });
  });
}

}  // namespace deuteron::cli
