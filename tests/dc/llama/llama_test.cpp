#include "dc/llama/llama.h"

#include <atomic>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "common/fault_env.h"
#include "common/random.h"
#include "tests/dc/llama/llama_test_util.h"

namespace deuteron::llama {
namespace {

using test::AddDelta;
using test::Consolidate;
using test::Contents;
using test::CreatePage;
using test::FlushPage;
using test::kAll;
using test::MakeNode;
using test::OpenOrDie;
using test::ReadContents;
using test::SmallOptions;
using test::TryAddDelta;

TEST_CASE("Flush writes only deltas under the bound and reload restores chain order",
          "[dc][llama][cache]") {
  auto mem = NewMemEnv();
  PageId pid;
  {
    auto l = OpenOrDie(mem.get());
    pid = CreatePage(l.get(), "base");
    // Arrival order is not tag order, as with operations on different keys.
    AddDelta(l.get(), pid, "a", 100);
    AddDelta(l.get(), pid, "b", 50);
    AddDelta(l.get(), pid, "c", 80);
    CHECK(FlushPage(l.get(), pid, 60) == FlushOutcome::kFlushed);
    CHECK(FlushPage(l.get(), pid, 60) == FlushOutcome::kClean);
    CHECK(ReadContents(l.get(), pid) ==
          std::vector<std::string>{"c@80", "b@50", "a@100", "base@0"});
    REQUIRE(l->Close().ok());
  }
  {
    auto l = OpenOrDie(mem.get());
    CHECK(ReadContents(l.get(), pid) == std::vector<std::string>{"b@50", "base@0"});
    // The rest comes later, in a second C-delta.
    AddDelta(l.get(), pid, "d", 90);
    CHECK(FlushPage(l.get(), pid, 120) == FlushOutcome::kFlushed);
    REQUIRE(l->Close().ok());
  }
  {
    auto l = OpenOrDie(mem.get());
    CHECK(ReadContents(l.get(), pid) == std::vector<std::string>{"d@90", "b@50", "base@0"});
    CHECK(l->GetStats().page_load_reads >= 2);  // two records: C-delta, then the base
  }
}

TEST_CASE("A store is opened by one owner at a time", "[dc][llama][cache]") {
  auto mem = NewMemEnv();
  auto l = OpenOrDie(mem.get());
  auto second = Llama::Open(mem.get(), "/db", SmallOptions());
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().IsBusy());
  CHECK(second.status().message().find("/db") != std::string_view::npos);
  l.reset();
  CHECK(Llama::Open(mem.get(), "/db", SmallOptions()).ok());
}

TEST_CASE("Deltas without a base are never flushed", "[dc][llama][cache]") {
  auto mem = NewMemEnv();
  auto l = OpenOrDie(mem.get());
  auto g = l->Enter();
  auto txn = l->TBegin();
  auto pid = l->TAllocate(txn.get());
  REQUIRE(pid.ok());
  auto upd = l->TUpdateD(txn.get(), *pid, nullptr, MakeNode(l.get(), NodeKind::kDelta, "d", 0));
  REQUIRE(upd.ok());
  auto commit = l->TCommit(txn.get(), 0, nullptr, nullptr, kAll, 0);
  CHECK(commit.status().IsInvalidArgument());
  l->TAbort(txn.get());

  // An allocated, empty page that gets a delta outside a transaction.
  auto txn2 = l->TBegin();
  auto empty = l->TAllocate(txn2.get());
  REQUIRE(empty.ok());
  auto c2 = l->TCommit(txn2.get(), 0, nullptr, nullptr, kAll, 0);
  REQUIRE(c2.ok());
  REQUIRE(*c2);
  REQUIRE(l->UpdateD(*empty, nullptr, MakeNode(l.get(), NodeKind::kDelta, "orphan", 0)));
  auto r = l->Flush(*empty, kAll, 0);
  REQUIRE(r.ok());
  CHECK(r->outcome == FlushOutcome::kBlocked);
}

TEST_CASE("Flush bounds never shrink along a chain", "[dc][llama][cache]") {
  auto mem = NewMemEnv();
  auto l = OpenOrDie(mem.get());
  PageId pid = CreatePage(l.get(), "base");
  AddDelta(l.get(), pid, "x", 40);
  CHECK(FlushPage(l.get(), pid, 100) == FlushOutcome::kFlushed);
  AddDelta(l.get(), pid, "y", 70);
  // A smaller bound than the page already has is raised to it: y (70 <= 100)
  // is flushed, as a flush at 100 was already allowed.
  CHECK(FlushPage(l.get(), pid, 10) == FlushOutcome::kFlushed);
  REQUIRE(l->Close().ok());
  auto again = OpenOrDie(mem.get());
  CHECK(ReadContents(again.get(), pid) == std::vector<std::string>{"y@70", "x@40", "base@0"});
}

TEST_CASE("Update-R keeps the old LSS state durable until the new base is flushed",
          "[dc][llama][cache]") {
  auto mem = NewMemEnv();
  PageId pid;
  {
    auto l = OpenOrDie(mem.get());
    pid = CreatePage(l.get(), "base");
    AddDelta(l.get(), pid, "a", 10);
    CHECK(FlushPage(l.get(), pid, kAll) == FlushOutcome::kFlushed);
    // Consolidate, keeping a delta above the bound as a delta on top.
    Consolidate(l.get(), pid);
    AddDelta(l.get(), pid, "mid", 150);
    // "mid" is under 200 but the new base (300) is not: no durable base for it.
    CHECK(FlushPage(l.get(), pid, 200) == FlushOutcome::kBlocked);
    // A checkpoint now must still record the old, flushed state.
    REQUIRE(l->Checkpoint().ok());
    REQUIRE(l->Close().ok());
  }
  {
    auto l = OpenOrDie(mem.get());
    // The consolidation was never flushed: the old, flushed state is back.
    CHECK(ReadContents(l.get(), pid) == std::vector<std::string>{"a@10", "base@0"});
    CHECK(FlushPage(l.get(), pid, 400) == FlushOutcome::kClean);
    Consolidate(l.get(), pid);
    AddDelta(l.get(), pid, "mid", 150);
    CHECK(FlushPage(l.get(), pid, 200) == FlushOutcome::kBlocked);
    CHECK(FlushPage(l.get(), pid, 400) == FlushOutcome::kFlushed);
    REQUIRE(l->Close().ok());
  }
  {
    auto l = OpenOrDie(mem.get());
    CHECK(ReadContents(l.get(), pid) == std::vector<std::string>{"mid@150", "base+a@300"});
  }
}

TEST_CASE("A consolidated base is written whole and the hot delta stays in memory",
          "[dc][llama][cache]") {
  auto mem = NewMemEnv();
  PageId pid;
  {
    auto l = OpenOrDie(mem.get());
    pid = CreatePage(l.get(), "base");
    auto g = l->Enter();
    auto head = l->Read(pid);
    REQUIRE(head.ok());
    PageNode* top = MakeNode(l.get(), NodeKind::kDelta, "hot", 900);
    top->next = MakeNode(l.get(), NodeKind::kBase, "base2", 300);
    REQUIRE(l->UpdateR(pid, *head, top));
    auto r = l->Flush(pid, 400, 0);
    REQUIRE(r.ok());
    CHECK(r->outcome == FlushOutcome::kFlushed);
    CHECK(ReadContents(l.get(), pid) == std::vector<std::string>{"hot@900", "base2@300"});
    REQUIRE(l->Close().ok());
  }
  auto l = OpenOrDie(mem.get());
  CHECK(ReadContents(l.get(), pid) == std::vector<std::string>{"base2@300"});
}

TEST_CASE("Swap-out drops only flushed and stable parts", "[dc][llama][cache]") {
  auto mem = NewMemEnv();
  auto l = OpenOrDie(mem.get());
  PageId whole = CreatePage(l.get(), "w");
  PageId part = CreatePage(l.get(), "p");
  AddDelta(l.get(), whole, "w1", 5);
  AddDelta(l.get(), part, "p1", 5);
  AddDelta(l.get(), part, "p2", 500);  // above the bound: stays unflushed
  AddDelta(l.get(), part, "p3", 6);
  CHECK(FlushPage(l.get(), whole, 100) == FlushOutcome::kFlushed);
  CHECK(FlushPage(l.get(), part, 100) == FlushOutcome::kFlushed);
  AddDelta(l.get(), part, "p4", 700);  // above the flush: unflushed too
  const auto before_whole = ReadContents(l.get(), whole);
  const auto before_part = ReadContents(l.get(), part);

  {
    auto g = l->Enter();
    if (l->HiStable() < l->Tail()) {
      CHECK_FALSE(l->SwapOut(whole));  // flushed but not yet stable
    }
  }
  REQUIRE(l->MakeStable(l->Tail()).ok());
  {
    auto g = l->Enter();
    CHECK(l->SwapOut(whole));
    CHECK(l->SwapOut(part));
    CHECK_FALSE(l->SwapOut(part));  // already swapped
  }
  CHECK(MappingTable::IsLss(l->mapping_table()->Load(whole)));
  const auto stats = l->GetStats();
  CHECK(stats.swap_outs == 1);
  CHECK(stats.partial_swaps == 1);

  CHECK(ReadContents(l.get(), whole) == before_whole);
  CHECK(ReadContents(l.get(), part) == before_part);
  CHECK(l->GetStats().page_loads == 2);

  // Flushed-ness survives the round trip: only p2 and p4 are left to flush.
  CHECK(FlushPage(l.get(), part, 100) == FlushOutcome::kClean);
  CHECK(FlushPage(l.get(), part, kAll) == FlushOutcome::kFlushed);
  REQUIRE(l->Close().ok());
  auto again = OpenOrDie(mem.get());
  CHECK(ReadContents(again.get(), part) == before_part);
}

TEST_CASE("System transactions commit atomically and abort in memory", "[dc][llama][txn]") {
  auto mem = NewMemEnv();
  PageId p, q, freed;
  {
    auto l = OpenOrDie(mem.get());
    p = CreatePage(l.get(), "left");
    freed = CreatePage(l.get(), "doomed");
    auto g = l->Enter();

    // A split-like SMO: new page q, connected by a delta on p at commit.
    auto txn = l->TBegin();
    auto qr = l->TAllocate(txn.get());
    REQUIRE(qr.ok());
    q = *qr;
    auto not_owned = l->TUpdateD(txn.get(), p, nullptr, nullptr);
    CHECK(not_owned.status().IsInvalidArgument());
    auto upd = l->TUpdateD(txn.get(), q, nullptr, MakeNode(l.get(), NodeKind::kBase, "right", 0));
    REQUIRE(upd.ok());
    REQUIRE(*upd);
    REQUIRE(l->TFree(txn.get(), freed).ok());
    CHECK(l->TFree(txn.get(), freed).IsInvalidArgument());

    auto stale = l->Read(p);
    REQUIRE(stale.ok());
    PageNode* split = MakeNode(l.get(), NodeKind::kDelta, "split->q", 0);
    AddDelta(l.get(), p, "meanwhile", 3);  // makes `stale` stale
    auto c1 = l->TCommit(txn.get(), p, *stale, split, kAll, 0);
    REQUIRE(c1.ok());
    CHECK_FALSE(*c1);  // final CAS failed; transaction still open
    auto fresh = l->Read(p);
    REQUIRE(fresh.ok());
    auto c2 = l->TCommit(txn.get(), p, *fresh, split, kAll, 0);
    REQUIRE(c2.ok());
    CHECK(*c2);
    CHECK(l->Read(freed).status().IsNotFound());

    auto aborted = l->TBegin();
    auto r = l->TAllocate(aborted.get());
    REQUIRE(r.ok());
    auto ru = l->TUpdateD(aborted.get(), *r, nullptr, MakeNode(l.get(), NodeKind::kBase, "x", 0));
    REQUIRE(ru.ok());
    l->TAbort(aborted.get());
    CHECK(l->Read(*r).status().IsNotFound());
    CHECK(l->GetStats().txn_aborts == 1);
  }
  auto l = OpenOrDie(mem.get());
  CHECK(ReadContents(l.get(), p) ==
        std::vector<std::string>{"split->q@0", "meanwhile@3", "left@0"});
  CHECK(ReadContents(l.get(), q) == std::vector<std::string>{"right@0"});
  auto g = l->Enter();
  CHECK(l->Read(freed).status().IsNotFound());
}

// A merge's commit: the absorbing page's new chain replaces its old one and
// the absorbed page is freed, in one transaction record, replayed whole.
TEST_CASE("A replacing commit installs a chain and frees pages together", "[dc][llama][txn]") {
  auto mem = NewMemEnv();
  PageId left, absorbed;
  {
    auto l = OpenOrDie(mem.get());
    left = CreatePage(l.get(), "left");
    absorbed = CreatePage(l.get(), "right");
    AddDelta(l.get(), left, "merge<-right", 0);
    auto g = l->Enter();
    auto txn = l->TBegin();
    REQUIRE(l->TFree(txn.get(), absorbed).ok());
    auto stale = l->Read(left);
    REQUIRE(stale.ok());
    PageNode* chain = MakeNode(l.get(), NodeKind::kDelta, "young", 500);
    chain->next = MakeNode(l.get(), NodeKind::kBase, "left+right", 0);
    AddDelta(l.get(), left, "meanwhile", 3);  // makes `stale` stale
    auto c1 = l->TCommitReplace(txn.get(), left, *stale, chain, 100, 100);
    REQUIRE(c1.ok());
    CHECK_FALSE(*c1);  // nothing installed, nothing freed, still open
    CHECK(l->Read(absorbed).ok());
    CHECK(ReadContents(l.get(), left) ==
          std::vector<std::string>{"meanwhile@3", "merge<-right@0", "left@0"});
    auto fresh = l->Read(left);
    REQUIRE(fresh.ok());
    auto c2 = l->TCommitReplace(txn.get(), left, *fresh, chain, 100, 100);
    REQUIRE(c2.ok());
    CHECK(*c2);
    CHECK(ReadContents(l.get(), left) == std::vector<std::string>{"young@500", "left+right@0"});
    CHECK(l->Read(absorbed).status().IsNotFound());
    // Recovery must replay the record (no closing checkpoint): the new base
    // and the free come back together; the delta above the bound does not.
    REQUIRE(l->MakeStable(l->Tail()).ok());
    l->TEST_SkipCloseOnDestroy();
  }
  LlamaOptions o = SmallOptions();
  o.checkpoint_on_close = false;
  auto l = OpenOrDie(mem.get(), o);
  CHECK(ReadContents(l.get(), left) == std::vector<std::string>{"left+right@0"});
  auto g = l->Enter();
  CHECK(l->Read(absorbed).status().IsNotFound());
}

// Issue 37: a split's new page was returned by Read to every thread while
// private, and a failed commit freed the flush nodes it had put on its
// private pages at once, though LLAMA's walkers of the mapping table (Flush,
// SwapOut, the evictor, checkpoints) may hold them.
//
// A page `right` private to `txn`, holding the base "right", beside a
// committed page `left`; the guard is held throughout (as a walker of the
// mapping table holds one).
struct SplitInFlight {
  explicit SplitInFlight(Env* env) : l(OpenOrDie(env)), left(CreatePage(l.get(), "left")) {
    g.emplace(l->Enter());
    txn = l->TBegin();
    auto pid = l->TAllocate(txn.get());
    REQUIRE(pid.ok());
    right = *pid;
    auto u = l->TUpdateD(txn.get(), right, nullptr, MakeNode(l.get(), NodeKind::kBase, "right", 0));
    REQUIRE(u.ok());
    REQUIRE(*u);
  }
  std::unique_ptr<Llama> l;
  PageId left;
  std::optional<Llama::Guard> g;
  std::unique_ptr<Llama::SystemTxn> txn;
  PageId right = 0;
};

TEST_CASE("A private page is hidden from Read until its transaction commits", "[dc][llama][txn]") {
  auto mem = NewMemEnv();
  SplitInFlight s(mem.get());
  Llama* l = s.l.get();
  const PageId left = s.left, right = s.right;
  CHECK(l->Read(right).status().IsNotFound());
  CHECK(l->ReadResident(right) == nullptr);
  // LLAMA's own flush leaves it to the commit, as before.
  auto f = l->Flush(right, kAll, 0);
  REQUIRE(f.ok());
  CHECK(f->outcome == FlushOutcome::kClean);
  auto head = l->Read(left);
  REQUIRE(head.ok());
  auto c = l->TCommit(s.txn.get(), left, *head,
                      MakeNode(l, NodeKind::kDelta, "split->right", 0), kAll, 0);
  REQUIRE(c.ok());
  REQUIRE(*c);
  auto now = l->Read(right);
  REQUIRE(now.ok());
  CHECK(Contents(*now) == std::vector<std::string>{"right@0"});
  CHECK(l->ReadResident(right) == *now);
}

TEST_CASE("A failed commit retires the flush nodes it published through the epoch",
          "[dc][llama][txn]") {
  auto mem = NewMemEnv();
  SplitInFlight s(mem.get());
  Llama* l = s.l.get();
  const PageId left = s.left, right = s.right;
  // At the commit point the flush node is on the private page: load it as
  // Flush or SwapOut would, then make the commit fail.
  const PageNode* seen = nullptr;
  l->TEST_SetCommitFault([&](PageId pid) {
    if (pid != left) return false;
    seen = MappingTable::ToPointer<const PageNode>(l->mapping_table()->Load(right));
    return true;
  });
  auto head = l->Read(left);
  REQUIRE(head.ok());
  PageNode* d = MakeNode(l, NodeKind::kDelta, "split->right", 0);
  auto c = l->TCommit(s.txn.get(), left, *head, d, kAll, 0);
  l->TEST_SetCommitFault(nullptr);
  REQUIRE(c.ok());
  REQUIRE_FALSE(*c);
  REQUIRE(seen != nullptr);
  REQUIRE(seen->kind == NodeKind::kFlush);
  const LssAddress address = AsFlush(seen)->address;
  // More commits allocate flush nodes of the same size; a node freed at once
  // would be handed out again (and overwritten) here. (Under ASan the reads
  // below are a use after free.)
  for (int i = 0; i < 4; ++i) CreatePage(l, "more" + std::to_string(i));
  CHECK(seen->kind == NodeKind::kFlush);
  CHECK(AsFlush(seen)->address == address);
  CHECK(seen->next != nullptr);
  // The undo put the private page back; it is still hidden, then freed.
  CHECK(l->Read(right).status().IsNotFound());
  l->DiscardNode(d);
  l->TAbort(s.txn.get());
  CHECK(l->Read(right).status().IsNotFound());
}

TEST_CASE("A flush that beats a free to its page is not replayed by recovery",
          "[dc][llama][txn][crash]") {
  auto mem = NewMemEnv();
  PageId kept, freed;
  {
    auto l = OpenOrDie(mem.get());
    kept = CreatePage(l.get(), "kept");
    freed = CreatePage(l.get(), "doomed");
    AddDelta(l.get(), freed, "unflushed", 0);
    auto g = l->Enter();
    auto txn = l->TBegin();
    REQUIRE(l->TFree(txn.get(), freed).ok());
    // The evictor's flush wins its CAS after the freeing commit reserved its
    // record: its page record lands after the free marker in the LSS, and
    // its flush node is on the chain the free must retire (else it leaks).
    bool flushed = false;
    l->TEST_SetBeforeFrees([&] {
      auto f = l->Flush(freed, kAll, 0);
      flushed = f.ok() && f->outcome == FlushOutcome::kFlushed;
    });
    auto c = l->TCommit(txn.get(), 0, nullptr, nullptr, kAll, 0);
    l->TEST_SetBeforeFrees(nullptr);
    REQUIRE(c.ok());
    REQUIRE(*c);
    REQUIRE(flushed);
    CHECK(l->Read(freed).status().IsNotFound());
    REQUIRE(l->MakeStable(l->Tail()).ok());
    l->TEST_SkipCloseOnDestroy();
  }
  LlamaOptions o = SmallOptions();
  o.checkpoint_on_close = false;
  auto l = OpenOrDie(mem.get(), o);
  auto g = l->Enter();
  CHECK(l->Read(freed).status().IsNotFound());
  CHECK(ReadContents(l.get(), kept) == std::vector<std::string>{"kept@0"});
  // Free again, so the lowest free PID is handed out next.
  CHECK(CreatePage(l.get(), "reborn") == freed);
}

TEST_CASE("Checkpoint plus replay recovers every page", "[dc][llama][checkpoint]") {
  auto mem = NewMemEnv();
  std::map<PageId, std::vector<std::string>> expected;
  {
    auto l = OpenOrDie(mem.get());
    for (int i = 0; i < 50; ++i) {
      PageId pid = CreatePage(l.get(), "page" + std::to_string(i));
      AddDelta(l.get(), pid, "d", static_cast<uint64_t>(i));
      CHECK(FlushPage(l.get(), pid, kAll) == FlushOutcome::kFlushed);
      if (i == 25) REQUIRE(l->Checkpoint().ok());
    }
    for (PageId pid = 1; pid <= 50; ++pid) expected[pid] = ReadContents(l.get(), pid);
    LlamaOptions o = SmallOptions();
    REQUIRE(l->MakeStable(l->Tail()).ok());
    // No closing checkpoint: recovery must replay the LSS past checkpoint 1.
    l->TEST_SkipCloseOnDestroy();
  }
  LlamaOptions o = SmallOptions();
  o.checkpoint_on_close = false;
  auto l = OpenOrDie(mem.get(), o);
  for (const auto& [pid, contents] : expected) CHECK(ReadContents(l.get(), pid) == contents);
}

TEST_CASE("Concurrent updates, flushes and swap-outs keep pages intact", "[dc][llama][stress]") {
  auto mem = NewMemEnv();
  constexpr int kPages = 8;
  std::vector<PageId> pages;
  std::map<PageId, std::vector<std::string>> expected;
  {
    LlamaOptions o = SmallOptions();
    o.lss.io_threads = 1;
    auto l = OpenOrDie(mem.get(), o);
    for (int i = 0; i < kPages; ++i) pages.push_back(CreatePage(l.get(), "b" + std::to_string(i)));
    std::atomic<uint64_t> next_tag{1};
    std::atomic<bool> stop{false};
    std::atomic<int> failures{0};  // Catch assertions are not thread-safe
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 400; ++i) {
          // Pages 0..5 are updated; 6 and 7 stay idle, so swap-outs of them
          // succeed and their reads exercise loading from the LSS.
          const PageId pid = pages[static_cast<size_t>((i * 7 + t) % (kPages - 2))];
          if (!TryAddDelta(l.get(), pid, "t" + std::to_string(t) + "." + std::to_string(i),
                           next_tag.fetch_add(1))) {
            failures++;
          }
        }
      });
    }
    // Flusher and swapper run at least kMinRounds rounds, and until the
    // updaters are done.
    constexpr int kMinRounds = 200;
    threads.emplace_back([&] {
      Random64 rnd(11);
      for (int round = 0; round < kMinRounds || !stop.load(); ++round) {
        auto g = l->Enter();
        const PageId pid = pages[rnd.Uniform(kPages)];
        if (!l->Flush(pid, next_tag.load() / 2, 0).ok()) failures++;
      }
    });
    threads.emplace_back([&] {
      Random64 rnd(12);
      for (int round = 0; round < kMinRounds || !stop.load(); ++round) {
        if (!l->MakeStable(l->Tail()).ok()) failures++;
        auto g = l->Enter();
        l->SwapOut(pages[rnd.Uniform(kPages)]);
        if (!l->Read(pages[rnd.Uniform(kPages)]).ok()) failures++;
      }
    });
    threads[0].join();
    threads[1].join();
    stop = true;
    threads[2].join();
    threads[3].join();
    CHECK(failures.load() == 0);
    CHECK(l->GetStats().page_loads > 0);
    size_t nodes = 0;
    for (PageId pid : pages) {
      FlushPage(l.get(), pid, kAll);
      expected[pid] = ReadContents(l.get(), pid);
      nodes += expected[pid].size();
    }
    CHECK(nodes == kPages + 800);  // every base and every delta, once
    REQUIRE(l->Close().ok());
  }
  auto l = OpenOrDie(mem.get());
  for (PageId pid : pages) CHECK(ReadContents(l.get(), pid) == expected[pid]);
}

