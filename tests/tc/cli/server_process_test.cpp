// The child-process servers (tc/cli/server_process.h): the ready line read
// from the log file, a server that dies before it is ready, SIGTERM and
// SIGKILL, and the port parsed from a serving line; in pipe mode the first
// line and its port, lines and the rest of the output, the exit status and
// the resident memory.
#include "tc/cli/server_process.h"

#include <signal.h>

#include <chrono>
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "tests/tc/cli/cli_util.h"

namespace deuteron::cli {
namespace {

using std::chrono::milliseconds;

std::unique_ptr<ServerProcess> StartShell(const std::string& script, const std::string& log) {
  auto p = ServerProcess::Start("/bin/sh", {"-c", script}, log);
  REQUIRE(p.ok());
  return std::move(p).value();
}

TEST_CASE("server process: ready line, early exit, stop and kill", "[tc][cli][demo]") {
  const std::string dir = test::TempDir();
  const std::string log = dir + "/server.log";
  {
    auto p = StartShell("echo starting; echo 'x: serving d on 127.0.0.1:4242 (y)'; exec sleep 30", log);
    Result<std::string> line = p->WaitForLine("x: serving", milliseconds(10000));
    REQUIRE(line.ok());
    CHECK(*line == "x: serving d on 127.0.0.1:4242 (y)");
    CHECK(ServingPort(*line) == 4242);
    Result<int> stopped = p->Stop(milliseconds(10000));
    REQUIRE(stopped.ok());
    CHECK(*stopped == -1);  // sleep dies of the SIGTERM
  }
  {
    // A second start appends to the same log: only the new lines count.
    auto p = StartShell("echo boom; exit 3", log);
    Result<std::string> line = p->WaitForLine("x: serving", milliseconds(10000));
    CHECK(line.status().IsUnavailable());
    CHECK(line.status().message().find("exited (status 3)") != std::string_view::npos);
    CHECK(line.status().message().find("boom") != std::string_view::npos);
  }
  {
    auto p = StartShell("exec sleep 30", log);
    CHECK(p->WaitForLine("x: serving", milliseconds(50)).status().IsUnavailable());
    p->Kill();
    CHECK(p->pid() == -1);
  }
  CHECK(ServingPort("deuteron tc: serving /d on 127.0.0.1:7400") == 7400);
  CHECK(ServingPort("no port here") == 0);
  CHECK(ServingPort("x: serving d on host:99999") == 0);
}

TEST_CASE("server process: pipe mode, the serving line and port, resident memory", "[tc][cli][demo]") {
  {
    auto p = ServerProcess::StartServing(
        "/bin/sh", {"-c", "echo 'x: serving d on 127.0.0.1:4243 (y)'; echo second; exec sleep 30"},
        milliseconds(10000));
    REQUIRE(p.ok());
    CHECK((*p)->port() == 4243);
    CHECK((*p)->first_line() == "x: serving d on 127.0.0.1:4243 (y)");
    CHECK((*p)->ReadLine() == "second\n");
    CHECK((*p)->PeakRssBytes() > 0);
    CHECK((*p)->RssBytes() > 0);
    CHECK((*p)->Stop(SIGTERM, milliseconds(10000)) == -1);  // sleep dies of the SIGTERM
    CHECK((*p)->pid() == -1);
    CHECK((*p)->PeakRssBytes() == 0);
    CHECK((*p)->Stop(SIGTERM) == -1);  // idempotent: the status it had
  }
  // A first line that is not a serving line: IOError, the child killed.
  CHECK(ServerProcess::StartServing("/bin/sh", {"-c", "echo hello; exec sleep 30"}, milliseconds(10000))
            .status()
            .IsIOError());
  {
    auto p = ServerProcess::StartPiped("/bin/sh", {"-c", "echo a; echo b >&2; printf c; exit 4"},
                                       /*merge_stderr=*/true);
    REQUIRE(p.ok());
    CHECK((*p)->ReadLine() == "a\n");
    CHECK((*p)->ReadAll() == "b\nc");
    CHECK((*p)->ReadLine().empty());  // end of output
    CHECK((*p)->Wait() == 4);
  }
  {
    auto p = ServerProcess::StartPiped("/bin/sh", {"-c", "echo starting; echo 'go: ready'; exec sleep 30"});
    REQUIRE(p.ok());
    Result<std::string> line = (*p)->WaitForLine("go:", milliseconds(10000));
    REQUIRE(line.ok());
    CHECK(*line == "go: ready");
    CHECK((*p)->WaitForLine("never", milliseconds(50)).status().IsUnavailable());
    (*p)->Kill();
    CHECK((*p)->pid() == -1);
  }
}

}  // namespace
}  // namespace deuteron::cli
