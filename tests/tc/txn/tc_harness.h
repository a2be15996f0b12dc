// TcHarness: a TxnManager over a dc::Dc and a wal::Log sharing one
// FaultInjectionEnv (in memory), reached in process or, with remote, through
// a DcServer on a loopback port and a RemoteDataComponent. Reopen closes
// everything cleanly; Crash simulates power loss (unsynced writes dropped)
// of the whole process (TC and DC) and reopens, which runs TC recovery.
// StopDc / StartDc (remote only) take the DC server and its Dc away while
// the TC keeps running (a DC process crash, with power loss of its files),
// and bring them back from the same directory on the same port.
//
// Thread safety: tm() may be used from any thread; the harness's own methods
// run on the test's thread with no transaction active.
#pragma once

#include <memory>
#include <mutex>
#include <vector>
#include <string>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "common/fault_env.h"
#include "dc/dc.h"
#include "dc/dc_server.h"
#include "protocol/remote_dc.h"
#include "tc/txn_manager.h"
#include "tc/wal/log.h"
#include "tests/dc/dc_harness.h"

namespace deuteron::test {

// Failures seen on worker threads (Catch's assertions are for the test's
// thread only); the test thread reports them with CheckNone.
class ThreadErrors {
 public:
  // Records `what` unless `cond`; returns cond.
  bool Expect(bool cond, const std::string& what) {
    if (!cond) {
      std::lock_guard<std::mutex> l(mu_);
      if (msgs_.size() < 10) msgs_.push_back(what);
      ++count_;
    }
    return cond;
  }
  void CheckNone() {
    std::lock_guard<std::mutex> l(mu_);
    std::string all;
    for (const std::string& m : msgs_) all += m + "\n";
    INFO(all);
    CHECK(count_ == 0);
  }

 private:
  std::mutex mu_;
  std::vector<std::string> msgs_;
  size_t count_ = 0;
};

class TcHarness {
 public:
  explicit TcHarness(bool remote = false, uint64_t seed = 1, tc::TxnOptions txn = Defaults())
      : remote_(remote), mem_(NewMemEnv()), env_(mem_.get(), seed),
        log_env_(mem_.get(), seed + 1000), txn_options_(txn) {
    Open();
  }
  ~TcHarness() { Close(/*clean=*/false); }

  static tc::TxnOptions Defaults() {
    tc::TxnOptions o;
    o.lock_timeout = std::chrono::milliseconds(5000);
    o.esl_interval = std::chrono::milliseconds(5);
    o.checkpoint_log_bytes = 0;  // tests checkpoint on demand unless they say
    o.checkpoint_interval = std::chrono::milliseconds(0);
    o.apply_batch_ops = 64;  // the DC takes 256: larger commits must split
    o.apply_batch_bytes = 256 << 10;
    o.max_key_size = 256;
    o.max_value_size = 1024;
    o.scan_page = 7;  // small: scans page through the DC
    return o;
  }

  tc::TxnManager& tm() { return *tm_; }
  bool dc_up() const { return dc_ != nullptr; }
  wal::Log& log() { return *log_; }
  dc::Dc& dc() { return *dc_; }
  FaultInjectionEnv& env() { return env_; }          // the DC's files
  FaultInjectionEnv& log_env() { return log_env_; }  // the TC log's files

  void Reopen() {
    Close(/*clean=*/true);
    Open();
  }

  // Power loss of TC and DC together: every unsynced write is lost.
  void Crash(CrashMode mode = CrashMode::kDropUnsynced) {
    REQUIRE(env_.SimulateCrash(mode).ok());
    REQUIRE(log_env_.SimulateCrash(mode).ok());
    dc_->TEST_SkipCloseOnDestroy();
    Close(/*clean=*/false);
    Open();
  }

  // The TC process alone dies (its log loses unsynced writes); the DC keeps
  // running, holding operations the log may never have made durable, until
  // the new TC's recovery restarts it to the end of the stable log.
  // REQUIRES: in process (not remote).
  void CrashTcOnly(CrashMode mode = CrashMode::kDropUnsynced) {
    REQUIRE_FALSE(remote_);
    REQUIRE(log_env_.SimulateCrash(mode).ok());
    if (tm_ != nullptr) {
      Status s = tm_->Close();
      s.PermitUncheckedError();
      tm_.reset();
    }
    Status s = log_->Close();
    s.PermitUncheckedError();
    log_.reset();
    OpenTc();
  }

