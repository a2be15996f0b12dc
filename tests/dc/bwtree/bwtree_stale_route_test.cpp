// Regression tests for issue 37: a parent kept routing to a page id that a merge freed,
// across RestartTo or a crash (all four failed on ecb9ecd).
//  - The first and third check the cause's fix: a merge flushes the parents whose routes
//    it changed before its freeing transaction, so no recovered tree routes to a freed id.
//  - The second and fourth build the old stale routes on purpose
//    (BwTree::TEST_SetFlushParentsBeforeFree(false), as a store written before the fix
//    may hold them) and check the defences: Llama::Read hides a page private to a system
//    transaction, and a routed descent that moved right re-points the route.
// Thread safety: single-threaded, except the one write the commit hook runs.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "dc/bwtree/bwtree.h"
#include "dc/dc.h"
#include "dc/llama/llama.h"
#include "tests/dc/dc_harness.h"

namespace deuteron::dc {
namespace {

using test::HarnessConfig;
using test::IncarnationOf;
using test::InProcessHarness;

std::string K(int i) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "k%06d", i);
  return buf;
}

void Put(DataComponent* dc, RecordOpKind kind, const std::string& key, uint64_t lsn) {
  const std::string value = kind == RecordOpKind::kUpsert ? "v" + std::to_string(lsn) : "";
  RecordOp op{kind, key, value, lsn};
  Result<ApplyResult> r = dc->Apply(std::span<const RecordOp>(&op, 1), 0, IncarnationOf(dc));
  INFO(key << " @" << lsn << ": " << r.status().ToString());
  REQUIRE(r.ok());
}

// Loads K(0 .. keys), makes it durable (parents included), then deletes
// K(lo .. hi) so that those leaves merge: the RSSP passes the tombstones, a
// few newer ones per leaf make a leaf's next consolidation purge the old ones
// and keep about two records, and reads around the range consolidate the
// leaves. With `stale`, the merges leave their parents' index-term deletes
// unflushed, as before issue 37's fix.
void MergeRange(Dc* dc, uint64_t* lsn, int keys, int lo, int hi, bool stale) {
  for (int i = 0; i < keys; ++i) Put(dc, RecordOpKind::kUpsert, K(i), ++*lsn);
  REQUIRE(dc->ProposeRssp(*lsn, IncarnationOf(dc)).ok());  // FlushAll under the ESL: parents durable
  for (int i = lo; i < hi; ++i) Put(dc, RecordOpKind::kDelete, K(i), ++*lsn);
  REQUIRE(dc->ProposeRssp(*lsn + 1, IncarnationOf(dc)).ok());
  if (stale) dc->TEST_tree()->TEST_SetFlushParentsBeforeFree(false);
  for (int i = lo; i < hi; i += 4) Put(dc, RecordOpKind::kDelete, K(i), ++*lsn);
  for (int i = std::max(0, lo - 100); i < std::min(keys, hi + 100); ++i) {
    REQUIRE(dc->Get(K(i)).ok());
  }
}

// A fresh in-process DC (ESL far ahead) after MergeRange.
struct MergedStore {
  static constexpr uint64_t kEsl = 10'000'000;
  MergedStore(int keys, int lo, int hi, bool stale) {
    REQUIRE(h.local()->SetEsl(kEsl, IncarnationOf(h.local())).ok());
    MergeRange(h.local(), &lsn, keys, lo, hi, stale);
  }
  // Leaf merges only: the tests find the stale routes that leaf merges
  // leave in level-1 pages, and the lowest free PID must be a freed leaf
  // (an inner merge frees inner PIDs, whose stale routes are a level up).
  static HarnessConfig Config() {
    HarnessConfig c;
    c.inner_merge_entries = 0;
    return c;
  }
  InProcessHarness h{Config()};
  uint64_t lsn = 0;
};

}  // namespace

