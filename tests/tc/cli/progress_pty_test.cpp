// The live progress line (tc/cli/progress.h) of `deuteron check` and of a
// server's recovery replay, as a person sees them: on a pseudo-terminal
// (forkpty) the line is redrawn in place (carriage return, erase to the end
// of the line) and ends with a final "done in" line that nothing else
// breaks into; with the output on a pipe there are only plain lines.
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tc/client/client.h"
#include "tests/tc/cli/cli_util.h"

namespace deuteron::test {
namespace {

namespace fs = std::filesystem;

// `deuteron ARGS` on a pseudo-terminal of 120 x 30.
class PtyChild {
 public:
  explicit PtyChild(std::vector<std::string> args) {
    struct winsize ws = {};
    ws.ws_row = 30;
    ws.ws_col = 120;
    pid_ = forkpty(&fd_, nullptr, nullptr, &ws);
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      setenv("TERM", "xterm", 1);
      // Redraws every 2 ms: the work here is short on a fast machine.
      setenv("DEUTERON_PROGRESS_MS", "2", 1);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(DEUTERON_BIN));
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(DEUTERON_BIN, argv.data());
      _exit(127);
    }
  }
  ~PtyChild() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(fd_);
  }

  // Reads until the terminal has shown `want` (60 s at most).
  void ReadUntil(const std::string& want) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (seen_.find(want) == std::string::npos) {
      INFO("waiting for '" << want << "'; the terminal shows: " << seen_);
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      ReadSome(100);
    }
  }

  // Sends `sig` (0: none) and reads what the terminal shows until the
  // child exits (60 s at most); returns its exit status (-1: a signal).
  int Finish(int sig) {
    if (sig != 0) kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      INFO("waiting for the exit; the terminal shows: " << seen_);
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      ReadSome(100);
    }
    pid_ = -1;
    while (ReadSome(0)) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  const std::string& seen() const { return seen_; }

 private:
  bool ReadSome(int wait_ms) {
    struct pollfd p = {fd_, POLLIN, 0};
    if (poll(&p, 1, wait_ms) <= 0) return false;
    char buf[4096];
    const ssize_t n = read(fd_, buf, sizeof(buf));
    if (n <= 0) return false;  // EIO once the child has closed the terminal
    seen_.append(buf, static_cast<size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string seen_;
};

// The terminal's output with its newlines ("\r\n", the terminal's output
// processing) as "\n": a "\r" left is one the program wrote.
std::string Lines(const std::string& tty) {
  std::string out;
  for (size_t i = 0; i < tty.size(); ++i) {
    if (tty[i] == '\r' && i + 1 < tty.size() && tty[i + 1] == '\n') continue;
    out += tty[i];
  }
  return out;
}

constexpr char kRedraw[] = "\r\033[K";

// Checks the live line of `what` in the terminal's output: drawn, then
// redrawn in place at least once, until its final "done in" line ends with
// a newline. While it is up, everything written begins by erasing it: its
// next draw, or a log line written whole on its own line (and the line
// redrawn after it); nothing runs into it.
void CheckLiveLine(const std::string& tty, const std::string& what) {
  const std::string out = Lines(tty);
  INFO("the terminal showed: " << out);
  const std::string redraw = kRedraw;
  size_t pos = out.find(redraw + what + ": ");
  REQUIRE(pos != std::string::npos);
  int draws = 0, partial_draws = 0;
  bool final_seen = false;
  while (pos < out.size()) {
    INFO("at offset " << pos);
    REQUIRE(out.compare(pos, redraw.size(), redraw) == 0);
    const size_t body = pos + redraw.size();
    const size_t cr = out.find('\r', body);
    const size_t nl = out.find('\n', body);
    if (out.compare(body, what.size() + 2, what + ": ") == 0) {
      ++draws;
      if (nl != std::string::npos && (cr == std::string::npos || nl < cr)) {
        const std::string line = out.substr(body, nl - body);
        INFO("the final line: " << line);
        CHECK(line.find(", done in ") != std::string::npos);
        final_seen = true;
        break;
      }
      REQUIRE(cr != std::string::npos);
      const std::string line = out.substr(body, cr - body);
      INFO("a live draw: " << line);
      CHECK(line.find("/s") != std::string::npos);  // a rate while it runs
      if (line.find("(100%)") == std::string::npos) ++partial_draws;
      pos = cr;
      continue;
    }
    // Another line, written whole while the live line is up, then the live
    // line again.
    REQUIRE(nl != std::string::npos);
    INFO("a line written meanwhile: " << out.substr(body, nl - body));
    REQUIRE(cr == nl + 1);
    pos = cr;
  }
  CHECK(final_seen);
  CHECK(draws >= 2);  // at least one live draw before the final line
  // The line moves while the work goes on, not only once it is done (check
  // updated it once a segment file, 16 or 64 MiB, before issue 31's test).
  CHECK(partial_draws >= 1);
}

// With the output on a pipe: plain lines only.
void CheckPlain(const std::string& out) {
  INFO("the output: " << out);
  CHECK(out.find('\r') == std::string::npos);
  CHECK(out.find('\033') == std::string::npos);
}

// A `serve` store with about `mib` MiB of values in its log, the server
// killed (SIGKILL) with no checkpoint since, so that the next open replays
// all of it.
void BuildCrashedStore(const std::string& dir, int mib) {
  Child child({"serve", "--dir", dir, "--listen", "127.0.0.1:0", "--checkpoint-interval", "1h"});
  const uint16_t port = ServingPort(child.ReadLine());
  {
    auto c = client::Client::Connect("127.0.0.1:" + std::to_string(port));
    REQUIRE(c.ok());
    // 1 KiB values, as a replay applies them in batches of 4096 operations
    // (4 MiB here: several progress steps), 900 a transaction (its log
    // record under the 1 MiB most).
    const std::string value(1 << 10, 'v');
    int key = 0;
    for (int t = 0; t < mib * 1024 / 900; ++t) {
      Status s = (*c)->Run([&](client::Transaction& txn) -> Status {
        for (int i = 0; i < 900; ++i) {
          Status p = txn.Put("key" + std::to_string(key + i), value);
          if (!p.ok()) return p;
        }
        return Status::OK();
      });
      INFO(s.ToString());
      REQUIRE(s.ok());
      key += 900;
    }
  }
  child.Stop(SIGKILL);
}

TEST_CASE("Recovery replay and check show a live progress line on a terminal",
          "[tc][cli][progress]") {
  const std::string dir = TempDir();
  const std::string a = dir + "/a", b = dir + "/b";
  BuildCrashedStore(a, 12);  // three replay batches
  fs::copy(a, b, fs::copy_options::recursive);

  {  // The replay on a terminal, then a clean close.
    PtyChild serve({"serve", "--dir", a, "--listen", "127.0.0.1:0"});
    serve.ReadUntil("serving");
    CHECK(serve.Finish(SIGTERM) == 0);
    CheckLiveLine(serve.seen(), "serve: replaying the log");
  }
  {  // The same replay with the output on a pipe.
    Child serve({"serve", "--dir", b, "--listen", "127.0.0.1:0"}, /*merge_stderr=*/true);
    std::string out;
    for (std::string line; (line = serve.ReadLine()).find("serving") == std::string::npos;) {
      REQUIRE(!line.empty());
      out += line;
    }
    CHECK(serve.Stop(SIGTERM) == 0);
    CheckPlain(out + serve.ReadAll());
  }
  {  // check on a terminal.
    PtyChild check({"check", "--dir", a});
    CHECK(check.Finish(0) == 0);
    CheckLiveLine(check.seen(), "check: log");
    CheckLiveLine(check.seen(), "check: lss");
  }
  {  // check with the output on a pipe.
    Child check({"check", "--dir", a}, /*merge_stderr=*/true);
    const std::string out = check.ReadAll();
    CHECK(check.Wait() == 0);
    CheckPlain(out);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deuteron::test
