// Single-threaded tests of the Bw-tree's public interface: the write kinds'
// existence rules, LSNs kept per record, size limits, reopening, structure
// changes (splits, root splits, merges) with Check, and the ESL rule across a
// crash. Scans: bwtree_scan_test.cpp; hand-built mid-merge states:
// bwtree_merge_window_test.cpp.
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

TEST_CASE("An empty tree finds nothing", "[dc][bwtree]") {
  Fixture f;
  RequireAbsent(f.tree.get(), "a", 0);
  RequireAbsent(f.tree.get(), Key(1), 0);
  CHECK(ScanText(f.tree.get()).empty());
  ScanOptions reverse;
  reverse.reverse = true;
  CHECK(ScanText(f.tree.get(), reverse).empty());
  RequireCheck(f.tree.get());
  const BwTree::Stats s = f.tree->GetStats();
  CHECK(s.height == 1);
  CHECK(s.splits == 0);
  // An empty tree survives a reopen, and Open does not bootstrap it twice.
  f.Reopen();
  RequireAbsent(f.tree.get(), "a", 0);
  RequireCheck(f.tree.get());
}

TEST_CASE("Open rejects a store whose page 1 is not a Bw-tree meta page", "[dc][bwtree]") {
  auto env = NewMemEnv();
  auto l = OpenLlama(env.get(), TreeLlamaOptions());
  const PageId pid = llama::test::CreatePage(l.get(), "not a meta page", 0, kAll);
  REQUIRE(pid == 1);
  auto r = BwTree::Open(l.get(), TestOptions());
  INFO(r.status().ToString());
  CHECK(r.status().IsCorruption());
}

TEST_CASE("Open rejects options the tree cannot keep", "[dc][bwtree]") {
  auto env = NewMemEnv();
  auto l = OpenLlama(env.get(), TreeLlamaOptions());
  const BwTreeOptions good = SmallNodeOptions();
  REQUIRE(BwTree::ValidateOptions(good).ok());
  REQUIRE(BwTree::ValidateOptions(BwTreeOptions{}).ok());
  struct Case {
    const char* what;
    void (*change)(BwTreeOptions*);
  };
  const Case cases[] = {
      {"max_key_size", [](BwTreeOptions* o) { o->limits.max_key_size = 0; }},
      {"leaf_max_records", [](BwTreeOptions* o) { o->leaf_max_records = 1; }},
      {"inner_max_entries", [](BwTreeOptions* o) { o->inner_max_entries = 1; }},
      {"node_max_bytes", [](BwTreeOptions* o) { o->node_max_bytes = 1023; }},
      {"leaf_merge_records", [](BwTreeOptions* o) { o->leaf_merge_records = o->leaf_max_records / 2; }},
  };
  for (const Case& c : cases) {
    BwTreeOptions o = good;
    c.change(&o);
    auto r = BwTree::Open(l.get(), o);
    INFO(c.what << ": " << r.status().ToString());
    CHECK(r.status().IsInvalidArgument());
    CHECK(r.status().ToString().find(c.what) != std::string::npos);
  }
  // Nothing was bootstrapped by the rejected opens: a valid one creates the tree.
  auto t = BwTree::Open(l.get(), good);
  REQUIRE(t.ok());
  RequireCheck(t->get());
}

// A split writes the page and its new sibling in one LSS record: a node
// limit the store's records cannot hold would make a split fail TooLarge
// long after Open, and the page could then never split.
TEST_CASE("Open holds node_max_bytes to what the store's LSS records hold", "[dc][bwtree]") {
  auto env = NewMemEnv();
  llama::LlamaOptions small = TreeLlamaOptions();  // 64 KiB buffers
  auto l = OpenLlama(env.get(), small);
  const size_t record = l->MaxRecordBytes();
  CHECK(record == small.lss.buffer_size - 64);
  const size_t limit = BwTree::NodeBytesLimit(record);
  REQUIRE(limit > 1024);
  REQUIRE(limit < (64u << 10));
  CHECK(3 * limit + 4 * llama::kRecordHeaderSize <= record);

  // Above the limit: InvalidArgument naming the option and the limit.
  BwTreeOptions o = SmallNodeOptions();
  o.node_max_bytes = limit + 1;
  REQUIRE(BwTree::ValidateOptions(o).ok());  // only the store rules it out
  auto r = BwTree::Open(l.get(), o);
  INFO(r.status().ToString());
  CHECK(r.status().IsInvalidArgument());
  CHECK(r.status().ToString().find("node_max_bytes (" + std::to_string(limit + 1) +
                                   ") must be at most " + std::to_string(limit)) !=
        std::string::npos);

  // At the limit it opens; the default (0) resolves to the limit here.
  o.node_max_bytes = limit;
  REQUIRE(BwTree::Open(l.get(), o).ok());
  o.node_max_bytes = 0;
  auto t = BwTree::Open(l.get(), o);
  REQUIRE(t.ok());
  CHECK((*t)->options().node_max_bytes == limit);

  // With the LSS's default buffers the default is 64 KiB, raised to one
  // record at the default limits (4 KiB keys, 64 KiB values, 48 bytes of
  // encoding).
  auto env2 = NewMemEnv();
  llama::LlamaOptions big = TreeLlamaOptions();
  big.lss.buffer_size = llama::LssOptions().buffer_size;
  big.lss.segment_size = 2 * big.lss.buffer_size;
  auto l2 = OpenLlama(env2.get(), big);
  auto t2 = BwTree::Open(l2.get(), BwTreeOptions{});
  REQUIRE(t2.ok());
  CHECK((*t2)->options().node_max_bytes == 4096 + (64u << 10) + 48);
}