namespace stale_route {

using llama::PageId;

struct StaleRoute {
  std::string low;   // the routed range's start
  PageId child = 0;  // a freed PID
};

// Calls fn(entry) for every level-1 index entry, left to right.
template <typename Fn>
void ForEachLevel1Entry(bwtree::BwTree* tree, llama::Llama* l, Fn fn) {
  auto g = l->Enter();
  PageId pid = tree->root();
  for (;;) {
    Result<const llama::PageNode*> head = l->Read(pid);
    REQUIRE(head.ok());
    bwtree::InnerImage image;
    REQUIRE(bwtree::GatherInner(*head, &image).ok());
    if (image.header.level > 1) {
      pid = image.entries.front().child;
      continue;
    }
    for (const bwtree::InnerEntry& e : image.entries) fn(e);
    if (image.header.high_infinite) break;
    pid = image.header.right_sibling;
  }
}

// Level-1 entries whose child is not allocated.
std::vector<StaleRoute> StaleRoutes(bwtree::BwTree* tree, llama::Llama* l) {
  std::vector<StaleRoute> out;
  ForEachLevel1Entry(tree, l, [&](const bwtree::InnerEntry& e) {
    if (l->Read(e.child).status().IsNotFound()) out.push_back({e.separator.ToString(), e.child});
  });
  return out;
}

// The child a level-1 entry routes `key` to (the last entry at or below it).
PageId RoutedChild(bwtree::BwTree* tree, llama::Llama* l, const std::string& key) {
  PageId child = 0;
  ForEachLevel1Entry(tree, l, [&](const bwtree::InnerEntry& e) {
    if (e.separator.empty() || e.separator <= Slice(key)) child = e.child;
  });
  return child;
}

// Whether leaf `pid` holds `key` itself (no right moves needed).
bool LeafHolds(llama::Llama* l, PageId pid, const std::string& key) {
  auto g = l->Enter();
  Result<const llama::PageNode*> head = l->Read(pid);
  if (!head.ok() || *head == nullptr) return false;
  bwtree::LeafImage image;
  REQUIRE(bwtree::GatherLeaf(*head, bwtree::PageReader(), &image).ok());
  return image.header.low_key <= Slice(key) &&
         (image.header.high_infinite || Slice(key) < image.header.high_key);
}

PageId LowestFree(llama::Llama* l) {
  const llama::MappingTable* t = l->mapping_table();
  for (PageId p = 1; p < t->high_water(); ++p) {
    if (llama::MappingTable::IsFree(t->Load(p))) return p;
  }
  return 0;
}

}  // namespace stale_route
using namespace stale_route;

// A merge frees the right leaf R in one system transaction (the left page's
// new base + R's free), but the parent's index-term delete that moved R's
// range to L is a plain delta, flushed only when the parent is. RestartTo
// (CloseWithoutCheckpoint makes every completed record stable, then
// recovers) keeps the free and drops the index-term delete: the parent
// routes to a freed PID, which RebuildFreeList hands out first.
TEST_CASE("stale route: after RestartTo a parent still routes to a merged, freed leaf",
          "[bwtree][stale_route]") {
  MergedStore store(200, 40, 160, /*stale=*/false);
  Dc* dc = store.h.local();
  constexpr uint64_t kEsl = MergedStore::kEsl;
  const bwtree::BwTree::Stats after = dc->TEST_tree()->GetStats();
  INFO("merges " << after.merges << " freed " << after.pages_freed << " height " << after.height);
  REQUIRE(after.pages_freed > 0);
  REQUIRE(dc->TEST_tree()->Check().ok());  // sound before the restart
  Result<DcReady> ready = dc->RestartTo(kEsl);
  REQUIRE(ready.ok());
  bwtree::BwTree* tree = dc->TEST_tree();
  CHECK(stale_route::StaleRoutes(tree, tree->llama()).empty());
  Status check = tree->Check();
  INFO("Check after RestartTo: " << check.ToString());
  CHECK(check.ok());  // failed before the fix: page 13 is not allocated
}


