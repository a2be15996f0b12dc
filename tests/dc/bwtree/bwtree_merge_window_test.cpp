// Hand-built Bw-trees in the states a crash can leave mid-merge (a removed
// page with its route still in the parent, a merge delta over a split, a torn
// flush), used through the public interface.
#include "dc/bwtree/bwtree.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "common/coding.h"
#include "common/env.h"
#include "common/fault_env.h"
#include "common/random.h"
#include "dc/llama/lss_format.h"
#include "tests/dc/bwtree/bwtree_fixture.h"
#include "tests/dc/bwtree/bwtree_test_util.h"
#include "tests/dc/llama/llama_test_util.h"

namespace deuteron::bwtree {
namespace {

// A crash can leave a merge half done, or a parent's route behind it, in
// shapes a run of writes cannot be steered into. These tests build such a
// tree page by page in a fresh store (PIDs are handed out 1, 2, 3, ...) and
// then use it through the public interface.

// A leaf base over [low, high) (an empty high: no bound) holding `keys`, each
// with the value "v" + key and LSN 1.
std::string HandLeaf(const std::string& low, const std::string& high, PageId sibling,
                     const std::vector<std::string>& keys) {
  BaseHeader h;
  h.low_key = low;
  h.high_infinite = high.empty();
  h.high_key = high;
  h.right_sibling = sibling;
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const std::string& k : keys) values.push_back("v" + k);
  std::vector<LeafRecord> records;
  for (size_t i = 0; i < keys.size(); ++i) {
    records.push_back(LeafRecord{keys[i], values[i], 1, false});
  }
  return EncodeLeafBase(h, records);
}

// The only inner node (level 1, no bounds) with `entries`: separator, child.
std::string HandRoot(const std::vector<std::pair<std::string, PageId>>& entries) {
  BaseHeader h;
  h.type = NodeType::kInner;
  h.level = 1;
  std::vector<InnerEntry> list;
  for (const auto& [separator, child] : entries) list.push_back(InnerEntry{separator, child});
  return EncodeInnerBase(h, list);
}

struct HandBuilt {
  // Page 1: the meta page naming `root` the root. On `on` (default: a fresh
  // in-memory Env of its own).
  explicit HandBuilt(PageId root, Env* on = nullptr, const LlamaOptions& lo = TreeLlamaOptions())
      : env(on != nullptr ? on : own_env.get()), llama(OpenLlama(env, lo)) {
    std::string pid;
    PutFixed64(&pid, root);
    Page(1, EncodeLeafBase(BaseHeader(), {LeafRecord{"root", pid, 0, false}}));
  }

  // Creates page `want` (the next PID) with `base` and then `deltas`, oldest
  // first; the deltas stay in memory.
  void Page(PageId want, const std::string& base, const std::vector<std::string>& deltas = {}) {
    const PageId pid = llama::test::CreatePage(llama.get(), base);
    REQUIRE(pid == want);
    auto g = llama->Enter();
    for (const std::string& d : deltas) llama::test::PostDelta(llama.get(), pid, d);
  }

  BwTree* Open(const BwTreeOptions& o = PurgeAll(TestOptions())) {
    tree = OpenTree(llama.get(), o);
    return tree.get();
  }

