// Test helpers for the `deuteron` commands as processes: a child process
// with its stdout on a pipe (tc/cli/server_process.h), and a fresh temporary
// directory.
// DEUTERON_BIN names the program (set by tests/CMakeLists.txt).
//
// Thread safety: a Child is used by one thread.
#pragma once

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tc/cli/server_process.h"

namespace deuteron::test {

// A child process running `deuteron` with args; its stdout (and its stderr
// too, with merge_stderr) is a pipe. A thin test face (REQUIRE on a failed
// start, killed when destroyed) over cli::ServerProcess.
class Child {
 public:
  explicit Child(std::vector<std::string> args, bool merge_stderr = false) {
    Result<std::unique_ptr<cli::ServerProcess>> p =
        cli::ServerProcess::StartPiped(DEUTERON_BIN, args, merge_stderr, /*die_with_parent=*/false);
    INFO(p.status().ToString());
    REQUIRE(p.ok());
    process_ = std::move(p).value();
  }
  // The process id (-1 once stopped or waited for).
  pid_t pid() const { return process_->pid(); }
  // The next line of the child's stdout ("" at end of file).
  std::string ReadLine() { return process_->ReadLine(); }
  // Everything the child writes until it closes its output.
  std::string ReadAll() { return process_->ReadAll(); }
  // Sends `sig` and returns the exit status (-1 if killed by a signal).
  int Stop(int sig) { return process_->Stop(sig, std::chrono::hours(1)); }
  int Wait() { return process_->Wait(); }
  cli::ServerProcess& process() { return *process_; }

 private:
  std::unique_ptr<cli::ServerProcess> process_;
};

inline std::string TempDir() {
  char tmpl[] = "/tmp/deuteron-cli-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return tmpl;
}

// "127.0.0.1:PORT": where the child processes listen and are reached.
inline std::string LoopbackAddress(uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

// The port in a command's first line, "... serving DIR on HOST:PORT ...".
inline uint16_t ServingPort(const std::string& line) {
  INFO("first line: " << line);
  const uint16_t port = cli::ServingPort(line);
  REQUIRE(port != 0);
  return port;
}

}  // namespace deuteron::test
