// The TC's memory budget bounds a real `deuteron tc` process (issue 30;
// tc/server/tc_server.md, "The memory budget"; protocol/protocol.md, "The
// process bound"): against a `deuteron dc`, hostile clients open many
// connections and transactions and write large write sets into them without
// ever committing, holding on after every refusal. They are refused with
// UNAVAILABLE (the retryable code) once the budget is full; the TC's peak
// resident memory (VmHWM) stays within its stated bound; small
// transactions through the client library are served all along; and once
// the attackers leave, the budget's account is back where it was and a
// large transaction gets its whole per-transaction limit again (TOO_LARGE
// only past it). Only where the program's allocator is jemalloc (the test
// binary is built with the program's preset: a sanitizer's allocator keeps
// its own quarantine and shadow). Run with TC_RSS_TEST_OFF=1 it starts the
// TC without a budget, and fails: that is how it was checked to be able to.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/heap.h"
#include "tc/client/client.h"
#include "tests/tc/cli/cli_util.h"
#include "tests/tc/cli/dc_child.h"
#include "tests/tc/server/tc_thrift_client.h"

namespace deuteron::test {
namespace {

namespace proto = ::deuteron::protocol;
constexpr uint64_t kMiB = 1 << 20;

int64_t MemoryUsed(uint16_t port) {
  ThriftTc c(port);
  proto::TcStats stats;
  if (c.Stats(&stats) != proto::ErrorCode::OK) return -1;
  return stats.memory_used;
}

// What one attacker did.
struct AttackResult {
  int puts = 0;
  int refused = 0;  // UNAVAILABLE
  int other = 0;    // anything else but TOO_LARGE
};

// One hostile connection: `txns` transactions, each written with 16 KiB
// values until it is refused or too large; then holds them until `leave`.
void Attack(uint16_t port, int id, int txns, const std::atomic<bool>& leave, AttackResult* out,
            std::atomic<int>* done) {
  ThriftTc c(port);
  std::vector<int64_t> open;
  for (int t = 0; t < txns; ++t) {
    int64_t txn = 0;
    const ThriftTc::Code code = c.Begin(&txn);
    if (code == proto::ErrorCode::OK) {
      open.push_back(txn);
    } else if (code == proto::ErrorCode::UNAVAILABLE) {
      ++out->refused;
    } else {
      ++out->other;
    }
  }
  const std::string value(16 << 10, 'a');
  std::vector<bool> full(open.size(), false);
  for (size_t left = open.size(), i = 0; left > 0; ++i) {
    for (size_t t = 0; t < open.size(); ++t) {
      if (full[t]) continue;
      const ThriftTc::Code code =
          c.Put(open[t], "attack/" + std::to_string(id) + "/" + std::to_string(t) + "/" + std::to_string(i), value);
      if (code == proto::ErrorCode::OK) {
        ++out->puts;
        continue;
      }
      if (code == proto::ErrorCode::UNAVAILABLE) {
        ++out->refused;
      } else if (code != proto::ErrorCode::TOO_LARGE) {
        ++out->other;
      }
      full[t] = true;
      --left;
    }
  }
  done->fetch_add(1);
  while (!leave.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

TEST_CASE("deuteron tc under a memory attack stays within its budget and keeps serving",
          "[tc][cli][memory][tc_budget]") {
  if (HeapAllocatorName() != "jemalloc") {
    WARN("skipped: the allocator is " << HeapAllocatorName() << ", not jemalloc");
    return;
  }
  // B, M, F and the threads as protocol/protocol.md's TC bound names them.
  const uint64_t budget = 32 * kMiB, request_memory = 4 * kMiB, frame = 256 << 10;
  const int io_threads = 2, workers = 16;
  // Outside the budget (protocol.md): thread stacks, the lock table's
  // shards, the DC client's connections, the allocator's caches.
  const uint64_t allowance = 8 * kMiB;
  constexpr int kAttackers = 16, kTxnsEach = 6, kIdleSessions = 48;
  // TC_RSS_TEST_OFF=1 runs the TC without a budget (0: counted, never
  // refused), to see this test fail: the peak then passes the bound.
  const bool enforce = std::getenv("TC_RSS_TEST_OFF") == nullptr;

  const std::string dc_dir = TempDir(), tc_dir = TempDir();
  Child dc({"dc", "--dir", dc_dir, "--listen", "127.0.0.1:0", "--memory-budget", std::to_string(32 * kMiB)});
  const uint16_t dc_port = StartDc(&dc);
  Child tc({"tc", "--dir", tc_dir, "--dc", "127.0.0.1:" + std::to_string(dc_port), "--listen", "127.0.0.1:0",
            "--memory-budget", enforce ? std::to_string(budget) : "0", "--request-memory-limit", std::to_string(request_memory),
            "--max-frame-size", std::to_string(frame), "--io-threads", std::to_string(io_threads),
            "--worker-threads", std::to_string(workers)});
  const uint16_t port = ServingPort(tc.ReadLine());
  const uint64_t serving = tc.process().RssBytes();
  REQUIRE(serving > 0);
  const uint64_t bound = serving + budget + request_memory + (io_threads + workers) * 3 * frame + allowance;
  const int64_t baseline = MemoryUsed(port);
  REQUIRE(baseline > 0);

  client::RemoteOptions ro;
  Result<std::unique_ptr<client::Client>> user = client::Client::Connect("127.0.0.1:" + std::to_string(port), ro);
  REQUIRE(user.ok());

  // Many sessions: idle connections each holding a few empty transactions.
  std::vector<std::unique_ptr<ThriftTc>> idle;
  for (int i = 0; i < kIdleSessions; ++i) {
    idle.push_back(std::make_unique<ThriftTc>(port));
    for (int t = 0; t < 4; ++t) {
      int64_t txn = 0;
      REQUIRE(idle.back()->Begin(&txn) == proto::ErrorCode::OK);
    }
  }
  std::atomic<bool> leave{false};
  std::atomic<int> done{0};
  std::vector<AttackResult> results(kAttackers);
  std::vector<std::thread> attackers;
  for (int i = 0; i < kAttackers; ++i) {
    attackers.emplace_back(Attack, port, i, kTxnsEach, std::cref(leave), &results[i], &done);
  }
  // Small transactions while the attack runs and while it holds on.
  int small_ok = 0;
  Status small_error;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; done.load() < kAttackers || i < 20; ++i) {
    Status s = (*user)->Run([i](client::Transaction& t) { return t.Put("small/" + std::to_string(i % 50), "v"); });
    if (s.ok()) {
      ++small_ok;
    } else {
      small_error = s;
    }
    REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(120));
  }
  small_error.PermitUncheckedError();
  const uint64_t peak = tc.process().PeakRssBytes();
  const int64_t held = MemoryUsed(port);
  leave.store(true);
  for (std::thread& t : attackers) t.join();
  AttackResult sum;
  for (const AttackResult& r : results) {
    sum.puts += r.puts;
    sum.refused += r.refused;
    sum.other += r.other;
  }
  idle.clear();
  user->reset();  // its idle connections' sessions too
  // The attackers' connections closed when their threads ended: everything
  // they held comes back.
  int64_t after = -1;
  for (int i = 0; i < 500 && (after = MemoryUsed(port)) != baseline; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));  // the allocator's decay (1 s)
  const uint64_t rss_after = tc.process().RssBytes();
  std::printf(
      "deuteron tc --memory-budget %.0f MiB%s: %d attackers wrote %.1f MiB in %d puts, refused %d times; "
      "%d small transactions committed; budget held %.1f MiB at the attack's height, %.1f MiB after "
      "(%.1f MiB before); resident once serving %.1f MiB, peak (VmHWM) %.1f MiB, bound %.1f MiB, "
      "resident after %.1f MiB\n",
      budget / 1048576.0, enforce ? "" : " (TC_RSS_TEST_OFF: started with 0, none)", kAttackers, sum.puts * 16.0 / 1024, sum.puts, sum.refused, small_ok, held / 1048576.0,
      after / 1048576.0, baseline / 1048576.0, serving / 1048576.0, peak / 1048576.0, bound / 1048576.0,
      rss_after / 1048576.0);
  std::fflush(stdout);
  CHECK(sum.refused > 0);
  CHECK(sum.other == 0);
  CHECK(small_ok >= 20);
  INFO("a small transaction's error: " << small_error.ToString());
  CHECK(small_error.ok());
  CHECK(held <= static_cast<int64_t>(budget));
  CHECK(peak <= bound);
  CHECK(after == baseline);
  // Resident memory after is printed, not checked: with the budget enforced
  // the attack grows the process by about 10 MiB, of the order of what
  // thread caches and the allocator's decay keep (27.9 to 31.1 MiB seen).
  CHECK(rss_after <= bound);

  // The budget is whole again: one transaction gets its full limit.
  {
    ThriftTc c(port);
    int64_t txn = 0;
    REQUIRE(c.Begin(&txn) == proto::ErrorCode::OK);
    const std::string value(60 << 10, 'b');
    ThriftTc::Code code = proto::ErrorCode::OK;
    int puts = 0;
    while (puts < 100 && (code = c.Put(txn, "big/" + std::to_string(puts), value)) == proto::ErrorCode::OK) ++puts;
    CHECK(code == proto::ErrorCode::TOO_LARGE);
    CHECK(puts >= 8);
    CHECK(c.Commit(txn) == proto::ErrorCode::OK);
  }
  CHECK(tc.Stop(SIGTERM) == 0);
  CHECK(dc.Stop(SIGTERM) == 0);
  std::filesystem::remove_all(dc_dir);
  std::filesystem::remove_all(tc_dir);
}

}  // namespace
}  // namespace deuteron::test