// A leaf is sized after each consolidation, so it may take
// leaf_delta_threshold + 1 records past node_max_bytes before its split
// writes it whole, with its sibling, in one LSS record. Limits whose records
// cannot fit that way would let a write succeed and the page's split then
// fail TooLarge, and the page could never be flushed: Open refuses them.
TEST_CASE("Open holds the key and value limits to what the store's LSS records hold",
          "[dc][bwtree]") {
  auto env = NewMemEnv();
  auto l = OpenLlama(env.get(), TreeLlamaOptions());  // 64 KiB buffers
  const size_t limit = BwTree::NodeBytesLimit(l->MaxRecordBytes());

  // The default limits (64 KiB values) do not fit 64 KiB buffers at all.
  {
    auto r = BwTree::Open(l.get(), BwTreeOptions{});
    INFO(r.status().ToString());
    CHECK(r.status().IsInvalidArgument());
    CHECK(r.status().ToString().find("65536-byte values") != std::string::npos);
    CHECK(r.status().ToString().find("raise buffer_size") != std::string::npos);
  }
  // Values of 8000 bytes need a node of one such record (8064 bytes) with
  // room for 5 more: more than 1.5 * limit (32,640 bytes).
  BwTreeOptions o;
  o.limits.max_key_size = 16;
  o.limits.max_value_size = 8000;
  CHECK(BwTree::NodeBytesRoom(o) == 5 * (16 + 8000 + 48));
  {
    auto r = BwTree::Open(l.get(), o);
    INFO(r.status().ToString());
    CHECK(r.status().IsInvalidArgument());
    CHECK(r.status().ToString().find("a node of 8064 bytes") != std::string::npos);
  }
  // 4000-byte values leave room for smaller nodes than the store's limit:
  // the default resolves to what is left, and node_max_bytes outside
  // [one record, what is left] is refused, naming the bound.
  o.limits.max_value_size = 4000;
  const size_t room = BwTree::NodeBytesRoom(o);
  REQUIRE(room < limit + limit / 2);
  const size_t max_node = limit + limit / 2 - room;
  REQUIRE(max_node < limit);
  const auto refused = [&](size_t node, const std::string& what) {
    o.node_max_bytes = node;
    auto r = BwTree::Open(l.get(), o);
    INFO(r.status().ToString());
    CHECK(r.status().IsInvalidArgument());
    CHECK(r.status().ToString().find(what) != std::string::npos);
  };
  refused(max_node + 1, "node_max_bytes (" + std::to_string(max_node + 1) +
                            ") must be at most " + std::to_string(max_node));
  refused(4063, "node_max_bytes (4063) must be at least 4064");
  // Nothing was bootstrapped by the refused opens. With the default node
  // size, values at the limit split and flush: every split's record fits.
  o.node_max_bytes = 0;
  auto t = OpenTree(l.get(), PurgeAll(o));
  CHECK(t->options().node_max_bytes == max_node);
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rnd(seed);
  Model m;
  for (uint64_t lsn = 1; lsn <= 600; ++lsn) {
    // Half the values at the limit, the rest of any size, so that a split
    // by count can give one half most of the bytes.
    const size_t size = rnd.OneIn(2) ? 4000 : rnd.Uniform(4001);
    Write(t.get(), &m, WriteKind::kUpsert, Key(rnd.Uniform(100)),
          std::string(size, static_cast<char>('a' + lsn % 26)), lsn);
  }
  CHECK(t->GetStats().splits >= 10);
  REQUIRE(t->FlushAll(kAll).ok());
  RequireSame(t.get(), m, kAll);
  RequireCheck(t.get());
}