TEST_CASE("After a crash exactly the stable flushes are recovered", "[dc][llama][crash]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rnd(seed);
  for (int round = 0; round < 100; ++round) {
    auto mem = NewMemEnv();
    FaultInjectionEnv env(mem.get(), seed + static_cast<uint64_t>(round));
    // Per page: every data node (text@tag) and whether a stable flush has it.
    struct Node {
      std::string text;        // "text@tag", unique
      LssAddress flushed_end;  // 0: never flushed
    };
    std::map<PageId, std::vector<Node>> model;
    std::map<PageId, uint64_t> page_bound;  // the bound of the page's newest flush
    LssAddress stable = 0;
    {
      auto l = OpenOrDie(&env);
      for (int i = 0; i < 4; ++i) {
        PageId pid = CreatePage(l.get(), "base");
        model[pid].push_back({"base@0", 1});
        page_bound[pid] = 0;
      }
      REQUIRE(l->MakeStable(l->Tail()).ok());
      const int ops = 20 + static_cast<int>(rnd.Uniform(60));
      for (int i = 0; i < ops; ++i) {
        const PageId pid = 1 + rnd.Uniform(model.size());
        auto& nodes = model[pid];
        switch (rnd.Uniform(4)) {
          case 0:
          case 1: {
            const uint64_t tag = 1 + rnd.Uniform(100);
            const std::string text = "d" + std::to_string(i);
            AddDelta(l.get(), pid, text, tag);
            nodes.push_back({text + "@" + std::to_string(tag), 0});
            break;
          }
          case 2: {
            auto g = l->Enter();
            const uint64_t bound = rnd.Uniform(120);
            auto head = l->Read(pid);
            REQUIRE(head.ok());
            auto r = l->Flush(pid, bound, 0);
            REQUIRE(r.ok());
            if (r->outcome == FlushOutcome::kFlushed) {
              // The flush took every unflushed node under its effective bound.
              const uint64_t effective = std::max(bound, page_bound[pid]);
              page_bound[pid] = effective;
              for (const std::string& text : Contents(*head)) {
                const uint64_t tag = std::stoull(text.substr(text.find('@') + 1));
                if (tag > effective) continue;
                for (auto& m : nodes) {
                  if (m.text == text && m.flushed_end == 0) m.flushed_end = r->end;
                }
              }
            }
            break;
          }
          case 3:
            REQUIRE(l->MakeStable(l->Tail()).ok());
            break;
        }
      }
      stable = l->HiStable();
      REQUIRE(env.SimulateCrash(rnd.OneIn(2) ? CrashMode::kDropUnsynced : CrashMode::kTearUnsynced)
                  .ok());
      l->TEST_SkipCloseOnDestroy();  // the process died: nothing runs after the crash
    }
    auto l = OpenOrDie(&env);
    for (const auto& [pid, nodes] : model) {
      std::vector<std::string> want;
      for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
        if (it->flushed_end != 0 && it->flushed_end <= stable) want.push_back(it->text);
      }
      INFO("round " << round << " page " << pid);
      auto got = ReadContents(l.get(), pid);
      // Flushes that were not yet stable may or may not have survived the
      // crash; everything stable must be there, and nothing else but them.
      for (const auto& w : want) {
        CHECK(std::find(got.begin(), got.end(), w) != got.end());
      }
      for (const auto& g : got) {
        bool known = false;
        for (const auto& n : nodes) known |= (n.text == g && n.flushed_end != 0);
        CHECK(known);
      }
    }
  }
}

