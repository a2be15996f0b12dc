// The RPC fault proxy between real servers: `deuteron dc` and `deuteron tc`
// run as child processes, the TC pointed at the proxy (in this process)
// instead of the DC, and clients make bank transfers through the client
// library (read two balances, move one unit, write a marker key naming the
// transfer) while the proxy delays, drops, resets and duplicates the TC's
// calls to the DC. Then the faults stop and:
//  - the same clients commit again through the same servers (both stayed
//    up, or recovered by themselves: no process is restarted by the test);
//  - every transfer a client saw acknowledged is there with its marker, none
//    that never reached commit is, and the balances sum to the start's;
//  - every fault kind happened.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/random.h"
#include "tc/client/client.h"
#include "tc/crash/proxy/rpc_proxy.h"
#include "tests/tc/cli/cli_util.h"
#include "tests/tc/cli/marked_transfers.h"

namespace deuteron::test {
namespace {

// A `deuteron dc` child serving `dir` on any free port, and that port.
std::unique_ptr<Child> StartDcChild(const std::string& dir, uint16_t* port) {
  auto dc = std::make_unique<Child>(std::vector<std::string>{"dc", "--dir", dir, "--listen", LoopbackAddress(0)});
  *port = ServingPort(dc->ReadLine());
  return dc;
}

// A `deuteron tc` child serving `dir` against the DC at `dc_port` on any
// free port, and that port.
std::unique_ptr<Child> StartTcChild(const std::string& dir, uint16_t dc_port, uint16_t* port) {
  auto tc = std::make_unique<Child>(std::vector<std::string>{
      "tc", "--dir", dir, "--dc", LoopbackAddress(dc_port), "--listen", LoopbackAddress(0)});
  *port = ServingPort(tc->ReadLine());
  return tc;
}

// A DC, the proxy in front of it (no faults yet), and a TC pointed at the
// proxy, with the bank loaded through it.
struct ProxiedSplit {
  ProxiedSplit(const std::string& dc_dir, const std::string& tc_dir) {
    dc = StartDcChild(dc_dir, &dc_port);
    auto p = crash::RpcProxy::Start("127.0.0.1", 0, "127.0.0.1", dc_port, crash::ProxyFaults{});
    REQUIRE(p.ok());
    proxy = std::move(p).value();
    tc = StartTcChild(tc_dir, proxy->port(), &tc_port);
    InitializeBank(tc_port);
  }

