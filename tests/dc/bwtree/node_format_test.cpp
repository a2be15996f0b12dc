#include "dc/bwtree/node_format.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/random.h"
#include "tests/dc/bwtree/node_test_util.h"

namespace deuteron::bwtree {
namespace {

using test::NodeKey;

BaseHeader LeafHeader(Slice low, Slice high, PageId sibling) {
  BaseHeader h;
  h.type = NodeType::kLeaf;
  h.level = 0;
  h.low_key = low;
  h.high_infinite = high.empty();
  h.high_key = high;
  h.right_sibling = sibling;
  return h;
}

// A leaf with keys k00000, k00002, ... (even numbers), every 5th a tombstone.
struct TestLeaf {
  std::vector<std::string> keys, values;
  std::vector<LeafRecord> records;
  std::string payload;
  explicit TestLeaf(int n, Slice high = Slice()) {
    for (int i = 0; i < n; ++i) {
      keys.push_back(NodeKey(2 * i));
      values.push_back(i % 5 == 4 ? "" : std::string(i % 7, 'v') + std::to_string(i));
    }
    for (int i = 0; i < n; ++i) {
      records.push_back(LeafRecord{keys[i], values[i], 100u + i, i % 5 == 4});
    }
    payload = EncodeLeafBase(LeafHeader("k", high, high.empty() ? 0 : 42), records);
  }
};

TEST_CASE("Leaf base round trip and search", "[dc][bwtree]") {
  for (int n : {0, 1, 2, 7, 100}) {
    INFO("n " << n);
    TestLeaf leaf(n, n % 2 == 0 ? Slice("z") : Slice());
    auto view = BaseView::Parse(leaf.payload);
    REQUIRE(view.ok());
    REQUIRE(view->Validate().ok());
    CHECK(view->is_leaf());
    CHECK(view->count() == static_cast<size_t>(n));
    CHECK(view->header().low_key == Slice("k"));
    CHECK(view->header().high_infinite == (n % 2 != 0));
    if (n % 2 == 0) {
      CHECK(view->header().high_key == Slice("z"));
      CHECK(view->header().right_sibling == 42);
      CHECK(view->AboveHigh("z"));
      CHECK_FALSE(view->AboveHigh("y"));
    }
    for (int i = 0; i < n; ++i) {
      auto r = view->RecordAt(i);
      REQUIRE(r.ok());
      CHECK(r->key == Slice(leaf.keys[i]));
      CHECK(r->value == Slice(leaf.values[i]));
      CHECK(r->lsn == 100u + i);
      CHECK(r->tombstone == (i % 5 == 4));
    }
    // The sequential decoder agrees with RecordAt, and stops at a key.
    std::vector<LeafRecord> all;
    REQUIRE(view->AppendRecords(&all).ok());
    REQUIRE(all.size() == static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      CHECK(all[i].key == Slice(leaf.keys[i]));
      CHECK(all[i].value == Slice(leaf.values[i]));
      CHECK(all[i].lsn == 100u + i);
      CHECK(all[i].tombstone == (i % 5 == 4));
    }
    std::vector<LeafRecord> some;
    const std::string stop = NodeKey(7);  // between k00006 and k00008
    const Slice stop_slice(stop);
    REQUIRE(view->AppendRecords(&some, &stop_slice).ok());
    CHECK(some.size() == static_cast<size_t>(std::min(n, 4)));
    // Find: present keys exact, odd keys between them.
    for (int k = -1; k <= 2 * n; ++k) {
      auto pos = view->Find(k < 0 ? std::string("a") : NodeKey(k));
      REQUIRE(pos.ok());
      const size_t want = k < 0 ? 0 : static_cast<size_t>((k + 1) / 2);
      CHECK(pos->index == want);
      CHECK(pos->exact == (k >= 0 && k % 2 == 0 && k < 2 * n));
      // Narrowed ranges: a correct one and a wrong one give the same answer.
      auto narrowed = view->Find(k < 0 ? std::string("a") : NodeKey(k), want, want);
      REQUIRE(narrowed.ok());
      CHECK(narrowed->index == want);
      auto wrong = view->Find(k < 0 ? std::string("a") : NodeKey(k), 0, want == 0 ? 0 : want - 1);
      REQUIRE(wrong.ok());
      CHECK(wrong->index == want);
    }
  }
}

TEST_CASE("Leaf entries are a flags byte and varints", "[dc][bwtree]") {
  // One record, then its exact bytes after the 24-byte header and its slot.
  const std::vector<LeafRecord> one = {{"ab", "xyz", 300, false}};
  const std::string live = EncodeLeafBase(LeafHeader("", "", 0), one);
  CHECK(live[0] == 5);  // the varint leaf's type byte
  CHECK(live.substr(kBaseFixedHeaderSize + kBaseSlotSize) ==
        std::string("\x00\x02" "ab" "\x03" "xyz" "\xac\x02", 10));
  const std::vector<LeafRecord> dead = {{"c", "", 5, true}};
  const std::string tomb = EncodeLeafBase(LeafHeader("", "", 0), dead);
  CHECK(tomb.substr(kBaseFixedHeaderSize + kBaseSlotSize) ==
        std::string("\x01\x01" "c" "\x00\x05", 5));

  // Fields whose varints take several bytes round-trip, through the
  // encoder and through a byte copy of the run.
  const std::string long_key(200, 'k'), big_value(20000, 'v');
  const std::vector<LeafRecord> wide = {{"", "", 0, false},
                                        {"a", big_value, uint64_t{1} << 40, false},
                                        {long_key, "", ~uint64_t{0}, true},
                                        {"z", "1", 127, false}};
  const std::string payload = EncodeLeafBase(LeafHeader("", "", 0), wide);
  auto view = BaseView::Parse(payload);
  REQUIRE(view.ok());
  REQUIRE(view->Validate().ok());
  BaseBuilder builder(view->header());
  REQUIRE(builder.AddRun(*view, 0, view->count()).ok());
  const std::string copy = builder.Finish();
  CHECK(copy == payload);
  for (size_t i = 0; i < wide.size(); ++i) {
    auto r = view->RecordAt(i);
    REQUIRE(r.ok());
    CHECK(r->key == wide[i].key);
    CHECK(r->value == wide[i].value);
    CHECK(r->lsn == wide[i].lsn);
    CHECK(r->tombstone == wide[i].tombstone);
    auto k = view->KeyAt(i);
    REQUIRE(k.ok());
    CHECK(*k == wide[i].key);
  }

  // The type before the varint layout (3) is retired.
  std::string old = live;
  old[0] = 3;
  const Status retired = BaseView::Parse(old).status();
  CHECK(retired.IsCorruption());
  CHECK(retired.ToString().find("retired base node type 3") != std::string::npos);
  // A length varint that runs past its entry is Corruption.
  std::string bad = live;
  bad[kBaseFixedHeaderSize + kBaseSlotSize + 1] = static_cast<char>(0x82);  // klen continues
  auto bad_view = BaseView::Parse(bad);
  REQUIRE(bad_view.ok());
  CHECK(bad_view->RecordAt(0).status().IsCorruption());
  CHECK(bad_view->Validate().IsCorruption());
}

TEST_CASE("A run drops tombstones below the purge bound, by their varint LSNs",
          "[dc][bwtree]") {
  // LSNs on both sides of the bound, one- and two-byte varints.
  const std::vector<LeafRecord> recs = {{"a", "", 100, true},  {"b", "2", 101, false},
                                        {"c", "", 299, true},  {"d", "", 300, true},
                                        {"e", "", 5000, true}, {"f", "6", 1, false}};
  const std::string payload = EncodeLeafBase(LeafHeader("", "", 0), recs);
  auto view = BaseView::Parse(payload);
  REQUIRE(view.ok());
  BaseBuilder builder(view->header());
  size_t purged = 0;
  REQUIRE(builder.AddRun(*view, 0, view->count(), /*purge_bound=*/300, &purged).ok());
  CHECK(purged == 2);  // a@100 and c@299; d@300 is not below the bound
  const std::string out = builder.Finish();
  auto kept = BaseView::Parse(out);
  REQUIRE(kept.ok());
  REQUIRE(kept->Validate().ok());
  std::vector<LeafRecord> all;
  REQUIRE(kept->AppendRecords(&all).ok());
  std::string keys;
  for (const LeafRecord& r : all) keys += r.key.ToString();
  CHECK(keys == "bdef");
}

// Find over bases bounded on both sides, with the keys spread evenly, bunched
// at the bottom or the top of the range, or in two clumps: every key, every
// point around one, and points spread over the range find their lower bound.
TEST_CASE("Find is exact however the keys sit between the bounds", "[dc][bwtree]") {
  const auto be = [](uint64_t v) {
    std::string s(8, '\0');
    for (int b = 7; b >= 0; --b, v >>= 8) s[static_cast<size_t>(b)] = static_cast<char>(v & 0xff);
    return s;
  };
  const uint64_t low = 1000000, high = low + (uint64_t{1} << 40);
  const uint64_t span = high - low;
  struct Layout {
    const char* name;
    std::function<uint64_t(uint64_t i, uint64_t n)> at;
  };
  const std::vector<Layout> layouts = {
      {"even", [&](uint64_t i, uint64_t n) { return low + 1 + i * (span / n); }},
      {"bottom", [&](uint64_t i, uint64_t) { return low + 1 + i * 7; }},
      {"top", [&](uint64_t i, uint64_t n) { return high - 1 - (n - i) * 7; }},
      {"two clumps", [&](uint64_t i, uint64_t n) {
         return i < n / 2 ? low + 1 + i * 3 : high - 1 - (n - i) * 3;
       }},
  };
  for (const Layout& layout : layouts) {
    for (uint64_t n : {30u, 64u, 128u, 500u}) {
      INFO(layout.name << " n " << n);
      std::vector<uint64_t> keys;
      for (uint64_t i = 0; i < n; ++i) keys.push_back(layout.at(i, n));
      REQUIRE(std::is_sorted(keys.begin(), keys.end()));
      std::vector<std::string> key_bytes, values;
      std::vector<LeafRecord> records;
      for (uint64_t k : keys) key_bytes.push_back(be(k));
      for (uint64_t i = 0; i < n; ++i) {
        records.push_back(LeafRecord{key_bytes[i], "v", i + 1, false});
      }
      const std::string low_key = be(low), high_key = be(high);
      const std::string payload = EncodeLeafBase(LeafHeader(low_key, high_key, 7), records);
      auto view = BaseView::Parse(payload);
      REQUIRE(view.ok());
      REQUIRE(view->Validate().ok());
      // Every key, the points just around it, and points spread evenly.
      std::vector<uint64_t> probes = {low, high - 1};
      for (uint64_t k : keys) probes.insert(probes.end(), {k - 1, k, k + 1});
      for (uint64_t j = 0; j < 200; ++j) probes.push_back(low + j * (span / 200));
      for (uint64_t p : probes) {
        const auto want = static_cast<size_t>(
            std::lower_bound(keys.begin(), keys.end(), p) - keys.begin());
        auto pos = view->Find(be(p));
        REQUIRE(pos.ok());
        REQUIRE(pos->index == want);
        REQUIRE(pos->exact == (want < keys.size() && keys[want] == p));
      }
    }
  }
}

TEST_CASE("Inner base round trip", "[dc][bwtree]") {
  std::vector<std::string> seps = {"", "b", "bb", "c", "zz"};
  std::vector<InnerEntry> entries;
  for (size_t i = 0; i < seps.size(); ++i) entries.push_back(InnerEntry{seps[i], 10 + i});
  BaseHeader h;
  h.type = NodeType::kInner;
  h.level = 3;
  const std::string payload = EncodeInnerBase(h, entries);
  CHECK(payload.size() == InnerBaseSize(h, entries));
  auto view = BaseView::Parse(payload);
  REQUIRE(view.ok());
  REQUIRE(view->Validate().ok());
  CHECK_FALSE(view->is_leaf());
  CHECK(view->header().level == 3);
  CHECK(view->header().high_infinite);
  for (size_t i = 0; i < seps.size(); ++i) {
    auto e = view->EntryAt(i);
    REQUIRE(e.ok());
    CHECK(e->separator == Slice(seps[i]));
    CHECK(e->child == 10 + i);
  }
  auto pos = view->Find("bc");
  REQUIRE(pos.ok());
  CHECK(pos->index == 3);
  CHECK_FALSE(pos->exact);
  // RouteEntry: the largest separator <= key (< key, before); none below
  // the first separator (only `before` the empty one).
  struct Case {
    const char* key;
    bool before;
    size_t want;  // entry index; seps.size(): none
  };
  const Case cases[] = {{"", false, 0},  {"", true, 5},    {"a", false, 0},  {"b", false, 1},
                        {"b", true, 0},  {"ba", false, 1}, {"bb", false, 2}, {"bb", true, 1},
                        {"bc", false, 2}, {"c", true, 2},  {"c", false, 3},  {"zz", false, 4},
                        {"zz", true, 3}, {"zzz", false, 4}};
  for (const Case& c : cases) {
    INFO("key '" << c.key << "' before " << c.before);
    size_t index = 99;
    InnerEntry e;
    REQUIRE(view->RouteEntry(c.key, c.before, &index, &e).ok());
    CHECK(index == c.want);
    if (index < seps.size()) {
      CHECK(e.separator == Slice(seps[index]));
      CHECK(e.child == 10 + index);
    }
  }
  // A separator length that overruns or does not fill its entry's span is
  // Corruption.
  for (char len : {3, 1}) {
    INFO("length field " << int{len});
    std::string bad = payload;
    bad[bad.size() - 8 - 2 - 4] = len;  // "zz"'s length field
    auto bad_view = BaseView::Parse(bad);
    REQUIRE(bad_view.ok());
    size_t index = 0;
    InnerEntry e;
    CHECK(bad_view->RouteEntry("zzz", false, &index, &e).IsCorruption());
    CHECK(bad_view->EntryAt(4).status().IsCorruption());
  }
}

std::vector<std::string> AllDeltas() {
  return {
      EncodeRecordDelta(DeltaType::kInsert, "key", "value", 7, 3),
      EncodeRecordDelta(DeltaType::kUpdate, "", "v", 8, kNoHint),
      EncodeRecordDelta(DeltaType::kUpsert, "k", "", 9, 0),
      EncodeRecordDelta(DeltaType::kDelete, "gone", "ignored", 10, 12),
      EncodeSplitDelta("sep", 99),
      EncodeIndexEntryDelta("a", 5, false, "b"),
      EncodeIndexEntryDelta("a", 6, true, ""),
      EncodeRemoveNodeDelta(),
      EncodeMergeDelta("m", 77),
      EncodeIndexTermDeleteDelta("c", 8, false, "d"),
      EncodeIndexTermDeleteDelta("c", 9, true, ""),
  };
}

TEST_CASE("Delta round trips", "[dc][bwtree]") {
  auto all = AllDeltas();
  auto parse = [](const std::string& s) {
    auto d = DeltaView::Parse(s);
    INFO(d.status().ToString());
    REQUIRE(d.ok());
    CHECK(EncodeDelta(*d) == s);
    return *d;
  };
  DeltaView d = parse(all[0]);
  CHECK(d.type == DeltaType::kInsert);
  CHECK(d.key == Slice("key"));
  CHECK(d.value == Slice("value"));
  CHECK(d.lsn == 7);
  CHECK(d.hint == 3);
  d = parse(all[1]);
  CHECK(d.type == DeltaType::kUpdate);
  CHECK(d.key.empty());
  CHECK(d.hint == kNoHint);
  d = parse(all[2]);
  CHECK(d.type == DeltaType::kUpsert);
  CHECK(d.value.empty());
  d = parse(all[3]);
  CHECK(d.type == DeltaType::kDelete);
  CHECK(d.key == Slice("gone"));
  CHECK(d.value.empty());
  CHECK(d.lsn == 10);
  CHECK(d.hint == 12);
  d = parse(all[4]);
  CHECK(d.type == DeltaType::kSplit);
  CHECK(d.key == Slice("sep"));
  CHECK(d.pid == 99);
  d = parse(all[5]);
  CHECK(d.type == DeltaType::kIndexEntry);
  CHECK(d.key == Slice("a"));
  CHECK(d.next == Slice("b"));
  CHECK_FALSE(d.next_infinite);
  CHECK(d.pid == 5);
  d = parse(all[6]);
  CHECK(d.next_infinite);
  d = parse(all[7]);
  CHECK(d.type == DeltaType::kRemoveNode);
  d = parse(all[8]);
  CHECK(d.type == DeltaType::kMerge);
  CHECK(d.pid == 77);
  CHECK(d.key == Slice("m"));
  d = parse(all[9]);
  CHECK(d.type == DeltaType::kIndexTermDelete);
  CHECK(d.key == Slice("c"));
  CHECK(d.next == Slice("d"));
  CHECK(d.pid == 8);
  d = parse(all[10]);
  CHECK(d.next_infinite);
}

// Parses and fully uses a base payload; must never crash (ASan checks reads).
Status TouchBase(const std::string& bytes) {
  // Copy into an exact-size heap buffer so any overread is caught.
  std::unique_ptr<char[]> buf(new char[bytes.size() + 1]);
  std::memcpy(buf.get(), bytes.data(), bytes.size());
  Slice s(buf.get(), bytes.size());
  auto view = BaseView::Parse(s);
  if (!view.ok()) return view.status();
  Status v = view->Validate();
  v.PermitUncheckedError();
  for (size_t i = 0; i < view->count(); ++i) {
    if (view->is_leaf()) {
      view->RecordAt(i).status().PermitUncheckedError();
    } else {
      view->EntryAt(i).status().PermitUncheckedError();
    }
  }
  if (!view->is_leaf()) {
    size_t index = 0;
    InnerEntry e;
    view->RouteEntry("k00010", false, &index, &e).PermitUncheckedError();
    view->RouteEntry("k00010", true, &index, &e).PermitUncheckedError();
  }
  // A hint, but it reads the header's keys: below, inside and above the range.
  for (const char* k : {"", "k00010", "z", "\xff\xff\xff\xff\xff\xff\xff\xff\xff"}) {
    view->PrefetchEntryNear(k);
  }
  view->Find("k00010").status().PermitUncheckedError();
  view->Find("k00010", 1, 3).status().PermitUncheckedError();
  {
    // Consolidation's copy: whatever AddRun accepts builds a base whose
    // reads stay inside it (ASan), and a base that validates gives a copy
    // that validates.
    BaseBuilder builder(view->header());
    const Status added = builder.AddRun(*view, 0, view->count(), /*purge_bound=*/5);
    if (v.ok()) CHECK(added.ok());
    if (added.ok()) {
      const std::string copy = builder.Finish();
      std::unique_ptr<char[]> copy_buf(new char[copy.size() + 1]);
      std::memcpy(copy_buf.get(), copy.data(), copy.size());
      auto copied = BaseView::Parse(Slice(copy_buf.get(), copy.size()));
      if (v.ok()) {
        REQUIRE(copied.ok());
        CHECK(copied->Validate().ok());
      }
      if (copied.ok()) {
        for (size_t i = 0; i < copied->count(); ++i) {
          if (copied->is_leaf()) {
            copied->RecordAt(i).status().PermitUncheckedError();
          } else {
            copied->EntryAt(i).status().PermitUncheckedError();
          }
        }
        copied->Validate().PermitUncheckedError();
      }
    }
    added.PermitUncheckedError();
  }
  if (view->is_leaf()) {
    std::vector<LeafRecord> all;
    const Status a = view->AppendRecords(&all);
    // A base that validates decodes sequentially too, to the same count.
    if (v.ok()) {
      CHECK(a.ok());
      CHECK(all.size() == view->count());
    }
    a.PermitUncheckedError();
  }
  return v;
}

TEST_CASE("Truncated payloads are Corruption", "[dc][bwtree]") {
  TestLeaf leaf(20, "z");
  for (size_t n = 0; n < leaf.payload.size(); ++n) {
    INFO("base truncated to " << n);
    CHECK(TouchBase(leaf.payload.substr(0, n)).IsCorruption());
  }
  for (const std::string& delta : AllDeltas()) {
    for (size_t n = 0; n < delta.size(); ++n) {
      INFO("delta truncated to " << n << " of " << delta.size());
      CHECK(DeltaView::Parse(delta.substr(0, n)).status().IsCorruption());
    }
    CHECK(DeltaView::Parse(delta + "x").status().IsCorruption());
  }
}

TEST_CASE("Random and mutated payloads never crash", "[dc][bwtree]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rnd(seed);
  TestLeaf leaf(30, "z");
  auto deltas = AllDeltas();
  for (int iter = 0; iter < 3000; ++iter) {
    std::string bytes;
    switch (rnd.Uniform(3)) {
      case 0:
        bytes.resize(rnd.Uniform(100));
        rnd.Fill(bytes.data(), bytes.size());
        break;
      case 1:
        bytes = leaf.payload;
        break;
      default:
        bytes = deltas[rnd.Uniform(deltas.size())];
        break;
    }
    for (uint64_t k = 1 + rnd.Uniform(4); k > 0 && !bytes.empty(); --k) {
      bytes[rnd.Uniform(bytes.size())] = static_cast<char>(rnd.Next());
    }
    TouchBase(bytes).PermitUncheckedError();
    std::unique_ptr<char[]> buf(new char[bytes.size() + 1]);
    std::memcpy(buf.get(), bytes.data(), bytes.size());
    DeltaView::Parse(Slice(buf.get(), bytes.size())).status().PermitUncheckedError();
  }
}

TEST_CASE("Malformed base headers are rejected", "[dc][bwtree]") {
  TestLeaf leaf(3);
  std::string bad = leaf.payload;
  bad[0] = 9;  // unknown type
  CHECK(TouchBase(bad).IsCorruption());
  bad = leaf.payload;
  bad[1] = 1;  // leaf with level 1
  CHECK(TouchBase(bad).IsCorruption());
  bad = leaf.payload;
  bad[2] = 4;  // unknown flag
  CHECK(TouchBase(bad).IsCorruption());
  // Keys out of order: swap two records' order via a hand-built payload.
  std::vector<LeafRecord> recs = {{"b", "1", 1, false}, {"c", "2", 2, false}};
  std::string ok = EncodeLeafBase(LeafHeader("", "", 0), recs);
  CHECK(TouchBase(ok).ok());
  std::string swapped = ok;
  // Record keys are one byte at a fixed place: flip "c" to "a".
  const size_t at = swapped.rfind('c');
  swapped[at] = 'a';
  CHECK(TouchBase(swapped).IsCorruption());
}

}  // namespace
}  // namespace deuteron::bwtree
