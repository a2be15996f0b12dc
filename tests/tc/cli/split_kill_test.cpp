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

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "tc/client/client.h"
#include "tests/tc/cli/cli_util.h"
#include "tests/tc/cli/dc_child.h"

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
        std::vector<std::string>{"dc", "--dir", dc_dir_, "--listen", Address(port)});
    dc_port_ = deuteron::StartDc(dc_.get());
  }
  void StartTc() {
    tc_ = std::make_unique<Child>(std::vector<std::string>{
        "tc", "--dir", tc_dir_, "--dc", Address(dc_port_), "--listen", "127.0.0.1:0"});
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

// Per client: the transfers it numbered, and what became of them.
struct ClientRecord {
  int next = 0;                   // transfers numbered so far
  std::set<int> acked;            // Commit returned OK
  std::set<int> in_doubt;         // Commit failed: may have committed
  std::vector<std::string> markers;  // marker value of transfer n
  int acked_since_mark = 0;       // acknowledged since Load::ResetProgress()
};

// Clients making transfers against the TC at a port, until Stop().
class Load {
 public:
  explicit Load(std::vector<ClientRecord>* records) : records_(records) {}
  ~Load() { Stop(); }

  void Start(uint16_t tc_port) {
    ResetProgress();
    stop_ = false;
    for (int c = 0; c < kClients; ++c) {
      threads_.emplace_back([this, c, tc_port] { Run(c, tc_port); });
    }
  }
  void Stop() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }
  // Counts acknowledgements from now on, for WaitForProgress.
  void ResetProgress() {
    std::lock_guard<std::mutex> l(mu_);
    for (ClientRecord& r : *records_) r.acked_since_mark = 0;
  }
  // Waits until every client has had `n` transfers acknowledged since
  // Start, ResetProgress or the last such wait (or `timeout` passed); false
  // on the timeout.
  bool WaitForProgress(int n, std::chrono::seconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      {
        std::lock_guard<std::mutex> l(mu_);
        bool all = true;
        for (const ClientRecord& r : *records_) all = all && r.acked_since_mark >= n;
        if (all) {
          for (ClientRecord& r : *records_) r.acked_since_mark = 0;
          return true;
        }
      }
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  // Errors other than the retryable ones (Deadlock, TimedOut, Unavailable).
  int other_errors() const { return other_errors_.load(); }
  std::string last_other_error() {
    std::lock_guard<std::mutex> l(mu_);
    return last_other_;
  }

 private:
  void Note(const Status& s) {
    if (s.ok() || client::IsRetryable(s)) return;
    ++other_errors_;
    std::lock_guard<std::mutex> l(mu_);
    last_other_ = s.ToString();
  }

  void Run(int c, uint16_t tc_port) {
    std::mt19937 rng(static_cast<unsigned>(c * 7919 + tc_port));
    std::unique_ptr<client::Client> client;
    while (!stop_.load()) {
      if (client == nullptr) {
        client::RemoteOptions o;
        o.connect_timeout_ms = 200;
        auto cl = client::Client::Connect(Address(tc_port), o);
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
      const int a = static_cast<int>(rng() % kAccounts);
      const int b = (a + 1 + static_cast<int>(rng() % (kAccounts - 1))) % kAccounts;
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
      std::string marker;
      {
        std::lock_guard<std::mutex> l(mu_);
        ClientRecord& r = (*records_)[static_cast<size_t>(c)];
        n = r.next++;
        marker = std::to_string(a) + ">" + std::to_string(b) + "@" + *va + "," + *vb;
        r.markers.push_back(marker);
      }
      Status s = (*t)->Put(Account(a), std::to_string(std::stoi(*va) - 1));
      if (s.ok()) s = (*t)->Put(Account(b), std::to_string(std::stoi(*vb) + 1));
      if (s.ok()) s = (*t)->Put(Marker(c, n), marker);
      if (!s.ok()) {  // nothing was sent for commit: nothing of n is there
        Note(s);
        continue;
      }
      s = (*t)->Commit();
      std::lock_guard<std::mutex> l(mu_);
      ClientRecord& r = (*records_)[static_cast<size_t>(c)];
      if (s.ok()) {
        r.acked.insert(n);
        ++r.acked_since_mark;
      } else {
        r.in_doubt.insert(n);
        if (!client::IsRetryable(s)) {
          ++other_errors_;
          last_other_ = s.ToString();
        }
      }
      t->reset();
      if (s.IsUnavailable()) client.reset();  // a new connection (the TC may be a new one)
    }
    // Transactions hold a pointer to their client: none is left here.
  }

  std::vector<ClientRecord>* records_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  std::atomic<int> other_errors_{0};
  std::mutex mu_;
  std::string last_other_;
};

void Initialize(uint16_t tc_port) {
  auto c = client::Client::Connect(Address(tc_port));
  REQUIRE(c.ok());
  REQUIRE((*c)->Run([](client::Transaction& t) -> Status {
                  for (int i = 0; i < kAccounts; ++i) {
                    RETURN_IF_ERROR(t.Put(Account(i), std::to_string(kInitialBalance)));
                  }
                  return Status::OK();
                })
              .ok());
}

// Every acknowledged transfer is there with its marker, none that was never
// committed is, and the balances sum to the start's.
void Verify(uint16_t tc_port, const std::vector<ClientRecord>& records) {
  auto c = client::Client::Connect(Address(tc_port));
  REQUIRE(c.ok());
  size_t acked = 0, doubtful_present = 0;
  Status s = (*c)->Run([&](client::Transaction& t) -> Status {
    acked = doubtful_present = 0;
    long total = 0;
    for (int i = 0; i < kAccounts; ++i) {
      auto v = t.Get(Account(i));
      if (!v.ok()) return v.status();
      total += std::stol(*v);
    }
    CHECK(total == long{kAccounts} * kInitialBalance);
    for (int cl = 0; cl < kClients; ++cl) {
      const ClientRecord& r = records[static_cast<size_t>(cl)];
      for (int n = 0; n < r.next; ++n) {
        auto v = t.Get(Marker(cl, n));
        if (!v.ok() && !v.status().IsNotFound()) return v.status();
        const bool present = v.ok();
        const bool was_acked = r.acked.count(n) != 0;
        const bool doubtful = r.in_doubt.count(n) != 0;
        INFO("client " << cl << " transfer " << n << " acked " << was_acked << " in doubt "
                       << doubtful);
        if (was_acked) {
          ++acked;
          CHECK(present);
        }
        if (!was_acked && !doubtful) CHECK_FALSE(present);
        if (present) {
          CHECK(*v == r.markers[static_cast<size_t>(n)]);
          if (doubtful) ++doubtful_present;
        }
      }
    }
    return Status::OK();
  });
  INFO("verify: " << s.ToString());
  REQUIRE(s.ok());
  INFO("acknowledged transfers " << acked << ", in-doubt ones present " << doubtful_present);
  CHECK(acked > 0);
  REQUIRE((*c)->Close().ok());
}

}  // namespace

TEST_CASE("split deployment: kill -9 of deuteron dc, the TC recovers it in place and clients go on",
          "[tc][cli][splitkill]") {
  Split split;
  Initialize(split.tc_port());
  std::vector<ClientRecord> records(kClients);
  Load load(&records);
  load.Start(split.tc_port());
  REQUIRE(load.WaitForProgress(10, std::chrono::seconds(30)));
  split.KillDc();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  split.StartDc(split.dc_port());  // the same port: the TC's address for it
  load.ResetProgress();
  // The same clients, through the same TC, commit again.
  CHECK(load.WaitForProgress(10, std::chrono::seconds(30)));
  load.Stop();
  INFO("other errors: " << load.other_errors() << " last " << load.last_other_error());
  CHECK(load.other_errors() == 0);
  Verify(split.tc_port(), records);
  split.StopCleanly();
}

TEST_CASE("split deployment: kill -9 of both deuteron tc and deuteron dc, then both restarted",
          "[tc][cli][splitkill]") {
  Split split;
  Initialize(split.tc_port());
  std::vector<ClientRecord> records(kClients);
  Load load(&records);
  load.Start(split.tc_port());
  REQUIRE(load.WaitForProgress(10, std::chrono::seconds(30)));
  split.KillDc();
  split.KillTc();
  load.Stop();
  split.StartDc(0);
  split.StartTc();
  load.Start(split.tc_port());
  CHECK(load.WaitForProgress(10, std::chrono::seconds(30)));
  load.Stop();
  INFO("other errors: " << load.other_errors() << " last " << load.last_other_error());
  CHECK(load.other_errors() == 0);
  Verify(split.tc_port(), records);
  split.StopCleanly();
}

TEST_CASE("split deployment: kill -9 of deuteron tc, restarted against the running DC",
          "[tc][cli][splitkill]") {
  Split split;
  Initialize(split.tc_port());
  std::vector<ClientRecord> records(kClients);
  Load load(&records);
  load.Start(split.tc_port());
  REQUIRE(load.WaitForProgress(10, std::chrono::seconds(30)));
  split.KillTc();
  load.Stop();
  split.StartTc();
  load.Start(split.tc_port());
  CHECK(load.WaitForProgress(10, std::chrono::seconds(30)));
  load.Stop();
  INFO("other errors: " << load.other_errors() << " last " << load.last_other_error());
  CHECK(load.other_errors() == 0);
  Verify(split.tc_port(), records);
  split.StopCleanly();
}

}  // namespace deuteron::test