TEST_CASE("A budget a quarter of the data still reads every page back", "[dc][llama][budget]") {
  auto mem = NewMemEnv();
  constexpr int kPages = 1500;
  const std::string filler(1000, 'x');
  LlamaOptions o = SmallOptions();
  o.memory_budget = kPages * (filler.size() + 100) / 4;
  auto l = OpenOrDie(mem.get(), o);
  std::vector<PageId> pages;
  for (int i = 0; i < kPages; ++i) {
    pages.push_back(CreatePage(l.get(), std::to_string(i) + filler));
    AddDelta(l.get(), pages.back(), "d" + std::to_string(i), static_cast<uint64_t>(i));
  }
  REQUIRE(l->EnforceBudget().ok());
  auto s = l->GetStats();
  INFO("memory " << s.memory_bytes << " budget " << s.memory_budget);
  CHECK(s.memory_bytes <= o.memory_budget);
  CHECK(s.swap_outs > 0);
  CHECK(s.eviction_flushes > 0);  // the deltas had to be flushed to leave
  for (int i = 0; i < kPages; ++i) {
    const auto c = ReadContents(l.get(), pages[static_cast<size_t>(i)]);
    REQUIRE(c.size() == 2);
    CHECK(c[0] == "d" + std::to_string(i) + "@" + std::to_string(i));
    CHECK(c[1] == std::to_string(i) + filler + "@0");
  }
  s = l->GetStats();
  CHECK(s.page_loads > 0);
  // Reading everything back kept the cache near its budget.
  REQUIRE(l->EnforceBudget().ok());
  CHECK(l->GetStats().memory_bytes <= o.memory_budget);
}