TEST_CASE("Write kinds follow their existence rules", "[dc][bwtree]") {
  // The same script on a plain tree and on one that consolidates after
  // every delta, so each rule is checked over deltas and over bases.
  BwTreeOptions o = TestOptions();
  SECTION("default nodes") {}
  SECTION("consolidating constantly") {
    o = SmallNodeOptions();
    o.leaf_delta_threshold = 1;
  }
  Fixture f(o);
  BwTree* t = f.tree.get();
  Model m;
  Write(t, &m, WriteKind::kInsert, "a", "1", 10);
  RequireFound(t, "a", "1", 10);
  Write(t, &m, WriteKind::kInsert, "a", "2", 11);  // AlreadyExists
  RequireFound(t, "a", "1", 10);
  Write(t, &m, WriteKind::kUpdate, "b", "x", 12);  // NotFound
  RequireAbsent(t, "b", 0);
  Write(t, &m, WriteKind::kUpdate, "a", "3", 13);
  RequireFound(t, "a", "3", 13);
  Write(t, &m, WriteKind::kUpsert, "b", "4", 14);
  RequireFound(t, "b", "4", 14);
  Write(t, &m, WriteKind::kUpsert, "b", "5", 15);
  RequireFound(t, "b", "5", 15);
  Write(t, &m, WriteKind::kDelete, "c", "", 16);  // NotFound
  RequireAbsent(t, "c", 0);
  Write(t, &m, WriteKind::kDelete, "a", "", 17);
  RequireAbsent(t, "a", 17);  // the tombstone keeps the delete's LSN
  Write(t, &m, WriteKind::kDelete, "a", "", 18);  // NotFound: already deleted
  RequireAbsent(t, "a", 17);
  Write(t, &m, WriteKind::kUpdate, "a", "6", 19);  // NotFound
  RequireAbsent(t, "a", 17);
  Write(t, &m, WriteKind::kInsert, "a", "7", 20);  // a tombstone is absent
  RequireFound(t, "a", "7", 20);
  Write(t, &m, WriteKind::kBlindDelete, "d", "", 21);  // blind: no check
  RequireAbsent(t, "d", 21);
  Write(t, &m, WriteKind::kBlindDelete, "a", "", 22);
  RequireAbsent(t, "a", 22);
  Write(t, &m, WriteKind::kUpsert, "d", "", 23);  // an empty value is not a tombstone
  RequireFound(t, "d", "", 23);
  Write(t, &m, WriteKind::kInsert, "d", "8", 24);  // AlreadyExists: "" is a value
  Write(t, &m, WriteKind::kUpdate, "d", "9", 25);
  RequireFound(t, "d", "9", 25);
  // The convenience wrappers are the same writes.
  CHECK(test::IsAlreadyExists(t->Insert("d", "x", 26)));
  CHECK(t->Update("e", "x", 27).IsNotFound());
  CHECK(t->Delete("e", 28).IsNotFound());
  REQUIRE(t->Upsert("e", "10", 29).ok());
  REQUIRE(m.Apply(WriteKind::kUpsert, "e", "10", 29) == Expect::kOk);
  REQUIRE(t->Delete("e", 30).ok());
  REQUIRE(m.Apply(WriteKind::kDelete, "e", "", 30) == Expect::kOk);
  CHECK(ScanText(t) == "b=5@15\nd=9@25\n");
  RequireSame(t, m);
  RequireCheck(t);
  f.Reopen();
  t = f.tree.get();
  RequireSame(t, m);
  RequireAbsent(t, "a", 22);
  RequireCheck(t);
}

// Blind upserts and deletes skip the record search (they need only the
// page); a conditional write must still see the LSNs they left, over deltas
// and over bases.
TEST_CASE("Conditional writes see the LSNs of blind writes", "[dc][bwtree]") {
  BwTreeOptions o = TestOptions();
  SECTION("default nodes") {}
  SECTION("consolidating constantly") {
    o = SmallNodeOptions();
    o.leaf_delta_threshold = 1;
  }
  Fixture f(o);
  BwTree* t = f.tree.get();
  for (int i = 0; i < 40; ++i) {
    const std::string key = "k" + std::to_string(i);
    REQUIRE(t->Upsert(key, "v", 100 + i).ok());
    if (i % 3 == 0) REQUIRE(t->Write(WriteKind::kBlindDelete, key, "", 200 + i).ok());
  }
  for (int i = 0; i < 40; ++i) {
    INFO("key " << i);
    const std::string key = "k" + std::to_string(i);
    const uint64_t held = i % 3 == 0 ? 200 + i : 100 + i;
    Result<bool> stale = t->WriteIfNewer(false, key, "old", held);
    REQUIRE(stale.ok());
    CHECK_FALSE(*stale);
    Result<bool> newer = t->WriteIfNewer(false, key, "new", held + 1000);
    REQUIRE(newer.ok());
    CHECK(*newer);
    RequireFound(t, key, "new", held + 1000);
  }
  RequireCheck(t);
}

TEST_CASE("Keys and values are bytes ordered bytewise", "[dc][bwtree]") {
  Fixture f(SmallNodeOptions());
  BwTree* t = f.tree.get();
  Model m;
  const std::vector<std::string> keys = {
      std::string("\0", 1), std::string("\0\0", 2), std::string("a\0", 2), "a", "ab",
      std::string("a\xff", 2), "b", std::string("\x7f", 1), std::string("\x80", 1),
      std::string("\xff", 1), std::string("\xff\xff\xff", 3), "B", "aa", "a b"};
  uint64_t lsn = 1;
  for (const std::string& k : keys) {
    Write(t, &m, WriteKind::kInsert, k, k + std::string("\0\xff", 2) + k, lsn++);
  }
  RequireSame(t, m);
  RequireCheck(t);
  std::vector<std::string> sorted = keys;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::string> got;
  for (const Item& i : ScanItems(t)) got.push_back(i.key);
  CHECK(got == sorted);
}

