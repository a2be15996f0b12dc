// kill -9 of a split deployment's processes (issue 30, "Process tests"):
// `deuteron dc` and `deuteron tc` run as child processes on loopback, each in
// its own temporary directory, while clients make transfers through the
// client library (read two balances, move one unit, and write a marker key
// naming the transfer). Then:
//  (a) the DC alone is killed and started again on its port: the running TC
//      recovers it in place (restart to its ESL, replay) and the same clients
//      carry on, seeing only retryable errors;
//  (b) both are killed and started again (the TC against the new DC);
//  (c) the TC alone is killed and started again against the running DC.
// After each: every transfer a client saw acknowledged is there with its
// marker's value, no transfer that was never committed is (only those whose
// commit was in flight may go either way), and the balances still sum to
// what they started with.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/random.h"
#include "tests/tc/cli/cli_util.h"
#include "tests/tc/cli/dc_child.h"
#include "tests/tc/cli/marked_transfers.h"

namespace deuteron::test {
namespace {

// The two servers, each a child process with its own directory.
class Split {
 public:
  Split() : dc_dir_(TempDir()), tc_dir_(TempDir()) {
    StartDc(0);
    StartTc();
  }
  ~Split() {
    tc_.reset();
    dc_.reset();
    std::system(("rm -rf " + dc_dir_ + " " + tc_dir_).c_str());
  }

  // `port` 0: any free port.
  void StartDc(uint16_t port) {
    dc_ = std::make_unique<Child>(
        std::vector<std::string>{"dc", "--dir", dc_dir_, "--listen", LoopbackAddress(port)});
    dc_port_ = deuteron::StartDc(dc_.get());
  }
  void StartTc() {
    tc_ = std::make_unique<Child>(std::vector<std::string>{
        "tc", "--dir", tc_dir_, "--dc", LoopbackAddress(dc_port_), "--listen", "127.0.0.1:0"});
    tc_port_ = ServingPort(tc_->ReadLine());
  }
  void KillDc() { CHECK(dc_->Stop(SIGKILL) == -1); }
  void KillTc() { CHECK(tc_->Stop(SIGKILL) == -1); }
  void StopCleanly() {
    CHECK(tc_->Stop(SIGTERM) == 0);
    CHECK(dc_->Stop(SIGTERM) == 0);
  }

  uint16_t dc_port() const { return dc_port_; }
  uint16_t tc_port() const { return tc_port_; }

 private:
  const std::string dc_dir_, tc_dir_;
  std::unique_ptr<Child> dc_, tc_;
  uint16_t dc_port_ = 0, tc_port_ = 0;
};

// A split deployment with its bank loaded and clients making transfers,
// each of which has had ten acknowledged.
struct SplitUnderLoad {
  SplitUnderLoad() {
    InitializeBank(split.tc_port());
    load.Start(split.tc_port());
    REQUIRE(load.WaitForProgress(10, std::chrono::seconds(30)));
  }
  // After the test's kills and restarts: the clients, running against the
  // TC at its current port, commit again, see only retryable errors, and
  // the store holds what they were told.
  void Check() {
    CHECK(load.WaitForProgress(10, std::chrono::seconds(30)));
    load.Stop();
    INFO("seed " << seed << "; errors: " << load.Errors());
    CHECK(load.other_errors() == 0);
    VerifyTransfers(split.tc_port(), load.records());
    split.StopCleanly();
  }

  const uint64_t seed = TestSeed();
  Split split;
  MarkedTransfers load{seed, /*connect_timeout_ms=*/200};
};

}  // namespace

TEST_CASE("split deployment: kill -9 of deuteron dc, the TC recovers it in place and clients go on",
          "[tc][cli][splitkill]") {
  SplitUnderLoad s;
  s.split.KillDc();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  s.split.StartDc(s.split.dc_port());  // the same port: the TC's address for it
  s.load.ResetProgress();
  // The same clients, through the same TC, commit again.
  s.Check();
}

TEST_CASE("split deployment: kill -9 of both deuteron tc and deuteron dc, then both restarted",
          "[tc][cli][splitkill]") {
  SplitUnderLoad s;
  s.split.KillDc();
  s.split.KillTc();
  s.load.Stop();
  s.split.StartDc(0);
  s.split.StartTc();
  s.load.Start(s.split.tc_port());
  s.Check();
}

TEST_CASE("split deployment: kill -9 of deuteron tc, restarted against the running DC",
          "[tc][cli][splitkill]") {
  SplitUnderLoad s;
  s.split.KillTc();
  s.load.Stop();
  s.split.StartTc();
  s.load.Start(s.split.tc_port());
  s.Check();
}

}  // namespace deuteron::test
