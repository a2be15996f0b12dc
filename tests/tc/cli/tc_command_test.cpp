// `deuteron serve` and `deuteron tc` as processes: they serve clients on the
// port they print, shut down cleanly on SIGINT and SIGTERM (exit 0), keep
// what was committed across a restart, and reject bad usage with status 2.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>
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

// kill -9 of `deuteron serve` under load from several clients: after a
// restart every commit a client saw acknowledged is there, whole (each
// writes three keys), and nothing that was never committed: a transaction
// is all there or all absent, and only the ones whose commit was in flight
// at the kill may go either way.
TEST_CASE("deuteron serve keeps exactly the acknowledged commits across kill -9", "[tc][cli]") {
  const std::string dir = TempDir();
  constexpr int kClients = 4;
  std::vector<std::vector<int>> acked(kClients), in_doubt(kClients);
  std::vector<int> attempted(kClients, 0);
  auto key = [](int client, int n, char part) {
    return "c" + std::to_string(client) + "/" + std::to_string(n) + "/" + part;
  };
  {
    Child child({"serve", "--dir", dir, "--listen", "127.0.0.1:0"});
    const uint16_t port = ServingPort(child.ReadLine());
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int c = 0; c < kClients; ++c) {
      threads.emplace_back([&, c] {
        auto client = client::Client::Connect("127.0.0.1:" + std::to_string(port));
        if (!client.ok()) return;
        for (int n = 0; !stop.load(); ++n) {
          auto t = (*client)->Begin();
          if (!t.ok()) return;
          attempted[c] = n + 1;
          Status s;
          for (char part : {'a', 'b', 'c'}) {
            if (s.ok()) s = (*t)->Put(key(c, n, part), std::to_string(n));
          }
          if (!s.ok()) return;  // the server is gone; nothing of n was committed
          s = (*t)->Commit();
          if (s.ok()) {
            acked[c].push_back(n);
          } else {
            in_doubt[c].push_back(n);
            return;
          }
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    child.Stop(SIGKILL);
    stop.store(true);
    for (auto& t : threads) t.join();
  }
  size_t total_acked = 0;
  for (const auto& a : acked) total_acked += a.size();
  INFO("acknowledged commits before the kill: " << total_acked);
  CHECK(total_acked > 0);

  Child child({"serve", "--dir", dir, "--listen", "127.0.0.1:0"});
  auto c = Connect(ServingPort(child.ReadLine()));
  Status s = c->Run([&](client::Transaction& t) -> Status {
    for (int cl = 0; cl < kClients; ++cl) {
      for (int n = 0; n <= attempted[cl]; ++n) {
        int present = 0;
        for (char part : {'a', 'b', 'c'}) {
          auto v = t.Get(key(cl, n, part));
          if (v.ok()) {
            ++present;
            CHECK(*v == std::to_string(n));
          } else if (!v.status().IsNotFound()) {
            return v.status();
          }
        }
        const bool was_acked = std::find(acked[cl].begin(), acked[cl].end(), n) != acked[cl].end();
        const bool doubtful =
            std::find(in_doubt[cl].begin(), in_doubt[cl].end(), n) != in_doubt[cl].end();
        INFO("client " << cl << " transaction " << n);
        CHECK((present == 0 || present == 3));  // atomic
        if (was_acked) CHECK(present == 3);     // durable
        if (!was_acked && !doubtful) CHECK(present == 0);  // never committed
      }
    }
    return Status::OK();
  });
  CHECK(s.ok());
  c.reset();
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