TEST_CASE("Every record keeps its own LSN through consolidations and splits", "[dc][bwtree]") {
  Fixture f(SmallNodeOptions());
  BwTree* t = f.tree.get();
  Model m;
  // LSNs out of key order (as operations on different keys arrive), some
  // over 32 bits, and rewrites with smaller LSNs than their neighbours'.
  for (uint64_t i = 0; i < 200; ++i) {
    const uint64_t lsn = i % 3 == 0 ? (1ull << 40) + 1000 - i : 1000 - i;
    Write(t, &m, WriteKind::kInsert, Key(i), "v" + std::to_string(i), lsn);
  }
  // Later writes of a key carry larger LSNs (per-key order is the log's).
  for (uint64_t i = 0; i < 200; i += 7) {
    Write(t, &m, WriteKind::kUpdate, Key(i), "u" + std::to_string(i), (1ull << 41) + 200 - i);
  }
  for (uint64_t i = 3; i < 200; i += 11) {
    Write(t, &m, WriteKind::kDelete, Key(i), "", (1ull << 42) + 200 - i);
  }
  Write(t, &m, WriteKind::kUpsert, Key(500), "big", ~0ull - 1);
  RequireSame(t, m);
  RequireCheck(t);
  CHECK(t->GetStats().splits > 0);
  f.Reopen();
  RequireSame(f.tree.get(), m);
}

TEST_CASE("Writes of keys and values over the limits are TooLarge", "[dc][bwtree]") {
  BwTreeOptions o;
  o.limits.max_key_size = 16;
  o.limits.max_value_size = 32;
  Fixture f(o);
  BwTree* t = f.tree.get();
  const std::string key16(16, 'k'), key17(17, 'k');
  const std::string value32(32, 'v'), value33(33, 'v');
  auto too_large = [](const Status& s) {
    INFO(s.ToString());
    return s.code() == Code::kTooLarge;
  };
  REQUIRE(t->Insert(key16, value32, 1).ok());
  RequireFound(t, key16, value32, 1);
  CHECK(too_large(t->Insert(key17, "v", 2)));
  CHECK(too_large(t->Upsert(key17, "v", 3)));
  CHECK(too_large(t->Update(key17, "v", 4)));
  CHECK(too_large(t->Delete(key17, 5)));
  CHECK(too_large(t->Write(WriteKind::kBlindDelete, key17, "", 6)));
  CHECK(too_large(t->Insert("x", value33, 7)));
  CHECK(too_large(t->Upsert(key16, value33, 8)));
  CHECK(too_large(t->Update(key16, value33, 9)));
  // Nothing was written by the rejected calls.
  RequireFound(t, key16, value32, 1);
  RequireAbsent(t, "x", 0);
  CHECK(ScanText(t) == key16 + "=" + value32 + "@1\n");
  // Scan bounds over the key limit are TooLarge too.
  ScanOptions s;
  s.lower = key17;
  CHECK(too_large(t->Scan(s).status()));
  ScanOptions u;
  u.upper = key17;
  CHECK(too_large(t->Scan(u).status()));
  RequireCheck(t);
}

TEST_CASE("A reopened tree finds what was flushed", "[dc][bwtree]") {
  LlamaOptions lo = TreeLlamaOptions();
  SECTION("closing with a checkpoint") {}
  SECTION("recovering from the LSS alone") { lo.checkpoint_on_close = false; }
  Fixture f(PurgeAll(SmallNodeOptions()), lo);
  Model m;
  Random64 rnd(42);
  uint64_t lsn = 0;
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    for (int i = 0; i < 400; ++i) {
      const std::string key = Key(rnd.Uniform(300));
      ++lsn;
      if (rnd.OneIn(4)) {
        Write(f.tree.get(), &m, WriteKind::kBlindDelete, key, "", lsn);
      } else {
        Write(f.tree.get(), &m, WriteKind::kUpsert, key, "r" + std::to_string(lsn), lsn);
      }
    }
    const uint32_t height = f.tree->GetStats().height;
    CHECK(height >= 2);
    f.Reopen();
    RequireSame(f.tree.get(), m, kAll);
    RequireCheck(f.tree.get());
    // The reopened tree has the same shape; its counters start over.
    CHECK(f.tree->GetStats().height == height);
  }
}

