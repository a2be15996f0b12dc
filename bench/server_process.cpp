#include "bench/server_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include <fmt/core.h>

namespace deuteron::bench {
namespace {

// A "Name:   1234 kB" field of /proc/PID/status, in bytes; 0 when absent.
uint64_t ProcStatusBytes(pid_t pid, const char* name) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string line;
  const size_t n = std::strlen(name);
  while (std::getline(in, line)) {
    if (line.compare(0, n, name) == 0 && line.size() > n && line[n] == ':') {
      return std::strtoull(line.c_str() + n + 1, nullptr, 10) * 1024;
    }
  }
  return 0;
}

// The port of "... serving DIR on HOST:PORT ..." (0: not such a line).
uint16_t PortOf(const std::string& line) {
  if (line.find("serving") == std::string::npos) return 0;
  const size_t on = line.rfind(" on ");
  if (on == std::string::npos) return 0;
  const size_t colon = line.find(':', on);
  if (colon == std::string::npos) return 0;
  const unsigned long port = std::strtoul(line.c_str() + colon + 1, nullptr, 10);
  return port > 0 && port < 65536 ? static_cast<uint16_t>(port) : 0;
}

}  // namespace

Result<std::unique_ptr<ServerProcess>> ServerProcess::Start(const std::string& program,
                                                            const std::vector<std::string>& args,
                                                            std::chrono::milliseconds timeout) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe");
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return Status::FromErrno(errno, "fork");
  }
  if (pid == 0) {
    dup2(fds[1], 1);  // dup2 clears O_CLOEXEC on fd 1
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  std::unique_ptr<ServerProcess> p(new ServerProcess());
  p->pid_ = pid;
  p->out_fd_ = fds[0];
  // Read the first line, byte by byte (it is short), within the timeout.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string line;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd pfd{p->out_fd_, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
    char c;
    const ssize_t n = read(p->out_fd_, &c, 1);
    if (n <= 0) break;  // it exited
    if (c == '\n') break;
    line.push_back(c);
  }
  p->first_line_ = line;
  p->port_ = PortOf(line);
  if (p->port_ == 0) {
    p->Stop(SIGKILL);
    return Status::IOError(fmt::format("{} {}: did not start serving (first line '{}')", program,
                                       args.empty() ? "" : args[0], line));
  }
  return p;
}

ServerProcess::~ServerProcess() {
  Stop(SIGTERM);
  if (out_fd_ >= 0) close(out_fd_);
}

uint64_t ServerProcess::PeakRssBytes() const {
  return pid_ > 0 ? ProcStatusBytes(pid_, "VmHWM") : 0;
}

uint64_t ServerProcess::RssBytes() const { return pid_ > 0 ? ProcStatusBytes(pid_, "VmRSS") : 0; }

int ServerProcess::Stop(int sig, std::chrono::milliseconds grace) {
  if (pid_ <= 0) return exit_status_;
  kill(pid_, sig);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR)) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
  exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return exit_status_;
}

Result<std::string> FindDeuteron(const std::string& explicit_path) {
  std::string path = explicit_path;
  if (path.empty()) {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) return Status::FromErrno(errno, "readlink /proc/self/exe");
    std::string dir(self, static_cast<size_t>(n));
    dir.resize(dir.rfind('/'));
    path = dir + "/deuteron";
  }
  if (access(path.c_str(), X_OK) != 0) {
    return Status::NotFound(fmt::format("no deuteron program at {} (build the `deuteron` target, "
                                        "or name it with --deuteron)",
                                        path));
  }
  return path;
}

Result<std::string> MakeTempDir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = fmt::format("{}/{}-XXXXXX", tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                                 prefix);
  if (mkdtemp(tmpl.data()) == nullptr) return Status::FromErrno(errno, "mkdtemp " + tmpl);
  return tmpl;
}

}  // namespace deuteron::bench
