#include "tc/cli/server_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>
#include <utility>

namespace deuteron::cli {
namespace {

// Where the child's output goes: fds to put on 1 and 2 (-1: leave it).
struct Redirect {
  int out = -1;
  int err = -1;
  bool die_with_parent = true;
};

// Forks and runs `program args...` with `r` applied and stdin on /dev/null.
Result<pid_t> Spawn(const std::string& program, const std::vector<std::string>& args, const Redirect& r) {
  // Everything the child needs, built before fork: after it only
  // async-signal-safe calls.
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return Status::FromErrno(errno, "fork");
  if (pid == 0) {
    if (r.die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // the parent died before prctl
    }
    if (r.out >= 0) dup2(r.out, STDOUT_FILENO);  // dup2 clears O_CLOEXEC
    if (r.err >= 0) dup2(r.err, STDERR_FILENO);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    // Nothing else of the parent's: a socket of its own (a client's, a
    // proxy's) held open by the child would not close when the parent
    // closes it, and its peer would wait for a timeout instead.
    close_range(3, ~0U, 0);
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

int ExitStatus(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

}  // namespace

Result<std::unique_ptr<ServerProcess>> ServerProcess::Start(const std::string& program,
                                                            const std::vector<std::string>& args,
                                                            const std::string& log_path) {
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return Status::FromErrno(errno, "open " + log_path);
  struct stat st = {};
  if (fstat(log, &st) != 0) {
    const int err = errno;
    ::close(log);
    return Status::FromErrno(err, "stat " + log_path);
  }
  Result<pid_t> pid = Spawn(program, args, Redirect{log, log, true});
  ::close(log);
  if (!pid.ok()) return pid.status();
  return std::unique_ptr<ServerProcess>(new ServerProcess(*pid, log_path, static_cast<uint64_t>(st.st_size)));
}

Result<std::unique_ptr<ServerProcess>> ServerProcess::StartPiped(const std::string& program,
                                                                 const std::vector<std::string>& args,
                                                                 bool merge_stderr, bool die_with_parent) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe");
  Result<pid_t> pid = Spawn(program, args, Redirect{fds[1], merge_stderr ? fds[1] : -1, die_with_parent});
  ::close(fds[1]);
  if (!pid.ok()) {
    ::close(fds[0]);
    return pid.status();
  }
  std::unique_ptr<ServerProcess> p(new ServerProcess(*pid, "", 0));
  p->out_fd_ = fds[0];
  return p;
}

Result<std::unique_ptr<ServerProcess>> ServerProcess::StartServing(const std::string& program,
                                                                   const std::vector<std::string>& args,
                                                                   std::chrono::milliseconds timeout) {
  Result<std::unique_ptr<ServerProcess>> started = StartPiped(program, args);
  if (!started.ok()) return started.status();
  std::unique_ptr<ServerProcess> p = std::move(started).value();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t nl = std::string::npos;
  while ((nl = p->partial_.find('\n')) == std::string::npos && !p->eof_) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !p->FillFromPipe(static_cast<int>(left.count()))) break;
  }
  p->first_line_ = p->partial_.substr(0, nl);
  p->partial_.erase(0, nl == std::string::npos ? std::string::npos : nl + 1);
  p->port_ = ServingPort(p->first_line_);
  if (p->port_ == 0) {
    p->Kill();
    return Status::IOError(program + " " + (args.empty() ? "" : args[0]) +
                           ": did not start serving (first line '" + p->first_line_ + "')");
  }
  return p;
}

ServerProcess::~ServerProcess() {
  Kill();
  if (out_fd_ >= 0) ::close(out_fd_);
}

bool ServerProcess::Reaped(int* status) {
  if (pid_ <= 0) return false;
  if (waitpid(pid_, status, WNOHANG) != pid_) return false;
  pid_ = -1;
  exit_status_ = ExitStatus(*status);
  return true;
}

void ServerProcess::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  exit_status_ = ExitStatus(status);
}

