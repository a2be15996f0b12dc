// The deuteron program's shared surface: every subcommand's --help, the
// version, bad usage (exit 2, one line), the commands not built yet, and the
// error paths common to the servers: a bad address, a missing or unusable
// directory, a directory locked by another process, a port in use. The unit
// parsers of tc/cli/cli_options.h are tested directly.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tc/cli/cli_options.h"
#include "tests/tc/cli/cli_util.h"

namespace deuteron::test {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  int status;
  std::string output;
};

Outcome Run(std::vector<std::string> args) {
  Child child(std::move(args), /*merge_stderr=*/true);
  Outcome o;
  o.output = child.ReadAll();
  o.status = child.Wait();
  return o;
}

TEST_CASE("deuteron: every command has --help; --version", "[tc][cli]") {
  for (const std::string name : {"serve", "dc", "tc", "stats", "check", "bench", "crashtest"}) {
    INFO(name);
    const Outcome o = Run({name, "--help"});
    CHECK(o.status == 0);
    CHECK(o.output.find("usage: deuteron " + name) != std::string::npos);
  }
  const Outcome top = Run({"--help"});
  CHECK(top.status == 0);
  for (const std::string name : {"serve", "dc", "tc", "stats", "check", "bench", "crashtest"}) {
    CHECK(top.output.find("  " + name + " ") != std::string::npos);
  }
  const Outcome v = Run({"--version"});
  CHECK(v.status == 0);
  CHECK(v.output.rfind("deuteron ", 0) == 0);
}

TEST_CASE("deuteron: bad usage exits 2 with a one-line reason", "[tc][cli]") {
  const std::vector<std::vector<std::string>> bad = {
      {"no-such-command"},
      {"serve", "--dir"},
      {"serve", "--dir", "/tmp/x", "--bogus"},
      {"serve", "--dir", "/tmp/x", "--listen", "nope"},
      {"serve", "--dir", "/tmp/x", "--listen", "localhost:65536"},
      {"serve", "--dir", "/tmp/x", "--memory-budget", "12 parsecs"},
      {"serve", "--dir", "/tmp/x", "--idle-timeout", "10 fortnights"},
      {"serve", "--dir", "/tmp/x", "--lock-timeout", "2h"},
      {"tc", "--dir", "/tmp/x", "--dc", "nope"},
      {"dc", "--dir", "/tmp/x", "--heap-decay", "2h"},
      {"stats"},
      {"check"},
  };
  for (const auto& args : bad) {
    INFO(args[0] << " " << (args.size() > 1 ? args.back() : ""));
    const Outcome o = Run(args);
    CHECK(o.status == 2);
    CHECK(std::count(o.output.begin(), o.output.end(), '\n') == 1);
    CHECK(o.output.rfind("deuteron", 0) == 0);
  }
  for (const std::string name : {"bench", "crashtest"}) {
    const Outcome o = Run({name});
    CHECK(o.status == 2);
    CHECK(o.output.find("not built yet") != std::string::npos);
  }
}

TEST_CASE("deuteron: sizes and durations take units", "[tc][cli]") {
  using cli::ParseDuration;
  using cli::ParseSize;
  CHECK(*ParseSize("512MiB") == 512ull << 20);
  CHECK(*ParseSize("512 MiB") == 512ull << 20);
  CHECK(*ParseSize("4096") == 4096);
  CHECK(*ParseSize("2G") == 2ull << 30);
  CHECK(*ParseSize("1kb") == 1024);
  CHECK_FALSE(ParseSize("12 parsecs").ok());
  CHECK_FALSE(ParseSize("MiB").ok());
  CHECK_FALSE(ParseSize("-1").ok());
  CHECK_FALSE(ParseSize("99999999999TiB").ok());
  const std::chrono::microseconds s = std::chrono::seconds(1);
  CHECK(*ParseDuration("10m", s) == std::chrono::minutes(10));
  CHECK(*ParseDuration("250ms", s) == std::chrono::milliseconds(250));
  CHECK(*ParseDuration("30", s) == std::chrono::seconds(30));
  CHECK(*ParseDuration("30", std::chrono::milliseconds(1)) == std::chrono::milliseconds(30));
  CHECK(*ParseDuration("2h", s) == std::chrono::hours(2));
  CHECK_FALSE(ParseDuration("10 fortnights", s).ok());
  CHECK_FALSE(ParseDuration("", s).ok());
  CHECK(cli::FormatSize(512ull << 20) == "512 MiB");
  CHECK(cli::FormatSize(1536) == "1.50 KiB");
  auto hp = cli::ParseHostPort("[::1]:7400");
  REQUIRE(hp.ok());
  CHECK(hp->host == "::1");
  CHECK(hp->port == 7400);
  CHECK_FALSE(cli::ParseHostPort(":7400").ok());
  CHECK_FALSE(cli::ParseHostPort("host:").ok());
  CHECK_FALSE(cli::ParseHostPort("host:7400x").ok());
}

TEST_CASE("deuteron servers: a port in use, a locked directory, an unusable directory, an unreachable DC",
          "[tc][cli]") {
  const std::string dir = TempDir();
  Child first({"serve", "--dir", dir + "/one", "--listen", "127.0.0.1:0"});
  const uint16_t port = ServingPort(first.ReadLine());
  {
    const Outcome o = Run({"serve", "--dir", dir + "/two", "--listen", "127.0.0.1:" + std::to_string(port)});
    INFO(o.output);
    CHECK(o.status == 1);
    CHECK(o.output.find("deuteron serve: listen 127.0.0.1:" + std::to_string(port)) != std::string::npos);
  }
  {
    const Outcome o = Run({"dc", "--dir", dir + "/dc", "--listen", "127.0.0.1:" + std::to_string(port)});
    INFO(o.output);
    CHECK(o.status == 1);
    CHECK(o.output.find("deuteron dc: listen 127.0.0.1:" + std::to_string(port)) != std::string::npos);
  }
  {
    const Outcome o = Run({"serve", "--dir", dir + "/one", "--listen", "127.0.0.1:0"});
    INFO(o.output);
    CHECK(o.status == 1);
    CHECK(o.output.find("in use by another Deuteron process") != std::string::npos);
  }
  {
    const Outcome o = Run({"dc", "--dir", dir + "/one/dc", "--listen", "127.0.0.1:0"});
    INFO(o.output);
    CHECK(o.status == 1);
    CHECK(o.output.find("in use by another Deuteron process") != std::string::npos);
  }
  {
    const Outcome o = Run({"serve", "--dir", "/dev/null/store", "--listen", "127.0.0.1:0"});
    INFO(o.output);
    CHECK(o.status == 1);
    CHECK(o.output.find("deuteron serve: open /dev/null/store") != std::string::npos);
  }
  {
    // Nothing listens on port `port + 1`'s... use a port just released.
    Child dc({"dc", "--dir", dir + "/gone", "--listen", "127.0.0.1:0"});
    const uint16_t dead = ServingPort(dc.ReadLine());
    CHECK(dc.Stop(SIGTERM) == 0);
    const Outcome o = Run({"tc", "--dir", dir + "/tc", "--dc", "127.0.0.1:" + std::to_string(dead)});
    INFO(o.output);
    CHECK(o.status == 1);
    CHECK(o.output.find("deuteron tc: connect to the DC at 127.0.0.1:" + std::to_string(dead)) !=
          std::string::npos);
  }
  CHECK(first.Stop(SIGTERM) == 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deuteron::test
