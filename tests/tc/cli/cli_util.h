// Test helpers for the `deuteron` commands as processes: a child process
// with its stdout on a pipe, and a fresh temporary directory.
// DEUTERON_BIN names the program (set by tests/CMakeLists.txt).
//
// Thread safety: a Child is used by one thread.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace deuteron::test {

// A child process running `deuteron` with args; its stdout (and its stderr
// too, with merge_stderr) is a pipe.
class Child {
 public:
  explicit Child(std::vector<std::string> args, bool merge_stderr = false) {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      dup2(fds[1], 1);
      if (merge_stderr) dup2(fds[1], 2);
      close(fds[0]);
      close(fds[1]);
      // Nothing else of the test's: a socket of its own (a client's, a
      // proxy's) held open by the child would not close when the test
      // closes it, and its peer would wait for a timeout instead.
      close_range(3, ~0U, 0);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(DEUTERON_BIN));
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(DEUTERON_BIN, argv.data());
      _exit(127);
    }
    close(fds[1]);
    out_ = fdopen(fds[0], "r");
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_ != nullptr) fclose(out_);
  }
  // The process id (-1 once stopped or waited for).
  pid_t pid() const { return pid_; }
  // The next line of the child's stdout ("" at end of file).
  std::string ReadLine() {
    char buf[512];
    if (fgets(buf, sizeof(buf), out_) == nullptr) return "";
    return buf;
  }
  // Everything the child writes until it closes its output.
  std::string ReadAll() {
    std::string all, line;
    while (!(line = ReadLine()).empty()) all += line;
    return all;
  }
  // Sends `sig` and returns the exit status (-1 if killed by a signal).
  int Stop(int sig) {
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
};

inline std::string TempDir() {
  char tmpl[] = "/tmp/deuteron-cli-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return tmpl;
}

// The port in a command's first line, "... serving DIR on HOST:PORT ...".
inline uint16_t ServingPort(const std::string& line) {
  INFO("first line: " << line);
  REQUIRE(line.find("serving") != std::string::npos);
  const size_t on = line.rfind(" on ");
  REQUIRE(on != std::string::npos);
  const size_t colon = line.find(':', on);
  REQUIRE(colon != std::string::npos);
  return static_cast<uint16_t>(std::stoi(line.substr(colon + 1)));
}

}  // namespace deuteron::test
