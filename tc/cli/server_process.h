// A program, usually a `deuteron dc`, `tc` or `serve` server, run as a child
// process: by `deuteron demo` (tc/cli/demo_command.h), by the benchmark and
// load drivers (bench/), and by the tests that run the program
// (tests/tc/cli/cli_util.h). Its output goes one of two ways:
//  - a log file (Start): standard output and error appended to it; ready once
//    it prints a line with a given prefix (WaitForLine, e.g. "deuteron dc:
//    serving");
//  - a pipe (StartPiped): standard output (and error, when asked) read line
//    by line (ReadLine, ReadAll); StartServing also reads the first line at
//    once and takes the port from it ("... serving DIR on HOST:PORT ...").
// It is stopped with SIGKILL (Kill: a crash), SIGTERM and a grace period
// (Stop), or any signal; its peak and current resident memory are read from
// /proc (VmHWM, VmRSS) while it runs. Standard input is /dev/null. The child
// is killed when the thread that started it ends (PR_SET_PDEATHSIG: so a
// crashed parent leaves no server behind), unless started with
// die_with_parent false.
//
// Thread safety: a ServerProcess is driven by one thread, the one that
// started it; PeakRssBytes(), RssBytes() and pid() may be called from any
// thread while it runs.
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
  // Starts `program args...` with its standard output and error appended to
  // `log_path`. Errors: IOError (the log file, fork).
  static Result<std::unique_ptr<ServerProcess>> Start(const std::string& program,
                                                      const std::vector<std::string>& args,
                                                      const std::string& log_path);
  // Starts `program args...` with its standard output on a pipe (and its
  // standard error too with merge_stderr; else it is this process's).
  static Result<std::unique_ptr<ServerProcess>> StartPiped(const std::string& program,
                                                           const std::vector<std::string>& args,
                                                           bool merge_stderr = false,
                                                           bool die_with_parent = true);
  // StartPiped, then waits up to `timeout` for the first line and takes the
  // port from it (port(), first_line()). IOError when it exits first or the
  // line is not a serving line (the child is killed).
  static Result<std::unique_ptr<ServerProcess>> StartServing(const std::string& program,
                                                             const std::vector<std::string>& args,
                                                             std::chrono::milliseconds timeout);
  ~ServerProcess();  // Kill() when still running
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Log file: waits until the log holds, after where it ended at Start, a
  // line that starts with `prefix`; pipe: reads lines until one does.
  // Returns that line (without its newline). Unavailable when the process
  // exits first (with the log's last lines) or after `timeout`.
  Result<std::string> WaitForLine(const std::string& prefix, std::chrono::milliseconds timeout);

  // Pipe: the next line of output with its newline (a last unfinished line
  // without); "" at end of output. Blocks.
  std::string ReadLine();
  // Pipe: everything until the end of output.
  std::string ReadAll();

  // SIGKILL, then reaps it.
  void Kill();
  // SIGTERM, then waits up to `timeout` for it to exit; its exit status, or
  // TimedOut (then it is killed). -1: it died of a signal.
  Result<int> Stop(std::chrono::milliseconds timeout);
  // Sends `sig`, waits for the exit (SIGKILL after `grace`) and returns the
  // exit status (-1: ended by a signal). Idempotent: once it is gone, the
  // status it had.
  int Stop(int sig, std::chrono::milliseconds grace = std::chrono::seconds(30));
  // Waits for it to exit by itself; its exit status (-1: a signal).
  int Wait();

  // -1 once it is gone.
  pid_t pid() const { return pid_; }
  // StartServing: the port of its first line and that line.
  uint16_t port() const { return port_; }
  const std::string& first_line() const { return first_line_; }
  // Peak resident bytes of the process so far (VmHWM); 0 once it is gone.
  uint64_t PeakRssBytes() const;
  // Resident bytes now (VmRSS); 0 once it is gone.
  uint64_t RssBytes() const;

 private:
  ServerProcess(pid_t pid, std::string log_path, uint64_t log_start)
      : pid_(pid), log_path_(std::move(log_path)), log_offset_(log_start) {}
  // The log's last lines, for an error message.
  std::string LogTail() const;
  // Pipe: reads what arrived into partial_, waiting up to `wait_ms` (-1:
  // forever) for something; false at end of output or on timeout.
  bool FillFromPipe(int wait_ms);
  // Reaps it when it has exited: its status, or nothing while it runs.
  bool Reaped(int* status);

  pid_t pid_;
  const std::string log_path_;  // empty: pipe
  uint64_t log_offset_;  // how far WaitForLine has read
  std::string partial_;  // read and not yet returned
  int out_fd_ = -1;      // pipe: its reading end
  bool eof_ = false;     // pipe: end of output seen
  int exit_status_ = 0;  // once gone
  uint16_t port_ = 0;
  std::string first_line_;
};

// The port in a "... serving DIR on HOST:PORT ..." line; 0 when none.
uint16_t ServingPort(const std::string& line);

// A "Name:   1234 kB" field of /proc/PID/status (VmRSS, VmHWM), in bytes;
// 0 when absent.
uint64_t ProcStatusBytes(pid_t pid, const std::string& field);

}  // namespace deuteron::cli
