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

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/random.h"
#include "tc/client/client.h"
#include "tc/crash/proxy/rpc_proxy.h"
#include "tests/tc/cli/cli_util.h"

namespace deuteron::test {
namespace {

constexpr int kAccounts = 16;
constexpr int kInitialBalance = 1000;
constexpr int kClients = 4;

std::string Account(int i) { return "acct/" + std::to_string(100 + i); }
std::string Marker(int client, int n) {
  return "xfer/" + std::to_string(client) + "/" + std::to_string(n);
}
std::string Address(uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

// Per client: the transfers it numbered, and what became of them.
struct Record {
  int next = 0;
  std::set<int> acked;       // Commit returned OK
  std::set<int> in_doubt;    // Commit failed: may have committed
  std::vector<std::string> markers;
  int acked_since_mark = 0;
};

// Clients making transfers until Stop; errors tallied by code.
class Transfers {
 public:
  Transfers(uint16_t tc_port, uint64_t seed) : tc_port_(tc_port), seed_(seed), records_(kClients) {}
  ~Transfers() { Stop(); }

  void Start() {
    for (int c = 0; c < kClients; ++c) threads_.emplace_back([this, c] { Run(c); });
  }
  void Stop() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }
  // Counts acknowledgements from now on, for WaitForProgress.
  void ResetProgress() {
    std::lock_guard<std::mutex> l(mu_);
    for (Record& r : records_) r.acked_since_mark = 0;
  }
  // Waits until every client has had n transfers acknowledged since the
  // last such wait (false after `timeout`).
  bool WaitForProgress(int n, std::chrono::seconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      {
        std::lock_guard<std::mutex> l(mu_);
        bool all = true;
        for (const Record& r : records_) all = all && r.acked_since_mark >= n;
        if (all) {
          for (Record& r : records_) r.acked_since_mark = 0;
          return true;
        }
      }
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  const std::vector<Record>& records() const { return records_; }
  // "Code: count" for every error seen, for messages.
  std::string Errors() {
    std::lock_guard<std::mutex> l(mu_);
    std::string s;
    for (const auto& [code, n] : errors_) s += std::string(CodeName(code)) + ": " + std::to_string(n) + "; ";
    return s + "last other: " + last_other_;
  }
  int other_errors() const { return other_errors_.load(); }

 private:
  void Note(const Status& s) {
    if (s.ok()) return;
    std::lock_guard<std::mutex> l(mu_);
    ++errors_[s.code()];
    if (!client::IsRetryable(s)) {
      ++other_errors_;
      last_other_ = s.ToString();
    }
  }

  void Run(int c) {
    Random64 rng(seed_ + static_cast<uint64_t>(c));
    std::unique_ptr<client::Client> client;
    while (!stop_.load()) {
      if (client == nullptr) {
        client::RemoteOptions o;
        o.connect_timeout_ms = 500;
        auto cl = client::Client::Connect(Address(tc_port_), o);
        if (!cl.ok()) {
          Note(cl.status());
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          continue;
        }
        client = std::move(cl).value();
      }
      auto t = client->Begin();
      if (!t.ok()) {
        Note(t.status());
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      const int a = static_cast<int>(rng.Uniform(kAccounts));
      const int b = (a + 1 + static_cast<int>(rng.Uniform(kAccounts - 1))) % kAccounts;
      auto va = (*t)->Get(Account(a));
      if (!va.ok()) {
        Note(va.status());
        continue;
      }
      auto vb = (*t)->Get(Account(b));
      if (!vb.ok()) {
        Note(vb.status());
        continue;
      }
      int n = 0;
      std::string marker = std::to_string(a) + ">" + std::to_string(b) + "@" + *va + "," + *vb;
      {
        std::lock_guard<std::mutex> l(mu_);
        Record& r = records_[static_cast<size_t>(c)];
        n = r.next++;
        r.markers.push_back(marker);
      }
      Status s = (*t)->Put(Account(a), std::to_string(std::stoi(*va) - 1));
      if (s.ok()) s = (*t)->Put(Account(b), std::to_string(std::stoi(*vb) + 1));
      if (s.ok()) s = (*t)->Put(Marker(c, n), marker);
      if (!s.ok()) {  // no commit was asked for: nothing of n may be there
        Note(s);
        continue;
      }
      s = (*t)->Commit();
      Note(s);
      {
        std::lock_guard<std::mutex> l(mu_);
        Record& r = records_[static_cast<size_t>(c)];
        if (s.ok()) {
          r.acked.insert(n);
          ++r.acked_since_mark;
        } else {
          r.in_doubt.insert(n);
        }
      }
      t->reset();
      if (s.IsUnavailable()) client.reset();
    }
  }

  const uint16_t tc_port_;
  const uint64_t seed_;
  std::vector<Record> records_;  // GUARDED_BY(mu_) while running
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<int> other_errors_{0};
  std::mutex mu_;
  std::map<Code, int> errors_;
  std::string last_other_;
};

void Initialize(uint16_t tc_port) {
  auto c = client::Client::Connect(Address(tc_port));
  REQUIRE(c.ok());
  const Status s = (*c)->Run([](client::Transaction& t) -> Status {
    for (int i = 0; i < kAccounts; ++i) RETURN_IF_ERROR(t.Put(Account(i), std::to_string(kInitialBalance)));
    return Status::OK();
  });
  INFO(s.ToString());
  REQUIRE(s.ok());
  REQUIRE((*c)->Close().ok());
}

// Every acknowledged transfer is there with its marker, none that was never
// committed is, and the balances sum to the start's.
void Verify(uint16_t tc_port, const std::vector<Record>& records) {
  auto c = client::Client::Connect(Address(tc_port));
  REQUIRE(c.ok());
  size_t acked = 0, doubtful_present = 0, doubtful = 0;
  const Status s = (*c)->Run([&](client::Transaction& t) -> Status {
    acked = doubtful_present = doubtful = 0;
    long total = 0;
    for (int i = 0; i < kAccounts; ++i) {
      auto v = t.Get(Account(i));
      if (!v.ok()) return v.status();
      CHECK(std::stol(*v) >= 0);
      total += std::stol(*v);
    }
    CHECK(total == long{kAccounts} * kInitialBalance);
    for (int cl = 0; cl < kClients; ++cl) {
      const Record& r = records[static_cast<size_t>(cl)];
      for (int n = 0; n < r.next; ++n) {
        auto v = t.Get(Marker(cl, n));
        if (!v.ok() && !v.status().IsNotFound()) return v.status();
        const bool present = v.ok();
        const bool was_acked = r.acked.count(n) != 0;
        const bool in_doubt = r.in_doubt.count(n) != 0;
        INFO("client " << cl << " transfer " << n << " acked " << was_acked << " in doubt " << in_doubt);
        if (was_acked) {
          ++acked;
          CHECK(present);
        }
        if (!was_acked && !in_doubt) CHECK_FALSE(present);
        if (in_doubt) ++doubtful;
        if (present) {
          CHECK(*v == r.markers[static_cast<size_t>(n)]);
          if (in_doubt) ++doubtful_present;
        }
      }
    }
    return Status::OK();
  });
  INFO("verify: " << s.ToString());
  REQUIRE(s.ok());
  UNSCOPED_INFO("acknowledged " << acked << ", in doubt " << doubtful << " (present " << doubtful_present << ")");
  CHECK(acked > 0);
  REQUIRE((*c)->Close().ok());
}

}  // namespace

namespace {

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
  auto dc = std::make_unique<Child>(std::vector<std::string>{"dc", "--dir", dc_dir, "--listen", Address(0)});
  const uint16_t dc_port = ServingPort(dc->ReadLine());
  auto proxy_or = crash::RpcProxy::Start("127.0.0.1", 0, "127.0.0.1", dc_port, crash::ProxyFaults{});
  REQUIRE(proxy_or.ok());
  std::unique_ptr<crash::RpcProxy> proxy = std::move(proxy_or).value();
  auto tc = std::make_unique<Child>(std::vector<std::string>{
      "tc", "--dir", tc_dir, "--dc", Address(proxy->port()), "--listen", Address(0)});
  const uint16_t tc_port = ServingPort(tc->ReadLine());
  Initialize(tc_port);

  f.seed = seed;
  proxy->SetFaults(f);
  Transfers load(tc_port, seed);
  load.Start();
  // A fair run under faults: enough frames that every kind happens a few
  // times; gives up (and fails below) after frames / 10 seconds.
  if (move_dc) {
    WaitForFrames(*proxy, frames / 2, f);
    CHECK(dc->Stop(SIGKILL) == -1);
    dc = std::make_unique<Child>(std::vector<std::string>{"dc", "--dir", dc_dir, "--listen", Address(0)});
    const uint16_t new_port = ServingPort(dc->ReadLine());
    CHECK(new_port != dc_port);
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
  Verify(tc_port, load.records());
  CHECK(load.other_errors() == 0);
  CHECK(tc->Stop(SIGTERM) == 0);
  proxy->Stop();
  CHECK(dc->Stop(SIGTERM) == 0);
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
  auto dc1 = std::make_unique<Child>(std::vector<std::string>{"dc", "--dir", dc1_dir, "--listen", Address(0)});
  const uint16_t dc1_port = ServingPort(dc1->ReadLine());
  auto proxy_or = crash::RpcProxy::Start("127.0.0.1", 0, "127.0.0.1", dc1_port, crash::ProxyFaults{});
  REQUIRE(proxy_or.ok());
  std::unique_ptr<crash::RpcProxy> proxy = std::move(proxy_or).value();
  auto tc1 = std::make_unique<Child>(std::vector<std::string>{
      "tc", "--dir", tc1_dir, "--dc", Address(proxy->port()), "--listen", Address(0)});
  const uint16_t tc1_port = ServingPort(tc1->ReadLine());
  Initialize(tc1_port);
  // A second store: its DC adopts its own TC's store id.
  auto dc2 = std::make_unique<Child>(std::vector<std::string>{"dc", "--dir", dc2_dir, "--listen", Address(0)});
  const uint16_t dc2_port = ServingPort(dc2->ReadLine());
  {
    Child tc2(std::vector<std::string>{"tc", "--dir", tc2_dir, "--dc", Address(dc2_port), "--listen", Address(0)});
    Initialize(ServingPort(tc2.ReadLine()));
    CHECK(tc2.Stop(SIGTERM) == 0);
  }
  proxy->SetTarget("127.0.0.1", dc2_port);
  CHECK(dc1->Stop(SIGKILL) == -1);
  // The TC finds its DC gone, and the one it reaches now belongs to another
  // store: it refuses it for good (STORE_MISMATCH), and says so to clients.
  auto c = client::Client::Connect(Address(tc1_port));
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
  CHECK(tc1->Stop(SIGTERM) == 1);
  CHECK(dc2->Stop(SIGTERM) == 0);
  proxy->Stop();
  std::system(("rm -rf " + dc1_dir + " " + tc1_dir + " " + dc2_dir + " " + tc2_dir).c_str());
}

// scripts/soak runs this one: thirty times the frames.
TEST_CASE("rpc proxy between deuteron tc and deuteron dc, long", "[crash][proxy][split][.]") {
  RunUnderFaults(30000, EveryKind());
}

}  // namespace deuteron::test
