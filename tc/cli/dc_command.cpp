#include "tc/cli/dc_command.h"

#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "common/env.h"
#include "common/fault_hooks.h"
#include "common/heap.h"
#include "common/status.h"
#include "dc/dc.h"
#include "dc/dc_server.h"

namespace deuteron::cli {
namespace {

using std::chrono::milliseconds;

struct DcArgs {
  std::string dir;
  HostPort listen{"127.0.0.1", 7410};
  uint64_t budget = 0;
  uint64_t max_connections = 256;
  milliseconds idle_timeout{600'000};
  uint64_t io_threads = 4;
  double above_esl_share = dc::DcOptions{}.max_above_esl_share;
  uint64_t max_frame = dc::DcServerOptions{}.max_frame_size;
  uint64_t request_memory = dc::DcServerOptions{}.request_memory_limit;
  milliseconds frame_deadline = std::chrono::duration_cast<milliseconds>(dc::DcServerOptions{}.frame_deadline);
  std::string secret_file;
  uint64_t cleaning_trigger = dc::DcOptions{}.llama.cleaning_trigger_segments;
  uint64_t cleaning_target = dc::DcOptions{}.llama.cleaning_target_segments;
  uint64_t checkpoint_bytes = dc::DcOptions{}.checkpoint_interval_bytes;
  milliseconds checkpoint_interval{dc::DcOptions{}.checkpoint_interval_ms};
  int64_t heap_decay_ms = HeapRetention{}.dirty_decay_ms;
  uint64_t flush_buffer_size = dc::DcOptions{}.llama.lss.buffer_size;
};

int RunDc(const DcArgs& a);

}  // namespace

void AddDcCommand(CLI::App& app, Runner& runner) {
  auto a = std::make_shared<DcArgs>();
  CLI::App* cmd = app.add_subcommand(
      "dc",
      "Runs a data component server: opens (and recovers) the store in DIR, then serves the DC\n"
      "protocol (Thrift, framed binary) on HOST:PORT. Ctrl-C or SIGTERM shuts it down cleanly:\n"
      "flush, checkpoint, close.");
  cmd->add_option("--dir", a->dir, "data directory (created if absent)")->required()->type_name("DIR");
  AddAddressOption(cmd, "--listen", &a->listen,
                   "address to serve on; port 0 picks a free port, printed at start. A non-loopback "
                   "address requires a shared secret");
  AddSizeOption(cmd, "--memory-budget", &a->budget,
                "the process's memory budget (0: none): the cache gets 3/4 of it less the flush "
                "buffers (4 x --flush-buffer-size), at least 1/4, and freed memory the allocator "
                "keeps is purged over it; peak resident memory stays within 1.1x plus a fixed allowance (dc/dc.md)");
  AddSizeOption(cmd, "--flush-buffer-size", &a->flush_buffer_size,
                "size of each of the LSS's flush buffers (1 MiB to 32 MiB); the ring of them is "
                "part of the memory budget, so a small budget wants small buffers (dc/dc.md, \"The "
                "memory budget\")");
  cmd->add_option("--max-connections", a->max_connections,
                  "connections open at once (1 to 1048576); when full, a new one closes the one longest without a request")
      ->check(Within(1, uint64_t{1} << 20))->type_name("N");
  AddDurationOption(cmd, "--idle-timeout,--idle-timeout-s", &a->idle_timeout, std::chrono::seconds(1),
                    "close a connection with no whole request for this long (bare number: seconds)");
  cmd->add_option("--io-threads", a->io_threads, "event loops (1 to 256), each one thread; reads run on them")
      ->check(Within(1, 256))->type_name("N");
  cmd->add_option("--max-above-esl-share", a->above_esl_share,
                  "share (0 to 1) of the memory budget that records above the TC's ESL (which the DC may not "
                  "flush) may hold; past it apply answers BUSY naming the ESL that frees them (0: no "
                  "bound; no bound either without a memory budget)")
      ->check(CLI::Range(0.0, 1.0).description(""))->type_name("F");
  AddSizeOption(cmd, "--max-frame-size", &a->max_frame,
                "largest request or reply payload (64 B to 4 GiB - 1): a longer frame gets TOO_LARGE "
                "and the connection closes");
  AddSizeOption(cmd, "--request-memory-limit", &a->request_memory,
                "bytes held for requests server-wide (frames being read, requests queued and running, "
                "replies not yet sent); at least the frame size. Past it the server stops reading");
  AddDurationOption(cmd, "--frame-deadline,--frame-deadline-ms", &a->frame_deadline, milliseconds(1),
                    "a frame must arrive whole, and a reply be taken, within this of starting (bare "
                    "number: milliseconds)");
  cmd->add_option("--secret-file", a->secret_file,
                  "the shared secret clients present with authenticate (trailing newlines dropped); "
                  "else $DEUTERON_SECRET (protocol/protocol.md)")
      ->type_name("PATH");
  cmd->add_option("--cleaning-trigger", a->cleaning_trigger,
                  "clean the LSS when more than N 64 MiB segments are held uncleaned, or twice what "
                  "the last cleaning left (0: never clean)")
      ->check(Within(0, 1'000'000))->type_name("N");
  cmd->add_option("--cleaning-target", a->cleaning_target, "clean until N segments remain uncleaned")
      ->check(Within(1, 1'000'000))->type_name("N");
  AddSizeOption(cmd, "--checkpoint-bytes", &a->checkpoint_bytes,
                "checkpoint once the LSS grew this much past the last checkpoint: bounds recovery (0: off)");
  AddDurationOption(cmd, "--checkpoint-interval,--checkpoint-ms", &a->checkpoint_interval, milliseconds(1),
                    "checkpoint after this long with anything written (0: off; bare number: milliseconds)");
  cmd->add_option_function<std::string>(
         "--heap-decay,--heap-decay-ms",
         [a](const std::string& text) {
           if (text == "-1") {
             a->heap_decay_ms = -1;
             return;
           }
           Result<std::chrono::microseconds> d = ParseDuration(text, milliseconds(1));
           if (!d.ok() || *d > std::chrono::hours(1)) {
             throw CLI::ValidationError("--heap-decay", "a duration up to 1h, or -1, not '" + text + "'");
           }
           a->heap_decay_ms = std::chrono::duration_cast<milliseconds>(*d).count();
         },
         "the allocator returns freed pages to the OS over this long (-1: jemalloc's own settings; "
         "bare number: milliseconds)")
      ->type_name("DURATION")
      ->default_str(std::to_string(a->heap_decay_ms) + "ms");
  cmd->callback([a, &runner] {
    if (a->max_frame < 64 || a->max_frame > UINT32_MAX) {
      UsageError("--max-frame-size takes 64 B to 4294967295 B");
    }
    if (a->request_memory < a->max_frame) {
      UsageError("--request-memory-limit must be at least --max-frame-size");
    }
    if (a->flush_buffer_size < (uint64_t{1} << 20) || a->flush_buffer_size > (uint64_t{32} << 20)) {
      UsageError("--flush-buffer-size takes 1 MiB to 32 MiB");
    }
    if (a->idle_timeout.count() <= 0) UsageError("--idle-timeout must be positive");
    if (a->cleaning_trigger != 0 && a->cleaning_target > a->cleaning_trigger) {
      UsageError("--cleaning-target may not exceed --cleaning-trigger");
    }
    runner.Set([a] { return RunDc(*a); });
  });
}

namespace {

int RunDc(const DcArgs& a) {
  const std::string& dir = a.dir;
  const std::string& host = a.listen.host;
  const uint64_t port = a.listen.port;
  const uint64_t budget = a.budget;
  const std::string& secret_file = a.secret_file;
  dc::DcOptions options;
  options.checkpoint_interval_bytes = a.checkpoint_bytes;
  options.checkpoint_interval_ms = static_cast<uint64_t>(a.checkpoint_interval.count());
  const uint64_t cleaning_trigger = a.cleaning_trigger, cleaning_target = a.cleaning_target;
  const int64_t heap_decay_ms = a.heap_decay_ms;
  const double above_esl_share = a.above_esl_share;
  // First, before any thread starts (common/fault_hooks.h).
  Result<Env*> env = fault::SetUpFromEnvironment();
  if (!env.ok()) {
    std::fprintf(stderr, "deuteron dc: %s\n", env.status().ToString().c_str());
    return 2;
  }
  Result<std::string> secret_read = LoadSecret(secret_file);
  if (!secret_read.ok()) {
    std::fprintf(stderr, "deuteron dc: %s\n", std::string(secret_read.status().message()).c_str());
    return 1;
  }
  const std::string secret = std::move(secret_read).value();
  if (Status s = CheckStoreDir(dir, StoreKind::kDc); !s.ok()) {
    std::fprintf(stderr, "deuteron dc: %s\n", std::string(s.message()).c_str());
    return 1;
  }

  // Block the shutdown signals in every thread (threads inherit the mask);
  // the main thread takes them with sigwait once the server runs.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  options.llama.cleaning_trigger_segments = cleaning_trigger;
  options.llama.cleaning_target_segments = cleaning_target;
  options.llama.lss.buffer_size = a.flush_buffer_size;
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
  Result<std::unique_ptr<dc::Dc>> opened = dc::Dc::Open(*env, dir, options);
  if (!opened.ok()) {
    std::fprintf(stderr, "deuteron dc: open %s: %s\n", dir.c_str(),
                 opened.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<dc::Dc> dc = std::move(opened).value();

  dc::DcServerOptions so;
  so.host = host;
  so.port = static_cast<uint16_t>(port);
  so.max_connections = a.max_connections;
  so.idle_timeout = a.idle_timeout;
  so.io_threads = static_cast<int>(a.io_threads);
  so.max_frame_size = static_cast<uint32_t>(a.max_frame);
  so.request_memory_limit = a.request_memory;
  so.frame_deadline = a.frame_deadline;
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

}  // namespace
}  // namespace deuteron::cli