  // The DC process dies: its server stops (every connection closes), its
  // files lose their unsynced writes (with `power_loss`) and the Dc goes
  // without a clean close. The TC keeps running. REQUIRES: remote.
  void StopDc(bool power_loss = true) {
    REQUIRE(remote_);
    REQUIRE(server_ != nullptr);
    server_->Stop();
    server_.reset();
    if (power_loss) REQUIRE(env_.SimulateCrash(CrashMode::kDropUnsynced).ok());
    dc_->TEST_SkipCloseOnDestroy();
    dc_.reset();
  }

  // A new DC process: reopens the Dc from its directory (its own recovery)
  // and serves it on the port the TC's client uses. REQUIRES: after StopDc.
  void StartDc() {
    REQUIRE(remote_);
    REQUIRE(dc_ == nullptr);
    OpenDc();
    StartServer(port_);
  }

 private:
  void OpenDc() {
    HarnessConfig c;
    c.max_batch_ops = 256;
    c.max_batch_bytes = 4 << 20;
    c.max_scan_items = 64;
    Result<std::unique_ptr<dc::Dc>> d = dc::Dc::Open(&env_, "/dc", InProcessHarness::Options(c));
    INFO(d.status().ToString());
    REQUIRE(d.ok());
    dc_ = std::move(d).value();
  }

  void StartServer(uint16_t port) {
    dc::DcServerOptions so;
    so.port = port;
    so.io_threads = 1;
    so.worker_threads = 4;
    server_ = std::make_unique<dc::DcServer>(dc_.get(), so);
    Status started = server_->Start();
    INFO(started.ToString());
    REQUIRE(started.ok());
    port_ = server_->port();
  }

  void Open() {
    OpenDc();
    OpenTc();
  }

  void OpenTc() {
    wal::LogOptions lo;
    lo.segment_size = 64 << 10;
    lo.buffer_size = 64 << 10;
    lo.spare_segments = 1;
    Result<std::unique_ptr<wal::Log>> l = wal::Log::Open(&log_env_, "/log", lo);
    INFO(l.status().ToString());
    REQUIRE(l.ok());
    log_ = std::move(l).value();
    DataComponent* target = dc_.get();
    if (remote_ && server_ == nullptr) {
      StartServer(0);
      protocol::RemoteOptions ro;
      ro.port = server_->port();
      ro.max_connections = 16;
      ro.connect_timeout_ms = 200;
      Result<std::unique_ptr<protocol::RemoteDataComponent>> rc =
          protocol::RemoteDataComponent::Connect(ro);
      INFO(rc.status().ToString());
      REQUIRE(rc.ok());
      client_ = std::move(rc).value();
      target = client_.get();
    }
    Result<std::unique_ptr<tc::TxnManager>> t = tc::TxnManager::Open(target, log_.get(), txn_options_);
    INFO(t.status().ToString());
    REQUIRE(t.ok());
    tm_ = std::move(t).value();
  }

  void Close(bool clean) {
    if (tm_ != nullptr) {
      Status s = tm_->Close();
      if (clean) {
        INFO(s.ToString());
        REQUIRE(s.ok());
      }
      s.PermitUncheckedError();
      tm_.reset();
    }
    client_.reset();
    if (server_ != nullptr) server_->Stop();
    server_.reset();
    if (log_ != nullptr) {
      Status s = log_->Close();
      if (clean) REQUIRE(s.ok());
      s.PermitUncheckedError();
      log_.reset();
    }
    if (dc_ != nullptr) {
      if (clean) {
        Status s = dc_->Close();
        INFO(s.ToString());
        REQUIRE(s.ok());
      }
      dc_.reset();
    }
  }

  const bool remote_;
  std::unique_ptr<Env> mem_;
  FaultInjectionEnv env_;
  FaultInjectionEnv log_env_;
  const tc::TxnOptions txn_options_;
  std::unique_ptr<dc::Dc> dc_;
  std::unique_ptr<wal::Log> log_;
  std::unique_ptr<dc::DcServer> server_;
  uint16_t port_ = 0;
  std::unique_ptr<protocol::RemoteDataComponent> client_;
  std::unique_ptr<tc::TxnManager> tm_;
};

}  // namespace deuteron::test
