// Range scans of the Bw-tree: every combination of bounds and direction,
// empty ranges and single keys, random scans over many leaves, long runs of
// deleted keys, and iterators that live across writes.
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

// Keys 10, 20, ..., 500 with every 7th deleted (tombstones among them), over
// small nodes: many leaves.
Model ScanData(Fixture* f) {
  Model m;
  uint64_t lsn = 0;
  for (uint64_t i = 10; i <= 500; i += 10) {
    Write(f->tree.get(), &m, WriteKind::kInsert, Key(i), "v" + std::to_string(i), ++lsn);
  }
  for (uint64_t i = 70; i <= 500; i += 70) {
    Write(f->tree.get(), &m, WriteKind::kDelete, Key(i), "", ++lsn);
  }
  return m;
}

TEST_CASE("Scans honour every combination of bounds and direction", "[dc][bwtree]") {
  Fixture f(SmallNodeOptions());
  const Model m = ScanData(&f);
  // Bounds below, at, between, inside and above the data; a deleted key; a
  // prefix of every key; a key right after an existing one.
  const std::vector<std::string> bounds = {
      "a",      "k",      Key(0),   Key(10),  Key(15),  Key(70), Key(250),
      Key(250) + std::string("\0", 1),    Key(255), Key(490), Key(500), Key(999), "l"};
  int scans = 0;
  for (int lo = -1; lo < static_cast<int>(bounds.size()); ++lo) {
    for (int hi = -1; hi < static_cast<int>(bounds.size()); ++hi) {
      for (int flags = 0; flags < 8; ++flags) {
        ScanOptions o;
        if (lo >= 0) o.lower = bounds[lo];
        if (hi >= 0) o.upper = bounds[hi];
        o.lower_inclusive = (flags & 1) != 0;
        o.upper_inclusive = (flags & 2) != 0;
        o.reverse = (flags & 4) != 0;
        if ((lo < 0 && (flags & 1) == 0) || (hi < 0 && (flags & 2) != 0)) continue;
        INFO("scan " << Describe(o));
        const std::string want = Describe(m.Scan(o));
        REQUIRE(ScanText(f.tree.get(), o) == want);
        ++scans;
      }
    }
  }
  CHECK(scans > 1000);
  CHECK(f.tree->GetStats().height >= 2);
  RequireCheck(f.tree.get());
}

TEST_CASE("Scans bounded by the empty key", "[dc][bwtree]") {
  // "" is below every key: (-inf, "") and ["", "") are empty, ["", ""] holds
  // only the empty key (absent here), ("", +inf) and ["", +inf) hold all.
  Fixture f(SmallNodeOptions());
  const Model m = ScanData(&f);
  for (int flags = 0; flags < 16; ++flags) {
    ScanOptions o;
    if ((flags & 1) != 0) {
      o.lower = "";
      o.lower_inclusive = (flags & 2) != 0;
    } else {
      o.upper = "";
      o.upper_inclusive = (flags & 2) != 0;
    }
    o.reverse = (flags & 4) != 0;
    if ((flags & 8) != 0) {
      if (o.lower) {
        o.upper = "";
      } else {
        o.lower = "";
      }
    }
    INFO("scan " << Describe(o));
    std::vector<Item> got;
    Status s = test::TryScan(f.tree.get(), o, &got);
    INFO(s.ToString());
    CHECK(s.ok());
    CHECK(Describe(got) == Describe(m.Scan(o)));
  }
}

TEST_CASE("Scans of empty ranges and single keys", "[dc][bwtree]") {
  Fixture f(SmallNodeOptions());
  const Model m = ScanData(&f);
  for (bool reverse : {false, true}) {
    INFO("reverse " << reverse);
    ScanOptions o;
    o.reverse = reverse;
    // lower > upper
    o.lower = Key(300);
    o.upper = Key(200);
    CHECK(ScanText(f.tree.get(), o).empty());
    // lower == upper: empty unless both ends are inclusive.
    o.lower = Key(200);
    o.upper = Key(200);
    CHECK(ScanText(f.tree.get(), o).empty());
    o.upper_inclusive = true;
    CHECK(ScanText(f.tree.get(), o) == "k000200=v200@20\n");
    o.lower_inclusive = false;
    CHECK(ScanText(f.tree.get(), o).empty());
    // A range holding only a deleted key.
    o.lower = Key(61);
    o.upper = Key(79);
    o.lower_inclusive = true;
    CHECK(ScanText(f.tree.get(), o).empty());
    // Ranges wholly outside the data.
    o.lower = Key(0);
    o.upper = Key(9);
    CHECK(ScanText(f.tree.get(), o).empty());
    o.lower = Key(501);
    o.upper.reset();
    CHECK(ScanText(f.tree.get(), o).empty());
  }
}