TEST_CASE("Splits and merges happen and keep the tree sound", "[dc][bwtree]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rnd(seed);
  std::vector<uint64_t> order(800);
  for (uint64_t i = 0; i < order.size(); ++i) order[i] = i;
  SECTION("ascending") {}
  SECTION("descending") { std::reverse(order.begin(), order.end()); }
  SECTION("random") {
    for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rnd.Uniform(i + 1)]);
  }
  Fixture f(PurgeAll(SmallNodeOptions()));
  BwTree* t = f.tree.get();
  Model m;
  uint64_t lsn = 0;
  uint32_t height = t->GetStats().height;
  CHECK(height == 1);
  for (size_t i = 0; i < order.size(); ++i) {
    Write(t, &m, WriteKind::kInsert, Key(order[i]), "v" + std::to_string(order[i]), ++lsn);
    const uint32_t h = t->GetStats().height;
    REQUIRE(h >= height);  // the tree never shrinks while growing
    height = h;
    if (i % 400 == 399) RequireCheck(t);
  }
  BwTree::Stats s = t->GetStats();
  INFO("splits " << s.splits << " root splits " << s.root_splits << " height " << s.height);
  CHECK(s.splits > 100);
  CHECK(s.root_splits >= 3);
  CHECK(s.height >= 4);
  CHECK(s.consolidations > 0);
  CHECK(s.index_posts > 0);
  RequireSame(t, m, kAll);
  RequireCheck(t);
  // Delete 95% (in the same order): leaves empty out and merge.
  for (size_t i = 0; i < order.size(); ++i) {
    if (i % 20 == 0) continue;
    Write(t, &m, WriteKind::kDelete, Key(order[i]), "", ++lsn);
    if (i % 400 == 399) RequireCheck(t);
  }
  s = t->GetStats();
  INFO("merges " << s.merges << " pages freed " << s.pages_freed);
  CHECK(s.merges > 20);
  CHECK(s.pages_freed > 0);
  // Each merge ends with the left page's consolidation, which frees the
  // removed page: none waits for a later write to its left neighbour.
  CHECK(s.pages_freed == s.merges);
  RequireSame(t, m, kAll);
  RequireCheck(t);
  // And grow again over the merged leaves.
  for (uint64_t i = 0; i < order.size(); i += 3) {
    Write(t, &m, WriteKind::kUpsert, Key(i), "again", ++lsn);
  }
  RequireSame(t, m, kAll);
  RequireCheck(t);
  f.Reopen();
  RequireSame(f.tree.get(), m, kAll);
  RequireCheck(f.tree.get());
}

// Keys appended at the right edge (ascending, as LSNs grow) split the
// rightmost leaf 7/8 : 1/8, since no key will come below its records, so
// leaves end up nearly full instead of half. That holds when the split meets
// deltas kept above the ESL too (the chain, not a lone base, is split).
TEST_CASE("Appends at the right edge fill leaves, with deltas above the ESL or without",
          "[dc][bwtree]") {
  const bool lag = GENERATE(false, true);
  INFO("deltas kept above the ESL: " << lag);
  std::atomic<uint64_t> esl{0};
  BwTreeOptions o = TestOptions();
  o.leaf_max_records = 32;
  o.leaf_merge_records = 4;
  o.leaf_delta_threshold = 4;
  if (lag) o.flush_bound = [&esl] { return esl.load(); };
  Fixture f(o);
  BwTree* t = f.tree.get();
  Model m;
  constexpr uint64_t kRecords = 1280;
  for (uint64_t i = 0; i < kRecords; ++i) {
    Write(t, &m, WriteKind::kUpsert, Key(i), "v", i + 1);
    esl = i > 2 ? i - 2 : 0;  // the newest two or three records stay above it
  }
  const BwTree::Stats s = t->GetStats();
  INFO("splits " << s.splits);
  // Half splits would make about kRecords / 16 = 80 leaves; 7/8 splits
  // about kRecords / 28 = 46.
  CHECK(s.splits > kRecords / 40);
  CHECK(s.splits < kRecords / 20);
  RequireSame(t, m, kAll);
  RequireCheck(t);
}

// Appends fill inner pages the same way: the rightmost inner page whose last
// child is its newest splits 7/8 : 1/8, so a tree of appended keys is as low
// as a tree of full pages.
TEST_CASE("Appends at the right edge fill inner pages", "[dc][bwtree]") {
  BwTreeOptions o = TestOptions();
  o.leaf_max_records = 16;  // split 15 : 2 when appending (7/8 from 16 entries up)
  o.leaf_merge_records = 4;
  o.inner_max_entries = 16;
  Fixture f(o);
  BwTree* t = f.tree.get();
  Model m;
  // About 1300 leaves. Inner pages left half full by their splits need five
  // levels for them (from about 18,000 records on, with the inner pages'
  // 7/8 split turned off), nearly full ones four (up to about 15^3 leaves).
  constexpr uint64_t kRecords = 20000;
  for (uint64_t i = 0; i < kRecords; ++i) Write(t, &m, WriteKind::kUpsert, Key(i), "v", i + 1);
  const BwTree::Stats s = t->GetStats();
  INFO("splits " << s.splits);
  CHECK(s.height == 4);
  RequireSame(t, m, kAll);
  RequireCheck(t);
}

