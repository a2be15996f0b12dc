// Helpers for the DC server's governance tests (issue 38's attack table): a
// served FakeDataComponent, and a healthy TC-like client that writes and
// reads its own keys beside an attack, timing each call, whose keys are
// checked afterwards.
//
// Thread safety: a HealthyClient runs on its own thread; read its results
// after Stop().
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "dc/dc_server.h"
#include "protocol/remote_dc.h"
#include "tests/protocol/fake_dc.h"
#include "tests/protocol/wire_util.h"

namespace deuteron::dc::attack {

using deuteron::testing::FakeDataComponent;
using deuteron::testing::RawSocket;
using protocol::RemoteDataComponent;
using protocol::RemoteOptions;

inline DcServerOptions AttackOptions() {
  DcServerOptions o;
  o.io_threads = 2;
  o.worker_threads = 2;
  return o;
}

struct AttackServed {
  explicit AttackServed(DcServerOptions o = AttackOptions()) : server(&fake, o) {
    Status s = server.Start();
    INFO(s.ToString());
    REQUIRE(s.ok());
  }

  std::unique_ptr<RemoteDataComponent> Client(const std::string& secret = "") {
    RemoteOptions o;
    o.port = server.port();
    o.max_connections = 2;
    o.recv_timeout_ms = 10000;
    o.secret = secret;
    auto r = RemoteDataComponent::Connect(o);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    return std::move(r).value();
  }

  // Waits (up to timeout_ms) until pred(stats) holds.
  template <typename Pred>
  bool WaitStats(Pred pred, int timeout_ms = 5000) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < end) {
      if (pred(server.stats())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return pred(server.stats());
  }

  FakeDataComponent fake;
  DcServer server;
};

// Writes h/<n> = v<n> (one key per apply, LSNs from lsn_base) and reads each
// back, until stopped; records every call's latency.
class HealthyClient {
 public:
  HealthyClient(uint16_t port, uint64_t lsn_base, std::string secret = "")
      : port_(port), lsn_base_(lsn_base), secret_(std::move(secret)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~HealthyClient() { Stop(); }

  void Stop() {
    WaitWritten(1);
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }

  // Waits until at least n keys are written (or 10 s pass).
  bool WaitWritten(uint64_t n) {
    for (int i = 0; i < 2000 && written_.load() < n && !stop_.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return written_.load() >= n;
  }

  static std::string Key(uint64_t n) { return fmt::format("h/{:06}", n); }
  static std::string Value(uint64_t n) { return fmt::format("value-{}", n); }

  uint64_t written() const { return written_.load(); }
  uint64_t errors() const { return errors_; }
  std::chrono::microseconds max_latency() const { return max_latency_; }
  std::chrono::microseconds p99() const {
    if (latencies_.empty()) return std::chrono::microseconds(0);
    std::vector<std::chrono::microseconds> l = latencies_;
    std::sort(l.begin(), l.end());
    return l[l.size() * 99 / 100];
  }

  // Every key written is there with its value, through a fresh client.
  void CheckKeys() const {
    RemoteOptions o;
    o.port = port_;
    o.secret = secret_;
    auto r = RemoteDataComponent::Connect(o);
    REQUIRE(r.ok());
    for (uint64_t n = 0; n < written_.load(); ++n) {
      auto g = (*r)->Get(Slice(Key(n)));
      REQUIRE(g.ok());
      CHECK(g->found);
      CHECK(g->value == Value(n));
    }
  }

 private:
  void Run() {
    RemoteOptions o;
    o.port = port_;
    o.max_connections = 1;
    o.secret = secret_;
    auto r = RemoteDataComponent::Connect(o);
    if (!r.ok()) {
      ++errors_;
      return;
    }
    auto& dc = *r;
    while (!stop_.load()) {
      const uint64_t n = written_.load();
      const std::string key = Key(n), value = Value(n);
      const RecordOp op{RecordOpKind::kUpsert, Slice(key), Slice(value), lsn_base_ + n};
      const auto start = std::chrono::steady_clock::now();
      auto a = dc->Apply(std::span<const RecordOp>(&op, 1), 0, 0);
      auto g = dc->Get(Slice(key));
      const auto took = std::chrono::duration_cast<std::chrono::microseconds>(
          std::chrono::steady_clock::now() - start);
      latencies_.push_back(took);
      max_latency_ = std::max(max_latency_, took);
      if (!a.ok() || !g.ok() || g->value != value) {
        ++errors_;
        continue;
      }
      ++written_;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  const uint16_t port_;
  const uint64_t lsn_base_;
  const std::string secret_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::atomic<uint64_t> written_{0};
  uint64_t errors_ = 0;
  std::chrono::microseconds max_latency_{0};
  std::vector<std::chrono::microseconds> latencies_;
};

// Raises the soft descriptor limit to at least `want` (up to the hard one);
// returns the soft limit now in force.
inline rlim_t RaiseFdLimit(rlim_t want) {
  rlimit l{};
  if (::getrlimit(RLIMIT_NOFILE, &l) != 0) return 0;
  if (l.rlim_cur < want) {
    l.rlim_cur = std::min(want, l.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &l);
    ::getrlimit(RLIMIT_NOFILE, &l);
  }
  return l.rlim_cur;
}

// Peak resident set of this process (VmHWM), in bytes; 0 when unknown.
inline size_t PeakRss() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  size_t kb = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "VmHWM: %zu kB", &kb) == 1) break;
  }
  std::fclose(f);
  return kb * 1024;
}

}  // namespace deuteron::dc::attack