// After RestartTo, a stale route [a, ...) -> p (p freed by a merge) sits in
// a parent. The next split anywhere reuses p (the lowest free PID) for its
// new right sibling S while S is still private to the split's system
// transaction. A split of the page now holding [a, ...) at a separator below
// a gives S a range holding a, so the stale route is a valid B-link entry
// point into S: a write for a key in [a, ...) lands on the private page.
// When the split's commit then fails (here: the write's delta changed the
// private page after the commit planned it, so its flush-node install fails;
// equally, any failed final CAS on the split page), TAbort frees S and the
// acknowledged write is gone.
TEST_CASE("stale route: a write through a stale route lands on a split's private page and is lost",
          "[bwtree][stale_route]") {
  MergedStore store(200, 40, 160, /*stale=*/true);
  Dc* dc = store.h.local();
  uint64_t& lsn = store.lsn;
  REQUIRE(dc->TEST_tree()->GetStats().merges > 0);
  REQUIRE(dc->RestartTo(MergedStore::kEsl).ok());

  bwtree::BwTree* tree = dc->TEST_tree();
  llama::Llama* l = tree->llama();
  const std::vector<StaleRoute> stale = StaleRoutes(tree, l);
  const PageId p = LowestFree(l);
  std::string a;
  for (const StaleRoute& s : stale) {
    if (s.child == p) a = s.low;
  }
  INFO(stale.size() << " stale routes, lowest free PID " << p);
  REQUIRE(!a.empty());

  // The write that will go through the stale route: a key in [a, ...).
  const std::string victim = a + "-victim";
  Status victim_status;
  bool fired = false;
  l->TEST_SetAfterPlan([&](const std::vector<PageId>& allocated) {
    if (fired || allocated.size() != 1 || allocated[0] != p) return;
    fired = true;
    {
      // The split's new page is its transaction's alone (it was returned,
      // built, to every reader before the fix).
      auto g = l->Enter();
      Result<const llama::PageNode*> priv = l->Read(p);
      CHECK(priv.status().IsNotFound());
    }
    // Another thread's write arrives while the split is between its plan and
    // its installs (a preemption; here made certain).
    const uint64_t incarnation = IncarnationOf(dc);
    std::thread w([&] {
      RecordOp op{RecordOpKind::kUpsert, victim, "acknowledged", 900'000};
      victim_status = dc->Apply(std::span<const RecordOp>(&op, 1), 0, incarnation).status();
    });
    w.join();
  });
  // Writes just below a (into the page that absorbed p's range) until that
  // page splits, below a.
  std::string below = a;
  below.back() = static_cast<char>(below.back() - 1);
  for (int i = 0; i < 40 && !fired; ++i) {
    Put(dc, RecordOpKind::kUpsert, below + "~" + K(i), ++lsn);
  }
  l->TEST_SetAfterPlan(nullptr);
  REQUIRE(fired);
  INFO("victim write: " << victim_status.ToString());
  REQUIRE(victim_status.ok());  // acknowledged to the TC
  Result<ReadResult> r = dc->Get(victim);
  REQUIRE(r.ok());
  CHECK(r->found);  // failed before the fix: the acknowledged write was gone
  // (Check() would report the other stale routes this test leaves on purpose.)
}

}  // namespace deuteron::dc

namespace deuteron::dc {

// The same stale route after a plain crash: the merges' system-transaction
// records become stable as later work fills the LSS buffers, while the
// parents' index-term deletes are never flushed.
TEST_CASE("stale route: after a crash a parent still routes to a merged, freed leaf", "[bwtree][stale_route]") {
  MergedStore store(200, 40, 160, /*stale=*/false);
  InProcessHarness& h = store.h;
  Dc* dc = h.local();
  uint64_t& lsn = store.lsn;
  REQUIRE(dc->TEST_tree()->GetStats().merges > 0);
  // Unrelated appends elsewhere (their splits' records fill buffers).
  for (int i = 0; i < 3000; ++i) Put(dc, RecordOpKind::kUpsert, "z" + K(i), ++lsn);
  h.Crash();
  dc = h.local();
  bwtree::BwTree* tree = dc->TEST_tree();
  const std::vector<StaleRoute> stale = StaleRoutes(tree, tree->llama());
  Status check = tree->Check();
  INFO("Check after crash: " << check.ToString());
  CHECK(stale.empty());
  CHECK(check.ok());  // failed before the fix: page 13: routed keys below its low key
}

}  // namespace deuteron::dc

#include <chrono>

