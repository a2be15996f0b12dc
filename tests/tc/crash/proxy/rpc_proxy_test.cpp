// The RPC fault proxy (tc/crash/proxy/rpc_proxy.h) against a tiny framed
// echo server (frame_peer.h): frames arrive intact and in order without
// faults; each fault kind happens, is counted and looks on the wire as
// proxy.md says; garbage and oversized frames close one connection and
// nothing else; SetTarget moves new connections; Stop returns with
// connections open and frames held.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/random.h"
#include "tc/crash/proxy/rpc_proxy.h"
#include "tests/tc/crash/proxy/frame_peer.h"

namespace deuteron::test {
namespace {

using crash::ProxyCounts;
using crash::ProxyFaults;
using crash::RpcProxy;

std::unique_ptr<RpcProxy> StartProxy(uint16_t target, ProxyFaults faults = {}) {
  auto p = RpcProxy::Start("127.0.0.1", 0, "127.0.0.1", target, faults);
  INFO(p.status().ToString());
  REQUIRE(p.ok());
  REQUIRE((*p)->port() != 0);
  return std::move(p).value();
}

std::string Payload(Random64& rng, size_t max_len) {
  std::string s(1 + rng.Uniform(max_len), '\0');
  rng.Fill(s.data(), s.size());
  return s;
}

}  // namespace

TEST_CASE("rpc proxy: without faults, frames arrive intact and in order", "[crash][proxy]") {
  EchoServer server;
  auto proxy = StartProxy(server.port());
  constexpr int kConns = 4, kCalls = 50;
  std::vector<std::vector<std::string>> sent(kConns);
  std::vector<int> good(kConns, 0);
  std::vector<std::thread> threads;
  for (int c = 0; c < kConns; ++c) {
    threads.emplace_back([&, c] {
      Random64 rng(static_cast<uint64_t>(c) + 1);
      FrameClient client(proxy->port());
      for (int i = 0; i < kCalls; ++i) {
        // Sizes from one byte to over 1 MiB (several TCP segments).
        std::string p = Payload(rng, i % 10 == 9 ? (1u << 20) + 7 : 300);
        p[0] = static_cast<char>('0' + c);
        sent[static_cast<size_t>(c)].push_back(p);
        std::string reply;
        if (client.Call(p, &reply) == ReadEnd::kFrame && reply == "A" + p) ++good[static_cast<size_t>(c)];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int c = 0; c < kConns; ++c) CHECK(good[static_cast<size_t>(c)] == kCalls);
  // Each connection's requests reached the server in the order sent.
  const std::vector<std::string> got = server.requests();
  REQUIRE(got.size() == size_t{kConns} * kCalls);
  for (int c = 0; c < kConns; ++c) {
    std::vector<std::string> mine;
    for (const std::string& r : got) {
      if (r[0] == '0' + c) mine.push_back(r);
    }
    CHECK(mine == sent[static_cast<size_t>(c)]);
  }
  const ProxyCounts n = proxy->counts();
  CHECK(n.frames == 2u * kConns * kCalls);
  CHECK(n.connections == kConns);
  CHECK(n.delayed + n.dropped + n.reset + n.duplicated + n.bad_frames == 0);
}

TEST_CASE("rpc proxy: a duplicated request is seen twice by the server and answered once",
          "[crash][proxy]") {
  EchoServer server;
  ProxyFaults f;
  f.duplicate_p = 1;
  auto proxy = StartProxy(server.port(), f);
  FrameClient client(proxy->port());
  for (int i = 0; i < 20; ++i) {
    const std::string p = "call " + std::to_string(i);
    std::string reply;
    REQUIRE(client.Call(p, &reply) == ReadEnd::kFrame);
    CHECK(reply == "A" + p);  // the reply to this call: the copy's never leaks
  }
  // Each copy goes just before the next request: the last one is still kept.
  const std::vector<std::string> got = server.requests();
  REQUIRE(got.size() == 39);
  for (int i = 0; i < 20; ++i) {
    CHECK(got[2 * static_cast<size_t>(i)] == "call " + std::to_string(i));
    if (i < 19) CHECK(got[2 * static_cast<size_t>(i) + 1] == "call " + std::to_string(i));
  }
  const ProxyCounts n = proxy->counts();
  CHECK(n.duplicated == 19);
  CHECK(n.frames == 59);  // 20 requests, 20 replies delivered, 19 discarded
}

TEST_CASE("rpc proxy: a duplicate goes after the caller has its reply, before its next call",
          "[crash][proxy]") {
  EchoServer server;
  auto proxy = StartProxy(server.port());
  FrameClient client(proxy->port());
  ProxyFaults f;
  f.duplicate_p = 1;
  proxy->SetFaults(f);
  std::string reply;
  REQUIRE(client.Call("once", &reply) == ReadEnd::kFrame);
  CHECK(reply == "Aonce");
  proxy->SetFaults(ProxyFaults{});
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(server.requests() == std::vector<std::string>{"once"});  // not yet
  REQUIRE(client.Call("next", &reply) == ReadEnd::kFrame);
  CHECK(reply == "Anext");
  CHECK(server.requests() == std::vector<std::string>{"once", "once", "next"});
  CHECK(proxy->counts().duplicated == 1);
}

TEST_CASE("rpc proxy: a kept copy older than a second is forgotten", "[crash][proxy]") {
  EchoServer server;
  ProxyFaults f;
  f.duplicate_p = 1;
  auto proxy = StartProxy(server.port(), f);
  FrameClient client(proxy->port());
  std::string reply;
  REQUIRE(client.Call("old", &reply) == ReadEnd::kFrame);
  proxy->SetFaults(ProxyFaults{});
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  REQUIRE(client.Call("new", &reply) == ReadEnd::kFrame);
  CHECK(server.requests() == std::vector<std::string>{"old", "new"});
  CHECK(proxy->counts().duplicated == 0);
}

TEST_CASE("rpc proxy: a dropped request never arrives and the caller sees the connection end",
          "[crash][proxy]") {
  EchoServer server;
  ProxyFaults f;
  f.drop_p = 1;
  auto proxy = StartProxy(server.port(), f);
  FrameClient client(proxy->port());
  std::string reply;
  // End of stream (FIN), not a hang: the caller's call fails at once.
  CHECK(client.Call("lost", &reply) == ReadEnd::kEof);
  CHECK(server.requests().empty());
  CHECK(proxy->counts().dropped == 1);
}

TEST_CASE("rpc proxy: a reset closes both sides with RST", "[crash][proxy]") {
  EchoServer server;
  ProxyFaults f;
  f.reset_p = 1;
  auto proxy = StartProxy(server.port(), f);
  FrameClient client(proxy->port());
  std::string reply;
  CHECK(client.Call("reset me", &reply) == ReadEnd::kReset);
  CHECK(server.requests().empty());
  CHECK(proxy->counts().reset == 1);
}

TEST_CASE("rpc proxy: delayed frames arrive late, intact and in order", "[crash][proxy]") {
  EchoServer server;
  ProxyFaults f;
  f.delay_p = 1;
  f.max_delay = std::chrono::milliseconds(10);
  auto proxy = StartProxy(server.port(), f);
  FrameClient client(proxy->port());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    const std::string p = "slow " + std::to_string(i);
    std::string reply;
    REQUIRE(client.Call(p, &reply) == ReadEnd::kFrame);
    CHECK(reply == "A" + p);
  }
  const auto took = std::chrono::steady_clock::now() - start;
  const ProxyCounts n = proxy->counts();
  CHECK(n.delayed == 40);
  // 40 delays uniform in [0, 10] ms: about 200 ms in all; far above zero.
  CHECK(took > std::chrono::milliseconds(50));
}

TEST_CASE("rpc proxy: every fault kind at once: each call is answered rightly or fails, never hangs",
          "[crash][proxy]") {
  EchoServer server;
  ProxyFaults f;
  f.delay_p = 0.2;
  f.max_delay = std::chrono::milliseconds(3);
  f.drop_p = 0.05;
  f.reset_p = 0.05;
  f.duplicate_p = 0.2;
  f.seed = 42;
  auto proxy = StartProxy(server.port(), f);
  int answered = 0, failed = 0, wrong = 0;
  for (int i = 0; i < 300; ++i) {
    FrameClient client(proxy->port());
    // A few calls per connection, until one fails.
    for (int k = 0; k < 5; ++k) {
      const std::string p = std::to_string(i) + "/" + std::to_string(k);
      std::string reply;
      const ReadEnd e = client.Call(p, &reply);
      if (e == ReadEnd::kFrame) {
        ++answered;
        if (reply != "A" + p) ++wrong;
        continue;
      }
      CHECK((e == ReadEnd::kEof || e == ReadEnd::kReset));
      ++failed;
      break;
    }
  }
  CHECK(wrong == 0);
  CHECK(answered > 0);
  CHECK(failed > 0);
  const ProxyCounts n = proxy->counts();
  CHECK(n.delayed > 0);
  CHECK(n.dropped > 0);
  CHECK(n.reset > 0);
  CHECK(n.duplicated > 0);
  CHECK(n.dropped + n.reset == static_cast<uint64_t>(failed));
}

TEST_CASE("rpc proxy: garbage and oversized frames close that connection only", "[crash][proxy]") {
  EchoServer server;
  auto proxy = StartProxy(server.port());
  {
    FrameClient client(proxy->port());
    std::string reply;
    CHECK(client.SendRaw(std::string(4, '\0')));  // length zero
    CHECK(client.Receive(&reply) == ReadEnd::kEof);
  }
  {
    FrameClient client(proxy->port());
    std::string reply;
    CHECK(client.SendRaw("\xff\xff\xff\xff garbage"));  // 4 GiB: over the cap
    // Closed with bytes unread: the kernel answers with RST rather than FIN.
    const ReadEnd e = client.Receive(&reply);
    CHECK((e == ReadEnd::kEof || e == ReadEnd::kReset));
  }
  {
    FrameClient client(proxy->port());
    std::string reply;
    CHECK(client.SendRaw("\x00\x00\x00"));  // half a length word, then gone
  }
  {
    // Bytes that are no Thrift at all are forwarded as they are: the proxy
    // frames, it does not parse.
    FrameClient client(proxy->port());
    std::string reply;
    REQUIRE(client.Call("\x01\x02 not thrift", &reply) == ReadEnd::kFrame);
    CHECK(reply == "A\x01\x02 not thrift");
  }
  CHECK(proxy->counts().bad_frames == 2);
}

TEST_CASE("rpc proxy: SetTarget sends new connections to the new server", "[crash][proxy]") {
  EchoServer a('A'), b('B');
  auto proxy = StartProxy(a.port());
  FrameClient old_conn(proxy->port());
  std::string reply;
  REQUIRE(old_conn.Call("x", &reply) == ReadEnd::kFrame);
  CHECK(reply == "Ax");
  proxy->SetTarget("127.0.0.1", b.port());
  FrameClient new_conn(proxy->port());
  REQUIRE(new_conn.Call("y", &reply) == ReadEnd::kFrame);
  CHECK(reply == "By");
  REQUIRE(old_conn.Call("z", &reply) == ReadEnd::kFrame);  // keeps its target
  CHECK(reply == "Az");
}

TEST_CASE("rpc proxy: a target that is down closes the caller's connection", "[crash][proxy]") {
  uint16_t dead_port = 0;
  {
    EchoServer gone;
    dead_port = gone.port();
  }
  auto proxy = StartProxy(dead_port);
  FrameClient client(proxy->port());
  std::string reply;
  const ReadEnd e = client.Call("anyone?", &reply);
  CHECK((e == ReadEnd::kEof || e == ReadEnd::kReset));
  CHECK(proxy->counts().connect_failures == 1);
}

TEST_CASE("rpc proxy: bad options are refused", "[crash][proxy]") {
  ProxyFaults f;
  f.drop_p = 1.5;
  auto p = RpcProxy::Start("127.0.0.1", 0, "127.0.0.1", 1, f);
  CHECK(p.status().code() == Code::kInvalidArgument);
  auto q = RpcProxy::Start("127.0.0.1", 0, "no-such-host.invalid", 1, ProxyFaults{});
  CHECK(q.status().code() == Code::kInvalidArgument);
  auto first = StartProxy(1);
  auto busy = RpcProxy::Start("127.0.0.1", first->port(), "127.0.0.1", 1, ProxyFaults{});
  CHECK(busy.status().code() == Code::kBusy);
}

TEST_CASE("rpc proxy: Stop returns with connections open and frames held", "[crash][proxy]") {
  EchoServer server;
  ProxyFaults f;
  f.delay_p = 1;
  f.max_delay = std::chrono::milliseconds(60000);  // held far longer than the test
  f.seed = 7;
  auto proxy = StartProxy(server.port(), f);
  FrameClient idle(proxy->port());
  FrameClient held(proxy->port(), 20000);
  REQUIRE(held.Send("held"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = std::chrono::steady_clock::now();
  proxy->Stop();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  std::string reply;
  CHECK(held.Receive(&reply) == ReadEnd::kEof);
  proxy->Stop();  // idempotent
}

}  // namespace deuteron::test
