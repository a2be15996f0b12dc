// Single-threaded tests of the Bw-tree's public interface: the write kinds'
// existence rules, LSNs kept per record, size limits, reopening, range scans
// (bounds, directions, empty ranges, runs of deleted keys, writes between
// Next() calls), structure changes (splits, root splits, merges) with Check,
// the ESL rule across a crash, and hand-built trees in states a crash can
// leave mid-merge.
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
#include "tests/dc/bwtree/bwtree_test_util.h"
#include "tests/dc/llama/llama_test_util.h"

namespace deuteron::bwtree {
namespace {

using llama::Llama;
using llama::LlamaOptions;
using test::CompareAll;
using test::Describe;
using test::Expect;
using test::Item;
using test::Key;
using test::kAll;
using test::Model;
using test::OpenLlama;
using test::OpenTree;
using test::RequireCheck;
using test::ScanItems;
using test::ScanText;
using test::SmallNodeOptions;
using test::TestOptions;
using test::TreeLlamaOptions;

// A tree on a fresh in-memory store. Members die tree first, then the cache.
struct Fixture {
  explicit Fixture(BwTreeOptions o = TestOptions(), LlamaOptions lo = TreeLlamaOptions())
      : tree_options(std::move(o)), llama_options(std::move(lo)) {
    llama = OpenLlama(env.get(), llama_options);
    tree = OpenTree(llama.get(), tree_options);
  }

  // Flushes everything, closes (checkpointing as configured) and reopens.
  void Reopen() {
    REQUIRE(tree->FlushAll(kAll).ok());
    tree.reset();
    REQUIRE(llama->Close().ok());
    llama.reset();
    llama = OpenLlama(env.get(), llama_options);
    tree = OpenTree(llama.get(), tree_options);
  }

  BwTreeOptions tree_options;
  LlamaOptions llama_options;
  std::unique_ptr<Env> env = NewMemEnv();
  std::unique_ptr<Llama> llama;
  std::unique_ptr<BwTree> tree;
};

// Writes and requires the given outcome; keeps `model` in step.
void Write(BwTree* tree, Model* model, WriteKind kind, const std::string& key,
           const std::string& value, uint64_t lsn) {
  const bool del = kind == WriteKind::kDelete || kind == WriteKind::kBlindDelete;
  const Expect want = model->Apply(kind, key, value, lsn);
  Status s = tree->Write(kind, key, del ? Slice() : Slice(value), lsn);
  INFO(test::KindName(kind) << " " << test::Esc(key) << " @" << lsn << ": " << s.ToString()
                            << ", want " << test::ExpectName(want));
  REQUIRE(test::Matches(s, want));
}

void RequireSame(BwTree* tree, const Model& model, uint64_t purge_below = 0) {
  const std::string diff = CompareAll(tree, model, purge_below);
  INFO(diff);
  REQUIRE(diff.empty());
}

void RequireFound(BwTree* tree, const std::string& key, const std::string& value, uint64_t lsn) {
  auto r = tree->Get(key);
  INFO("Get " << key << ": " << r.status().ToString());
  REQUIRE(r.ok());
  CHECK(r->value == value);
  CHECK(r->lsn == lsn);
  auto l = tree->GetLsn(key);
  REQUIRE(l.ok());
  CHECK(*l == lsn);
}

void RequireAbsent(BwTree* tree, const std::string& key, uint64_t lsn) {
  auto r = tree->Get(key);
  INFO("Get " << key << ": " << r.status().ToString());
  CHECK(r.status().IsNotFound());
  auto l = tree->GetLsn(key);
  REQUIRE(l.ok());
  CHECK(*l == lsn);
}

BwTreeOptions PurgeAll(BwTreeOptions o) {
  o.purge_bound = [] { return kAll; };
  return o;
}

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
