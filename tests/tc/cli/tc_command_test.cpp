// `deuteron serve` and `deuteron tc` as processes: they serve clients on the
// port they print, shut down cleanly on SIGINT and SIGTERM (exit 0), keep
// what was committed across a restart, and reject bad usage with status 2.
#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "tc/client/client.h"
#include "tests/tc/cli/cli_util.h"

namespace deuteron::test {
namespace {

std::unique_ptr<client::Client> Connect(uint16_t port) {
  auto c = client::Client::Connect("127.0.0.1:" + std::to_string(port));
  REQUIRE(c.ok());
  return std::move(c).value();
}

void Write(client::Client& c, const std::string& key, const std::string& value) {
  REQUIRE(c.Run([&](client::Transaction& t) { return t.Put(key, value); }).ok());
}

std::string Read(client::Client& c, const std::string& key) {
  std::string out;
  Status s = c.Run([&](client::Transaction& t) -> Status {
    auto v = t.Get(key);
    if (!v.ok()) return v.status();
    out = *v;
    return Status::OK();
  });
  REQUIRE(s.ok());
  return out;
}

void StopCleanly(Child& child, int sig) {
  CHECK(child.Stop(sig) == 0);
  CHECK(child.ReadLine().find("shutting down") != std::string::npos);
  CHECK(child.ReadLine().find("closed cleanly") != std::string::npos);
}

TEST_CASE("deuteron serve serves clients and keeps commits across a clean restart", "[tc][cli]") {
  const std::string dir = TempDir();
  const int sig = GENERATE(SIGTERM, SIGINT);
  {
    Child child({"serve", "--dir", dir, "--listen", "127.0.0.1:0"});
    auto c = Connect(ServingPort(child.ReadLine()));
    Write(*c, "alpha", "1");
    // An open transaction at shutdown is aborted, not committed.
    auto t = c->Begin();
    REQUIRE(t.ok());
    REQUIRE((*t)->Put("beta", "uncommitted").ok());
    t->reset();
    c.reset();
    StopCleanly(child, sig);
  }
  Child child({"serve", "--dir", dir, "--listen", "127.0.0.1:0"});
  auto c = Connect(ServingPort(child.ReadLine()));
  CHECK(Read(*c, "alpha") == "1");
  auto t = c->Begin();
  REQUIRE(t.ok());
  CHECK((*t)->Get("beta").status().IsNotFound());
  t->reset();
  c.reset();
  StopCleanly(child, SIGTERM);
}

TEST_CASE("deuteron tc serves clients over a deuteron dc server", "[tc][cli]") {
  const std::string dc_dir = TempDir(), tc_dir = TempDir();
  Child dc({"dc", "--dir", dc_dir, "--listen", "127.0.0.1:0"});
  const std::string dc_addr = "127.0.0.1:" + std::to_string(ServingPort(dc.ReadLine()));
  {
    Child tc({"tc", "--dir", tc_dir, "--dc", dc_addr, "--listen", "127.0.0.1:0"});
    auto c = Connect(ServingPort(tc.ReadLine()));
    Write(*c, "k", "v1");
    c.reset();
    StopCleanly(tc, SIGINT);
  }
  Child tc({"tc", "--dir", tc_dir, "--dc", dc_addr, "--listen", "127.0.0.1:0"});
  auto c = Connect(ServingPort(tc.ReadLine()));
  CHECK(Read(*c, "k") == "v1");
  c.reset();
  StopCleanly(tc, SIGTERM);
  CHECK(dc.Stop(SIGTERM) == 0);
}

TEST_CASE("deuteron serve off loopback needs a shared secret, and clients must present it",
          "[tc][cli]") {
  const std::string dir = TempDir();
  {
    Child child({"serve", "--dir", dir, "--listen", "0.0.0.0:0"});
    CHECK(child.Wait() == 1);  // refuses to start, says why on stderr
  }
  const std::string secret_file = dir + "/secret";
  FILE* f = std::fopen(secret_file.c_str(), "w");
  REQUIRE(f != nullptr);
  std::fputs("correct horse\n", f);
  std::fclose(f);
  Child child({"serve", "--dir", dir + "/db", "--listen", "0.0.0.0:0", "--secret-file", secret_file});
  const std::string address = "127.0.0.1:" + std::to_string(ServingPort(child.ReadLine()));
  client::RemoteOptions good;
  good.secret = "correct horse";
  auto c = client::Client::Connect(address, good);
  REQUIRE(c.ok());
  Write(**c, "k", "v");
  c->reset();
  client::RemoteOptions bad;
  bad.secret = "battery staple";
  auto refused = client::Client::Connect(address, bad);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == Code::kUnauthenticated);
  StopCleanly(child, SIGTERM);
}

TEST_CASE("deuteron serve and tc reject bad usage with status 2", "[tc][cli]") {
  CHECK(Child({"serve"}).Wait() == 2);  // no --dir
  CHECK(Child({"serve", "--dir", "/tmp/x", "--listen", "nope"}).Wait() == 2);
  CHECK(Child({"tc", "--dir", "/tmp/x"}).Wait() == 2);  // no --dc
  CHECK(Child({"tc", "--dir", "/tmp/x", "--dc", "127.0.0.1:0"}).Wait() == 2);
  CHECK(Child({"serve", "--help"}).Wait() == 0);
}

}  // namespace
}  // namespace deuteron::test
