#include "dc/llama/mapping_table.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/random.h"

namespace deuteron::llama {
namespace {

MappingTable::Options SmallTable(uint64_t max_pages) {
  MappingTable::Options o;
  o.max_pages = max_pages;
  return o;
}

// Every test drains the deferred pushes before the table dies (the table's
// destruction contract): no guard is held here, and every thread that freed
// PIDs has been joined, so its deferrals are orphans TryReclaim runs.
void Drain(EpochManager* epochs, const MappingTable& table) {
  for (int i = 0; i < 4 && table.pending_frees() != 0; ++i) epochs->TryReclaim();
  REQUIRE(table.pending_frees() == 0);
}

TEST_CASE("MappingTable entry encodings round trip", "[dc][llama][mapping_table]") {
  CHECK(MappingTable::IsFree(0));
  CHECK_FALSE(MappingTable::IsFree(MappingTable::kEmptyPage));
  CHECK(MappingTable::IsEmptyPage(MappingTable::kEmptyPage));
  CHECK_FALSE(MappingTable::IsMemory(MappingTable::kEmptyPage));
  CHECK_FALSE(MappingTable::IsLss(MappingTable::kEmptyPage));
  CHECK_FALSE(MappingTable::IsMemory(0));
  CHECK_FALSE(MappingTable::IsLss(0));

  for (LssAddress a : {LssAddress{1}, LssAddress{4096}, LssAddress{(1ull << 40) + 12345},
                       LssAddress{(1ull << 62) - 1}, LssAddress{0x2f00'0000'1000ull}}) {
    INFO("address " << a);
    const uint64_t e = MappingTable::FromLss(a);
    CHECK(MappingTable::IsLss(e));
    CHECK_FALSE(MappingTable::IsMemory(e));
    CHECK_FALSE(MappingTable::IsFree(e));
    CHECK_FALSE(MappingTable::IsEmptyPage(e));
    CHECK(MappingTable::ToLss(e) == a);
  }

  auto node = std::make_unique<uint64_t>(42);
  const uint64_t e = MappingTable::FromPointer(node.get());
  CHECK(MappingTable::IsMemory(e));
  CHECK_FALSE(MappingTable::IsLss(e));
  CHECK_FALSE(MappingTable::IsEmptyPage(e));
  CHECK(MappingTable::ToPointer<uint64_t>(e) == node.get());
  CHECK(*MappingTable::ToPointer<uint64_t>(e) == 42);
}

TEST_CASE("MappingTable allocates, frees and reuses after an epoch",
          "[dc][llama][mapping_table]") {
  EpochManager epochs;
  MappingTable table(&epochs, SmallTable(1 << 16));
  CHECK(table.capacity() == 1 << 16);
  CHECK(table.high_water() == 1);

  Result<PageId> a = table.Allocate();
  Result<PageId> b = table.Allocate();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(*a == 1);
  CHECK(*b == 2);
  CHECK(table.Load(*a) == MappingTable::kEmptyPage);
  CHECK(table.high_water() == 3);

  {
    // A guard that predates the free keeps the PID from being reused.
    EpochManager::Guard guard = epochs.Enter();
    table.Free(*a);
    CHECK(table.Load(*a) == MappingTable::kFree);
    epochs.TryReclaim();
    Result<PageId> c = table.Allocate();
    REQUIRE(c.ok());
    CHECK(*c == 3);
    CHECK(table.pending_frees() == 1);
  }
  // The guard is gone: reclamation pushes the PID and it is reused.
  epochs.TryReclaim();
  CHECK(table.pending_frees() == 0);
  CHECK(table.Load(*a) == MappingTable::kFree);  // the internal link reads as free
  Result<PageId> d = table.Allocate();
  REQUIRE(d.ok());
  CHECK(*d == *a);
  CHECK(table.Load(*d) == MappingTable::kEmptyPage);
  CHECK(table.high_water() == 4);

  const MappingTable::Stats st = table.GetStats();
  CHECK(st.allocated == 4);
  CHECK(st.freed == 1);
  CHECK(st.reused == 1);
  CHECK(st.high_water == 4);
  Drain(&epochs, table);
}

TEST_CASE("MappingTable reuses the most recently freed PID first (stack)",
          "[dc][llama][mapping_table]") {
  EpochManager epochs;
  MappingTable table(&epochs, SmallTable(64));
  std::vector<PageId> pids;
  for (int i = 0; i < 10; ++i) {
    Result<PageId> p = table.Allocate();
    REQUIRE(p.ok());
    pids.push_back(*p);
  }
  table.Free(pids[2]);
  table.Free(pids[7]);
  table.Free(pids[5]);
  epochs.TryReclaim();
  REQUIRE(table.pending_frees() == 0);
  for (PageId want : {pids[5], pids[7], pids[2]}) {
    Result<PageId> p = table.Allocate();
    REQUIRE(p.ok());
    CHECK(*p == want);
  }
  Result<PageId> fresh = table.Allocate();
  REQUIRE(fresh.ok());
  CHECK(*fresh == 11);
  Drain(&epochs, table);
}

#ifndef NDEBUG
// The ABA case of invariant 4, made deterministic with the pop hook: while one
// Allocate has read the top (PID 1, link to 2) and is about to CAS it off, PIDs
// 1 and 2 are popped, and 1 is freed and pushed back on top of 3. The head
// shows PID 1 again, but with another tag, so the stale CAS must fail and the
// retry must pop 1 with its new link (to 3), leaving 2 with its owner.
TEST_CASE("MappingTable free stack survives ABA", "[dc][llama][mapping_table]") {
  EpochManager epochs;
  MappingTable table(&epochs, SmallTable(64));
  for (PageId want = 1; want <= 5; ++want) {
    Result<PageId> p = table.Allocate();
    REQUIRE(p.ok());
    REQUIRE(*p == want);
  }
  table.Free(3);
  table.Free(2);
  table.Free(1);
  epochs.TryReclaim();
  REQUIRE(table.pending_frees() == 0);  // stack: 1 -> 2 -> 3

  struct Interleave {
    MappingTable* table;
    EpochManager* epochs;
    PageId a = 0, b = 0;
    bool ok = false;
  } in{&table, &epochs};
  table.TEST_SetPopHook(
      [](void* arg) {
        auto* in = static_cast<Interleave*>(arg);
        in->table->TEST_SetPopHook(nullptr, nullptr);  // once
        Result<PageId> a = in->table->Allocate();
        Result<PageId> b = in->table->Allocate();
        in->ok = a.ok() && b.ok();
        if (!in->ok) return;
        in->a = *a;
        in->b = *b;
        in->table->Free(*a);
        in->epochs->TryReclaim();  // stack: 1 -> 3
      },
      &in);
  Result<PageId> outer = table.Allocate();
  REQUIRE(in.ok);
  CHECK(in.a == 1);
  CHECK(in.b == 2);
  REQUIRE(outer.ok());
  CHECK(*outer == 1);
  Result<PageId> next = table.Allocate();
  REQUIRE(next.ok());
  CHECK(*next == 3);  // not 2, which `b` holds
  Result<PageId> fresh = table.Allocate();
  REQUIRE(fresh.ok());
  CHECK(*fresh == 6);
  Drain(&epochs, table);
}
#endif  // NDEBUG

TEST_CASE("MappingTable Cas reports the current value on failure",
          "[dc][llama][mapping_table]") {
  EpochManager epochs;
  MappingTable table(&epochs, SmallTable(64));
  Result<PageId> p = table.Allocate();
  REQUIRE(p.ok());

  uint64_t expected = MappingTable::kEmptyPage;
  const uint64_t lss = MappingTable::FromLss(123456);
  CHECK(table.Cas(*p, expected, lss));
  CHECK(expected == MappingTable::kEmptyPage);
  CHECK(table.Load(*p) == lss);

  expected = MappingTable::kEmptyPage;  // stale
  CHECK_FALSE(table.Cas(*p, expected, MappingTable::FromLss(999)));
  CHECK(expected == lss);
  CHECK(table.Load(*p) == lss);

  uint64_t node = 0;
  CHECK(table.Cas(*p, expected, MappingTable::FromPointer(&node)));
  CHECK(MappingTable::ToPointer<uint64_t>(table.Load(*p)) == &node);

  // A CAS racing with Free fails and sees the PID free.
  table.Free(*p);
  expected = MappingTable::FromPointer(&node);
  CHECK_FALSE(table.Cas(*p, expected, lss));
  CHECK(expected == MappingTable::kFree);
  Drain(&epochs, table);
}

TEST_CASE("MappingTable reports TooLarge when every PID is in use",
          "[dc][llama][mapping_table]") {
  EpochManager epochs;
  MappingTable table(&epochs, SmallTable(8));  // PIDs 1..7
  for (PageId want = 1; want < 8; ++want) {
    Result<PageId> p = table.Allocate();
    REQUIRE(p.ok());
    CHECK(*p == want);
  }
  Result<PageId> full = table.Allocate();
  REQUIRE_FALSE(full.ok());
  CHECK(full.status().code() == Code::kTooLarge);
  CHECK(full.status().message().find("mapping table full") != std::string_view::npos);
  Result<PageId> again = table.Allocate();  // stays full, mark stays clamped
  CHECK(again.status().code() == Code::kTooLarge);
  CHECK(table.high_water() == 8);
  CHECK(table.GetStats().high_water == 8);

  // A freed PID makes room again.
  table.Free(3);
  epochs.TryReclaim();
  Result<PageId> p = table.Allocate();
  REQUIRE(p.ok());
  CHECK(*p == 3);
  Drain(&epochs, table);
}

TEST_CASE("MappingTable RebuildFreeList reuses the lowest PIDs first",
          "[dc][llama][mapping_table]") {
  EpochManager epochs;
  MappingTable table(&epochs, SmallTable(1024));
  // Recovery found pages 1..20 with 3, 4, 9, 15 and 19 free.
  const std::vector<PageId> free_pids = {3, 4, 9, 15, 19};
  for (PageId pid = 1; pid <= 20; ++pid) {
    const bool is_free = std::find(free_pids.begin(), free_pids.end(), pid) != free_pids.end();
    table.RecoverySet(pid, is_free ? MappingTable::kFree : MappingTable::FromLss(pid * 4096));
  }
  table.RecoverySetHighWater(21);
  table.RebuildFreeList();
  CHECK(table.high_water() == 21);
  for (PageId want : free_pids) {
    Result<PageId> p = table.Allocate();
    REQUIRE(p.ok());
    CHECK(*p == want);
    CHECK(table.Load(*p) == MappingTable::kEmptyPage);
  }
  Result<PageId> fresh = table.Allocate();
  REQUIRE(fresh.ok());
  CHECK(*fresh == 21);
  for (PageId pid = 1; pid <= 20; ++pid) {
    if (std::find(free_pids.begin(), free_pids.end(), pid) == free_pids.end()) {
      CHECK(table.Load(pid) == MappingTable::FromLss(pid * 4096));
    }
  }

  // Rebuilding twice, with PIDs already on the stack, gives the same order.
  table.Free(9);
  table.Free(4);
  Drain(&epochs, table);  // both on the stack, 4 on top
  table.RebuildFreeList();
  table.RebuildFreeList();
  for (PageId want : {PageId{4}, PageId{9}, PageId{22}}) {
    Result<PageId> p = table.Allocate();
    REQUIRE(p.ok());
    CHECK(*p == want);
  }
  Drain(&epochs, table);
}

TEST_CASE("MappingTable grows past 2^20 pages", "[dc][llama][mapping_table]") {
  EpochManager epochs;
  MappingTable table(&epochs, {});  // default reservation, 2^28 entries
  CHECK(table.capacity() == (1ull << 28));
  const size_t initial_usage = table.MemoryUsage();
  CHECK(initial_usage == 4096);

  constexpr PageId kPages = 1'500'000;  // > 2^20, ~12 MB of entries
  size_t last_usage = initial_usage;
  for (PageId want = 1; want <= kPages; ++want) {
    Result<PageId> p = table.Allocate();
    if (!p.ok() || *p != want) {
      FAIL("allocation " << want << ": " << (p.ok() ? std::to_string(*p) : p.status().ToString()));
    }
    if (want % 262'144 == 0) {
      const size_t usage = table.MemoryUsage();
      CHECK(usage > last_usage);
      last_usage = usage;
    }
  }
  CHECK(table.high_water() == kPages + 1);
  CHECK(table.MemoryUsage() == ((kPages + 1) * 8 + 4095) / 4096 * 4096);

  size_t bad = 0;
  for (PageId pid = 1; pid <= kPages; ++pid) {
    uint64_t expected = MappingTable::kEmptyPage;
    if (!table.Cas(pid, expected, MappingTable::FromLss(pid << 12))) ++bad;
  }
  CHECK(bad == 0);
  for (PageId pid = 1; pid <= kPages; ++pid) {
    if (table.Load(pid) != MappingTable::FromLss(pid << 12)) ++bad;
  }
  CHECK(bad == 0);
  Drain(&epochs, table);
}

// Four threads allocate and free concurrently; a shared ownership map checks
// that no PID is handed to two owners at once. Guarded: every operation inside
// an epoch guard (as the Bw-tree runs). Unguarded: Allocate outside any guard
// and a reclaim on every Free, so freed PIDs go back on the stack at once and
// the stack churns while pops are in flight (the ABA case of invariant 4).
TEST_CASE("MappingTable hands out unique PIDs under concurrency",
          "[dc][llama][mapping_table][concurrency]") {
  const bool guarded = GENERATE(true, false);
  const uint64_t seed = TestSeed();
  INFO("seed " << seed << (guarded ? ", guarded" : ", unguarded"));
  constexpr int kThreads = 4;
  constexpr int kOpsPerThread = 20'000;
  constexpr uint64_t kMaxPages = 1 << 16;
  const size_t max_held = guarded ? 64 : 4;
  EpochManager::Options eo;
  eo.reclaim_interval = guarded ? 16 : 1;  // reuse early and often
  EpochManager epochs(eo);
  MappingTable table(&epochs, SmallTable(kMaxPages));
  std::vector<std::atomic<int>> owner(kMaxPages);  // 0 = nobody, else thread + 1
  std::atomic<uint64_t> violations{0};
  std::atomic<uint64_t> failures{0};

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Random64 rnd(seed + static_cast<uint64_t>(t));
      const int me = t + 1;
      std::vector<PageId> held;
      for (int i = 0; i < kOpsPerThread; ++i) {
        std::optional<EpochManager::Guard> guard;
        if (guarded) guard.emplace(epochs.Enter());
        if (held.empty() || (held.size() < max_held && rnd.OneIn(2))) {
          Result<PageId> p = table.Allocate();
          if (!p.ok()) {
            failures.fetch_add(1);
            continue;
          }
          if (owner[*p].exchange(me) != 0) violations.fetch_add(1);
          uint64_t expected = MappingTable::kEmptyPage;
          const uint64_t mine = MappingTable::FromLss(static_cast<uint64_t>(me) << 32 | i);
          if (!table.Cas(*p, expected, mine)) violations.fetch_add(1);
          held.push_back(*p);
        } else {
          const size_t k = rnd.Uniform(held.size());
          const PageId pid = held[k];
          held[k] = held.back();
          held.pop_back();
          if (MappingTable::ToLss(table.Load(pid)) >> 32 != static_cast<uint64_t>(me)) {
            violations.fetch_add(1);
          }
          if (owner[pid].exchange(0) != me) violations.fetch_add(1);
          table.Free(pid);
        }
      }
      for (PageId pid : held) {
        owner[pid].store(0);
        table.Free(pid);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  Drain(&epochs, table);
  CHECK(violations.load() == 0);
  CHECK(failures.load() == 0);
  const MappingTable::Stats st = table.GetStats();
  CHECK(st.allocated == st.freed);
  CHECK(st.reused > 0);
}

TEST_CASE("MappingTable destroyed after its EpochManager drains",
          "[dc][llama][mapping_table]") {
  // The other legal order: the manager is destroyed first and runs the pushes.
  auto epochs = std::make_unique<EpochManager>();
  MappingTable table(epochs.get(), SmallTable(64));
  Result<PageId> p = table.Allocate();
  REQUIRE(p.ok());
  table.Free(*p);
  CHECK(table.pending_frees() == 1);
  epochs.reset();
  CHECK(table.pending_frees() == 0);
}

}  // namespace
}  // namespace deuteron::llama