  std::unique_ptr<Env> own_env = NewMemEnv();
  Env* env;
  std::unique_ptr<Llama> llama;
  std::unique_ptr<BwTree> tree;
};

// Reads, writes and scans in both directions agree with `m`, then Check.
void RequireUsable(BwTree* t, Model* m, const std::vector<std::string>& keys) {
  for (const std::string& k : keys) RequireFound(t, k, "v" + k, 1);
  uint64_t lsn = 10;
  for (const std::string& k : keys) Write(t, m, WriteKind::kUpsert, k + "+", "w", ++lsn);
  RequireSame(t, *m, kAll);
  ScanOptions reverse;
  reverse.reverse = true;
  std::vector<Item> down = ScanItems(t, reverse);
  std::vector<Item> up = ScanItems(t);
  std::reverse(down.begin(), down.end());
  CHECK(Describe(down) == Describe(up));
  RequireCheck(t);
}

// Leaf R ["b", "c") is removed and merged into L, and its own range is routed
// to L, but two later ranges of the parent still route to R: entry points
// past its high key (R once held them, before it split). A read through the
// upper one asks to repair it; the keys just below it lead to R too, so the
// repair must go to the page before R's own range. Before, it gave up there
// and every read of "e..." restarted until Busy.
TEST_CASE("A route past a removed page's range is handed on when the keys below lead there too",
          "[dc][bwtree]") {
  // 2 root, 3 L [-inf, b), 4 R [b, c), 5 S [c, f), 6 T [f, +inf)
  HandBuilt b(2);
  b.Page(2, HandRoot({{"", 3}, {"b", 3}, {"c", 5}, {"d", 4}, {"e", 4}, {"f", 6}}));
  b.Page(3, HandLeaf("", "b", 4, {"a1", "a2"}), {EncodeMergeDelta("b", 4)});
  b.Page(4, HandLeaf("b", "c", 5, {"b1"}), {EncodeRemoveNodeDelta()});
  b.Page(5, HandLeaf("c", "f", 6, {"c1", "d1", "e1", "e2"}));
  b.Page(6, HandLeaf("f", "", 0, {"f1"}));
  BwTree* t = b.Open();
  Model m;
  const std::vector<std::string> keys = {"a1", "a2", "b1", "c1", "d1", "e1", "e2", "f1"};
  for (const std::string& k : keys) m.Apply(WriteKind::kUpsert, k, "v" + k, 1);
  SECTION("a point read") { RequireFound(t, "e2", "ve2", 1); }
  SECTION("a reverse scan") {
    ScanOptions o;
    o.upper = "e2";
    o.upper_inclusive = true;
    o.reverse = true;
    CHECK(ScanText(t, o) ==
          "e2=ve2@1\ne1=ve1@1\nd1=vd1@1\nc1=vc1@1\nb1=vb1@1\na2=va2@1\na1=va1@1\n");
  }
  RequireUsable(t, &m, keys);
}

// L has absorbed R by a merge delta, but R's remove-node was lost (possible
// before remove-nodes were system transactions) and R, live, split: its
// upper half is R2. A read of a key in R2's range goes
// through L's merge delta to R and must follow R's split. Before, it
// restarted until Busy.
TEST_CASE("A read through a merge delta follows a split of the merged page", "[dc][bwtree]") {
  // 2 root, 3 L [-inf, b), 4 R [b, c) split at "bm" into 6 R2, 5 S [c, +inf)
  HandBuilt b(2);
  b.Page(2, HandRoot({{"", 3}, {"c", 5}}));
  b.Page(3, HandLeaf("", "b", 4, {"a1"}), {EncodeMergeDelta("b", 4)});
  b.Page(4, HandLeaf("b", "c", 5, {"b1", "bn"}), {EncodeSplitDelta("bm", 6)});
  b.Page(5, HandLeaf("c", "", 0, {"c1"}));
  b.Page(6, HandLeaf("bm", "c", 5, {"bn"}));
  BwTree* t = b.Open();
  Model m;
  const std::vector<std::string> keys = {"a1", "b1", "bn", "c1"};
  for (const std::string& k : keys) m.Apply(WriteKind::kUpsert, k, "v" + k, 1);
  RequireFound(t, "bn", "vbn", 1);
  RequireUsable(t, &m, keys);
}

// Each partial merge bwtree.md ("Crash consistency") lists, over leaves
// L [-inf, b), R [b, c) and S [c, +inf) under one root: reads, writes and
// scans see every record, and the tree ends sound. (A merge delta without
// its remove-node is left only by stores written before remove-nodes became
// system transactions; it is still handled.)
TEST_CASE("Every merge step a crash can leave alone is completed or read through",
          "[dc][bwtree]") {
  // 2 root, 3 L, 4 R, 5 S
  const std::string l_base = HandLeaf("", "b", 4, {"a1", "a2"});
  const std::string r_base = HandLeaf("b", "c", 5, {"b1", "b2"});
  const std::string s_base = HandLeaf("c", "", 0, {"c1"});
  const std::vector<std::pair<std::string, PageId>> routed_to_r = {{"", 3}, {"b", 4}, {"c", 5}};
  const std::vector<std::pair<std::string, PageId>> routed_to_l = {{"", 3}, {"b", 3}, {"c", 5}};
  HandBuilt b(2);
  bool merging = true;  // whether R is on its way into L
  SECTION("remove-node alone") {
    b.Page(2, HandRoot(routed_to_r));
    b.Page(3, l_base);
    b.Page(4, r_base, {EncodeRemoveNodeDelta()});
  }
  SECTION("merge delta alone: R still live") {
    b.Page(2, HandRoot(routed_to_r));
    b.Page(3, l_base, {EncodeMergeDelta("b", 4)});
    b.Page(4, r_base);
  }
  SECTION("index-term delete alone: L moves right to R") {
    merging = false;
    b.Page(2, HandRoot(routed_to_l));
    b.Page(3, l_base);
    b.Page(4, r_base);
  }
  SECTION("remove-node and merge delta, R's route not yet moved") {
    b.Page(2, HandRoot(routed_to_r));
    b.Page(3, l_base, {EncodeMergeDelta("b", 4)});
    b.Page(4, r_base, {EncodeRemoveNodeDelta()});
  }
  b.Page(5, s_base);
  BwTreeOptions o = PurgeAll(TestOptions());
  o.leaf_merge_records = 0;  // no new merges: only the one under way
  BwTree* t = b.Open(o);
  Model m;
  const std::vector<std::string> keys = {"a1", "a2", "b1", "b2", "c1"};
  for (const std::string& k : keys) m.Apply(WriteKind::kUpsert, k, "v" + k, 1);
  RequireUsable(t, &m, keys);
  // Enough writes to L to consolidate it: a merge under way ends with R
  // folded into L and freed (a live R frozen first), and nothing is lost.
  for (uint64_t i = 3; i <= 9; ++i) {
    Write(t, &m, WriteKind::kUpsert, "a" + std::to_string(i), "w", 100 + i);
  }
  RequireSame(t, m, kAll);
  RequireCheck(t);
  CHECK(t->GetStats().pages_freed == (merging ? 1u : 0u));
}

// Pages 2 L [-inf, b) {a1}, 3 R [b, c) {b1}, 4 S [c, +inf) {c1} under the
// root 5, all flushed stably; the tree opened on them. Writes b2..b6 then
// consolidate R, which is small, so it merges into L.
BwTree* OpenMergePair(HandBuilt* b) {
  b->Page(2, HandLeaf("", "b", 3, {"a1"}));
  b->Page(3, HandLeaf("b", "c", 4, {"b1"}));
  b->Page(4, HandLeaf("c", "", 0, {"c1"}));
  b->Page(5, HandRoot({{"", 2}, {"b", 3}, {"c", 4}}));
  BwTree* t = b->Open();
  REQUIRE(t->FlushAll(kAll).ok());
  return t;
}

// A merge's remove-node commits as a system transaction, so its record is in
// the LSS before the merge delta on the left page and before the writes that
// page takes for the merged range. A flush torn at any write therefore keeps
// those only with the remove-node. Before, the remove-node was written with
// the merged page's own flush, after the left page's (FlushAll goes in PID
// order): a crash between the two left R live beside L's newer writes to R's
// keys, and a point read (routed to R) missed what a scan (through L's merge
// delta) returned. That failed here ("key b9: Get NotFound") while merges
// were completed by L's next write. Since StartMerge consolidates L at once
// (eb2271d), folding R in and freeing it in one system transaction, this
// single thread never flushes L between its merge delta and that
// consolidation, so the test no longer fails with the remove-node posted by
// a plain Update-D (checked 2026-11-22): only a concurrent flush meets that
// window, which the next test drives. This one still requires Get and scans
// to agree after any torn flush of a merged pair.
TEST_CASE("A torn flush keeps a merge's left page only with the merged page's remove-node",
          "[dc][bwtree][crash]") {
  const std::vector<std::string> keys = {"a1", "b1", "b2", "b3", "b4", "b5", "b6", "b9", "c1"};
  uint64_t merges = 0, torn = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    for (uint64_t fail_at = 1; fail_at <= 4; ++fail_at) {
      INFO("seed " << seed << ": the torn flush's write " << fail_at << " fails");
      auto mem = NewMemEnv();
      FaultInjectionEnv env(mem.get(), seed);
      const LlamaOptions lo = TreeLlamaOptions();
      {
        // The root, flushed last, so its index-term delete can be lost with
        // R's record, and R's range still be routed to R.
        HandBuilt b(5, &env, lo);
        BwTree* t = OpenMergePair(&b);
        // Writes to R consolidate it; it is small, so it merges into L. The
        // next write to R's range goes on L, through the merge delta.
        for (uint64_t i = 2; i <= 6; ++i) {
          REQUIRE(t->Upsert("b" + std::to_string(i), "w", 10 + i).ok());
        }
        merges += t->GetStats().merges;
        REQUIRE(t->Upsert("b9", "w", 20).ok());
        env.FailNth(FaultInjectionEnv::Op::kWrite, fail_at, Code::kIOError);
        // L's flush is made stable by a write of its own, so a torn flush
        // can keep it and lose R's (and the root's), which FlushAll writes
        // after it.
        Result<llama::FlushResult> left = b.llama->Flush(2, kAll, kAll);
        Status s = left.status();
        if (s.ok()) {
          REQUIRE(left->outcome == llama::FlushOutcome::kFlushed);
          s = b.llama->MakeStable(left->end);
        }
        if (s.ok()) s = t->FlushAll(kAll);
        torn += s.ok() ? 0 : 1;
        b.llama->TEST_SkipCloseOnDestroy();
        REQUIRE(env.SimulateCrash(CrashMode::kTearUnsynced).ok());
        env.ClearFailures();
      }
      auto l = OpenLlama(&env, lo);
      auto t = OpenTree(l.get(), PurgeAll(TestOptions()));
      // Every key reads the same by Get as by a scan.
      std::map<std::string, Item> scanned;
      for (const Item& i : ScanItems(t.get())) scanned[i.key] = i;
      for (const std::string& k : keys) {
        auto got = t->Get(k);
        INFO("key " << k << ": Get " << got.status().ToString());
        const auto it = scanned.find(k);
        if (it == scanned.end()) {
          CHECK(got.status().IsNotFound());
        } else {
          REQUIRE(got.ok());
          CHECK(got->value == it->second.value);
          CHECK(got->lsn == it->second.lsn);
        }
      }
      RequireCheck(t.get());
    }
  }
  INFO("merges " << merges << ", torn flushes " << torn);
  CHECK(merges == 16);  // one per run
  CHECK(torn > 0);
}

