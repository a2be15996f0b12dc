// Helpers for the kill -9 variants of issue 38's attack tests
// (tests/dc/dc_server_kill_test.cpp): a real `deuteron dc` process
// (DcProcess, over tests/tc/cli/cli_util.h's Child), a TC-like healthy
// writer that keeps its own log and tracks what the DC acknowledged as
// durable (DurableWriter), and the checks after the process was killed:
// what the acknowledged RSSP covers is there as the DC recovered it, a TC's
// restart-to and replay bring back everything it logged, and the store
// passes the tree's Check offline.
//
// Thread safety: a DcProcess is used by one thread. A DurableWriter runs on
// its own thread; read its log and counters after Stop().
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "common/env.h"
#include "dc/dc.h"
#include "dc/bwtree/bwtree.h"
#include "protocol/remote_dc.h"
#include "tests/tc/cli/cli_util.h"

namespace deuteron::dc::kill {

using protocol::RemoteDataComponent;
using protocol::RemoteOptions;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// The sanitizers' shadow memory and quarantine make resident memory
// meaningless: the process bound is checked in plain builds only.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr bool kCheckRss = false;
#else
constexpr bool kCheckRss = true;
#endif

// How a test's `deuteron dc` runs: small limits, so that an attack reaches
// them within a second.
struct ServerConfig {
  uint64_t memory_budget = 32 * kMiB;
  uint64_t max_frame = 2 * kMiB;
  uint64_t request_limit = 8 * kMiB;
  uint64_t io_threads = 2;
  uint64_t frame_deadline_ms = 5000;
  uint64_t max_connections = 256;
  std::string secret;  // non-empty: given with --secret-file
};

// server::ServerOptions::worker_threads, which `deuteron dc` keeps.
constexpr uint64_t kWorkerThreads = 4;
// The tree's largest value (bwtree::Limits::max_value_size).
constexpr uint64_t kMaxValue = 64 << 10;

// A `deuteron dc` process serving `dir` on a loopback port of its choosing.
class DcProcess {
 public:
  DcProcess(std::string dir, ServerConfig config)
      : dir_(std::move(dir)), config_(std::move(config)) {
    if (!config_.secret.empty()) {
      std::ofstream(dir_ + ".secret") << config_.secret << "\n";
    }
  }
  ~DcProcess() {
    child_.reset();
    std::system(("rm -rf " + dir_ + " " + dir_ + ".secret").c_str());
  }

  // Starts the process (recovering what the directory holds) and waits for
  // its "serving" line.
  void Start() {
    std::vector<std::string> args = {
        "dc",
        "--dir", dir_,
        "--listen", "127.0.0.1:0",
        "--memory-budget", std::to_string(config_.memory_budget),
        "--max-frame-size", std::to_string(config_.max_frame),
        "--request-memory-limit", std::to_string(config_.request_limit),
        "--io-threads", std::to_string(config_.io_threads),
        "--frame-deadline-ms", std::to_string(config_.frame_deadline_ms),
        "--max-connections", std::to_string(config_.max_connections)};
    if (!config_.secret.empty()) {
      args.push_back("--secret-file");
      args.push_back(dir_ + ".secret");
    }
    child_ = std::make_unique<test::Child>(args);
    port_ = test::ServingPort(child_->ReadLine());
    start_rss_ = child_->process().RssBytes();
  }
  // SIGKILL: nothing is flushed or closed.
  void Kill() {
    REQUIRE(child_ != nullptr);
    CHECK(child_->Stop(SIGKILL) == -1);
    child_.reset();
  }
  // SIGTERM: a clean shutdown; its exit status.
  int Terminate() {
    REQUIRE(child_ != nullptr);
    const int status = child_->Stop(SIGTERM);
    child_.reset();
    return status;
  }

  uint16_t port() const { return port_; }
  const std::string& dir() const { return dir_; }
  const ServerConfig& config() const { return config_; }
  uint64_t peak_rss() const { return child_->process().PeakRssBytes(); }
  uint64_t rss() const { return child_->process().RssBytes(); }
  uint64_t start_rss() const { return start_rss_; }

  // The process bound of issue 38 ("peak RSS within the DC budget plus the
  // request limit plus a stated fixed allowance"), as protocol/protocol.md
  // states it ("The process bound").
  // The DC's part alone (dc/dc.md, "The memory budget"): what the process
  // comes back within once the attack's connections closed.
  uint64_t DcBound() const {
    return start_rss_ + config_.memory_budget + config_.memory_budget / 10 + 8 * kMiB;
  }
  uint64_t RssBound() const {
    const uint64_t calls = config_.io_threads + kWorkerThreads;
    return start_rss_ + config_.memory_budget + config_.memory_budget / 10 + 8 * kMiB +
           config_.request_limit + calls * (3 * config_.max_frame + 64 * kMaxValue) +
           config_.io_threads * 64 * 1024;
  }

