// The demo's child-process servers (tc/cli/server_process.h): the ready line
// read from the log file, a server that dies before it is ready, SIGTERM and
// SIGKILL, and the port parsed from a serving line.
#include "tc/cli/server_process.h"

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

}  // namespace
}  // namespace deuteron::cli
