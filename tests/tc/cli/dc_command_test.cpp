// `deuteron dc` as a process: it serves the DC protocol on the port it
// prints, shuts down cleanly on SIGTERM and SIGINT (exit 0, data up to the
// ESL kept), and rejects bad usage with exit status 2.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "protocol/data_component.h"
#include "protocol/remote_dc.h"

namespace deuteron {
namespace {

// A child process running `deuteron` with args; its stdout is a pipe.
class Child {
 public:
  explicit Child(std::vector<std::string> args) {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      dup2(fds[1], 1);
      close(fds[0]);
      close(fds[1]);
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
  // The next line of the child's stdout ("" at end of file).
  std::string ReadLine() {
    char buf[512];
    if (fgets(buf, sizeof(buf), out_) == nullptr) return "";
    return buf;
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

std::string TempDir() {
  char tmpl[] = "/tmp/deuteron-cli-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return tmpl;
}

// Starts `deuteron dc` on an ephemeral port and connects to it.
uint16_t StartDc(Child* child) {
  const std::string line = child->ReadLine();
  INFO("first line: " << line);
  const size_t colon = line.rfind(':', line.find(" (rssp"));
  REQUIRE(line.find("serving") != std::string::npos);
  REQUIRE(colon != std::string::npos);
  return static_cast<uint16_t>(std::stoi(line.substr(colon + 1)));
}

std::unique_ptr<protocol::RemoteDataComponent> Connect(uint16_t port) {
  protocol::RemoteOptions ro;
  ro.host = "127.0.0.1";
  ro.port = port;
  Result<std::unique_ptr<protocol::RemoteDataComponent>> r =
      protocol::RemoteDataComponent::Connect(ro);
  REQUIRE(r.ok());
  return std::move(r).value();
}

TEST_CASE("deuteron dc serves, and shuts down cleanly on SIGTERM and SIGINT", "[tc][cli]") {
  const std::string dir = TempDir();
  const int sig = GENERATE(SIGTERM, SIGINT);
  {
    Child child({"dc", "--dir", dir, "--listen", "127.0.0.1:0"});
    auto dc = Connect(StartDc(&child));
    std::vector<RecordOp> ops;
    ops.push_back({RecordOpKind::kUpsert, "alpha", "1", 10});
    ops.push_back({RecordOpKind::kUpsert, "beta", "2", 11});
    ops.push_back({RecordOpKind::kUpsert, "gamma", "3", 12});  // above the ESL
    Result<ApplyResult> applied = dc->Apply(ops, 11, 0);
    REQUIRE(applied.ok());
    CHECK(applied->applied == 3);
    Result<ReadResult> got = dc->Get("gamma");
    REQUIRE(got.ok());
    CHECK(got->found);
    dc.reset();
    CHECK(child.Stop(sig) == 0);
    CHECK(child.ReadLine().find("shutting down") != std::string::npos);
    CHECK(child.ReadLine().find("closed cleanly") != std::string::npos);
  }
  {
    // Reopened: what the ESL covered is there; the write above it is not.
    Child child({"dc", "--dir", dir, "--listen", "127.0.0.1:0"});
    auto dc = Connect(StartDc(&child));
    Result<ReadResult> a = dc->Get("alpha");
    REQUIRE(a.ok());
    CHECK(a->found);
    CHECK(a->value == "1");
    CHECK(a->lsn == 10);
    Result<ReadResult> b = dc->Get("beta");
    REQUIRE(b.ok());
    CHECK(b->found);
    Result<ReadResult> g = dc->Get("gamma");
    REQUIRE(g.ok());
    CHECK_FALSE(g->found);
    dc.reset();
    CHECK(child.Stop(SIGTERM) == 0);
  }
  std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("deuteron dc rejects bad usage with status 2", "[tc][cli]") {
  const std::vector<std::vector<std::string>> bad = {
      {"dc"},                                         // no --dir
      {"dc", "--dir"},                                // missing value
      {"dc", "--dir", "/tmp/x", "--listen", "nope"},  // not HOST:PORT
      {"dc", "--dir", "/tmp/x", "--listen", "127.0.0.1:70000"},
      {"dc", "--dir", "/tmp/x", "--bogus", "1"},
  };
  for (const auto& args : bad) {
    INFO("args " << args.size());
    Child child(args);
    CHECK(child.Wait() == 2);
  }
  Child help({"dc", "--help"});
  CHECK(help.ReadLine().find("usage: deuteron dc") != std::string::npos);
  CHECK(help.Wait() == 0);
}

}  // namespace
}  // namespace deuteron
