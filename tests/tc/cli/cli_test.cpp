// The deuteron program's shared surface: every subcommand's --help, the
// version, bad usage (exit 2, one line), and the
// error paths common to the servers: a bad address, a missing or unusable
// directory, a directory locked by another process, a port in use. The unit
// parsers of tc/cli/cli_options.h are tested directly.
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/logging.h"
#include "tc/cli/cli_options.h"
#include "tc/cli/progress.h"
#include "tc/client/client.h"
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
      {"bench"},
      {"bench", "no_such_bench"},
      {"crashtest", "--faults", "kill,nuke"},
      {"crashtest", "--cycles", "0"},
      {"crashtest", "--break", "no_such_contract"},
  };
  for (const auto& args : bad) {
    INFO(args[0] << " " << (args.size() > 1 ? args.back() : ""));
    const Outcome o = Run(args);
    CHECK(o.status == 2);
    CHECK(std::count(o.output.begin(), o.output.end(), '\n') == 1);
    CHECK(o.output.rfind("deuteron", 0) == 0);
  }
}

TEST_CASE("deuteron bench runs a benchmark program with its arguments", "[tc][cli]") {
  // The programs sit next to deuteron in a whole-tree build (CI); built
  // alone, deuteron says which target builds the program.
  const Outcome o = Run({"bench", "log_bench", "--help"});
  if (o.status == 1) {
    CHECK(o.output.find("is not built next to deuteron") != std::string::npos);
  } else {
    CHECK(o.status == 0);
    CHECK(o.output.find("usage: log_bench") != std::string::npos);
  }
  const Outcome bad = Run({"bench", "log_bench", "--no-such-flag"});
  CHECK(bad.status != 0);
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

TEST_CASE("deuteron servers: a port in use, a locked directory, an unusable directory, an unreachable DC, another format",
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
  // A directory of another kind of store, or of something else.
  {
    const Outcome o = Run({"dc", "--dir", dir + "/one", "--listen", "127.0.0.1:0"});
    INFO(o.output);
    CHECK(o.status == 1);
    CHECK(o.output.find("holds a `serve` store") != std::string::npos);
  }
  {
    const Outcome o = Run({"serve", "--dir", dir + "/one/dc", "--listen", "127.0.0.1:0"});
    INFO(o.output);
    CHECK(o.status == 1);
    CHECK(o.output.find("holds a `deuteron dc` store") != std::string::npos);
  }
  {
    const Outcome o = Run({"tc", "--dir", dir + "/one", "--dc", "127.0.0.1:1"});
    INFO(o.output);
    CHECK(o.status == 1);
    CHECK(o.output.find("open it with `deuteron serve`") != std::string::npos);
  }
  {
    fs::create_directories(dir + "/photos");
    std::FILE* f = std::fopen((dir + "/photos/cat.jpg").c_str(), "w");
    REQUIRE(f != nullptr);
    std::fclose(f);
    const Outcome o = Run({"serve", "--dir", dir + "/photos", "--listen", "127.0.0.1:0"});
    INFO(o.output);
    CHECK(o.status == 1);
    CHECK(o.output.find("is not empty and holds no Deuteron store") != std::string::npos);
    CHECK_FALSE(fs::exists(dir + "/photos/log"));
  }
  fs::remove_all(dir);
}

TEST_CASE("Progress prints plain lines with rate and estimate when not on a terminal", "[tc][cli]") {
  std::FILE* out = std::tmpfile();
  REQUIRE(out != nullptr);
  {
    cli::Progress p("replay", 200, cli::Progress::kBytes, out, std::chrono::milliseconds(0));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    p.Update(100);
    p.Finish();
    p.Update(150);  // after Finish: nothing
  }
  std::rewind(out);
  char buf[4096];
  const size_t n = std::fread(buf, 1, sizeof(buf), out);
  std::fclose(out);
  const std::string text(buf, n);
  INFO(text);
  CHECK(std::count(text.begin(), text.end(), '\n') == 2);
  CHECK(text.find("replay: 100 B of 200 B (50%), ") != std::string::npos);
  CHECK(text.find("B/s, about ") != std::string::npos);
  CHECK(text.find(" left\n") != std::string::npos);
  CHECK(text.find("replay: 100 B of 200 B (50%), done in ") != std::string::npos);
  CHECK(text.find("\r") == std::string::npos);  // no live line off a terminal
}

TEST_CASE("A live progress line on a terminal: log lines go around it", "[tc][cli][progress]") {
  int master = -1, slave = -1;
  REQUIRE(openpty(&master, &slave, nullptr, nullptr, nullptr) == 0);
  struct termios t = {};
  REQUIRE(tcgetattr(slave, &t) == 0);
  t.c_oflag &= ~static_cast<tcflag_t>(OPOST);  // the bytes as written
  REQUIRE(tcsetattr(slave, TCSANOW, &t) == 0);
  std::FILE* out = fdopen(slave, "w");
  REQUIRE(out != nullptr);
  {
    cli::Progress p("replay", 200, cli::Progress::kBytes, out);
    std::this_thread::sleep_for(std::chrono::milliseconds(120));  // a live draw is due
    p.Update(100);
    DLOG_WARN("a log line meanwhile");
    p.Finish();
  }
  DLOG_WARN("a log line after");  // the default sink again: stderr, not the terminal
  std::fclose(out);
  std::string text;
  char buf[4096];
  for (;;) {
    struct pollfd pfd = {master, POLLIN, 0};
    if (poll(&pfd, 1, 200) <= 0) break;
    const ssize_t n = read(master, buf, sizeof(buf));
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(master);
  INFO(text);
  const std::string live = "\r\033[Kreplay: 100 B of 200 B (50%), ";
  const size_t draw = text.find(live);
  REQUIRE(draw != std::string::npos);
  // Erased, the log line on its own line, the live line drawn again.
  const size_t log = text.find("\r\033[K", draw + 1);
  REQUIRE(log != std::string::npos);
  const size_t nl = text.find('\n', log);
  REQUIRE(nl != std::string::npos);
  CHECK(text.substr(log, nl - log).find("a log line meanwhile") != std::string::npos);
  CHECK(text.compare(nl + 1, live.size(), live) == 0);
  CHECK(text.find("done in ") != std::string::npos);
  CHECK(text.find("a log line after") == std::string::npos);
}

// The value of "name": in a flat JSON object (-1 when absent).
int64_t JsonField(const std::string& json, const std::string& name) {
  const size_t at = json.find("\"" + name + "\":");
  if (at == std::string::npos) return -1;
  return std::stoll(json.substr(at + name.size() + 3));
}

TEST_CASE("deuteron stats --json against a running TC and DC", "[tc][cli][stats]") {
  const std::string dir = TempDir();
  Child server({"serve", "--dir", dir + "/s", "--listen", "127.0.0.1:0"});
  const std::string address = "127.0.0.1:" + std::to_string(ServingPort(server.ReadLine()));
  {
    auto c = client::Client::Connect(address);
    REQUIRE(c.ok());
    for (int i = 0; i < 5; ++i) {
      REQUIRE((*c)->Run([&](client::Transaction& t) { return t.Put("k" + std::to_string(i), "v"); }).ok());
    }
    auto t = (*c)->Begin();
    REQUIRE(t.ok());
    REQUIRE((*t)->Put("x", "y").ok());
    (*t)->Abort();
  }
  const Outcome o = Run({"stats", "--connect", address, "--json"});
  INFO(o.output);
  CHECK(o.status == 0);
  CHECK(o.output.find("\"kind\":\"tc\"") != std::string::npos);
  CHECK(JsonField(o.output, "commits") == 5);
  CHECK(JsonField(o.output, "commit_count") == 5);
  CHECK(JsonField(o.output, "aborts_by_client") == 1);
  CHECK(JsonField(o.output, "commit_p99_us") > 0);
  CHECK(JsonField(o.output, "esl") > 0);
  CHECK(JsonField(o.output, "ops_applied") == 5);  // the DC's, inside "dc"
  CHECK(JsonField(o.output, "pages") > 0);
  CHECK(JsonField(o.output, "live_bytes") >= 0);  // the DC's live bytes (issue 31), reported
  const Outcome text = Run({"stats", "--connect", address, "--interval", "10ms"});
  INFO(text.output);
  CHECK(text.status == 0);
  CHECK(text.output.find("commit p50") != std::string::npos);
  CHECK(text.output.find("space amplification") != std::string::npos);
  CHECK(text.output.find(" live; space amplification ") != std::string::npos);  // over live bytes
  CHECK(server.Stop(SIGTERM) == 0);

  Child dc({"dc", "--dir", dir + "/d", "--listen", "127.0.0.1:0"});
  const std::string dc_address = "127.0.0.1:" + std::to_string(ServingPort(dc.ReadLine()));
  const Outcome d = Run({"stats", "--connect", dc_address, "--json", "--watch", "--count", "2", "--interval", "10ms"});
  INFO(d.output);
  CHECK(d.status == 0);
  CHECK(std::count(d.output.begin(), d.output.end(), '\n') == 2);
  CHECK(d.output.find("\"kind\":\"dc\"") != std::string::npos);
  CHECK(JsonField(d.output, "tree_height") == 1);
  CHECK(dc.Stop(SIGTERM) == 0);
  const Outcome gone = Run({"stats", "--connect", dc_address});
  CHECK(gone.status == 1);
  CHECK(std::count(gone.output.begin(), gone.output.end(), '\n') == 1);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deuteron::test
