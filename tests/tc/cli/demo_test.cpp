// `deuteron demo` end to end, short: two server processes, transfers, SIGKILL,
// restart, recovery, verification; exit 0 with the verification line. And
// its usage errors.
#include <string>

#include <catch2/catch.hpp>

#include "tests/tc/cli/cli_util.h"

namespace deuteron::test {
namespace {

// All of the child's standard output.
std::string ReadAll(Child& child) {
  std::string out;
  for (std::string line = child.ReadLine(); !line.empty(); line = child.ReadLine()) out += line;
  return out;
}

TEST_CASE("deuteron demo crashes both servers, recovers and verifies", "[tc][cli][demo]") {
  const std::string dir = TempDir();
  // Checkpoints every 300 ms: the crash finds an RSSP, so the TC replays
  // only the log's tail.
  Child demo({"demo", "--seconds", "2", "--accounts", "500", "--threads", "3", "--dir", dir + "/demo",
              "--checkpoint-interval-ms", "300"});
  const std::string out = ReadAll(demo);
  INFO(out);
  CHECK(demo.Wait() == 0);
  CHECK(out.find("2. Crash: SIGKILL to deuteron dc") != std::string::npos);
  CHECK(out.find("deuteron tc: recovered in") != std::string::npos);
  CHECK(out.find("redo of the log from the checkpoint (RSSP, lsn ") != std::string::npos);
  CHECK(out.find("both exited cleanly") != std::string::npos);
  CHECK(out.find("\nverification: OK: all ") != std::string::npos);
  CHECK(out.find("total balance 500000 unchanged") != std::string::npos);
}

TEST_CASE("deuteron demo: bad usage exits 2", "[tc][cli][demo]") {
  const std::string dir = TempDir();
  {
    Child demo({"demo", "--seconds", "x"});
    CHECK(demo.Wait() == 2);
  }
  {
    Child demo({"demo", "--threads", "0"});
    CHECK(demo.Wait() == 2);
  }
  {
    // A directory with something in it is not used.
    Child demo({"demo", "--dir", "/"});
    CHECK(demo.Wait() == 2);
  }
  Child help({"demo", "--help"});
  CHECK(ReadAll(help).find("--seconds") != std::string::npos);
  CHECK(help.Wait() == 0);
}

}  // namespace
}  // namespace deuteron::test
