// DcHarness: one DataComponent binding under test, with the crash and
// reopen moves the contract tests (dc_contract_test.cpp) need. The contract
// tests see only DataComponent& and this harness, so they run unchanged over
// every binding: HarnessKinds() names them ("in-process", "remote"),
// MakeHarness() builds one. To add a binding, derive from DcHarness and add a
// name to both functions.
//
// Thread safety: dc() may be used from any thread (DataComponent is
// thread-safe); the harness's own methods run on the test's thread only (they
// use Catch assertions), with no other thread using dc() meanwhile.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "common/fault_env.h"
#include "dc/dc.h"
#include "dc/dc_server.h"
#include "protocol/data_component.h"
#include "protocol/remote_dc.h"

namespace deuteron::test {

// What every binding is configured with; the tests rely on these values.
struct HarnessConfig {
  size_t memory_budget = 0;  // LLAMA's; 0: none (small ones force eviction)
  uint64_t seed = 1;         // FaultInjectionEnv's
  size_t max_key_size = 256;
  size_t max_value_size = 1024;
  size_t max_batch_ops = 256;
  size_t max_batch_bytes = 64 << 10;
  uint32_t max_scan_items = 64;
  size_t max_multiget_keys = 128;
  double max_above_esl_share = dc::DcOptions{}.max_above_esl_share;  // of memory_budget
  // BwTreeOptions::inner_merge_entries (0: inner pages never merge).
  size_t inner_merge_entries = bwtree::BwTreeOptions::kAutoInnerMerge;
};

class DcHarness {
 public:
  virtual ~DcHarness() = default;
  virtual DataComponent* dc() = 0;
  // A second client of the same DC, as a second TC process would hold: in
  // process the same Dc, remote a client with connections of its own.
  virtual DataComponent* peer() = 0;
  // The DC's process dies: every write it had not synced is lost
  // (FaultInjectionEnv, kDropUnsynced); then a new DC opens the same store,
  // recovering its LSS, and dc() is the new one.
  virtual void Crash() = 0;
  // A clean shutdown (Close) and a reopen.
  virtual void Reopen() = 0;
  const HarnessConfig& config() const { return config_; }

 protected:
  explicit DcHarness(HarnessConfig config) : config_(config) {}
  const HarnessConfig config_;
};

// The in-process binding: a dc::Dc over an in-memory file system wrapped in a
// FaultInjectionEnv.
class InProcessHarness : public DcHarness {
 public:
  explicit InProcessHarness(HarnessConfig config)
      : DcHarness(config), mem_(NewMemEnv()), env_(mem_.get(), config.seed) {
    Open();
  }
  ~InProcessHarness() override {
    if (dc_ != nullptr) {
      Status s = dc_->Close();
      s.PermitUncheckedError();  // a test that cared closed it itself
      dc_.reset();
    }
  }

  DataComponent* dc() override { return dc_.get(); }
  DataComponent* peer() override { return dc_.get(); }
  dc::Dc* local() { return dc_.get(); }
  FaultInjectionEnv* env() { return &env_; }

  void Crash() override {
    dc_->TEST_SkipCloseOnDestroy();
    REQUIRE(env_.SimulateCrash(CrashMode::kDropUnsynced).ok());
    dc_.reset();
    Open();
  }

  // Crash() without the reopen: dc() is null until Restore(). `mode` says
  // what becomes of unsynced writes.
  void Kill(CrashMode mode = CrashMode::kDropUnsynced) {
    dc_->TEST_SkipCloseOnDestroy();
    REQUIRE(env_.SimulateCrash(mode).ok());
    dc_.reset();
  }
  void Restore() { Open(); }

  void Reopen() override {
    Status s = dc_->Close();
    INFO(s.ToString());
    REQUIRE(s.ok());
    dc_.reset();
    Open();
  }