// A page allocated in the store but reachable from no node of the tree can
// never be freed: Check reports it, before and after a reopen.
TEST_CASE("Check reports a page allocated outside the tree", "[dc][bwtree]") {
  Fixture f(SmallNodeOptions());
  Model m;
  for (uint64_t i = 0; i < 200; ++i) {
    Write(f.tree.get(), &m, WriteKind::kUpsert, Key(i), "v", i + 1);
  }
  RequireCheck(f.tree.get());
  const PageId stray = llama::test::CreatePage(f.llama.get(), EncodeLeafBase(BaseHeader(), {}));
  Status s = f.tree->Check();
  CHECK(s.IsCorruption());
  CHECK(s.ToString().find("page " + std::to_string(stray) + ": allocated but not reachable") !=
        std::string::npos);
  f.Reopen();
  CHECK(f.tree->Check().IsCorruption());
}

void RunLargeValues(uint64_t seed) {
  INFO("seed " << seed);
  Random64 rnd(seed);
  BwTreeOptions o;
  o.limits.max_key_size = 16;
  o.limits.max_value_size = 3000;
  o.leaf_max_records = 1000;  // never the reason
  o.node_max_bytes = 8 << 10;
  o.leaf_delta_threshold = 4;
  Fixture f(PurgeAll(o));
  BwTree* t = f.tree.get();
  Model m;
  uint64_t lsn = 0;
  for (int i = 0; i < 300; ++i) {
    const std::string key = Key(rnd.Uniform(120));
    std::string value(rnd.Uniform(3000), '\0');
    rnd.Fill(value.data(), value.size());
    ++lsn;
    if (rnd.OneIn(6)) {
      Write(t, &m, WriteKind::kBlindDelete, key, "", lsn);
    } else {
      Write(t, &m, WriteKind::kUpsert, key, value, lsn);
    }
  }
  CHECK(t->GetStats().splits > 5);
  RequireSame(t, m, kAll);
  RequireCheck(t);
  f.Reopen();
  RequireSame(f.tree.get(), m, kAll);
  RequireCheck(f.tree.get());
}

TEST_CASE("Large values split nodes by bytes", "[dc][bwtree]") {
  RunLargeValues(TestSeed());
  // With values this large every leaf is small in records, so each
  // consolidation merges it into its left neighbour, while it is large in
  // bytes. This seed once made a left page absorb neighbour after
  // neighbour with no split between (the merge's consolidation of the left
  // page was not sized), until a split's system transaction outgrew an LSS
  // record (TooLarge).
  RunLargeValues(862663123613183628ull);
}

// Writers racing on one leaf can beat every consolidation of it: each
// Update-R loses to the next post. Before held posts, the chain grew
// meanwhile: with large values the consolidation that finally landed left a
// page a split's record could not hold, and from then on every split of it
// failed TooLarge; with small ones chains of thousands of deltas made every
// consolidation slower still (bwtree.md, "Held posts"). Here every Update-R
// but one in `kLose + 1` loses, as it would to racing writers,
// deterministically: writes must be held until a restructure lands, never
// fail, keep chains short, and leave a tree that splits, checks, flushes and
// reopens.
TEST_CASE("Writers whose consolidations keep losing hold a page to its byte bound",
          "[dc][bwtree]") {
  const uint64_t seed = TestSeed();
  const bool large = GENERATE(true, false);
  INFO("seed " << seed << (large ? ", large values" : ", small values"));
  Random64 rnd(seed);
  BwTreeOptions o;
  o.limits.max_key_size = 16;
  o.limits.max_value_size = 4000;
  Fixture f(PurgeAll(o));
  BwTree* t = f.tree.get();
  constexpr uint64_t kLose = 30;
  std::atomic<uint64_t> update_rs{0};
  f.llama->TEST_SetUpdateRFault(
      [&](PageId) { return update_rs.fetch_add(1, std::memory_order_relaxed) % (kLose + 1) != kLose; });
  Model m;
  uint64_t lsn = 0;
  for (int i = 0; i < 3000; ++i) {
    const size_t size = !large ? 8 : rnd.OneIn(2) ? 4000 : rnd.Uniform(200);
    const std::string value(size, static_cast<char>('a' + i % 26));
    Write(t, &m, WriteKind::kUpsert, Key(rnd.Uniform(large ? 60 : 2000)), value, ++lsn);
  }
  f.llama->TEST_SetUpdateRFault(nullptr);
  const BwTree::Stats s = t->GetStats();
  INFO("held posts " << s.held_posts << " overruns " << s.bound_overruns << " splits " << s.splits
                     << " failed consolidations " << s.failed_consolidations
                     << " longest chain seen " << s.chain_length_max);
  CHECK(s.held_posts > 0);
  CHECK(s.bound_overruns == 0);
  CHECK(s.deferred_restructures == 0);
  CHECK(s.splits > 0);
  // Writers hold at 2 * leaf_delta_threshold + 2 deltas (none is kept: no
  // flush bound), so no chain grows longer.
  CHECK(s.chain_length_max <= 2 * o.leaf_delta_threshold + 2);
  RequireSame(t, m, kAll);
  RequireCheck(t);
  f.Reopen();
  RequireSame(f.tree.get(), m, kAll);
  RequireCheck(f.tree.get());
}