// The window the test above no longer reaches: between a merge's delta on
// the left page and that page's consolidation (which folds the removed page
// in and frees it), another thread writes to the merged range (the write
// lands on the left page, above its merge delta) and flushes the left page
// stably, and the process then crashes before anything else is synced.
// Recovery must keep the removed page's remove-node with that flush, or the
// parent, whose index-term delete was lost, routes the merged range back to
// a live removed page: Get misses the write that a scan (through the left
// page's merge delta) returns. It failed that way ("b9": Get NotFound, the
// scan found it) with the remove-node posted by a plain Update-D instead of
// a system transaction (checked 2026-11-23). The tree must hold exactly what
// was stable: the removed page's records up to the merge, which its
// remove-node's transaction carried, and the write flushed in the window.
TEST_CASE("A concurrent flush between a merge delta and its consolidation keeps the remove-node",
          "[dc][bwtree][crash]") {
  auto mem = NewMemEnv();
  FaultInjectionEnv env(mem.get(), 1);
  const LlamaOptions lo = TreeLlamaOptions();
  int windows = 0;
  {
    HandBuilt b(5, &env, lo);
    BwTree* t = OpenMergePair(&b);
    Status window = Status::OK();
    t->TEST_SetMergeHook([&](PageId removed, PageId left) {
      ++windows;
      // Another thread: the merging one holds its epoch guard and is in the
      // middle of its restructuring.
      std::thread other([&] {
        window = t->Upsert("b9", "w", 20);
        if (!window.ok()) return;
        Result<llama::FlushResult> flushed = b.llama->Flush(left, kAll, kAll);
        window = flushed.status();
        if (window.ok()) window = b.llama->MakeStable(flushed->end);
      });
      other.join();
      CHECK(removed == 3);
      CHECK(left == 2);
    });
    // Writes to R consolidate it; it is small, so it merges into L.
    for (uint64_t i = 2; i <= 6; ++i) {
      REQUIRE(t->Upsert("b" + std::to_string(i), "w", 10 + i).ok());
    }
    t->TEST_SetMergeHook(nullptr);
    INFO("the window's write and flush: " << window.ToString());
    REQUIRE(window.ok());
    REQUIRE(windows == 1);
    CHECK(t->GetStats().merges == 1);
    b.llama->TEST_SkipCloseOnDestroy();
    REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
  }
  auto l = OpenLlama(&env, lo);
  auto t = OpenTree(l.get(), PurgeAll(TestOptions()));
  Model m;
  for (const char* k : {"a1", "b1", "c1"}) m.Apply(WriteKind::kUpsert, k, std::string("v") + k, 1);
  for (uint64_t i = 2; i <= 6; ++i) {
    m.Apply(WriteKind::kUpsert, "b" + std::to_string(i), "w", 10 + i);
  }
  m.Apply(WriteKind::kUpsert, "b9", "w", 20);
  RequireSame(t.get(), m, kAll);  // Get of every key, and scans both ways
  RequireCheck(t.get());
}

}  // namespace
}  // namespace deuteron::bwtree