  static dc::DcOptions Options(const HarnessConfig& c) {
    dc::DcOptions o;
    o.llama.lss.segment_size = 1 << 20;
    o.llama.lss.buffer_size = 64 << 10;
    o.llama.lss.buffer_count = 4;
    o.llama.lss.io_threads = 0;  // the filling thread writes: deterministic
    o.llama.mapping.max_pages = 1 << 16;
    o.llama.memory_budget = c.memory_budget;
    // Cleaning on, as by default, and eager: a test that writes a few
    // segments has some cleaned and released under it (issue 33).
    o.llama.cleaning_trigger_segments = 2;
    o.llama.cleaning_target_segments = 1;
    // Small nodes: a few hundred keys make several levels, and every few
    // writes consolidate, split or merge.
    o.tree.limits.max_key_size = c.max_key_size;
    o.tree.limits.max_value_size = c.max_value_size;
    o.tree.leaf_max_records = 8;
    o.tree.inner_max_entries = 6;
    o.tree.leaf_delta_threshold = 4;
    o.tree.inner_delta_threshold = 2;
    o.tree.leaf_merge_records = 2;
    o.tree.inner_merge_entries = c.inner_merge_entries;
    o.tree.node_max_bytes = 16 << 10;
    o.max_batch_ops = c.max_batch_ops;
    o.max_batch_bytes = c.max_batch_bytes;
    o.max_scan_items = c.max_scan_items;
    o.max_multiget_keys = c.max_multiget_keys;
    o.max_above_esl_share = c.max_above_esl_share;
    return o;
  }

 private:
  void Open() {
    Result<std::unique_ptr<dc::Dc>> r = dc::Dc::Open(&env_, "/dc", Options(config_));
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    dc_ = std::move(r).value();
  }

  std::unique_ptr<Env> mem_;
  FaultInjectionEnv env_;
  std::unique_ptr<dc::Dc> dc_;
};

// The remote binding: a DcServer on an ephemeral loopback port over an
// in-process Dc, and a RemoteDataComponent connected to it. Crash and
// Reopen stop the server, crash or reopen the Dc, and serve it again on a
// new port with a new client (as a TC reconnects to a restarted DC).
class RemoteHarness : public DcHarness {
 public:
  explicit RemoteHarness(HarnessConfig config) : DcHarness(config), local_(config) { Serve(); }
  ~RemoteHarness() override { Unserve(); }

  DataComponent* dc() override { return client_.get(); }
  DataComponent* peer() override { return peer_.get(); }
  void Crash() override {
    Unserve();
    local_.Crash();
    Serve();
  }
  void Reopen() override {
    Unserve();
    local_.Reopen();
    Serve();
  }

 private:
  void Serve() {
    dc::DcServerOptions so;
    so.port = 0;
    so.io_threads = 1;
    so.worker_threads = 4;  // the concurrency tests run several clients
    so.max_multiget_keys = config_.max_multiget_keys;
    server_ = std::make_unique<dc::DcServer>(local_.local(), so);
    Status started = server_->Start();
    INFO(started.ToString());
    REQUIRE(started.ok());
    protocol::RemoteOptions ro;
    ro.port = server_->port();
    ro.max_connections = 8;
    Result<std::unique_ptr<protocol::RemoteDataComponent>> c =
        protocol::RemoteDataComponent::Connect(ro);
    INFO(c.status().ToString());
    REQUIRE(c.ok());
    client_ = std::move(c).value();
    c = protocol::RemoteDataComponent::Connect(ro);
    INFO(c.status().ToString());
    REQUIRE(c.ok());
    peer_ = std::move(c).value();
  }
  void Unserve() {
    client_.reset();
    peer_.reset();
    if (server_ != nullptr) server_->Stop();
    server_.reset();
  }

  InProcessHarness local_;
  std::unique_ptr<dc::DcServer> server_;
  std::unique_ptr<protocol::RemoteDataComponent> client_;
  std::unique_ptr<protocol::RemoteDataComponent> peer_;
};

inline bool HasCode(const Status& s, Code code) { return s.code() == code; }

// The DC's current TC incarnation (the last RestartTo's; 0 before any), for
// tests that drive a DC across restarts without keeping DcReady.
inline uint64_t IncarnationOf(DataComponent* dc) {
  Result<DcHealth> health = dc->Health();
  INFO(health.status().ToString());
  REQUIRE(health.ok());
  return health->incarnation;
}

inline std::vector<std::string> HarnessKinds() { return {"in-process", "remote"}; }

inline std::unique_ptr<DcHarness> MakeHarness(const std::string& kind, HarnessConfig config) {
  if (kind == "in-process") return std::make_unique<InProcessHarness>(config);
  if (kind == "remote") return std::make_unique<RemoteHarness>(config);
  FAIL("unknown DC binding " << kind);
  return nullptr;
}

}  // namespace deuteron::test
