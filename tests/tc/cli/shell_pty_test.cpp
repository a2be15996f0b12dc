// `deuteron shell` as a program: on a pseudo-terminal (forkpty) a transaction,
// an error and history (the up arrow recalls the previous line, libedit);
// against a `deuteron serve` server; and with a script on standard input (no
// prompts or banner, exit status 1 when a command failed).
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/tc/cli/cli_util.h"

namespace deuteron::test {
namespace {

// `deuteron shell ARGS` on a pseudo-terminal of 100 x 30.
class PtyShell {
 public:
  PtyShell(std::vector<std::string> args, const std::string& history) {
    struct winsize ws = {};
    ws.ws_row = 30;
    ws.ws_col = 100;
    pid_ = forkpty(&fd_, nullptr, nullptr, &ws);
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      setenv("TERM", "xterm", 1);
      setenv("DEUTERON_HISTORY", history.c_str(), 1);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(DEUTERON_BIN));
      argv.push_back(const_cast<char*>("shell"));
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(DEUTERON_BIN, argv.data());
      _exit(127);
    }
  }
  ~PtyShell() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(fd_);
  }

  // Types `keys` once the shell reads the terminal in raw mode. libedit
  // prints its prompt before it leaves canonical mode, and a Ctrl-D typed in
  // that window is taken by the terminal's line discipline (it reaches the
  // shell as nothing): a person cannot type that fast, a test can. On Linux
  // the master's termios are the terminal's.
  void Send(const std::string& keys) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    struct termios t = {};
    while (tcgetattr(fd_, &t) == 0 && (t.c_lflag & ICANON) != 0) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      usleep(1000);
    }
    REQUIRE(write(fd_, keys.data(), keys.size()) == static_cast<ssize_t>(keys.size()));
  }

  // Reads until the output since the last call holds `want`; returns that
  // output. Fails after 20 s.
  std::string ReadUntil(const std::string& want) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (seen_.find(want) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      INFO("waiting for '" << want << "'; the terminal shows: " << seen_);
      REQUIRE(left.count() > 0);
      struct pollfd p = {fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      const ssize_t n = read(fd_, buf, sizeof(buf));
      REQUIRE(n > 0);
      seen_.append(buf, static_cast<size_t>(n));
    }
    const size_t end = seen_.find(want) + want.size();
    std::string out = seen_.substr(0, end);
    seen_.erase(0, end);
    return out;
  }

  // Waits up to 30 s for the shell to exit, reading what it still writes
  // meanwhile (a child writing to a terminal nobody reads would block on a
  // full buffer), and returns its exit status (-1: killed by a signal).
  int Wait() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      INFO("waiting for the shell to exit; the terminal shows: " << seen_);
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      struct pollfd p = {fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      const ssize_t n = read(fd_, buf, sizeof(buf));
      if (n > 0) seen_.append(buf, static_cast<size_t>(n));
    }
    pid_ = -1;
    INFO("the terminal shows: " << seen_);
    CHECK(seen_.find("ERROR") == std::string::npos);  // no sanitizer report
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string seen_;
};

// Runs `deuteron shell ARGS` with `script` on standard input; its standard
// output and error in *out and *err; returns the exit status.
int RunScript(const std::vector<std::string>& args, const std::string& script, std::string* out,
              std::string* err) {
  const std::string dir = TempDir();
  const std::string in_path = dir + "/in", out_path = dir + "/out", err_path = dir + "/err";
  FILE* f = std::fopen(in_path.c_str(), "w");
  REQUIRE(f != nullptr);
  std::fputs(script.c_str(), f);
  std::fclose(f);
  std::string cmd = std::string(DEUTERON_BIN) + " shell";
  for (const std::string& a : args) cmd += " '" + a + "'";
  cmd += " <" + in_path + " >" + out_path + " 2>" + err_path;
  const int status = std::system(cmd.c_str());
  auto slurp = [](const std::string& path) {
    std::string s;
    FILE* g = std::fopen(path.c_str(), "r");
    REQUIRE(g != nullptr);
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof(buf), g)) > 0) s.append(buf, n);
    std::fclose(g);
    return s;
  };
  *out = slurp(out_path);
  *err = slurp(err_path);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_CASE("deuteron shell on a terminal: a transaction, an error, history", "[tc][cli][shell]") {
  const std::string dir = TempDir();
  PtyShell sh({"--dir", dir + "/db"}, dir + "/history");
  sh.ReadUntil("Type help");
  sh.ReadUntil("deuteron> ");
  sh.Send("begin\r");
  sh.ReadUntil("begun transaction");
  sh.ReadUntil(")> ");  // the prompt names the transaction
  sh.Send("put greeting hello\r");
  sh.ReadUntil("ok");
  sh.Send("commit\r");
  sh.ReadUntil("committed (");
  sh.ReadUntil("deuteron> ");

  sh.Send("frobnicate\r");
  sh.ReadUntil("error: unknown command 'frobnicate'");
  sh.ReadUntil("deuteron> ");

  sh.Send("get greeting\r");
  sh.ReadUntil("hello");
  sh.ReadUntil("deuteron> ");
  // Up arrow, Enter: the previous line again.
  sh.Send("\x1b[A");
  sh.ReadUntil("get greeting");
  sh.Send("\r");
  sh.ReadUntil("hello");
  sh.ReadUntil("deuteron> ");
  sh.Send("\x04");  // Ctrl-D leaves
  CHECK(sh.Wait() == 0);

  // The history was kept: a new session recalls the last line.
  PtyShell again({"--dir", dir + "/db"}, dir + "/history");
  again.ReadUntil("deuteron> ");
  again.Send("\x1b[A\r");
  again.ReadUntil("hello");
  again.Send("quit\r");
  CHECK(again.Wait() == 0);
}

