// A `deuteron dc` or `deuteron tc` server run as a child process, for
// `deuteron demo` (tc/cli/demo_command.h): started with its standard output
// and error appended to a log file, ready once it prints its "serving" line,
// killed with SIGKILL (a crash) or stopped with SIGTERM (a clean shutdown).
// The child is also killed if this process dies (PR_SET_PDEATHSIG).
//
// Thread safety: a ServerProcess is used by one thread, the one that started
// it (the death signal follows the thread that forked).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace deuteron::cli {

class ServerProcess {
 public:
  // Starts `program args...`. Errors: IOError (the log file, fork).
  static Result<std::unique_ptr<ServerProcess>> Start(const std::string& program,
                                                      const std::vector<std::string>& args,
                                                      const std::string& log_path);
  ~ServerProcess();  // Kill() when still running
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Waits until the log holds, after where it ended at Start, a line that
  // starts with `prefix` (e.g. "deuteron dc: serving"); returns that line.
  // Unavailable when the process exits first (with the log's last lines) or
  // after `timeout`.
  Result<std::string> WaitForLine(const std::string& prefix, std::chrono::milliseconds timeout);

  // SIGKILL, then reaps it.
  void Kill();
  // SIGTERM, then waits up to `timeout` for it to exit; its exit status, or
  // TimedOut (then it is killed). -1: it died of a signal.
  Result<int> Stop(std::chrono::milliseconds timeout);

  pid_t pid() const { return pid_; }

 private:
  ServerProcess(pid_t pid, std::string log_path, uint64_t log_start)
      : pid_(pid), log_path_(std::move(log_path)), log_offset_(log_start) {}
  // The log's last lines, for an error message.
  std::string LogTail() const;

  pid_t pid_;
  const std::string log_path_;
  uint64_t log_offset_;  // how far WaitForLine has read
  std::string partial_;  // an unfinished last line
};

// The port in a "... serving DIR on HOST:PORT ..." line; 0 when none.
uint16_t ServingPort(const std::string& line);

}  // namespace deuteron::cli
