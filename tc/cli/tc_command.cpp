#include "tc/cli/tc_command.h"

#include <pthread.h>
#include <signal.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "common/dir_lock.h"
#include "common/env.h"
#include "common/status.h"
#include "protocol/remote_dc.h"
#include "tc/database.h"
#include "tc/server/tc_server.h"
#include "tc/txn_manager.h"
#include "tc/wal/log.h"

namespace deuteron::cli {
namespace {

constexpr const char* kServeUsage =
    "usage: deuteron serve --dir DIR [--listen HOST:PORT] [--memory-budget BYTES]\n"
    "                      [--max-connections N] [--idle-timeout-s S] [--lock-timeout-ms MS]\n"
    "\n"
    "Runs the transactional store in one process: opens (and recovers) the TC and\n"
    "DC in DIR, then serves the TC protocol (Thrift, framed binary) on HOST:PORT,\n"
    "for clients such as the C++ client library (Client::Connect).\n"
    "Ctrl-C or SIGTERM shuts it down cleanly.\n";

constexpr const char* kTcUsage =
    "usage: deuteron tc --dir DIR --dc HOST:PORT [--listen HOST:PORT]\n"
    "                   [--max-connections N] [--idle-timeout-s S] [--lock-timeout-ms MS]\n"
    "\n"
    "Runs a transactional component whose data component is a `deuteron dc`\n"
    "server at --dc: keeps its log in DIR, recovers (restarting the DC to the\n"
    "log's end and replaying), then serves the TC protocol on HOST:PORT.\n"
    "Ctrl-C or SIGTERM shuts it down cleanly.\n";

constexpr const char* kCommonOptions =
    "\n"
    "options:\n"
    "  --dir DIR            data directory (created if absent)\n"
    "  --listen HOST:PORT   address to serve on (default 127.0.0.1:7400;\n"
    "                       port 0 picks a free port, printed at start)\n"
    "  --max-connections N  connections served at once (default 256)\n"
    "  --idle-timeout-s S   close connections idle this long, aborting their\n"
    "                       transactions (default 600)\n"
    "  --lock-timeout-ms MS a lock wait longer than this fails TimedOut (default 10000)\n"
    "  --checkpoint-interval-ms MS  checkpoint (advance the RSSP) at least this often\n"
    "                       while the log grows (default 60000)\n"
    "  --secret-file PATH   the shared secret every client (and, for tc, the DC server)\n"
    "                       must present; else $DEUTERON_SECRET. Required to listen on\n"
    "                       an address other than loopback\n"
    "  --help               show this help and exit\n";

constexpr const char* kServeOptions = "  --memory-budget B    the DC's cache budget in bytes (default 0: none)\n";
constexpr const char* kTcOptions = "  --dc HOST:PORT       the `deuteron dc` server (required)\n";

struct Args {
  std::string dir;
  std::string host = "127.0.0.1";
  uint64_t port = 7400;
  std::string dc_host;
  uint64_t dc_port = 0;
  uint64_t budget = 0, max_connections = 256, idle_s = 600, lock_timeout_ms = 10000;
  uint64_t checkpoint_ms = 60000;
  std::string secret;
};

// The whole file, less one trailing newline.
bool ReadSecret(const std::string& path, std::string* out) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  char buf[4096];
  size_t n = 0;
  out->clear();
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out->append(buf, n);
  std::fclose(f);
  if (!out->empty() && out->back() == '\n') out->pop_back();
  if (!out->empty() && out->back() == '\r') out->pop_back();
  return !out->empty();
}

bool ParseU64(std::string_view s, uint64_t* out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

bool ParseHostPort(std::string_view value, std::string* host, uint64_t* port) {
  const size_t colon = value.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || !ParseU64(value.substr(colon + 1), port) ||
      *port > 65535) {
    return false;
  }
  *host = value.substr(0, colon);
  return true;
}

class Command {
 public:
  Command(const char* name, bool serve) : name_(name), serve_(serve) {}

  void PrintUsage(FILE* out) const {
    std::fputs(serve_ ? kServeUsage : kTcUsage, out);
    std::fputs(kCommonOptions, out);
    std::fputs(serve_ ? kServeOptions : kTcOptions, out);
  }

  int Usage(const std::string& problem) const {
    std::fprintf(stderr, "deuteron %s: %s\n\n", name_, problem.c_str());
    PrintUsage(stderr);
    return 2;
  }