TEST_CASE("deuteron shell runs a script from standard input", "[tc][cli][shell]") {
  const std::string dir = TempDir();
  std::string out, err;
  CHECK(RunScript({"--dir", dir + "/db"},
                  "put a 1\nbegin\nput b 2\ncommit\n# comment\nscan\nget zz\n", &out, &err) == 0);
  // Results only: no banner, no prompts.
  CHECK(out.find("deuteron>") == std::string::npos);
  CHECK(out.find("Type help") == std::string::npos);
  CHECK(out.find("ok\nbegun transaction") == 0);
  CHECK(out.find("a 1\nb 2\n(2 items)\n(not found)\n") != std::string::npos);
  CHECK(err.empty());

  // A failed command is reported on standard error and in the exit status;
  // the rest still runs, and an open transaction at the end is aborted.
  CHECK(RunScript({"--dir", dir + "/db"}, "bogus\nget a\nbegin\nput a 9\n", &out, &err) == 1);
  CHECK(out.find("1\n") != std::string::npos);
  CHECK(err.find("error: unknown command 'bogus'") != std::string::npos);
  CHECK(err.find("aborted the open transaction") != std::string::npos);
  CHECK(RunScript({"--dir", dir + "/db"}, "get a\n", &out, &err) == 0);
  CHECK(out == "1\n");
}

TEST_CASE("deuteron shell against a deuteron serve server", "[tc][cli][shell]") {
  const std::string dir = TempDir();
  Child server({"serve", "--dir", dir, "--listen", "127.0.0.1:0"});
  const std::string address = "127.0.0.1:" + std::to_string(ServingPort(server.ReadLine()));
  std::string out, err;
  CHECK(RunScript({"--connect", address}, "begin\nput x 1\nput y 2\ncommit\nscan\n", &out, &err) ==
        0);
  CHECK(out.find("x 1\ny 2\n(2 items)\n") != std::string::npos);
  PtyShell sh({"--connect", address}, dir + "/history");
  sh.ReadUntil("connected to " + address);
  sh.Send("get x\r");
  sh.ReadUntil("1");
  sh.Send("exit\r");
  CHECK(sh.Wait() == 0);
}

TEST_CASE("deuteron shell: usage and connection errors", "[tc][cli][shell]") {
  std::string out, err;
  CHECK(RunScript({}, "", &out, &err) == 2);
  CHECK(err.find("give --connect HOST:PORT or --dir DIR") != std::string::npos);
  CHECK(RunScript({"--connect", "127.0.0.1:1", "--dir", "/tmp"}, "", &out, &err) == 2);
  CHECK(RunScript({"--bogus"}, "", &out, &err) == 2);
  CHECK(RunScript({"--help"}, "", &out, &err) == 0);
  CHECK(out.find("--connect") != std::string::npos);
  // Nobody listens on port 1.
  CHECK(RunScript({"--connect", "127.0.0.1:1"}, "", &out, &err) == 1);
  CHECK(err.find("deuteron shell: connect to 127.0.0.1:1: Unavailable") == 0);
  CHECK(RunScript({"--connect", "nonsense"}, "", &out, &err) != 0);
  CHECK(err.find("address must be host:port") != std::string::npos);
  // A directory a running server holds.
  const std::string dir = TempDir();
  Child server({"serve", "--dir", dir, "--listen", "127.0.0.1:0"});
  ServingPort(server.ReadLine());
  CHECK(RunScript({"--dir", dir}, "get a\n", &out, &err) == 1);
  CHECK(err.find("deuteron shell: open " + dir + ": Busy") == 0);
}

}  // namespace
}  // namespace deuteron::test
