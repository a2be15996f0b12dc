#include "tc/cli/dc_command.h"

#include <pthread.h>
#include <signal.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "common/env.h"
#include "common/status.h"
#include "dc/dc.h"
#include "dc/dc_server.h"

namespace deuteron::cli {
namespace {

constexpr const char* kUsage =
    "usage: deuteron dc --dir DIR [--listen HOST:PORT] [--memory-budget BYTES]\n"
    "                   [--max-connections N] [--idle-timeout-s S] [--io-threads N]\n"
    "                   [--max-above-esl-share F]\n"
    "\n"
    "Runs a data component server: opens (and recovers) the store in DIR, then\n"
    "serves the DC protocol (Thrift, framed binary) on HOST:PORT.\n"
    "Ctrl-C or SIGTERM shuts it down cleanly: flush, checkpoint, close.\n"
    "\n"
    "options:\n"
    "  --dir DIR            data directory (created if absent)\n"
    "  --listen HOST:PORT   address to serve on (default 127.0.0.1:7410;\n"
    "                       port 0 picks a free port, printed at start)\n"
    "  --memory-budget B    cache memory budget in bytes (default 0: none)\n"
    "  --max-connections N  connections served at once (default 256)\n"
    "  --idle-timeout-s S   close connections idle this long (default 600)\n"
    "  --io-threads N       event loops, each one thread; reads run on them (default 4)\n"
    "  --max-above-esl-share F\n"
    "                       share of the memory budget that records above the TC's\n"
    "                       ESL (which the DC may not flush) may hold; past it apply\n"
    "                       answers BUSY naming the ESL that frees them (default 0.5;\n"
    "                       0: no bound; no bound either without a memory budget)\n"
    "  --help               show this help and exit\n";

int Usage(const char* problem) {
  std::fprintf(stderr, "deuteron dc: %s\n\n%s", problem, kUsage);
  return 2;
}

bool ParseU64(std::string_view s, uint64_t* out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

int RunDcCommand(int argc, char** argv) {
  std::string dir;
  std::string host = "127.0.0.1";
  uint64_t port = 7410, budget = 0, max_connections = 256, idle_s = 600, io_threads = 4;
  double above_esl_share = dc::DcOptions{}.max_above_esl_share;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) return Usage(("missing value for " + std::string(arg)).c_str());
    const std::string_view value = argv[++i];
    if (arg == "--dir") {
      dir = value;
    } else if (arg == "--listen") {
      const size_t colon = value.rfind(':');
      if (colon == std::string_view::npos || colon == 0 ||
          !ParseU64(value.substr(colon + 1), &port) || port > 65535) {
        return Usage("--listen takes HOST:PORT");
      }
      host = value.substr(0, colon);
    } else if (arg == "--memory-budget") {
      if (!ParseU64(value, &budget)) return Usage("--memory-budget takes a byte count");
    } else if (arg == "--max-connections") {
      if (!ParseU64(value, &max_connections) || max_connections == 0) {
        return Usage("--max-connections takes a positive count");
      }
    } else if (arg == "--idle-timeout-s") {
      if (!ParseU64(value, &idle_s) || idle_s == 0) {
        return Usage("--idle-timeout-s takes a positive number of seconds");
      }
    } else if (arg == "--io-threads") {
      if (!ParseU64(value, &io_threads) || io_threads == 0 || io_threads > 256) {
        return Usage("--io-threads takes a count from 1 to 256");
      }
    } else if (arg == "--max-above-esl-share") {
      const auto [end, ec] =
          std::from_chars(value.data(), value.data() + value.size(), above_esl_share);
      if (ec != std::errc() || end != value.data() + value.size() || !(above_esl_share >= 0) ||
          above_esl_share > 1) {
        return Usage("--max-above-esl-share takes a number from 0 to 1");
      }
    } else {
      return Usage(("unknown option " + std::string(arg)).c_str());
    }
  }
  if (dir.empty()) return Usage("--dir is required");

  // Block the shutdown signals in every thread (threads inherit the mask);
  // the main thread takes them with sigwait once the server runs.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  dc::DcOptions options;
  options.llama.memory_budget = budget;
  options.max_above_esl_share = above_esl_share;
  Result<std::unique_ptr<dc::Dc>> opened = dc::Dc::Open(Env::Posix(), dir, options);
  if (!opened.ok()) {
    std::fprintf(stderr, "deuteron dc: open %s: %s\n", dir.c_str(),
                 opened.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<dc::Dc> dc = std::move(opened).value();

  dc::DcServerOptions so;
  so.host = host;
  so.port = static_cast<uint16_t>(port);
  so.max_connections = max_connections;
  so.idle_timeout = std::chrono::seconds(idle_s);
  so.io_threads = static_cast<int>(io_threads);
  dc::DcServer server(dc.get(), so);
  Status started = server.Start();
  if (!started.ok()) {
    std::fprintf(stderr, "deuteron dc: listen %s:%llu: %s\n", host.c_str(),
                 static_cast<unsigned long long>(port), started.ToString().c_str());
    dc->Close().PermitUncheckedError();
    return 1;
  }
  Result<DcHealth> health = dc->Health();
  std::printf(
      "deuteron dc: serving %s on %s:%u (rssp %llu, max durable lsn %llu, incarnation %llu)\n",
      dir.c_str(), host.c_str(), static_cast<unsigned>(server.port()),
      static_cast<unsigned long long>(health.ok() ? health->rssp : 0),
      static_cast<unsigned long long>(health.ok() ? health->max_durable_lsn : 0),
      static_cast<unsigned long long>(health.ok() ? health->incarnation : 0));
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  std::printf("deuteron dc: %s, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  std::fflush(stdout);
  server.Stop();
  Status closed = dc->Close();
  if (!closed.ok()) {
    std::fprintf(stderr, "deuteron dc: close: %s\n", closed.ToString().c_str());
    return 1;
  }
  std::printf("deuteron dc: closed cleanly\n");
  return 0;
}

}  // namespace deuteron::cli
