#include "tc/cli/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <thread>

namespace deuteron::cli {

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
  // Everything the child needs, built before fork: after it only
  // async-signal-safe calls.
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    ::close(log);
    return Status::FromErrno(err, "fork");
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent died before prctl
    dup2(log, STDOUT_FILENO);
    dup2(log, STDERR_FILENO);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  ::close(log);
  return std::unique_ptr<ServerProcess>(
      new ServerProcess(pid, log_path, static_cast<uint64_t>(st.st_size)));
}

ServerProcess::~ServerProcess() { Kill(); }

void ServerProcess::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

Result<int> ServerProcess::Stop(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return Status::InvalidArgument("the server is not running");
  ::kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      Kill();
      return Status::TimedOut("the server did not exit after SIGTERM");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
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

Result<std::string> ServerProcess::WaitForLine(const std::string& prefix,
                                               std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (FILE* f = std::fopen(log_path_.c_str(), "r"); f != nullptr) {
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
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return Status::Unavailable("the server exited (status " +
                                 std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
                                 ") before \"" + prefix + "\"; its log ends:\n" + LogTail());
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::Unavailable("no \"" + prefix + "\" line in " + log_path_ + " in time");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

uint16_t ServingPort(const std::string& line) {
  const size_t on = line.find(" on ", line.find("serving"));
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

}  // namespace deuteron::cli