Result<int> ServerProcess::Stop(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return Status::InvalidArgument("the server is not running");
  ::kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    if (Reaped(&status)) return exit_status_;
    if (std::chrono::steady_clock::now() > deadline) {
      Kill();
      return Status::TimedOut("the server did not exit after SIGTERM");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int ServerProcess::Stop(int sig, std::chrono::milliseconds grace) {
  if (pid_ <= 0) return exit_status_;
  ::kill(pid_, sig);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (true) {
    int status = 0;
    if (Reaped(&status)) return exit_status_;
    if (std::chrono::steady_clock::now() >= deadline) {
      Kill();
      return exit_status_;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(sig == SIGKILL ? 1 : 10));
  }
}

int ServerProcess::Wait() {
  if (pid_ <= 0) return exit_status_;
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  exit_status_ = ExitStatus(status);
  return exit_status_;
}

uint64_t ServerProcess::PeakRssBytes() const { return pid_ > 0 ? ProcStatusBytes(pid_, "VmHWM") : 0; }
uint64_t ServerProcess::RssBytes() const { return pid_ > 0 ? ProcStatusBytes(pid_, "VmRSS") : 0; }

bool ServerProcess::FillFromPipe(int wait_ms) {
  if (out_fd_ < 0 || eof_) return false;
  pollfd pfd{out_fd_, POLLIN, 0};
  const int ready = poll(&pfd, 1, wait_ms);
  if (ready < 0 && errno == EINTR) return true;
  if (ready <= 0) return false;
  char buf[4096];
  const ssize_t n = ::read(out_fd_, buf, sizeof(buf));
  if (n < 0 && errno == EINTR) return true;
  if (n <= 0) {
    eof_ = true;
    return false;
  }
  partial_.append(buf, static_cast<size_t>(n));
  return true;
}

std::string ServerProcess::ReadLine() {
  size_t nl = std::string::npos;
  while ((nl = partial_.find('\n')) == std::string::npos && FillFromPipe(-1)) {
  }
  std::string line = partial_.substr(0, nl == std::string::npos ? std::string::npos : nl + 1);
  partial_.erase(0, line.size());
  return line;
}

std::string ServerProcess::ReadAll() {
  while (FillFromPipe(-1)) {
  }
  return std::exchange(partial_, std::string());
}

std::string ServerProcess::LogTail() const {
  FILE* f = std::fopen(log_path_.c_str(), "r");
  if (f == nullptr) return "";
  std::string all;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
    all.append(buf, n);
    if (all.size() > 8192) all.erase(0, all.size() - 2048);
  }
  std::fclose(f);
  if (all.size() > 2048) all.erase(0, all.size() - 2048);
  return all;
}

Result<std::string> ServerProcess::WaitForLine(const std::string& prefix, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (out_fd_ >= 0) {
      while (FillFromPipe(0)) {
      }
    } else if (FILE* f = std::fopen(log_path_.c_str(), "r"); f != nullptr) {
      if (fseeko(f, static_cast<off_t>(log_offset_), SEEK_SET) == 0) {
        char buf[4096];
        size_t n = 0;
        while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
          log_offset_ += n;
          partial_.append(buf, n);
        }
      }
      std::fclose(f);
    }
    size_t nl = 0;
    while ((nl = partial_.find('\n')) != std::string::npos) {
      std::string line = partial_.substr(0, nl);
      partial_.erase(0, nl + 1);
      if (line.compare(0, prefix.size(), prefix) == 0) return line;
    }
    if (pid_ <= 0) return Status::Unavailable("the server is not running");
    int status = 0;
    if (Reaped(&status)) {
      return Status::Unavailable("the server exited (status " + std::to_string(exit_status_) + ") before \"" +
                                 prefix + "\"" +
                                 (out_fd_ >= 0 ? std::string() : "; its log ends:\n" + LogTail()));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::Unavailable("no \"" + prefix + "\" line in " +
                                 (out_fd_ >= 0 ? std::string("its output") : log_path_) + " in time");
    }
    if (out_fd_ >= 0) {
      FillFromPipe(5);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
}

uint16_t ServingPort(const std::string& line) {
  const size_t serving = line.find("serving");
  if (serving == std::string::npos) return 0;
  const size_t on = line.find(" on ", serving);
  if (on == std::string::npos) return 0;
  const size_t colon = line.find(':', on);
  if (colon == std::string::npos) return 0;
  unsigned long port = 0;
  size_t i = colon + 1;
  while (i < line.size() && line[i] >= '0' && line[i] <= '9' && port <= 65535) {
    port = port * 10 + static_cast<unsigned long>(line[i++] - '0');
  }
  return port > 65535 ? 0 : static_cast<uint16_t>(port);
}

uint64_t ProcStatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > field.size() && line.compare(0, field.size(), field) == 0 && line[field.size()] == ':') {
      return std::strtoull(line.c_str() + field.size() + 1, nullptr, 10) * 1024;
    }
  }
  return 0;
}

}  // namespace deuteron::cli