  std::unique_ptr<Child> dc;
  uint16_t dc_port = 0;
  std::unique_ptr<crash::RpcProxy> proxy;
  std::unique_ptr<Child> tc;
  uint16_t tc_port = 0;
};

// Waits until the proxy has forwarded `frames` frames and made a few of each
// kind f asks for, or frames / 10 seconds passed.
void WaitForFrames(const crash::RpcProxy& proxy, uint64_t frames, const crash::ProxyFaults& f) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(frames / 10);
  while (std::chrono::steady_clock::now() < until) {
    const crash::ProxyCounts n = proxy.counts();
    if (n.frames > frames && (f.drop_p == 0 || n.dropped > 2) && (f.reset_p == 0 || n.reset > 2) &&
        (f.duplicate_p == 0 || n.duplicated > 2)) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Runs the transfers under `f` (its seed replaced by the test's) until the
// proxy has forwarded `frames` frames and made a few of each kind f asks
// for, then turns the faults off and checks. With move_dc, halfway through
// the DC is killed (SIGKILL) and started again on another port, and the
// proxy sent there (SetTarget): the TC, still pointed at the proxy, must
// find it by itself.
void RunUnderFaults(uint64_t frames, crash::ProxyFaults f, bool move_dc = false) {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  const std::string dc_dir = TempDir(), tc_dir = TempDir();
  ProxiedSplit s(dc_dir, tc_dir);
  crash::RpcProxy* const proxy = s.proxy.get();

  f.seed = seed;
  proxy->SetFaults(f);
  MarkedTransfers load(seed, /*connect_timeout_ms=*/500);
  load.Start(s.tc_port);
  // A fair run under faults: enough frames that every kind happens a few
  // times; gives up (and fails below) after frames / 10 seconds.
  if (move_dc) {
    WaitForFrames(*proxy, frames / 2, f);
    CHECK(s.dc->Stop(SIGKILL) == -1);
    uint16_t new_port = 0;
    s.dc = StartDcChild(dc_dir, &new_port);
    CHECK(new_port != s.dc_port);
    proxy->SetTarget("127.0.0.1", new_port);
  }
  WaitForFrames(*proxy, frames, f);
  const crash::ProxyCounts n = proxy->counts();
  INFO("frames " << n.frames << " delayed " << n.delayed << " dropped " << n.dropped << " reset "
                 << n.reset << " duplicated " << n.duplicated << " connections " << n.connections);
  proxy->SetFaults(crash::ProxyFaults{});
  // The same servers serve the same clients again, by themselves.
  load.ResetProgress();
  const bool progress = load.WaitForProgress(5, std::chrono::seconds(30));
  load.Stop();
  INFO("errors: " << load.Errors());
  CHECK(progress);
  CHECK((f.delay_p == 0 || n.delayed > 0));
  CHECK((f.drop_p == 0 || n.dropped > 0));
  CHECK((f.reset_p == 0 || n.reset > 0));
  CHECK((f.duplicate_p == 0 || n.duplicated > 0));
  VerifyTransfers(s.tc_port, load.records());
  CHECK(load.other_errors() == 0);
  CHECK(s.tc->Stop(SIGTERM) == 0);
  proxy->Stop();
  CHECK(s.dc->Stop(SIGTERM) == 0);
  std::system(("rm -rf " + dc_dir + " " + tc_dir).c_str());
}

// Every kind at a fair rate. max_delay is also the most a duplicate waits:
// long enough for the TC to commit, let go of the keys and apply a newer
// write to them before the late copy arrives.
crash::ProxyFaults EveryKind() {
  crash::ProxyFaults f;
  f.delay_p = 0.1;
  f.max_delay = std::chrono::milliseconds(20);
  f.drop_p = 0.02;
  f.reset_p = 0.02;
  f.duplicate_p = 0.1;
  return f;
}

// Duplicates alone, often: no recovery slows the clients, so late copies
// meet newer writes to their keys many times a second (how a DC that
// applies an operation older than its key's would be caught).
crash::ProxyFaults Duplicates() {
  crash::ProxyFaults f;
  f.duplicate_p = 1;
  return f;
}

}  // namespace

TEST_CASE("rpc proxy between deuteron tc and deuteron dc: delays, drops, resets and duplicates; "
          "every acknowledged transfer kept, the total intact, the servers up",
          "[crash][proxy][split]") {
  RunUnderFaults(1000, EveryKind());
}

TEST_CASE("rpc proxy between deuteron tc and deuteron dc: late duplicates of the TC's calls change "
          "nothing",
          "[crash][proxy][split]") {
  RunUnderFaults(3000, Duplicates());
}

TEST_CASE("rpc proxy between deuteron tc and deuteron dc: the DC killed and moved to another port "
          "under faults, the TC finds it through the proxy",
          "[crash][proxy][split]") {
  RunUnderFaults(1000, EveryKind(), /*move_dc=*/true);
}

// What a client sees of a TC that refused its DC for another store's:
// StoreMismatch, whether its call met the recovery round or arrived after
// the TC failed (then "the TC has failed ...: StoreMismatch ..."; under
// TSan the TC fails first). Before, the second was Unavailable.
bool RefusedForStore(const Status& s) { return s.code() == Code::kStoreMismatch; }

TEST_CASE("rpc proxy: the DC swapped under the TC for another store's: the TC refuses it and still "
          "stops cleanly",
          "[crash][proxy][split]") {
  const std::string dc1_dir = TempDir(), tc1_dir = TempDir(), dc2_dir = TempDir(), tc2_dir = TempDir();
  ProxiedSplit s(dc1_dir, tc1_dir);
  // A second store: its DC adopts its own TC's store id.
  uint16_t dc2_port = 0, tc2_port = 0;
  std::unique_ptr<Child> dc2 = StartDcChild(dc2_dir, &dc2_port);
  {
    std::unique_ptr<Child> tc2 = StartTcChild(tc2_dir, dc2_port, &tc2_port);
    InitializeBank(tc2_port);
    CHECK(tc2->Stop(SIGTERM) == 0);
  }
  s.proxy->SetTarget("127.0.0.1", dc2_port);
  CHECK(s.dc->Stop(SIGKILL) == -1);
  // The TC finds its DC gone, and the one it reaches now belongs to another
  // store: it refuses it for good (STORE_MISMATCH), and says so to clients.
  auto c = client::Client::Connect(LoopbackAddress(s.tc_port));
  REQUIRE(c.ok());
  Status last;
  for (int i = 0; i < 600; ++i) {  // up to 30 s
    last = (*c)->Run([](client::Transaction& t) -> Status { return t.Get(Account(0)).status(); },
                     client::RetryOptions{1});
    if (RefusedForStore(last)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  INFO(last.ToString());
  CHECK(RefusedForStore(last));
  REQUIRE((*c)->Close().ok());
  // A failed TC still shuts down: its close reports the failure (status 1).
  CHECK(s.tc->Stop(SIGTERM) == 1);
  CHECK(dc2->Stop(SIGTERM) == 0);
  s.proxy->Stop();
  std::system(("rm -rf " + dc1_dir + " " + tc1_dir + " " + dc2_dir + " " + tc2_dir).c_str());
}

// scripts/soak runs this one: thirty times the frames.
TEST_CASE("rpc proxy between deuteron tc and deuteron dc, long", "[crash][proxy][split][.]") {
  RunUnderFaults(30000, EveryKind());
}

}  // namespace deuteron::test
