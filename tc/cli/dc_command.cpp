#include "tc/cli/dc_command.h"

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

#include "common/env.h"
#include "common/heap.h"
#include "common/status.h"
#include "dc/dc.h"
#include "dc/dc_server.h"

namespace deuteron::cli {
namespace {

constexpr const char* kUsage =
    "usage: deuteron dc --dir DIR [--listen HOST:PORT] [--memory-budget BYTES]\n"
    "                   [--max-connections N] [--idle-timeout-s S] [--io-threads N]\n"
    "                   [--max-above-esl-share F]\n"
    "                   [--max-frame-size BYTES] [--request-memory-limit BYTES]\n"
    "                   [--frame-deadline-ms MS] [--secret-file PATH]\n"
    "                   [--cleaning-trigger N] [--cleaning-target N]\n"
    "                   [--checkpoint-bytes B] [--checkpoint-ms MS] [--heap-decay-ms MS]\n"
    "\n"
    "Runs a data component server: opens (and recovers) the store in DIR, then\n"
    "serves the DC protocol (Thrift, framed binary) on HOST:PORT.\n"
    "Ctrl-C or SIGTERM shuts it down cleanly: flush, checkpoint, close.\n"
    "\n"
    "options:\n"
    "  --dir DIR            data directory (created if absent)\n"
    "  --listen HOST:PORT   address to serve on (default 127.0.0.1:7410;\n"
    "                       port 0 picks a free port, printed at start).\n"
    "                       A non-loopback address requires a shared secret.\n"
    "  --memory-budget B    the process's memory budget in bytes (default 0: none):\n"
    "                       the cache gets 3/4 of B less the flush buffers\n"
    "                       (16 MiB), at least B/4, and freed memory the allocator keeps is\n"
    "                       purged over B; peak resident memory stays within\n"
    "                       1.1 B plus a fixed allowance (dc/dc.md)\n"
    "  --max-connections N  connections open at once (default 256); when full,\n"
    "                       a new one closes the one longest without a request\n"
    "  --idle-timeout-s S   close a connection with no whole request for S\n"
    "                       seconds (default 600)\n"
    "  --io-threads N       event loops, each one thread; reads run on them (default 4)\n"
    "  --max-above-esl-share F\n"
    "                       share of the memory budget that records above the TC's\n"
    "                       ESL (which the DC may not flush) may hold; past it apply\n"
    "                       answers BUSY naming the ESL that frees them (default 0.5;\n"
    "                       0: no bound; no bound either without a memory budget)\n"
    "  --max-frame-size B   largest request or reply payload (default 67108864,\n"
    "                       64 MiB): a longer frame gets TOO_LARGE and the\n"
    "                       connection closes; a longer reply is TOO_LARGE\n"
    "  --request-memory-limit B\n"
    "                       bytes held for requests server-wide: frames being\n"
    "                       read, requests queued and running, replies not yet\n"
    "                       sent (default 134217728, 128 MiB; at least the frame\n"
    "                       size). Past it the server stops reading (backpressure)\n"
    "  --frame-deadline-ms MS\n"
    "                       a frame must arrive whole, and a reply be taken by\n"
    "                       the client, within MS of starting (default 5000)\n"
    "  --secret-file PATH   the shared secret clients present with authenticate\n"
    "                       (trailing newlines dropped); else the environment\n"
    "                       variable DEUTERON_SECRET. A call before authenticate,\n"
    "                       or a wrong token, gets UNAUTHENTICATED and the\n"
    "                       connection closes. See protocol/protocol.md.\n"
    "  --cleaning-trigger N clean the LSS when more than N 64 MiB segments are\n"
    "                       held uncleaned, or twice what the last cleaning left\n"
    "                       (default 4; 0: never clean)\n"
    "  --cleaning-target N  clean until N segments remain uncleaned (default 2)\n"
    "  --checkpoint-bytes B checkpoint once the LSS grew B bytes past the last\n"
    "                       checkpoint: bounds recovery (default 67108864; 0: off)\n"
    "  --checkpoint-ms MS   checkpoint after MS with anything written (default\n"
    "                       60000; 0: off)\n"
    "  --heap-decay-ms MS   the allocator returns freed pages to the OS over MS\n"
    "                       (default 1000; -1: jemalloc's own settings)\n"
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
  const dc::DcServerOptions defaults;
  uint64_t max_frame = defaults.max_frame_size;
  uint64_t request_memory = defaults.request_memory_limit;
  uint64_t frame_deadline_ms = static_cast<uint64_t>(defaults.frame_deadline.count());
  std::string secret_file;
  dc::DcOptions options;
  uint64_t cleaning_trigger = options.llama.cleaning_trigger_segments;
  uint64_t cleaning_target = options.llama.cleaning_target_segments;
  int64_t heap_decay_ms = HeapRetention{}.dirty_decay_ms;
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
    } else if (arg == "--max-frame-size") {
      if (!ParseU64(value, &max_frame) || max_frame < 64 || max_frame > UINT32_MAX) {
        return Usage("--max-frame-size takes a byte count from 64 to 4294967295");
      }
    } else if (arg == "--request-memory-limit") {
      if (!ParseU64(value, &request_memory)) return Usage("--request-memory-limit takes a byte count");
    } else if (arg == "--frame-deadline-ms") {
      if (!ParseU64(value, &frame_deadline_ms)) {
        return Usage("--frame-deadline-ms takes a number of milliseconds");
      }
    } else if (arg == "--secret-file") {
      secret_file = value;
    } else if (arg == "--cleaning-trigger") {
      if (!ParseU64(value, &cleaning_trigger) || cleaning_trigger > 1'000'000) {
        return Usage("--cleaning-trigger takes a segment count up to 1000000");
      }
    } else if (arg == "--cleaning-target") {
      if (!ParseU64(value, &cleaning_target) || cleaning_target == 0 ||
          cleaning_target > 1'000'000) {
        return Usage("--cleaning-target takes a segment count from 1 to 1000000");
      }
    } else if (arg == "--checkpoint-bytes") {
      if (!ParseU64(value, &options.checkpoint_interval_bytes)) {
        return Usage("--checkpoint-bytes takes a byte count");
      }
    } else if (arg == "--checkpoint-ms") {
      if (!ParseU64(value, &options.checkpoint_interval_ms)) {
        return Usage("--checkpoint-ms takes a number of milliseconds");
      }
    } else if (arg == "--heap-decay-ms") {
      uint64_t ms = 0;
      if (value == "-1") {
        heap_decay_ms = -1;
      } else if (ParseU64(value, &ms) && ms <= 3'600'000) {
        heap_decay_ms = static_cast<int64_t>(ms);
      } else {
        return Usage("--heap-decay-ms takes milliseconds up to 3600000, or -1");
      }
    } else {
      return Usage(("unknown option " + std::string(arg)).c_str());
    }
  }
  if (dir.empty()) return Usage("--dir is required");
  if (request_memory < max_frame) {
    return Usage("--request-memory-limit must be at least --max-frame-size");
  }
  std::string secret;
  if (!secret_file.empty()) {
    Result<std::string> read = ReadFileToString(Env::Posix(), secret_file);
    if (!read.ok()) {
      std::fprintf(stderr, "deuteron dc: --secret-file %s: %s\n", secret_file.c_str(),
                   read.status().ToString().c_str());
      return 1;
    }
    secret = std::move(read).value();
    while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
    if (secret.empty()) {
      std::fprintf(stderr, "deuteron dc: --secret-file %s is empty\n", secret_file.c_str());
      return 1;
    }
  } else if (const char* env = std::getenv("DEUTERON_SECRET"); env != nullptr) {
    secret = env;
  }

  // Block the shutdown signals in every thread (threads inherit the mask);
  // the main thread takes them with sigwait once the server runs.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (cleaning_trigger != 0 && cleaning_target > cleaning_trigger) {
    return Usage("--cleaning-target may not exceed --cleaning-trigger");
  }
  options.llama.cleaning_trigger_segments = cleaning_trigger;
  options.llama.cleaning_target_segments = cleaning_target;
  // The budget is the process's (dc/dc.md, "The memory budget").
  options.llama.memory_budget = dc::CacheBudgetFor(budget, options.llama.lss);
  options.heap_purge_above = budget;
  if (heap_decay_ms >= 0) {
    HeapRetention retention;
    retention.dirty_decay_ms = heap_decay_ms;
    Status s = ConfigureHeapRetention(retention);
    if (!s.ok() && s.code() != Code::kNotSupported) {
      std::fprintf(stderr, "deuteron dc: allocator settings: %s\n", s.ToString().c_str());
    }
  }
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
  so.max_frame_size = static_cast<uint32_t>(max_frame);
  so.request_memory_limit = request_memory;
  so.frame_deadline = std::chrono::milliseconds(frame_deadline_ms);
  so.shared_secret = secret;
  so.max_multiget_keys = options.max_multiget_keys;
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