// Reads consolidate a leaf holding leaf_read_delta_threshold record deltas
// foldable under the ESL, and only those: deltas the ESL holds back do not
// count, so reads do not repeat useless consolidations.
TEST_CASE("Reads consolidate chains of foldable deltas only", "[dc][bwtree]") {
  std::atomic<uint64_t> esl{0};
  BwTreeOptions o;  // one leaf: the default sizes
  o.leaf_delta_threshold = 100;  // writes never consolidate here
  o.limits.max_key_size = 16;    // 101 records of the largest size fit a node
  o.limits.max_value_size = 16;
  o.leaf_read_delta_threshold = 2;
  o.flush_bound = [&esl] { return esl.load(); };
  Fixture f(o);
  BwTree* t = f.tree.get();
  REQUIRE(t->Upsert(Key(1), "a", 1).ok());
  REQUIRE(t->Upsert(Key(2), "b", 2).ok());
  REQUIRE(t->Upsert(Key(3), "c", 3).ok());
  const uint64_t before = t->GetStats().consolidations;
  // All three above the ESL: reads leave the chain alone.
  for (int i = 0; i < 5; ++i) REQUIRE(t->Get(Key(2)).ok());
  CHECK(t->GetStats().consolidations == before);
  // One foldable delta: still under the threshold.
  esl = 1;
  REQUIRE(t->Get(Key(1)).ok());
  CHECK(t->GetStats().consolidations == before);
  // Two foldable: the read consolidates (key 3 stays as a kept delta), and
  // the next read finds one delta, which is not enough again.
  esl = 2;
  auto r = t->Get(Key(3));
  REQUIRE(r.ok());
  CHECK(r->value == "c");
  CHECK(t->GetStats().consolidations == before + 1);
  bool found = false;
  auto held = t->ReadHeld(Key(1), &found);
  REQUIRE(held.ok());
  CHECK(found);
  CHECK(held->lsn == 1);
  CHECK(t->GetStats().consolidations == before + 1);
  // Threshold 0: reads never consolidate.
  BwTreeOptions off = o;
  off.leaf_read_delta_threshold = 0;
  esl = kAll;
  Fixture g(off);
  for (uint64_t i = 0; i < 5; ++i) REQUIRE(g.tree->Upsert(Key(i), "v", i + 1).ok());
  const uint64_t g_before = g.tree->GetStats().consolidations;
  for (uint64_t i = 0; i < 5; ++i) REQUIRE(g.tree->Get(Key(i)).ok());
  CHECK(g.tree->GetStats().consolidations == g_before);
  RequireCheck(t);
}

// An ascending load leaves a split delta on every leaf but the last, and no
// write reaches those leaves again: reads fold the split delta (once), so
// later reads find a bare base.
TEST_CASE("Reads fold the split deltas an ascending load leaves", "[dc][bwtree]") {
  Fixture f(SmallNodeOptions());
  BwTree* t = f.tree.get();
  Model model;
  for (uint64_t i = 0; i < 300; ++i) {
    Write(t, &model, WriteKind::kUpsert, Key(i), "v" + std::to_string(i), i + 1);
  }
  const BwTree::Stats loaded = t->GetStats();
  REQUIRE(loaded.splits > 10);
  const uint64_t before = loaded.consolidations;
  auto read_all = [&] {
    for (uint64_t i = 0; i < 300; ++i) {
      auto r = t->Get(Key(i));
      REQUIRE(r.ok());
      CHECK(r->value == "v" + std::to_string(i));
      CHECK(r->lsn == i + 1);
    }
  };
  read_all();
  const uint64_t folded = t->GetStats().consolidations - before;
  INFO("splits " << loaded.splits << ", read consolidations " << folded);
  // Each leaf left of a split (more when a consolidation split the leaf
  // again) consolidates on its first read; the last leaf has no split delta.
  CHECK(folded >= loaded.splits / 2);
  // Nothing left to fold: a second pass consolidates nothing.
  read_all();
  CHECK(t->GetStats().consolidations == before + folded);
  RequireSame(t, model);
  RequireCheck(t);
}