  // 0: parsed; -1: --help printed; otherwise the exit status.
  int Parse(int argc, char** argv, Args* a) const {
    for (int i = 1; i < argc; ++i) {
      const std::string_view arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        PrintUsage(stdout);
        return -1;
      }
      if (i + 1 >= argc) return Usage("missing value for " + std::string(arg));
      const std::string_view value = argv[++i];
      if (arg == "--dir") {
        a->dir = value;
      } else if (arg == "--listen") {
        if (!ParseHostPort(value, &a->host, &a->port)) return Usage("--listen takes HOST:PORT");
      } else if (arg == "--dc" && !serve_) {
        if (!ParseHostPort(value, &a->dc_host, &a->dc_port) || a->dc_port == 0) {
          return Usage("--dc takes HOST:PORT");
        }
      } else if (arg == "--memory-budget" && serve_) {
        if (!ParseU64(value, &a->budget)) return Usage("--memory-budget takes a byte count");
      } else if (arg == "--max-connections") {
        if (!ParseU64(value, &a->max_connections) || a->max_connections == 0) {
          return Usage("--max-connections takes a positive count");
        }
      } else if (arg == "--idle-timeout-s") {
        if (!ParseU64(value, &a->idle_s) || a->idle_s == 0 || a->idle_s > 86400 * 365) {
          return Usage("--idle-timeout-s takes a positive number of seconds");
        }
      } else if (arg == "--lock-timeout-ms") {
        if (!ParseU64(value, &a->lock_timeout_ms) || a->lock_timeout_ms == 0 ||
            a->lock_timeout_ms > 3600000) {
          return Usage("--lock-timeout-ms takes milliseconds, 1 to 3600000");
        }
      } else if (arg == "--checkpoint-interval-ms") {
        if (!ParseU64(value, &a->checkpoint_ms) || a->checkpoint_ms == 0 ||
            a->checkpoint_ms > 86400000) {
          return Usage("--checkpoint-interval-ms takes milliseconds, 1 to 86400000");
        }
      } else if (arg == "--secret-file") {
        if (!ReadSecret(std::string(value), &a->secret)) {
          return Usage("--secret-file: cannot read a nonempty secret from " + std::string(value));
        }
      } else {
        return Usage("unknown option " + std::string(arg));
      }
    }
    if (a->secret.empty()) {
      if (const char* env = std::getenv("DEUTERON_SECRET"); env != nullptr) a->secret = env;
    }
    if (a->dir.empty()) return Usage("--dir is required");
    if (!serve_ && a->dc_port == 0) return Usage("--dc is required");
    return 0;
  }

  // Serves `tm` until SIGINT or SIGTERM; the server is stopped on return.
  int Serve(tc::TxnManager* tm, const Args& a, const sigset_t& signals) const {
    tc::TcServerOptions so;
    so.host = a.host;
    so.port = static_cast<uint16_t>(a.port);
    so.max_connections = a.max_connections;
    so.idle_timeout = std::chrono::seconds(a.idle_s);
    so.shared_secret = a.secret;
    tc::TcServer server(tm, so);
    if (Status s = server.Start(); !s.ok()) {
      std::fprintf(stderr, "deuteron %s: listen %s:%llu: %s\n", name_, a.host.c_str(),
                   static_cast<unsigned long long>(a.port), s.ToString().c_str());
      return 1;
    }
    std::printf("deuteron %s: serving %s on %s:%u\n", name_, a.dir.c_str(), a.host.c_str(),
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
  const bool serve_;
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

int Closed(const char* name, const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "deuteron %s: close: %s\n", name, s.ToString().c_str());
    return 1;
  }
  std::printf("deuteron %s: closed cleanly\n", name);
  return 0;
}

}  // namespace

int RunServeCommand(int argc, char** argv) {
  const Command cmd("serve", /*serve=*/true);
  Args a;
  if (int rc = cmd.Parse(argc, argv, &a); rc != 0) return rc < 0 ? 0 : rc;
  const sigset_t signals = BlockShutdownSignals();
  tc::DatabaseOptions o;
  o.dc.llama.memory_budget = a.budget;
  o.txn.lock_timeout = std::chrono::milliseconds(a.lock_timeout_ms);
  o.txn.checkpoint_interval = std::chrono::milliseconds(a.checkpoint_ms);
  Result<std::unique_ptr<tc::Database>> db = tc::Database::Open(a.dir, o);
  if (!db.ok()) {
    std::fprintf(stderr, "deuteron serve: open %s: %s\n", a.dir.c_str(), db.status().ToString().c_str());
    return 1;
  }
  const int rc = cmd.Serve(&(*db)->txn(), a, signals);
  const int closed = Closed("serve", (*db)->Close());
  return rc != 0 ? rc : closed;
}

int RunTcCommand(int argc, char** argv) {
  const Command cmd("tc", /*serve=*/false);
  Args a;
  if (int rc = cmd.Parse(argc, argv, &a); rc != 0) return rc < 0 ? 0 : rc;
  const sigset_t signals = BlockShutdownSignals();
  Env* env = Env::Posix();
  auto fail = [](const char* what, const std::string& where, const Status& s) {
    std::fprintf(stderr, "deuteron tc: %s %s: %s\n", what, where.c_str(), s.ToString().c_str());
    return 1;
  };
  if (Status s = env->CreateDirs(a.dir); !s.ok()) return fail("create", a.dir, s);
  Result<std::unique_ptr<DirLock>> lock = DirLock::Acquire(env, a.dir);
  if (!lock.ok()) return fail("lock", a.dir, lock.status());
  Result<std::unique_ptr<wal::Log>> log = wal::Log::Open(env, a.dir + "/log", wal::LogOptions());
  if (!log.ok()) return fail("open the log in", a.dir, log.status());
  protocol::RemoteOptions ro;
  ro.host = a.dc_host;
  ro.port = static_cast<uint16_t>(a.dc_port);
  ro.secret = a.secret;
  const std::string dc_where = a.dc_host + ":" + std::to_string(a.dc_port);
  Result<std::unique_ptr<protocol::RemoteDataComponent>> dc = protocol::RemoteDataComponent::Connect(ro);
  if (!dc.ok()) return fail("connect to the DC at", dc_where, dc.status());
  tc::TxnOptions to;
  to.lock_timeout = std::chrono::milliseconds(a.lock_timeout_ms);
  to.checkpoint_interval = std::chrono::milliseconds(a.checkpoint_ms);
  Result<std::unique_ptr<tc::TxnManager>> tm = tc::TxnManager::Open(dc->get(), log->get(), to);
  if (!tm.ok()) return fail("recover against the DC at", dc_where, tm.status());
  const int rc = cmd.Serve(tm->get(), a, signals);
  Status s = (*tm)->Close();
  if (Status l = (*log)->Close(); s.ok()) s = std::move(l);
  return rc != 0 ? rc : Closed("tc", s);
}

}  // namespace deuteron::cli