 private:
  const std::string dir_;
  const ServerConfig config_;
  std::unique_ptr<test::Child> child_;
  uint16_t port_ = 0;
  uint64_t start_rss_ = 0;
};

inline RemoteOptions ClientOptions(uint16_t port, const std::string& secret) {
  RemoteOptions o;
  o.port = port;
  o.max_connections = 1;
  o.recv_timeout_ms = 20000;
  o.secret = secret;
  return o;
}

// A TC-like writer: it takes the DC (restartTo, which starts its
// incarnation), then logs and applies one key per LSN (LSN n writes Key(n);
// the ESL it piggy-backs is n: its log is durable up to there), and every
// kRsspEvery keys proposes an RSSP. When fenced off (StaleIncarnation) it
// takes the DC back as a TC does: restartTo its stable end and replay from
// its RSSP. It stops at Stop(), or at the first failure after
// ExpectFailures() (the server was killed).
class DurableWriter {
 public:
  static constexpr uint64_t kRsspEvery = 16;

  // `preload`: (key, value) pairs logged and applied first (LSNs 1..k),
  // made durable with an RSSP before the thread starts.
  DurableWriter(uint16_t port, std::string secret,
                std::vector<std::pair<std::string, std::string>> preload = {})
      : port_(port), secret_(std::move(secret)), log_(std::move(preload)) {
    auto r = RemoteDataComponent::Connect(ClientOptions(port_, secret_));
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    dc_ = std::move(r).value();
    Result<DcReady> ready = dc_->RestartTo(0);
    INFO(ready.status().ToString());
    REQUIRE(ready.ok());
    incarnation_ = ready->incarnation;
    for (uint64_t lsn = 1; lsn <= log_.size(); ++lsn) {
      const auto& [k, v] = log_[lsn - 1];
      const RecordOp op{RecordOpKind::kUpsert, Slice(k), Slice(v), lsn};
      REQUIRE(dc_->Apply(std::span<const RecordOp>(&op, 1), lsn, incarnation_).ok());
    }
    applied_ = log_.size();
    if (!log_.empty()) {
      REQUIRE(dc_->ProposeRssp(log_.size() + 1, incarnation_).ok());
      durable_ = log_.size() + 1;
    }
    thread_ = std::thread([this] { Run(); });
  }
  ~DurableWriter() { Stop(); }

  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  // From now on a failed call ends the writer (the server is being killed).
  void ExpectFailures() { expect_failures_.store(true); }

