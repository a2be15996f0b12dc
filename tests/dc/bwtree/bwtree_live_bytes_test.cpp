// LLAMA's live bytes (dc/llama/llama.md, "Live bytes") under the Bw-tree's
// own changes: inserts flushed as they go, splits, deletes down to one key
// in twenty, the consolidations and leaf and inner merges they cause (system
// transactions that free pages), cleaning. The count must equal a recount of
// every page's LSS state (Llama::RecountLiveBytes) after each phase.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "common/random.h"
#include "dc/bwtree/bwtree.h"
#include "tests/dc/bwtree/bwtree_test_util.h"

namespace deuteron::bwtree {
namespace {

using test::Key;
using test::kAll;
using test::OpenLlama;
using test::OpenTree;
using test::RequireCheck;
using test::TestOptions;
using test::TreeLlamaOptions;

void CheckLiveBytes(llama::Llama* l) {
  auto recount = l->RecountLiveBytes();
  INFO(recount.status().ToString());
  REQUIRE(recount.ok());
  CHECK(l->GetStats().live_bytes == *recount);
}

TEST_CASE("Live bytes follow the Bw-tree's flushes, splits, merges and cleaning",
          "[bwtree][livebytes]") {
  const uint64_t seed = GENERATE(1, 2);
  INFO("seed " << seed);
  auto env = NewMemEnv();
  llama::LlamaOptions lo = TreeLlamaOptions();
  lo.mapping.max_pages = 1 << 20;
  lo.max_lss_chain = 4;
  auto l = OpenLlama(env.get(), lo);
  BwTreeOptions o = TestOptions();
  o.leaf_max_records = 12;
  o.inner_max_entries = 12;
  o.leaf_merge_records = 3;
  o.inner_merge_entries = 3;
  o.purge_bound = [] { return kAll; };
  auto tree = OpenTree(l.get(), o);
  constexpr uint64_t kKeys = 3000;
  Random64 rnd(seed);
  std::vector<uint64_t> order(kKeys);
  for (uint64_t i = 0; i < kKeys; ++i) order[i] = i;
  auto shuffle = [&] {
    for (uint64_t i = kKeys; i > 1; --i) std::swap(order[i - 1], order[rnd.Uniform(i)]);
  };
  uint64_t lsn = 0;
  auto flush_now_and_then = [&] {
    if (lsn % 150 == 0) REQUIRE(tree->FlushAll(lsn).ok());
    if (lsn % 1000 == 0) {
      auto c = l->Clean(1);
      INFO(c.status().ToString());
      REQUIRE(c.ok());
    }
  };
  shuffle();
  for (uint64_t i : order) {
    REQUIRE(tree->Insert(Key(i), std::string(40, 'v'), ++lsn).ok());
    flush_now_and_then();
  }
  REQUIRE(tree->FlushAll(lsn).ok());
  CheckLiveBytes(l.get());
  shuffle();
  for (uint64_t i : order) {
    if (i % 20 == 0) continue;
    REQUIRE(tree->Delete(Key(i), ++lsn).ok());
    flush_now_and_then();
  }
  // Reads consolidate the leaves the deletes left with tombstones, which
  // then merge.
  for (int pass = 0; pass < 2; ++pass) {
    for (uint64_t i = 0; i < kKeys; ++i) REQUIRE(tree->GetLsn(Key(i)).ok());
  }
  REQUIRE(tree->FlushAll(lsn).ok());
  auto c = l->Clean(4);
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  RequireCheck(tree.get());
  CheckLiveBytes(l.get());
  const BwTree::Stats s = tree->GetStats();
  CHECK(s.merges > 0);
  CHECK(l->GetStats().txn_commits > 0);
}

}  // namespace
}  // namespace deuteron::bwtree