namespace deuteron::dc {

// After RestartTo, the stale route's PID is reused by a split at the far left
// of the key space. The route is then a "valid" B-link entry point (the new
// page's low key is below the routed keys), so no descent ever repairs it:
// every access to the range starts at the far-left page and moves right leaf
// by leaf (each hop also runs a FindRoute descent in PostIndexEntry). Past
// kMaxHops (4096) leaves, Locate restarts from the root, 16384 times, then
// returns Busy: the range becomes unreachable. Check() passes throughout.
TEST_CASE("stale route: a stale route reused at the far left sends every access on a long walk",
          "[bwtree][stale_route]") {
  MergedStore store(3000, 2500, 2700, /*stale=*/true);
  Dc* dc = store.h.local();
  uint64_t& lsn = store.lsn;
  REQUIRE(dc->RestartTo(MergedStore::kEsl).ok());

  bwtree::BwTree* tree = dc->TEST_tree();
  llama::Llama* l = tree->llama();
  const PageId p = LowestFree(l);
  std::string a;
  for (const StaleRoute& s : StaleRoutes(tree, l)) {
    if (s.child == p) a = s.low;
  }
  REQUIRE(!a.empty());
  // Appends at the far left (keys below every other): the leftmost leaf
  // splits and its new sibling gets p.
  for (int i = 0; i < 20 && !l->Read(p).ok(); ++i) {
    Put(dc, RecordOpKind::kUpsert, "a" + K(i), ++lsn);
  }
  REQUIRE(l->Read(p).ok());
  {
    auto g = l->Enter();
    Result<const llama::PageNode*> head = l->Read(p);
    REQUIRE(head.ok());
    bwtree::LeafImage image;
    REQUIRE(bwtree::GatherLeaf(*head, bwtree::PageReader(), &image).ok());
  }
  auto time_get = [&](const std::string& key) {
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(dc->Get(key).ok());
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
        .count();
  };
  const double normal = time_get(K(100));
  const double stale1 = time_get(a + "x");
  const double stale3 = time_get(a + "z");
  INFO("Get elsewhere " << normal << " us, through the route " << stale1 << ", " << stale3);
  // The first use re-pointed the route at the leaf holding its low key.
  // Failed before the fix: the route stayed, and every read walked ~360 leaves.
  CHECK(LeafHolds(l, RoutedChild(tree, l, a), a));
  CHECK(stale3 < 20 * normal + 1000);
}

}  // namespace deuteron::dc

#include <map>
#include <optional>

#include "common/random.h"

namespace deuteron::dc {
namespace {

// Merges, then a restart that does not flush the parents first: the suite's
// other crash tests call FlushAll (parents included) before they crash, and
// its RestartTo tests make no merges, so neither saw issue 37. Each cycle
// loads a key range, makes it durable, deletes most of it in runs (so that
// leaves empty and merge once the RSSP lets consolidations purge the
// tombstones), then restarts: by RestartTo, or by a crash after unrelated
// writes filled (and so wrote) the LSS buffers holding the merges' records.
// The recovered tree must pass Check() with no route to a freed page; the
// TC's redo of every operation then brings back exactly the model.
class MergeRestartRun {
 public:
  static constexpr uint64_t kEsl = 1'000'000;

  explicit MergeRestartRun(uint64_t seed) : rng_(seed) {
    REQUIRE(dc()->SetEsl(kEsl, IncarnationOf(dc())).ok());
  }

  Dc* dc() { return h_.local(); }

  void Write(RecordOpKind kind, const std::string& key) {
    ++lsn_;
    REQUIRE(lsn_ < kEsl);
    const std::string value = kind == RecordOpKind::kUpsert ? "v" + std::to_string(lsn_) : "";
    ops_.push_back(Op{kind, key, value, lsn_});
    Put(dc(), kind, key, lsn_);
    if (kind == RecordOpKind::kUpsert) {
      model_[key] = value;
    } else {
      model_[key] = std::nullopt;
    }
  }