TEST_CASE("Point reads of a settled tree take the lean path and agree with the model",
          "[dc][bwtree]") {
  BwTreeOptions o = SmallNodeOptions();
  o.inner_delta_threshold = 0;  // inner pages bare bases once settled
  Fixture f(o);
  BwTree* t = f.tree.get();
  Model model;
  for (uint64_t i = 0; i < 400; ++i) {
    Write(t, &model, WriteKind::kUpsert, Key(i * 3), "v" + std::to_string(i), i + 1);
  }
  // Deltas of every kind the lean path reads: a tombstone and an update
  // over a base, and flush-state nodes above bases.
  Write(t, &model, WriteKind::kDelete, Key(30), "", 1000);
  Write(t, &model, WriteKind::kUpsert, Key(60), "new", 1001);
  REQUIRE(t->FlushAll(kAll).ok());
  REQUIRE(t->GetStats().height >= 3);
  // A first pass finishes what the writes left to readers (index deltas on
  // inner pages are folded by the next descent through them).
  for (uint64_t i = 0; i < 1200; ++i) {
    auto r = t->Get(Key(i));
    REQUIRE((r.ok() || r.status().IsNotFound()));
  }
  const uint64_t fallbacks = t->GetStats().read_fallbacks;
  for (uint64_t i = 0; i < 1200; ++i) {
    const std::string k = Key(i);
    const test::ModelRecord* r = model.Find(k);
    if (r == nullptr || r->deleted) {
      RequireAbsent(t, k, r == nullptr ? 0 : r->lsn);
    } else {
      RequireFound(t, k, r->value, r->lsn);
    }
  }
  // Every read of the settled tree (two per key: Get and GetLsn) was the
  // lean path's; the general path alone would have counted 2400 here.
  CHECK(t->GetStats().read_fallbacks == fallbacks);
  // A key below the leftmost leaf and above the rightmost.
  RequireAbsent(t, "", 0);
  RequireAbsent(t, "zzz", 0);
  CHECK(t->GetStats().read_fallbacks == fallbacks);
  // Blind writes of keys already there (no leaf grows, so nothing splits)
  // find their pages on the lean path too, through consolidations.
  const uint64_t write_fallbacks = t->GetStats().write_fallbacks;
  for (uint64_t i = 0; i < 400; i += 2) {
    Write(t, &model, WriteKind::kUpsert, Key(i * 3), "w" + std::to_string(i), 2000 + i);
  }
  Write(t, &model, WriteKind::kBlindDelete, Key(33), "", 3000);
  CHECK(t->GetStats().write_fallbacks == write_fallbacks);
  RequireSame(t, model);
  RequireCheck(t);
}

TEST_CASE("Nothing above the ESL reaches the LSS", "[dc][bwtree]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rnd(seed);
  auto mem = NewMemEnv();
  FaultInjectionEnv env(mem.get(), seed);
  std::atomic<uint64_t> esl{0};
  BwTreeOptions o = SmallNodeOptions();
  o.flush_bound = [&esl] { return esl.load(); };
  LlamaOptions lo = TreeLlamaOptions();
  lo.eviction_flush_bound = [&esl] { return esl.load(); };
  // Every write, with its LSN, to compute the state at any bound.
  std::vector<std::pair<uint64_t, std::pair<WriteKind, std::pair<std::string, std::string>>>>
      history;
  Model m;
  uint64_t lsn = 0;
  auto run = [&](BwTree* t, int writes) {
    for (int i = 0; i < writes; ++i) {
      const std::string key = Key(rnd.Uniform(150));
      const WriteKind kind = rnd.OneIn(5) ? WriteKind::kBlindDelete : WriteKind::kUpsert;
      const std::string value = "v" + std::to_string(lsn + 1);
      Write(t, &m, kind, key, value, ++lsn);
      history.push_back({lsn, {kind, {key, value}}});
    }
  };
  {
    auto l = OpenLlama(&env, lo);
    auto t = OpenTree(l.get(), o);
    // Nothing may be flushed: structure changes happen with every record
    // above the ESL.
    run(t.get(), 300);
    CHECK(t->GetStats().splits > 0);
    esl = 150;
    run(t.get(), 300);
    esl = 500;
    REQUIRE(t->FlushAll(500).ok());
    // Above the bound, to be lost: more structure changes, an ESL that
    // does not move.
    run(t.get(), 300);
    REQUIRE(t->FlushAll(500).ok());
    RequireCheck(t.get());
    l->TEST_SkipCloseOnDestroy();
    REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
  }
  Model stable;
  for (const auto& [at, w] : history) {
    if (at <= 500) REQUIRE(stable.Apply(w.first, w.second.first, w.second.second, at) == Expect::kOk);
  }
  auto l = OpenLlama(&env, lo);
  auto t = OpenTree(l.get(), o);
  RequireSame(t.get(), stable);
  for (const Item& i : ScanItems(t.get())) CHECK(i.lsn <= 500);
  RequireCheck(t.get());
  // The recovered tree takes writes again.
  esl = kAll;
  m = stable;
  run(t.get(), 200);
  RequireSame(t.get(), m);
  RequireCheck(t.get());
}

// ---- Hand-built states --------------------------------------------------------------

}  // namespace
}  // namespace deuteron::bwtree