TEST_CASE("The evictor flushes only under the bound it is given", "[dc][llama][budget]") {
  auto mem = NewMemEnv();
  LlamaOptions o = SmallOptions();
  // A budget nothing fits in: every sweep flushes and swaps out every cold
  // page it can, so the page below is sure to be visited.
  o.memory_budget = 1;
  o.eviction_flush_bound = [] { return uint64_t{10}; };
  PageId pid;
  {
    auto l = OpenOrDie(mem.get(), o);
    pid = CreatePage(l.get(), "base");
    AddDelta(l.get(), pid, "durable", 5);
    AddDelta(l.get(), pid, "not-yet", 50);  // above the bound: must never reach the LSS
    REQUIRE(l->EnforceBudget().ok());
    CHECK(l->GetStats().eviction_flushes > 0);
    CHECK(ReadContents(l.get(), pid) == std::vector<std::string>{"not-yet@50", "durable@5", "base@0"});
    REQUIRE(l->Close().ok());
  }
  auto l = OpenOrDie(mem.get(), o);
  CHECK(ReadContents(l.get(), pid) == std::vector<std::string>{"durable@5", "base@0"});
}

// Issue 35, suspect 3: a PID allocated by a system transaction while a
// checkpoint reads the mapping table was recorded allocated and empty; the
// transaction then aborted, and after a crash the PID was allocated for good
// (leaked). It must be recorded free.
TEST_CASE("A checkpoint records a PID allocated while it runs as free", "[dc][llama][txn]") {
  auto mem = NewMemEnv();
  FaultInjectionEnv env(mem.get(), 1);
  PageId pid = 0;
  {
    auto l = OpenOrDie(&env);
    std::unique_ptr<Llama::SystemTxn> txn;
    l->TEST_SetCheckpointHook([&] {
      if (txn != nullptr) return;
      txn = l->TBegin();
      Result<PageId> r = l->TAllocate(txn.get());
      REQUIRE(r.ok());
      pid = *r;
    });
    REQUIRE(l->Checkpoint().ok());
    REQUIRE(txn != nullptr);
    l->TAbort(txn.get());
    {
      auto g = l->Enter();
      CHECK(l->Read(pid).status().IsNotFound());
    }
    l->TEST_SkipCloseOnDestroy();
  }
  REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
  auto l = OpenOrDie(&env);
  auto g = l->Enter();
  Result<const PageNode*> r = l->Read(pid);
  INFO("pid " << pid << ": " << (r.ok() ? "allocated" : r.status().ToString()));
  CHECK(r.status().IsNotFound());
}

