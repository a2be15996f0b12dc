// Inner-node merges and root collapse (bwtree.md, "Structure changes"): a
// tree whose keys are mostly deleted loses its inner pages and its height;
// hand-built partial inner merges are completed by whoever meets them; and
// readers and writers run while inner pages merge (the TSan target).
#include "dc/bwtree/bwtree.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "common/random.h"
#include "dc/llama/mapping_table.h"
#include "tests/dc/bwtree/bwtree_test_util.h"

namespace deuteron::bwtree {
namespace {

using llama::Llama;
using test::Key;
using test::kAll;
using test::OpenLlama;
using test::OpenTree;
using test::RequireCheck;
using test::TestOptions;
using test::TreeLlamaOptions;

// Pages the store holds (the meta page included).
uint64_t AllocatedPages(Llama* l) {
  const llama::MappingTable* table = l->mapping_table();
  uint64_t n = 0;
  for (PageId pid = 1; pid < table->high_water(); ++pid) {
    if (!llama::MappingTable::IsFree(table->Load(pid))) ++n;
  }
  return n;
}

// Small pages, so that 5,000 keys make a tree of four levels (40k, five),
// and a tombstone is dropped as soon as a consolidation meets it.
BwTreeOptions ShrinkOptions() {
  BwTreeOptions o = TestOptions();
  o.leaf_max_records = 12;
  o.inner_max_entries = 12;
  o.leaf_merge_records = 3;
  o.inner_merge_entries = 3;
  o.purge_bound = [] { return kAll; };
  return o;
}

std::string ValueOf(uint64_t i) { return "v" + std::to_string(i); }

struct Shrink {
  uint64_t pages_before = 0, pages_after = 0;
  uint32_t height_before = 0, height_after = 0;
  BwTree::Stats stats;
  // After the shrink, per level (leaves first): pages, and entries of their
  // bases (records or separators).
  std::vector<uint64_t> level_pages, level_entries, level_min_entries;
};

// Pages and base entries per level, from every allocated page's base (the
// meta page and pages without a base skipped).
void Census(Llama* l, Shrink* out) {
  auto g = l->Enter();
  const llama::MappingTable* table = l->mapping_table();
  for (PageId pid = 2; pid < table->high_water(); ++pid) {
    if (llama::MappingTable::IsFree(table->Load(pid))) continue;
    auto head = l->Read(pid);
    if (!head.ok() || *head == nullptr) continue;
    const llama::PageNode* n = *head;
    while (n != nullptr && n->kind != llama::NodeKind::kBase) n = n->next;
    if (n == nullptr) continue;
    auto base = BaseView::Parse(Slice(n->payload(), n->size));
    if (!base.ok()) continue;
    const size_t level = base->header().level;
    if (out->level_pages.size() <= level) {
      out->level_pages.resize(level + 1);
      out->level_entries.resize(level + 1);
      out->level_min_entries.resize(level + 1, UINT64_MAX);
    }
    out->level_pages[level]++;
    out->level_entries[level] += base->count();
    out->level_min_entries[level] = std::min<uint64_t>(out->level_min_entries[level], base->count());
  }
}

// Inserts `n` keys in random order, deletes all but one in `keep_every` in
// random order, then reads every key twice (reads consolidate the leaves
// the deletes left with tombstones, which then merge). Checks the tree and
// every key on the way.
Shrink InsertThenDelete(uint64_t seed, uint64_t n, uint64_t keep_every) {
  INFO("seed " << seed << ", " << n << " keys");
  auto env = NewMemEnv();
  llama::LlamaOptions lo = TreeLlamaOptions();
  lo.mapping.max_pages = 1 << 20;
  auto l = OpenLlama(env.get(), lo);
  auto tree = OpenTree(l.get(), ShrinkOptions());
  Random64 rnd(seed);
  std::vector<uint64_t> order(n);
  for (uint64_t i = 0; i < n; ++i) order[i] = i;
  auto shuffle = [&] {
    for (uint64_t i = n; i > 1; --i) std::swap(order[i - 1], order[rnd.Uniform(i)]);
  };
  shuffle();
  uint64_t lsn = 0;
  for (uint64_t i : order) REQUIRE(tree->Insert(Key(i), ValueOf(i), ++lsn).ok());
  Shrink out;
  out.pages_before = AllocatedPages(l.get());
  out.height_before = tree->GetStats().height;
  RequireCheck(tree.get());
  shuffle();
  for (uint64_t i : order) {
    if (i % keep_every != 0) REQUIRE(tree->Delete(Key(i), ++lsn).ok());
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (uint64_t i = 0; i < n; ++i) REQUIRE(tree->GetLsn(Key(i)).ok());
  }
  RequireCheck(tree.get());
  for (uint64_t i = 0; i < n; ++i) {
    auto r = tree->Get(Key(i));
    INFO("key " << Key(i) << ": " << r.status().ToString());
    if (i % keep_every == 0) {
      REQUIRE(r.ok());
      REQUIRE(r->value == ValueOf(i));
    } else {
      REQUIRE(r.status().IsNotFound());
    }
  }
  std::vector<test::Item> items = test::ScanItems(tree.get());
  CHECK(items.size() == (n + keep_every - 1) / keep_every);
  out.pages_after = AllocatedPages(l.get());
  Census(l.get(), &out);
  out.stats = tree->GetStats();
  out.height_after = out.stats.height;
  return out;
}

void Report(const char* what, uint64_t n, const Shrink& s) {
  // Printed for the design notes (bwtree.md, "Inner merges, measured").
  std::printf("%s: %llu keys, 95%% deleted: pages %llu -> %llu, height %u -> %u; merges %llu "
              "(inner %llu), root collapses %llu, pages freed %llu\n",
              what, static_cast<unsigned long long>(n),
              static_cast<unsigned long long>(s.pages_before),
              static_cast<unsigned long long>(s.pages_after), s.height_before, s.height_after,
              static_cast<unsigned long long>(s.stats.merges),
              static_cast<unsigned long long>(s.stats.inner_merges),
              static_cast<unsigned long long>(s.stats.root_collapses),
              static_cast<unsigned long long>(s.stats.pages_freed));
  std::printf("  after, per level (pages, mean entries):");
  for (size_t i = 0; i < s.level_pages.size(); ++i) {
    std::printf(" L%zu %llu (%.1f)", i, static_cast<unsigned long long>(s.level_pages[i]),
                s.level_pages[i] == 0 ? 0.0
                                      : static_cast<double>(s.level_entries[i]) /
                                            static_cast<double>(s.level_pages[i]));
  }
  std::printf("\n");
}

TEST_CASE("The inner merge threshold stays below what a split leaves", "[dc][bwtree][inner_merge]") {
  BwTreeOptions o = TestOptions();
  o.inner_max_entries = 6;
  o.inner_merge_entries = 3;
  CHECK(BwTree::ValidateOptions(o).IsInvalidArgument());
  o.inner_merge_entries = 2;
  CHECK(BwTree::ValidateOptions(o).ok());
  // The default: under the 1/8 an appending split leaves on the right.
  auto env = NewMemEnv();
  auto l = OpenLlama(env.get(), TreeLlamaOptions());
  CHECK(OpenTree(l.get(), TestOptions())->options().inner_merge_entries == 15);
}

// A fixed seed in CI, 5,000 keys (pages 552 -> 65, height 4 -> 3, 63 inner
// merges, 1 root collapse; an eighth of the time of 40k keys); the hidden
// case below runs random seeds over 40k keys. Before
// 2026-11-26 about one random run in ten ended at the height it started from:
// a small leftmost page had no left neighbour to merge into and stayed small,
// so a root whose leftmost child was one kept two children (bwtree.md, "Two
// findings explained"); now the leftmost page takes its right sibling in.
//
// Merging is triggered by a small page (at most the threshold), so it keeps a
// floor on occupancy, not the least height: a root may keep two children that
// are each above the threshold though together they would fit one page (1
// seed in 40 here, e.g. 3772620922223318003: two level-3 pages of 5 and 6
// entries under the root). With `strict` (the fixed seed) the height must
// shrink; otherwise it must not grow, and when it stays, no page under the
// root may be small enough to merge (else a merge was missed).
void ShrinkCase(uint64_t seed, bool strict, uint64_t n) {
  const Shrink s = InsertThenDelete(seed, n, 20);
  Report("inner merge", n, s);
  INFO("seed " << seed << ", pages " << s.pages_before << " -> " << s.pages_after << ", height "
                << s.height_before << " -> " << s.height_after << ", inner merges "
                << s.stats.inner_merges << ", root collapses " << s.stats.root_collapses);
  CHECK(s.height_before >= 4);
  if (strict || s.height_after < s.height_before) {
    CHECK(s.height_after < s.height_before);
    CHECK(s.stats.root_collapses > 0);  // the only way the height goes down
  } else {
    CHECK(s.height_after == s.height_before);
    REQUIRE(s.level_min_entries.size() == s.height_after);
    CHECK(s.level_min_entries[s.height_after - 2] > ShrinkOptions().inner_merge_entries);
  }
  CHECK(s.pages_after * 5 < s.pages_before);
  CHECK(s.stats.inner_merges > 0);
}

TEST_CASE("Deleting 95% of the keys shrinks the page count and the height",
          "[dc][bwtree][inner_merge]") {
  ShrinkCase(1, /*strict=*/true, 5000);
}

TEST_CASE("Deleting 95% of the keys shrinks the page count and the height, random seeds (long)",
          "[.][dc][bwtree][inner_merge]") {
  for (int i = 0; i < 10; ++i) ShrinkCase(TestSeed(), /*strict=*/false, 40000);
}

TEST_CASE("Deleting 95% of a million keys shrinks the page count and the height (long)",
          "[dc][bwtree][inner_merge][.]") {
  const uint64_t n = 1000000;
  const Shrink s = InsertThenDelete(TestSeed(), n, 20);
  Report("inner merge (long)", n, s);
  CHECK(s.height_after < s.height_before);
  CHECK(s.pages_after * 5 < s.pages_before);
}

TEST_CASE("Deleting every key collapses the tree to one leaf", "[dc][bwtree][inner_merge]") {
  auto env = NewMemEnv();
  auto l = OpenLlama(env.get(), TreeLlamaOptions());
  BwTreeOptions o = ShrinkOptions();
  o.leaf_max_records = 6;
  o.inner_max_entries = 5;
  o.leaf_merge_records = 2;
  o.inner_merge_entries = 2;
  auto tree = OpenTree(l.get(), o);
  const uint64_t n = 3000;
  uint64_t lsn = 0;
  for (uint64_t i = 0; i < n; ++i) REQUIRE(tree->Insert(Key(i), "v", ++lsn).ok());
  const uint32_t height = tree->GetStats().height;
  CHECK(height >= 5);
  // Descending: each emptied leaf merges into its left neighbour at once.
  for (uint64_t i = n; i-- > 0;) REQUIRE(tree->Delete(Key(i), ++lsn).ok());
  for (uint64_t i = 0; i < n; ++i) {
    auto got = tree->GetLsn(Key(i));
    INFO("GetLsn " << Key(i) << ": " << got.status().ToString());
    REQUIRE(got.ok());
  }
  RequireCheck(tree.get());
  const BwTree::Stats s = tree->GetStats();
  INFO("height " << height << " -> " << s.height << ", root collapses " << s.root_collapses);
  CHECK(s.height == 1);
  CHECK(s.root_collapses == height - 1);
  CHECK(AllocatedPages(l.get()) == 2);  // the meta page and the root leaf
  CHECK(test::ScanItems(tree.get()).empty());
  // The tree grows again from its one leaf.
  for (uint64_t i = 0; i < 500; ++i) REQUIRE(tree->Insert(Key(i), "w", ++lsn).ok());
  RequireCheck(tree.get());
  CHECK(tree->GetStats().height >= 3);
}

// Threads delete disjoint keys (95% of them) while others read the keys no
// one deletes and scan: every kept key is always found with its value, and
// every scan is in order and holds every kept key in its range. Inner pages
// merge and the root collapses meanwhile.
TEST_CASE("Readers and writers run while inner pages merge", "[dc][bwtree][inner_merge]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  auto env = NewMemEnv();
  auto l = OpenLlama(env.get(), TreeLlamaOptions());
  BwTreeOptions o = ShrinkOptions();
  o.leaf_max_records = 8;
  o.inner_max_entries = 6;
  o.leaf_merge_records = 2;
  o.inner_merge_entries = 2;
  o.inner_delta_threshold = 1;
  auto tree = OpenTree(l.get(), o);
  const uint64_t n = 6000;
  const uint64_t keep = 20;
  std::atomic<uint64_t> lsn{0};
  for (uint64_t i = 0; i < n; ++i) REQUIRE(tree->Insert(Key(i), ValueOf(i), ++lsn).ok());
  const uint32_t height = tree->GetStats().height;
  constexpr int kWriters = 2, kReaders = 2;
  std::atomic<int> writers_left{kWriters};
  std::vector<std::string> failures(kWriters + kReaders);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      Random64 rnd(seed + static_cast<uint64_t>(w));
      std::vector<uint64_t> mine;
      for (uint64_t i = static_cast<uint64_t>(w); i < n; i += kWriters) {
        if (i % keep != 0) mine.push_back(i);
      }
      for (size_t i = mine.size(); i > 1; --i) std::swap(mine[i - 1], mine[rnd.Uniform(i)]);
      for (uint64_t i : mine) {
        Status s = tree->Delete(Key(i), ++lsn);
        if (!s.ok()) {
          failures[w] = "Delete " + Key(i) + ": " + s.ToString();
          break;
        }
      }
      --writers_left;
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&, r] {
      std::string& failure = failures[kWriters + r];
      Random64 rnd(seed + 100 + static_cast<uint64_t>(r));
      while (writers_left.load() > 0 && failure.empty()) {
        const uint64_t i = rnd.Uniform(n / keep) * keep;
        auto got = tree->Get(Key(i));
        if (!got.ok() || got->value != ValueOf(i)) {
          failure = "Get " + Key(i) + ": " + got.status().ToString();
          break;
        }
        if (!rnd.OneIn(8)) continue;
        ScanOptions so;
        so.lower = Key(i);
        so.upper = Key(i + 40 * keep);
        so.reverse = rnd.OneIn(2);
        std::vector<test::Item> items;
        Status s = test::TryScan(tree.get(), so, &items);
        if (!s.ok()) {
          failure = "scan from " + Key(i) + ": " + s.ToString();
          break;
        }
        std::vector<std::string> kept;
        for (const test::Item& item : items) {
          if (!kept.empty() && (so.reverse ? !(item.key < kept.back()) : !(kept.back() < item.key))) {
            failure = "scan from " + Key(i) + " out of order at " + item.key;
            break;
          }
          kept.push_back(item.key);
        }
        for (uint64_t j = i; j < i + 40 * keep && j < n && failure.empty(); j += keep) {
          if (std::find(kept.begin(), kept.end(), Key(j)) == kept.end()) {
            failure = "scan from " + Key(i) + " missed the kept key " + Key(j);
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  std::string all;
  for (const std::string& f : failures) all += f.empty() ? "" : f + "\n";
  INFO(all);
  REQUIRE(all.empty());
  for (uint64_t i = 0; i < n; ++i) REQUIRE(tree->GetLsn(Key(i)).ok());
  RequireCheck(tree.get());
  for (uint64_t i = 0; i < n; i += keep) {
    auto got = tree->Get(Key(i));
    REQUIRE(got.ok());
    CHECK(got->value == ValueOf(i));
  }
  const BwTree::Stats s = tree->GetStats();
  INFO("height " << height << " -> " << s.height << ", inner merges " << s.inner_merges
                 << ", root collapses " << s.root_collapses << ", helped " << s.helped_smos);
  CHECK(s.inner_merges > 0);
  // Not the height: racing threads lose some restructures (counted as
  // failed, left to the next write), so whether the last level above the
  // leaves goes down to one page varies from run to run; the single-threaded
  // tests above require the height to shrink.
  CHECK(s.height <= height);
}

}  // namespace
}  // namespace deuteron::bwtree