TEST_CASE("Random scans across many leaves match the model", "[dc][bwtree]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rnd(seed);
  Fixture f(PurgeAll(SmallNodeOptions()));
  Model m;
  uint64_t lsn = 0;
  for (int i = 0; i < 800; ++i) {
    const std::string key = Key(rnd.Uniform(1000));
    ++lsn;
    if (rnd.OneIn(5)) {
      Write(f.tree.get(), &m, WriteKind::kBlindDelete, key, "", lsn);
    } else {
      Write(f.tree.get(), &m, WriteKind::kUpsert, key, std::to_string(lsn), lsn);
    }
  }
  RequireSame(f.tree.get(), m, kAll);
  for (int i = 0; i < 100; ++i) {
    ScanOptions o;
    if (!rnd.OneIn(6)) o.lower = Key(rnd.Uniform(1050));
    if (!rnd.OneIn(6)) o.upper = Key(rnd.Uniform(1050));
    o.lower_inclusive = rnd.OneIn(2);
    o.upper_inclusive = rnd.OneIn(2);
    o.reverse = rnd.OneIn(2);
    INFO("scan " << Describe(o));
    REQUIRE(ScanText(f.tree.get(), o) == Describe(m.Scan(o)));
  }
  CHECK(f.tree->GetStats().height >= 3);
  RequireCheck(f.tree.get());
}

TEST_CASE("Scans cross long runs of deleted keys", "[dc][bwtree]") {
  BwTreeOptions o = SmallNodeOptions();
  uint64_t purge_below = 0;
  SECTION("tombstones kept") {}
  SECTION("tombstones purged, leaves merged") {
    o = PurgeAll(o);
    purge_below = kAll;
  }
  Fixture f(o);
  BwTree* t = f.tree.get();
  Model m;
  uint64_t lsn = 0;
  for (uint64_t i = 0; i < 1200; ++i) {
    Write(t, &m, WriteKind::kInsert, Key(i), "v" + std::to_string(i), ++lsn);
  }
  for (uint64_t i = 100; i < 1100; ++i) Write(t, &m, WriteKind::kDelete, Key(i), "", ++lsn);
  RequireCheck(t);
  auto scan = [&](std::optional<std::string> lower, std::optional<std::string> upper,
                  bool reverse) {
    ScanOptions s;
    s.lower = std::move(lower);
    s.upper = std::move(upper);
    s.reverse = reverse;
    INFO("scan " << Describe(s));
    const std::vector<Item> got = ScanItems(t, s);
    CHECK(Describe(got) == Describe(m.Scan(s)));
    return got.size();
  };
  for (bool reverse : {false, true}) {
    CHECK(scan(std::nullopt, std::nullopt, reverse) == 200);
    CHECK(scan(Key(150), Key(1050), reverse) == 0);     // only deleted keys
    CHECK(scan(Key(500), std::nullopt, reverse) == 100);  // starts inside the run
    CHECK(scan(std::nullopt, Key(500), reverse) == 100);  // ends inside the run
    CHECK(scan(Key(50), Key(1150), reverse) == 100);
  }
  // A run at the end and one at the start as well.
  for (uint64_t i = 1100; i < 1200; ++i) Write(t, &m, WriteKind::kDelete, Key(i), "", ++lsn);
  for (uint64_t i = 0; i < 50; ++i) Write(t, &m, WriteKind::kDelete, Key(i), "", ++lsn);
  for (bool reverse : {false, true}) {
    CHECK(scan(std::nullopt, std::nullopt, reverse) == 50);
    CHECK(scan(Key(100), std::nullopt, reverse) == 0);
    CHECK(scan(std::nullopt, Key(50), reverse) == 0);
  }
  RequireSame(t, m, purge_below);
  RequireCheck(t);
  if (purge_below != 0) CHECK(t->GetStats().merges > 0);
  // Everything deleted: scans end at once.
  for (uint64_t i = 50; i < 100; ++i) Write(t, &m, WriteKind::kDelete, Key(i), "", ++lsn);
  for (bool reverse : {false, true}) CHECK(scan(std::nullopt, std::nullopt, reverse) == 0);
  RequireSame(t, m, purge_below);
  RequireCheck(t);
}