  // One cycle over keys `prefix`000000.. ; returns the merges it made.
  uint64_t LoadAndMerge(const std::string& prefix, int keys) {
    for (int i = 0; i < keys; ++i) Write(RecordOpKind::kUpsert, prefix + K(i));
    REQUIRE(dc()->ProposeRssp(lsn_, IncarnationOf(dc())).ok());  // everything durable, parents too
    const uint64_t merges_before = dc()->TEST_tree()->GetStats().merges;
    std::vector<int> doomed;
    for (int i = 0; i < keys;) {
      const int run = 10 + static_cast<int>(rng_.Uniform(40));
      const bool keep = rng_.Uniform(4) == 0;
      for (int j = i; j < std::min(keys, i + run); ++j) {
        if (!keep) doomed.push_back(j);
      }
      i += run;
    }
    for (int i : doomed) Write(RecordOpKind::kDelete, prefix + K(i));
    // The RSSP passes the tombstones, so consolidations may purge them.
    REQUIRE(dc()->ProposeRssp(lsn_ + 1, IncarnationOf(dc())).ok());
    for (size_t i = 0; i < doomed.size(); i += 4) Write(RecordOpKind::kDelete, prefix + K(doomed[i]));
    for (int i = 0; i < keys; ++i) REQUIRE(dc()->Get(prefix + K(i)).ok());
    return dc()->TEST_tree()->GetStats().merges - merges_before;
  }

  // Unrelated appends: their splits' records fill the LSS buffers, which
  // are written (and the merges' records with them) without a FlushAll.
  void FillBuffers(int n) {
    const std::string prefix = "z" + std::to_string(fill_++);
    for (int i = 0; i < n; ++i) Write(RecordOpKind::kUpsert, prefix + K(i));
  }

  void Crash() {
    h_.Crash();
    REQUIRE(dc()->SetEsl(kEsl, IncarnationOf(dc())).ok());
  }
  void Restart() { REQUIRE(dc()->RestartTo(kEsl).ok()); }

  void CheckRecovered() {
    bwtree::BwTree* tree = dc()->TEST_tree();
    CHECK(stale_route::StaleRoutes(tree, tree->llama()).empty());
    Status check = tree->Check();
    INFO("Check after the restart: " << check.ToString());
    REQUIRE(check.ok());
    // The TC's redo: every operation again (the DC skips those it holds).
    for (const Op& o : ops_) {
      RecordOp op{o.kind, o.key, o.value, o.lsn};
      Result<ApplyResult> r = dc()->Apply(std::span<const RecordOp>(&op, 1), 0, IncarnationOf(dc()));
      REQUIRE(r.ok());
    }
    for (const auto& [key, value] : model_) {
      Result<ReadResult> r = dc()->Get(key);
      INFO(key);
      REQUIRE(r.ok());
      REQUIRE(r->found == value.has_value());
      if (value.has_value()) REQUIRE(r->value == *value);
    }
    REQUIRE(tree->Check().ok());
  }

 private:
  InProcessHarness h_{HarnessConfig{}};
  Random64 rng_;
  uint64_t lsn_ = 0;
  int fill_ = 0;
  struct Op {
    RecordOpKind kind;
    std::string key, value;
    uint64_t lsn;
  };
  std::vector<Op> ops_;
  std::map<std::string, std::optional<std::string>> model_;
};

// `seeds` runs of `cycles` cycles: merges, then a restart by RestartTo or
// by a crash after filling the buffers; each recovery is checked.
void MergeRestartCycles(int seeds, int cycles, bool crash) {
  for (int seed = 1; seed <= seeds; ++seed) {
    INFO("seed " << seed);
    MergeRestartRun run(static_cast<uint64_t>(seed));
    uint64_t merges = 0;
    for (int cycle = 0; cycle < cycles; ++cycle) {
      merges += run.LoadAndMerge("c" + std::to_string(cycle) + "-", 300);
      if (crash) {
        run.FillBuffers(2000);
        run.Crash();
      } else {
        run.Restart();
      }
      run.CheckRecovered();
    }
    REQUIRE(merges > 0);
  }
}

}  // namespace

TEST_CASE("RestartTo after merges recovers a sound tree with no route to a freed page",
          "[bwtree][stale_route][crash]") {
  MergeRestartCycles(3, 3, /*crash=*/false);
}

TEST_CASE("A crash after merges, with the parents never flushed, recovers a sound tree",
          "[bwtree][stale_route][crash]") {
  MergeRestartCycles(2, 2, /*crash=*/true);
}

}  // namespace deuteron::dc