// Issue 35, suspect 2: with both checkpoint slots damaged, recovery replayed
// the LSS from its lowest segment as if there had never been a checkpoint;
// once segments (and the allocations they held) were released, page records
// met "free" PIDs and were dropped silently. It must fail instead.
TEST_CASE("LLAMA refuses to open when both checkpoints are damaged", "[dc][llama]") {
  auto mem = NewMemEnv();
  FaultInjectionEnv env(mem.get(), 1);
  {
    auto l = OpenOrDie(&env);
    CreatePage(l.get(), "a");
    REQUIRE(l->Checkpoint().ok());
    CreatePage(l.get(), "b");
    REQUIRE(l->Checkpoint().ok());
    REQUIRE(l->Close().ok());
  }
  for (const char* slot : {"/db/ckpt-0", "/db/ckpt-1"}) {
    REQUIRE(env.CorruptRange(slot, 8, 16, 3).ok());
  }
  Result<std::unique_ptr<Llama>> r = Llama::Open(&env, "/db", SmallOptions());
  INFO(r.status().ToString());
  CHECK(r.status().IsCorruption());
}

// Issue 35, suspect 1: a checkpoint named a page state in the LSS buffer
// that recovery then cut as a torn tail (it was damaged); the next writes
// landed at the same addresses, and the page was served another page's
// bytes. Recovery must refuse a checkpoint entry at or past the recovered
// end.
TEST_CASE("LLAMA refuses a checkpoint that names a page state past the recovered end",
          "[dc][llama]") {
  auto mem = NewMemEnv();
  FaultInjectionEnv env(mem.get(), 1);
  PageId a = 0;
  LssAddress rsp = 0;
  {
    auto l = OpenOrDie(&env);
    rsp = l->HiStable();
    a = CreatePage(l.get(), "page a");  // its record: in the buffer at rsp
    REQUIRE(l->Checkpoint().ok());      // RSP rsp; makes the buffer stable
    REQUIRE(l->HiStable() > rsp);
    l->TEST_SkipCloseOnDestroy();
  }
  // Damage the buffer: nothing after it, so recovery cuts it as a torn tail.
  REQUIRE(env.CorruptRange("/db/lss/0000000000000000.seg", rsp + 64 + 8, 8, 3).ok());
  Result<std::unique_ptr<Llama>> r = Llama::Open(&env, "/db", SmallOptions());
  INFO(r.status().ToString());
  CHECK(r.status().IsCorruption());
  if (r.ok()) {
    // What the old code did: a new page's record takes the cut address.
    auto l = std::move(r).value();
    const PageId b = CreatePage(l.get(), "page b");
    REQUIRE(l->MakeStable(l->Tail()).ok());
    auto g = l->Enter();
    Result<const PageNode*> read = l->Read(a);
    INFO("page " << a << " (b is " << b << "): "
                 << (read.ok() && *read != nullptr ? Contents(*read).front() : read.status().ToString()));
    CHECK(!read.ok());
  }
}

}  // namespace
}  // namespace deuteron::llama