// A scan that writes between its Next() calls: keys ahead and behind are
// inserted, updated and deleted, enough to split and merge the leaves the
// iterator is crossing. Untouched keys must all be seen with their values;
// every key seen at most once, in order, in range, with a value it held
// during the scan.
void ScanWhileWriting(uint64_t seed, ScanOptions o) {
  INFO("seed " << seed << ", scan " << Describe(o));
  Random64 rnd(seed);
  Fixture f(PurgeAll(SmallNodeOptions()));
  BwTree* t = f.tree.get();
  Model m;
  uint64_t lsn = 0;
  std::map<std::string, std::set<std::string>> versions;  // values held during the scan
  for (uint64_t i = 0; i < 600; i += 2) {
    Write(t, &m, WriteKind::kInsert, Key(i), "v" + std::to_string(i), ++lsn);
    versions[Key(i)].insert("v" + std::to_string(i));
  }
  std::set<std::string> touched;
  auto it_or = t->Scan(o);
  REQUIRE(it_or.ok());
  std::unique_ptr<Iterator> it = std::move(it_or).value();
  std::vector<std::string> seen;
  int writes = 0;
  for (; it->Valid(); it->Next()) {
    const std::string key = it->key().ToString();
    INFO("at " << key << " after " << seen.size() << " keys, the last "
               << (seen.empty() ? std::string("none") : seen.back()));
    REQUIRE(test::InRange(o, key));
    if (!seen.empty()) REQUIRE((o.reverse ? key < seen.back() : key > seen.back()));
    REQUIRE(versions[key].count(it->value().ToString()) == 1);
    seen.push_back(key);
    for (int w = 0; w < 4; ++w) {
      const std::string k = Key(rnd.Uniform(620));
      touched.insert(k);
      const uint64_t r = rnd.Uniform(10);
      const std::string value = "w" + std::to_string(lsn + 1);
      if (r < 4) {
        Write(t, &m, WriteKind::kUpsert, k, value, ++lsn);
        versions[k].insert(value);
      } else {
        Write(t, &m, WriteKind::kBlindDelete, k, "", ++lsn);
      }
      ++writes;
    }
  }
  REQUIRE(it->status().ok());
  for (const auto& [key, values] : versions) {
    if (touched.count(key) != 0 || !test::InRange(o, key)) continue;
    INFO("untouched key " << key);
    CHECK(std::find(seen.begin(), seen.end(), key) != seen.end());
  }
  CHECK(writes > 100);
  const BwTree::Stats s = t->GetStats();
  CHECK(s.splits + s.merges > 0);
  RequireSame(t, m, kAll);
  RequireCheck(t);
}

TEST_CASE("An iterator survives writes between its Next() calls", "[dc][bwtree]") {
  const uint64_t seed = TestSeed();
  ScanOptions o;
  SECTION("forward") { ScanWhileWriting(seed, o); }
  SECTION("reverse") {
    o.reverse = true;
    ScanWhileWriting(seed, o);
  }
  SECTION("bounded forward") {
    o.lower = Key(101);
    o.upper = Key(500);
    o.upper_inclusive = true;
    ScanWhileWriting(seed, o);
  }
  SECTION("bounded reverse") {
    o.lower = Key(100);
    o.lower_inclusive = false;
    o.upper = Key(501);
    o.reverse = true;
    ScanWhileWriting(seed, o);
  }
}

TEST_CASE("An iterator whose remaining keys are deleted ends cleanly", "[dc][bwtree]") {
  Fixture f(PurgeAll(SmallNodeOptions()));
  BwTree* t = f.tree.get();
  Model m;
  uint64_t lsn = 0;
  for (uint64_t i = 0; i < 300; ++i) Write(t, &m, WriteKind::kInsert, Key(i), "v", ++lsn);
  for (bool reverse : {false, true}) {
    ScanOptions o;
    o.reverse = reverse;
    auto it = t->Scan(o);
    REQUIRE(it.ok());
    REQUIRE((*it)->Valid());
    const std::string first = (*it)->key().ToString();
    CHECK(first == (reverse ? Key(299) : Key(0)));
    // Delete everything: the iterator's copy of the first leaf may still
    // hold keys, but past it nothing remains.
    for (uint64_t i = 0; i < 300; ++i) Write(t, &m, WriteKind::kDelete, Key(i), "", ++lsn);
    size_t more = 0;
    std::string last = first;
    for ((*it)->Next(); (*it)->Valid(); (*it)->Next()) {
      const std::string key = (*it)->key().ToString();
      CHECK((reverse ? key < last : key > last));
      last = key;
      ++more;
    }
    REQUIRE((*it)->status().ok());
    CHECK(more < 20);
    for (uint64_t i = 0; i < 300; ++i) Write(t, &m, WriteKind::kInsert, Key(i), "w", ++lsn);
  }
  RequireSame(t, m, kAll);
  RequireCheck(t);
}

}  // namespace
}  // namespace deuteron::bwtree