  // Waits up to timeout_ms until pred(this) holds.
  template <typename Pred>
  bool WaitFor(Pred pred, int timeout_ms = 10000) {
    const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < end && !done_.load()) {
      if (pred(*this)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return pred(*this);
  }

  static std::string Key(uint64_t lsn) { return fmt::format("h/{:07}", lsn); }
  static std::string Value(uint64_t lsn) {
    return fmt::format("value-{}-{}", lsn, std::string(100, static_cast<char>('a' + lsn % 26)));
  }

  // The highest LSN the DC acknowledged applying, and the RSSP it
  // acknowledged last (every LSN below it is durable in the DC).
  uint64_t applied() const { return applied_.load(); }
  uint64_t durable() const { return durable_.load(); }
  // Unexpected failures before ExpectFailures(), with the last one.
  uint64_t unexpected_errors() const { return unexpected_.load(); }
  std::string last_error() const {
    std::lock_guard<std::mutex> l(mu_);
    return last_error_;
  }
  uint64_t stale() const { return stale_.load(); }
  uint64_t retakes() const { return retakes_.load(); }
  // REQUIRES: Stop() returned.
  const std::vector<std::pair<std::string, std::string>>& log() const { return log_; }
  const std::string& secret() const { return secret_; }

 private:
  enum class Outcome { kOk, kStale, kRetry, kEnd };

  Outcome Classify(const Status& s) {
    if (s.ok()) return Outcome::kOk;
    if (s.IsStaleIncarnation()) {
      ++stale_;
      return Outcome::kStale;
    }
    if (expect_failures_.load()) return Outcome::kEnd;
    // A rogue restart in progress (Unavailable) or a full backlog (Busy) is
    // retried; anything else is a failure of the server's governance.
    if (!s.IsUnavailable() && !s.IsBusy()) {
      ++unexpected_;
      std::lock_guard<std::mutex> l(mu_);
      last_error_ = s.ToString();
      if (unexpected_.load() > 100) return Outcome::kEnd;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return Outcome::kRetry;
  }

  // Restarts the DC to the log's end and replays from the RSSP.
  Outcome Retake() {
    for (;;) {
      if (stop_.load()) return Outcome::kEnd;
      Result<DcReady> r = dc_->RestartTo(log_.size());
      const Outcome o = Classify(r.status());
      if (o == Outcome::kEnd) return o;
      if (o != Outcome::kOk) continue;
      incarnation_ = r->incarnation;
      ++retakes_;
      bool again = false;
      for (uint64_t lsn = std::max<uint64_t>(durable_.load(), 1); lsn <= log_.size() && !again;) {
        const auto& [k, v] = log_[lsn - 1];
        const RecordOp op{RecordOpKind::kUpsert, Slice(k), Slice(v), lsn};
        const Outcome a = Classify(
            dc_->Apply(std::span<const RecordOp>(&op, 1), log_.size(), incarnation_).status());
        if (a == Outcome::kEnd) return a;
        if (a == Outcome::kStale) again = true;
        if (a == Outcome::kOk) ++lsn;
      }
      if (!again) return Outcome::kOk;
    }
  }

  void Run() {
    while (!stop_.load()) {
      const uint64_t lsn = log_.size() + 1;
      log_.emplace_back(Key(lsn), Value(lsn));  // logged: the stable end is lsn
      const auto& [k, v] = log_.back();
      const RecordOp op{RecordOpKind::kUpsert, Slice(k), Slice(v), lsn};
      Outcome o;
      do {
        o = Classify(dc_->Apply(std::span<const RecordOp>(&op, 1), lsn, incarnation_).status());
        if (o == Outcome::kStale) o = Retake();  // the replay applies lsn too
      } while (o == Outcome::kRetry && !stop_.load());
      if (o != Outcome::kOk) break;
      applied_.store(lsn);
      if (lsn % kRsspEvery == 0) {
        do {
          o = Classify(dc_->ProposeRssp(lsn + 1, incarnation_));
          if (o == Outcome::kStale) {
            o = Retake();
            if (o == Outcome::kOk) o = Outcome::kRetry;  // propose again
          }
        } while (o == Outcome::kRetry && !stop_.load());
        if (o != Outcome::kOk) break;
        durable_.store(lsn + 1);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    done_.store(true);
  }

  const uint16_t port_;
  const std::string secret_;
  std::unique_ptr<RemoteDataComponent> dc_;
  uint64_t incarnation_ = 0;
  std::vector<std::pair<std::string, std::string>> log_;  // log_[n - 1] is LSN n
  std::atomic<uint64_t> applied_{0}, durable_{0};
  std::atomic<uint64_t> unexpected_{0}, stale_{0}, retakes_{0};
  mutable std::mutex mu_;
  std::string last_error_;
  std::atomic<bool> stop_{false}, expect_failures_{false}, done_{false};
  std::thread thread_;
};

// The server restarted after the kill: every key the acknowledged RSSP
// covers is there as the DC recovered it (before any replay), and its RSSP
// is at least that one. Then, as a TC recovering: restartTo the log's end,
// replay from the DC's RSSP, and every logged key reads back.
inline void CheckRecovered(uint16_t port, const DurableWriter& w) {
  auto r = RemoteDataComponent::Connect(ClientOptions(port, w.secret()));
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  RemoteDataComponent& dc = **r;
  Result<DcHealth> health = dc.Health();
  REQUIRE(health.ok());
  INFO("acknowledged RSSP " << w.durable() << ", applied " << w.applied() << ", logged "
                           << w.log().size() << "; recovered rssp " << health->rssp
                           << " max durable " << health->max_durable_lsn);
  CHECK(health->rssp >= w.durable());
  const auto& log = w.log();
  uint64_t missing = 0;
  for (uint64_t lsn = 1; lsn < w.durable(); ++lsn) {
    Result<ReadResult> g = dc.Get(Slice(log[lsn - 1].first));
    REQUIRE(g.ok());
    if (!g->found || g->value != log[lsn - 1].second) ++missing;
  }
  CHECK(missing == 0);

  Result<DcReady> ready = dc.RestartTo(log.size());
  INFO(ready.status().ToString());
  REQUIRE(ready.ok());
  for (uint64_t lsn = std::max<uint64_t>(ready->rssp, 1); lsn <= log.size(); ++lsn) {
    const RecordOp op{RecordOpKind::kUpsert, Slice(log[lsn - 1].first), Slice(log[lsn - 1].second),
                      lsn};
    REQUIRE(dc.Apply(std::span<const RecordOp>(&op, 1), log.size(), ready->incarnation).ok());
  }
  for (uint64_t lsn = 1; lsn <= log.size(); ++lsn) {
    Result<ReadResult> g = dc.Get(Slice(log[lsn - 1].first));
    REQUIRE(g.ok());
    if (!g->found || g->value != log[lsn - 1].second) ++missing;
  }
  CHECK(missing == 0);
}

// The store, once the server shut down cleanly: opened in this process, the
// tree passes its Check and every logged key is there.
inline void CheckOffline(const std::string& dir, const DurableWriter& w) {
  Result<std::unique_ptr<Dc>> opened = Dc::Open(Env::Posix(), dir, DcOptions{});
  INFO(opened.status().ToString());
  REQUIRE(opened.ok());
  Dc& dc = **opened;
  const Status check = dc.TEST_tree()->Check();
  INFO(check.ToString());
  CHECK(check.ok());
  uint64_t missing = 0;
  for (const auto& [k, v] : w.log()) {
    Result<ReadResult> g = dc.Get(Slice(k));
    REQUIRE(g.ok());
    if (!g->found || g->value != v) ++missing;
  }
  CHECK(missing == 0);
  REQUIRE(dc.Close().ok());
}

}  // namespace deuteron::dc::kill
