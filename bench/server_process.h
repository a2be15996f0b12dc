// ServerProcess: a `deuteron` server (`dc`, `tc`, `serve`) run by a benchmark
// or load driver as a child process: started with its stdout on a pipe, the
// port it serves on read from its first line ("deuteron dc: serving DIR on
// HOST:PORT ..."), stopped at the end (SIGTERM, then SIGKILL after a grace
// period), and its peak resident memory read from /proc (VmHWM) while it runs.
// Its stderr is the caller's.
//
// FindDeuteron: the `deuteron` program next to the running one (the build puts
// every program in build/<preset>/bin/), or an explicit path.
//
// Thread safety: a ServerProcess is driven by one thread; PeakRssBytes() and
// pid() may be called from any thread while it runs.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace deuteron::bench {

class ServerProcess {
 public:
  // Runs `program args...`, waits up to `timeout` for its first stdout line
  // and parses the port from it. IOError when it cannot start, exits first
  // or prints something else (the child is killed).
  static Result<std::unique_ptr<ServerProcess>> Start(const std::string& program,
                                                      const std::vector<std::string>& args,
                                                      std::chrono::milliseconds timeout);
  ~ServerProcess();  // Stop(SIGTERM) when still running
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& first_line() const { return first_line_; }
  // Peak resident bytes of the process so far (VmHWM); 0 once it is gone.
  uint64_t PeakRssBytes() const;
  // Resident bytes now (VmRSS); 0 once it is gone.
  uint64_t RssBytes() const;
  // Sends `sig`, waits for the exit (SIGKILL after `grace`) and returns the
  // exit status (-1: ended by a signal). Idempotent (later calls: the first
  // status).
  int Stop(int sig, std::chrono::milliseconds grace = std::chrono::seconds(30));

 private:
  ServerProcess() = default;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  uint16_t port_ = 0;
  int exit_status_ = 0;
  std::string first_line_;
};

// `explicit_path` when not empty, else `deuteron` in the directory of this
// program (/proc/self/exe). NotFound when it is not an executable file.
Result<std::string> FindDeuteron(const std::string& explicit_path);

// A fresh directory under $TMPDIR (or /tmp) named `prefix`-XXXXXX.
Result<std::string> MakeTempDir(const std::string& prefix);

}  // namespace deuteron::bench
