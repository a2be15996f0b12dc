// What a commit reports when the DC or the log fails after its record was
// appended (tc/txn.md, "Failures"): a durable record is committed (OK) even
// if the DC refused it, the TC then refuses reads until a reopen replays it;
// a log failure leaves the commit in doubt, and recovery makes it wholly
// present or wholly absent.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "common/fault_env.h"
#include "dc/dc.h"
#include "tc/txn_manager.h"
#include "tc/wal/log.h"
#include "tests/dc/dc_harness.h"
#include "tests/protocol/forwarding_dc.h"

namespace deuteron::test {
namespace {

// Forwards to a DataComponent; Apply fails with TooLarge while `fail_apply`.
class FlakyDc final : public ForwardingDc {
 public:
  explicit FlakyDc(DataComponent* dc) : ForwardingDc(dc) {}
  std::atomic<bool> fail_apply{false};
  // Apply answers Unavailable (the DC went away) while `away`; RestartTo
  // answers NoSpace (the DC's disk is full) `restart_no_space` times.
  std::atomic<bool> away{false};
  std::atomic<int> restart_no_space{0};
  std::atomic<int> restarts{0};
  Result<ApplyResult> Apply(std::span<const RecordOp> ops, uint64_t esl, uint64_t inc) override {
    if (fail_apply.load()) return Status::TooLarge("injected apply failure");
    if (away.load()) return Status::Unavailable("injected: the DC went away");
    return dc()->Apply(ops, esl, inc);
  }
  Result<DcReady> RestartTo(uint64_t end) override {
    restarts.fetch_add(1);
    if (restart_no_space.fetch_sub(1) > 0) return Status::NoSpace("injected: the DC's disk is full");
    return dc()->RestartTo(end);
  }
};

struct Store {
  std::unique_ptr<Env> mem = NewMemEnv();
  FaultInjectionEnv env{mem.get(), 1};      // the DC's files
  FaultInjectionEnv log_env{mem.get(), 2};  // the log's
  std::unique_ptr<dc::Dc> dc;
  std::unique_ptr<wal::Log> log;
  std::unique_ptr<FlakyDc> flaky;
  std::unique_ptr<tc::TxnManager> tm;

  void Open() {
    auto d = dc::Dc::Open(&env, "/dc", InProcessHarness::Options(HarnessConfig{}));
    REQUIRE(d.ok());
    dc = std::move(d).value();
    wal::LogOptions lo;
    lo.segment_size = 64 << 10;
    lo.buffer_size = 64 << 10;
    auto l = wal::Log::Open(&log_env, "/log", lo);
    REQUIRE(l.ok());
    log = std::move(l).value();
    flaky = std::make_unique<FlakyDc>(dc.get());
    tc::TxnOptions o;
    o.checkpoint_log_bytes = 0;
    o.checkpoint_interval = std::chrono::milliseconds(0);
    auto t = tc::TxnManager::Open(flaky.get(), log.get(), o);
    INFO(t.status().ToString());
    REQUIRE(t.ok());
    tm = std::move(t).value();
  }
  // Power loss of everything, then a reopen (recovery).
  void CrashAndReopen() {
    REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
    REQUIRE(log_env.SimulateCrash(CrashMode::kDropUnsynced).ok());
    log_env.ClearFailures();
    dc->TEST_SkipCloseOnDestroy();
    Status s = tm->Close();
    s.PermitUncheckedError();
    tm.reset();
    s = log->Close();
    s.PermitUncheckedError();
    log.reset();
    dc.reset();
    flaky.reset();
    Open();
  }
  ~Store() {
    if (tm != nullptr) tm->Close().PermitUncheckedError();
  }
};

Status Put1(tc::TxnManager& tm, const std::string& k, const std::string& v) {
  auto t = tm.Begin();
  if (Status s = t->Put(k, v); !s.ok()) return s;
  return t->Commit();
}

}  // namespace

TEST_CASE("txn: a DC apply failure after append: committed, TC refuses reads until reopen",
          "[tc][txn][failure]") {
  Store st;
  st.Open();
  REQUIRE(Put1(*st.tm, "a", "1").ok());
  st.flaky->fail_apply = true;
  Status s = Put1(*st.tm, "a", "2");
  INFO(s.ToString());
  CHECK(s.ok());  // durable: committed
  CHECK_FALSE(st.tm->health().ok());
  {
    auto t = st.tm->Begin();
    Result<std::string> r = t->Get("a");
    CHECK_FALSE(r.ok());
    CHECK_FALSE(r.status().IsNotFound());
  }
  CHECK_FALSE(Put1(*st.tm, "b", "1").ok());
  // No checkpoint may pass the record the DC lacks.
  CHECK_FALSE(st.tm->Checkpoint().ok());
  st.CrashAndReopen();
  REQUIRE(st.tm->health().ok());
  auto t = st.tm->Begin();
  Result<std::string> r = t->Get("a");
  REQUIRE(r.ok());
  CHECK(*r == "2");
  CHECK(t->Get("b").status().IsNotFound());
  REQUIRE(t->Commit().ok());
}

TEST_CASE("txn: a log failure leaves the commit in doubt, recovery decides wholly",
          "[tc][txn][failure]") {
  Store st;
  st.Open();
  REQUIRE(Put1(*st.tm, "a", "1").ok());
  st.log_env.FailNth(FaultInjectionEnv::Op::kSync, 1, Code::kIOError);
  auto t = st.tm->Begin();
  REQUIRE(t->Put("a", "2").ok());
  REQUIRE(t->Put("b", "2").ok());
  Status s = t->Commit();
  INFO(s.ToString());
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("in doubt") != std::string::npos);
  CHECK_FALSE(st.tm->health().ok());
  st.CrashAndReopen();
  auto r = st.tm->Begin();
  Result<std::string> a = r->Get("a");
  Result<std::string> b = r->Get("b");
  REQUIRE(a.ok());
  if (*a == "2") {
    CHECK((b.ok() && *b == "2"));
  } else {
    CHECK(*a == "1");
    CHECK(b.status().IsNotFound());
  }
  REQUIRE(r->Commit().ok());
}

// A DC whose disk is full answers the TC's restart-to with NoSpace: that DC
// is lost for now (it may get space back), not refused for good, so the TC
// keeps retrying its recovery rounds and serves again once the DC takes it.
// Before, the TC failed itself at the first NoSpace (found by the crash
// harness's enospc and rpc faults).
TEST_CASE("txn: a DC recovery refused with NoSpace is retried until the DC takes it",
          "[tc][txn][failure]") {
  Store st;
  st.Open();
  REQUIRE(Put1(*st.tm, "a", "1").ok());
  st.flaky->restart_no_space = 3;
  st.flaky->away = true;
  // Its record is durable: committed, though the apply found the DC gone.
  Status s = Put1(*st.tm, "a", "2");
  INFO(s.ToString());
  REQUIRE(s.ok());
  st.flaky->away = false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!st.tm->health().ok() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  INFO(st.tm->health().ToString());
  REQUIRE(st.tm->health().ok());
  CHECK(st.flaky->restarts.load() >= 4);
  auto t = st.tm->Begin();
  Result<std::string> a = t->Get("a");
  REQUIRE(a.ok());
  CHECK(*a == "2");
  REQUIRE(t->Commit().ok());
}

}  // namespace deuteron::test
