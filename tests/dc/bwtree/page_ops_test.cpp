#include "dc/bwtree/page_ops.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "common/random.h"
#include "dc/bwtree/node_format.h"
#include "tests/dc/llama/llama_test_util.h"
#include "tests/dc/bwtree/node_test_util.h"

namespace deuteron::bwtree {
namespace {

using llama::Llama;
using llama::NodeKind;
using llama::PageNode;
using llama::test::CreatePage;
using llama::test::MakeNode;
using llama::test::OpenOrDie;
using llama::test::PostDelta;

using test::NodeKey;

std::string EmptyLeaf() { return EncodeLeafBase(BaseHeader{}, {}); }

const PageNode* ReadHead(Llama* l, PageId pid) {
  auto r = l->Read(pid);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return *r;
}

LookupResult MustLookup(const PageNode* head, Slice key) {
  auto r = Lookup(head, key);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return *r;
}

struct ModelEntry {
  std::string value;
  uint64_t lsn = 0;
  bool deleted = false;
};
using Model = std::map<std::string, ModelEntry>;

// What the page says for each key, and what the model says, as one line each
// (one assertion per check keeps the model test fast).
std::string DescribePage(const PageNode* head, int key_space) {
  std::string out;
  for (int i = 0; i < key_space; ++i) {
    const std::string key = NodeKey(i);
    auto r = Lookup(head, key);
    auto lsn = LatestLsn(head, key);
    if (!r.ok() || !lsn.ok()) return r.status().ToString() + " " + lsn.status().ToString();
    out += key;
    switch (r->outcome) {
      case LookupOutcome::kFound:
        out += "=" + r->value.ToString() + "@" + std::to_string(r->lsn);
        break;
      case LookupOutcome::kDeleted:
        out += " deleted@" + std::to_string(r->lsn);
        break;
      case LookupOutcome::kNotFound:
        break;
      default:
        out += " unexpected outcome";
    }
    out += " latest " + std::to_string(*lsn) + "\n";
  }
  return out;
}

std::string DescribeModel(const Model& model, int key_space) {
  std::string out;
  for (int i = 0; i < key_space; ++i) {
    const std::string key = NodeKey(i);
    out += key;
    auto it = model.find(key);
    uint64_t lsn = 0;
    if (it != model.end()) {
      lsn = it->second.lsn;
      out += it->second.deleted ? " deleted@" + std::to_string(lsn)
                                : "=" + it->second.value + "@" + std::to_string(lsn);
    }
    out += " latest " + std::to_string(lsn) + "\n";
  }
  return out;
}

void CheckAgainstModel(const PageNode* head, const Model& model, int key_space) {
  CHECK(DescribePage(head, key_space) == DescribeModel(model, key_space));
}

// Every record delta's hint is its key's lower bound in the base below.
void CheckHints(const PageNode* head) {
  const PageNode* base = head;
  while (base != nullptr && base->kind != NodeKind::kBase) base = base->next;
  REQUIRE(base != nullptr);
  auto view = BaseView::Parse(Slice(base->payload(), base->size));
  REQUIRE(view.ok());
  REQUIRE(view->Validate().ok());
  for (const PageNode* n = head; n != base; n = n->next) {
    if (n->kind != NodeKind::kDelta) continue;
    auto d = DeltaView::Parse(Slice(n->payload(), n->size));
    if (!d.ok()) FAIL(d.status().ToString());
    if (!IsRecordDelta(d->type)) continue;
    auto pos = view->Find(d->key);
    REQUIRE(pos.ok());
    if (d->hint != pos->index || d->lsn != n->tag) {
      FAIL("delta for " << d->key.ToString() << " hint " << d->hint << " want " << pos->index
                        << " lsn " << d->lsn << " tag " << n->tag);
    }
  }
}

TEST_CASE("Page ops match a std::map model under deltas and consolidation", "[dc][bwtree]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rnd(seed);
  auto env = NewMemEnv();
  auto l = OpenOrDie(env.get());
  const PageId pid = CreatePage(l.get(), EmptyLeaf());
  const int key_space = 30;
  Model model;
  uint64_t next_lsn = 0;
  int consolidations = 0;
  uint64_t base_tag = 0;
  for (int op = 0; op < 500; ++op) {
    INFO("op " << op);
    auto g = l->Enter();
    const uint64_t choice = rnd.Uniform(100);
    if (choice < 15) {
      // Consolidate with a random ESL and RSSP.
      const PageNode* head = ReadHead(l.get(), pid);
      const uint64_t lsn_bound = rnd.Uniform(next_lsn + 1);
      const uint64_t purge_bound = rnd.Uniform(lsn_bound + 2);
      INFO("lsn_bound " << lsn_bound << " purge_bound " << purge_bound);
      auto c = Consolidate(head, lsn_bound, purge_bound);
      INFO(c.status().ToString());
      REQUIRE(c.ok());
      for (const auto& d : c->deltas) CHECK(d.tag > lsn_bound);
      CHECK(c->base_tag <= std::max(lsn_bound, base_tag));
      auto view = BaseView::Parse(c->base);
      REQUIRE(view.ok());
      REQUIRE(view->Validate().ok());
      for (size_t i = 0; i < view->count(); ++i) {
        auto r = view->RecordAt(i);
        REQUIRE(r.ok());
        CHECK(r->lsn <= c->base_tag);  // earlier consolidations may have had higher bounds
        CHECK(!(r->tombstone && r->lsn < purge_bound));
      }
      PageNode* chain = BuildChain(l.get(), *c);
      REQUIRE(l->UpdateR(pid, head, chain));
      base_tag = c->base_tag;
      ++consolidations;
      for (auto it = model.begin(); it != model.end();) {
        if (it->second.deleted && it->second.lsn < purge_bound) {
          it = model.erase(it);
        } else {
          ++it;
        }
      }
    } else if (choice < 20) {
      // A flush adds LLAMA nodes that lookups must skip.
      auto f = l->Flush(pid, rnd.Uniform(next_lsn + 1), 0);
      REQUIRE(f.ok());
    } else {
      const std::string key = NodeKey(static_cast<int>(rnd.Uniform(key_space)));
      const uint64_t lsn = ++next_lsn;
      DeltaType type = static_cast<DeltaType>(1 + rnd.Uniform(4));
      const std::string value = std::string(rnd.Uniform(20), 'x') + std::to_string(lsn);
      const PageNode* head = ReadHead(l.get(), pid);
      auto payload = MakeRecordDelta(head, type, key, value, lsn);
      REQUIRE(payload.ok());
      PostDelta(l.get(), pid, *payload, lsn);
      model[key] = ModelEntry{type == DeltaType::kDelete ? "" : value, lsn,
                              type == DeltaType::kDelete};
    }
    const PageNode* head = ReadHead(l.get(), pid);
    CheckHints(head);
    CheckAgainstModel(head, model, key_space + 2);
  }
  CHECK(consolidations > 0);
  REQUIRE(l->Close().ok());
}

TEST_CASE("Consolidation keeps lookups identical", "[dc][bwtree]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rnd(seed);
  auto env = NewMemEnv();
  auto l = OpenOrDie(env.get());
  for (int round = 0; round < 20; ++round) {
    INFO("round " << round);
    const PageId pid = CreatePage(l.get(), EmptyLeaf());
    auto g = l->Enter();
    for (uint64_t lsn = 1; lsn <= 60; ++lsn) {
      const std::string key = NodeKey(static_cast<int>(rnd.Uniform(25)));
      auto type = static_cast<DeltaType>(1 + rnd.Uniform(4));
      auto payload = MakeRecordDelta(ReadHead(l.get(), pid), type, key, "v" + std::to_string(lsn),
                                     lsn);
      REQUIRE(payload.ok());
      PostDelta(l.get(), pid, *payload, lsn);
      if (rnd.OneIn(15)) {
        const PageNode* head = ReadHead(l.get(), pid);
        auto c = Consolidate(head, rnd.Uniform(lsn + 1));
        REQUIRE(c.ok());
        REQUIRE(l->UpdateR(pid, head, BuildChain(l.get(), *c)));
      }
    }
    const PageNode* before = ReadHead(l.get(), pid);
    auto c = Consolidate(before, rnd.Uniform(61));  // no purge: everything identical
    REQUIRE(c.ok());
    PageNode* after = BuildChain(l.get(), *c);
    for (int i = 0; i < 27; ++i) {
      LookupResult a = MustLookup(before, NodeKey(i));
      LookupResult b = MustLookup(after, NodeKey(i));
      CHECK(a.outcome == b.outcome);
      CHECK(a.value == b.value);
      CHECK(a.lsn == b.lsn);
    }
    CheckHints(after);
    l->DiscardChain(after);
  }
}

TEST_CASE("Consolidation folds the newest delta per key and keeps newer ones", "[dc][bwtree]") {
  auto env = NewMemEnv();
  auto l = OpenOrDie(env.get());
  std::vector<LeafRecord> recs = {{"a", "a1", 1, false}, {"c", "c1", 2, false},
                                  {"e", "", 3, true}};
  const PageId pid = CreatePage(l.get(), EncodeLeafBase(BaseHeader{}, recs), 3, 3);
  auto g = l->Enter();
  auto post = [&](DeltaType t, Slice key, Slice value, uint64_t lsn) {
    auto p = MakeRecordDelta(ReadHead(l.get(), pid), t, key, value, lsn);
    REQUIRE(p.ok());
    PostDelta(l.get(), pid, *p, lsn);
  };
  post(DeltaType::kUpdate, "c", "c2", 4);
  post(DeltaType::kInsert, "b", "b1", 5);
  post(DeltaType::kUpdate, "c", "c3", 6);
  post(DeltaType::kDelete, "a", "", 7);
  post(DeltaType::kUpsert, "c", "c4", 8);
  const PageNode* head = ReadHead(l.get(), pid);
  auto c = Consolidate(head, 6, /*purge_bound=*/4);
  REQUIRE(c.ok());
  // Folded: c3@6 (c2@4 dropped), b1@5. Kept: c4@8, delete a@7. e@3 purged.
  CHECK(c->folded == 2);
  CHECK(c->dropped == 1);
  CHECK(c->purged == 1);
  CHECK(c->base_tag == 6);
  REQUIRE(c->deltas.size() == 2);
  CHECK(c->deltas[0].tag == 8);
  CHECK(c->deltas[1].tag == 7);
  auto view = BaseView::Parse(c->base);
  REQUIRE(view.ok());
  REQUIRE(view->count() == 3);
  std::vector<std::string> got;
  for (size_t i = 0; i < 3; ++i) {
    auto r = view->RecordAt(i);
    REQUIRE(r.ok());
    got.push_back(r->key.ToString() + "=" + r->value.ToString() + "@" + std::to_string(r->lsn));
  }
  CHECK(got == std::vector<std::string>{"a=a1@1", "b=b1@5", "c=c3@6"});
  PageNode* chain = BuildChain(l.get(), *c);
  REQUIRE(l->UpdateR(pid, head, chain));
  head = ReadHead(l.get(), pid);
  CHECK(MustLookup(head, "a").outcome == LookupOutcome::kDeleted);
  CHECK(MustLookup(head, "c").value == Slice("c4"));
  CHECK(MustLookup(head, "e").outcome == LookupOutcome::kNotFound);
  CheckHints(head);
}

// Consolidate(head) copies the base's untouched records as bytes; gathering
// the chain and consolidating the image decodes and re-encodes every record.
// Both must build the same bytes.
TEST_CASE("Byte-copying consolidation equals the decoding one", "[dc][bwtree]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rnd(seed);
  auto env = NewMemEnv();
  auto l = OpenOrDie(env.get());
  for (int round = 0; round < 200; ++round) {
    INFO("round " << round);
    // A base of random even keys (some tombstones), then record deltas on
    // random keys and sometimes a split delta or two.
    std::vector<std::string> keys, values;
    for (int i = 0; i < 60; i += 1 + static_cast<int>(rnd.Uniform(3))) {
      keys.push_back(NodeKey(2 * i));
      values.push_back(rnd.OneIn(4) ? "" : std::string(rnd.Uniform(12), 'v'));
    }
    std::vector<LeafRecord> recs;
    for (size_t i = 0; i < keys.size(); ++i) {
      recs.push_back(LeafRecord{keys[i], values[i], 1 + rnd.Uniform(50), values[i].empty()});
    }
    BaseHeader h;
    if (rnd.OneIn(2)) {
      h.high_infinite = false;
      h.high_key = "l";
      h.right_sibling = 9;
    }
    const PageId pid = CreatePage(l.get(), EncodeLeafBase(h, recs), 50, 50);
    auto g = l->Enter();
    const int deltas = static_cast<int>(rnd.Uniform(20));
    for (int i = 0; i < deltas; ++i) {
      const uint64_t lsn = 51 + static_cast<uint64_t>(i);
      if (rnd.OneIn(8)) {
        const std::string separator = NodeKey(static_cast<int>(rnd.Uniform(120)));
        PostDelta(l.get(), pid, EncodeSplitDelta(separator, 70 + i), 0);
        continue;
      }
      // As the tree does: no record delta for a key the page sends away.
      const std::string key = NodeKey(static_cast<int>(rnd.Uniform(120)));
      if (MustLookup(ReadHead(l.get(), pid), key).outcome == LookupOutcome::kRedirect) continue;
      auto type = static_cast<DeltaType>(1 + rnd.Uniform(4));
      auto payload = MakeRecordDelta(ReadHead(l.get(), pid), type, key,
                                     std::string(rnd.Uniform(6), 'n'), lsn);
      REQUIRE(payload.ok());
      PostDelta(l.get(), pid, *payload, lsn);
    }
    const PageNode* head = ReadHead(l.get(), pid);
    const uint64_t lsn_bound = rnd.Uniform(80);
    const uint64_t purge_bound = rnd.OneIn(2) ? 0 : rnd.Uniform(80);
    INFO("lsn_bound " << lsn_bound << " purge_bound " << purge_bound);
    auto fast = Consolidate(head, lsn_bound, purge_bound);
    INFO(fast.status().ToString());
    REQUIRE(fast.ok());
    LeafImage image;
    REQUIRE(GatherLeaf(head, PageReader(), &image).ok());
    auto slow = Consolidate(image, lsn_bound, purge_bound);
    REQUIRE(slow.ok());
    CHECK(fast->base == slow->base);
    CHECK(fast->base_tag == slow->base_tag);
    CHECK(fast->folded == slow->folded);
    CHECK(fast->purged == slow->purged);
    CHECK(fast->dropped == slow->dropped);
    REQUIRE(fast->deltas.size() == slow->deltas.size());
    for (size_t i = 0; i < fast->deltas.size(); ++i) {
      CHECK(fast->deltas[i].payload == slow->deltas[i].payload);
      CHECK(fast->deltas[i].tag == slow->deltas[i].tag);
    }
    auto view = BaseView::Parse(fast->base);
    REQUIRE(view.ok());
    CHECK(view->Validate().ok());
    // Straight into a chain: the same nodes BuildChain makes.
    ConsolidatedPage stats;
    auto chain = ConsolidateChain(l.get(), head, lsn_bound, purge_bound, &stats);
    REQUIRE(chain.ok());
    std::vector<std::pair<std::string, uint64_t>> got, want;
    for (const PageNode* n = *chain; n != nullptr; n = n->next) {
      got.emplace_back(std::string(n->payload(), n->size), n->tag);
    }
    PageNode* built = BuildChain(l.get(), *fast);
    for (const PageNode* n = built; n != nullptr; n = n->next) {
      want.emplace_back(std::string(n->payload(), n->size), n->tag);
    }
    CHECK(got == want);
    CHECK(stats.folded == fast->folded);
    l->DiscardChain(*chain);
    l->DiscardChain(built);

    // A split's right half, from a random key up, both ways.
    const std::string low = NodeKey(static_cast<int>(rnd.Uniform(120)));
    INFO("from " << low);
    auto right = ConsolidateFrom(head, low, lsn_bound, purge_bound);
    REQUIRE(right.ok());
    LeafImage upper;
    upper.header = image.header;
    upper.header.low_key = low;
    upper.base_tag = image.base_tag;
    for (const LeafRecord& r : image.base) {
      if (r.key >= Slice(low)) upper.base.push_back(r);
    }
    for (const LeafImage::Delta& d : image.deltas) {
      if (d.d.key >= Slice(low)) upper.deltas.push_back(d);
    }
    auto slow_right = Consolidate(upper, lsn_bound, purge_bound);
    REQUIRE(slow_right.ok());
    CHECK(right->base == slow_right->base);
    CHECK(right->base_tag == slow_right->base_tag);
    REQUIRE(right->deltas.size() == slow_right->deltas.size());
    for (size_t i = 0; i < right->deltas.size(); ++i) {
      CHECK(right->deltas[i].payload == slow_right->deltas[i].payload);
    }
  }
}

TEST_CASE("Split delta redirects and is applied by consolidation", "[dc][bwtree]") {
  auto env = NewMemEnv();
  auto l = OpenOrDie(env.get());
  std::vector<std::string> keys, values;
  for (int i = 0; i < 10; ++i) {
    keys.push_back(NodeKey(2 * i));
    values.push_back("v" + std::to_string(i));
  }
  std::vector<LeafRecord> recs;
  for (int i = 0; i < 10; ++i) recs.push_back(LeafRecord{keys[i], values[i], 1u + i, false});
  const PageId pid = CreatePage(l.get(), EncodeLeafBase(BaseHeader{}, recs), 10, 10);
  auto g = l->Enter();
  PostDelta(l.get(), pid, EncodeSplitDelta(NodeKey(10), 77), 0);
  auto p = MakeRecordDelta(ReadHead(l.get(), pid), DeltaType::kUpsert, NodeKey(3), "new", 20);
  REQUIRE(p.ok());
  PostDelta(l.get(), pid, *p, 20);

  const PageNode* head = ReadHead(l.get(), pid);
  LookupResult r = MustLookup(head, NodeKey(12));
  CHECK(r.outcome == LookupOutcome::kRedirect);
  CHECK(r.redirect_kind == RedirectKind::kSplit);
  CHECK(r.redirect == 77);
  CHECK(MustLookup(head, NodeKey(10)).outcome == LookupOutcome::kRedirect);
  CHECK(MustLookup(head, NodeKey(4)).value == Slice("v2"));
  CHECK(MustLookup(head, NodeKey(3)).value == Slice("new"));
  PageId redirect = 0;
  auto lsn = LatestLsn(head, NodeKey(18), &redirect);
  REQUIRE(lsn.ok());
  CHECK(*lsn == 0);
  CHECK(redirect == 77);

  auto c = Consolidate(head, 15);
  REQUIRE(c.ok());
  REQUIRE(c->deltas.size() == 1);  // the upsert at LSN 20
  auto view = BaseView::Parse(c->base);
  REQUIRE(view.ok());
  REQUIRE(view->Validate().ok());
  CHECK(view->count() == 5);
  CHECK_FALSE(view->header().high_infinite);
  CHECK(view->header().high_key == Slice(NodeKey(10)));
  CHECK(view->header().right_sibling == 77);
  REQUIRE(l->UpdateR(pid, head, BuildChain(l.get(), *c)));
  head = ReadHead(l.get(), pid);
  r = MustLookup(head, NodeKey(12));
  CHECK(r.outcome == LookupOutcome::kRedirect);
  CHECK(r.redirect_kind == RedirectKind::kSibling);
  CHECK(r.redirect == 77);
  CHECK(MustLookup(head, NodeKey(8)).value == Slice("v4"));
  CHECK(MustLookup(head, NodeKey(3)).value == Slice("new"));
}

TEST_CASE("Remove-node and merge deltas", "[dc][bwtree]") {
  auto env = NewMemEnv();
  auto l = OpenOrDie(env.get());
  const PageId pid = CreatePage(l.get(), EmptyLeaf());
  auto g = l->Enter();
  PostDelta(l.get(), pid, EncodeMergeDelta("m", 55), 0);
  const PageNode* head = ReadHead(l.get(), pid);
  LookupResult r = MustLookup(head, "x");
  CHECK(r.outcome == LookupOutcome::kRedirect);
  CHECK(r.redirect_kind == RedirectKind::kMerge);
  CHECK(r.redirect == 55);
  CHECK(MustLookup(head, "a").outcome == LookupOutcome::kNotFound);
  CHECK(Consolidate(head, 100).status().code() == Code::kNotSupported);
  PostDelta(l.get(), pid, EncodeRemoveNodeDelta(), 0);
  CHECK(MustLookup(ReadHead(l.get(), pid), "a").outcome == LookupOutcome::kRemoved);
}

TEST_CASE("FindChild routes through index deltas and the inner base", "[dc][bwtree]") {
  auto env = NewMemEnv();
  auto l = OpenOrDie(env.get());
  BaseHeader h;
  h.type = NodeType::kInner;
  h.level = 1;
  h.low_key = "b";
  h.high_infinite = false;
  h.high_key = "x";
  h.right_sibling = 66;
  std::vector<InnerEntry> entries = {{"b", 10}, {"f", 11}, {"m", 12}};
  const PageId pid = CreatePage(l.get(), EncodeInnerBase(h, entries));
  auto g = l->Enter();
  auto child = [&](Slice key) {
    auto r = FindChild(ReadHead(l.get(), pid), key);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    return *r;
  };
  CHECK(child("a").outcome == LookupOutcome::kNotFound);
  CHECK(child("b").child == 10);
  CHECK(child("c").child == 10);
  CHECK(child("f").child == 11);
  CHECK(child("z").outcome == LookupOutcome::kRedirect);
  CHECK(child("z").redirect_kind == RedirectKind::kSibling);
  CHECK(child("z").redirect == 66);
  // Child 11 split at "h": new child 13 covers [h, m).
  PostDelta(l.get(), pid, EncodeIndexEntryDelta("h", 13, false, "m"), 0);
  CHECK(child("g").child == 11);
  CHECK(child("h").child == 13);
  CHECK(child("k").child == 13);
  CHECK(child("m").child == 12);
  // Child 12 removed into 13: [h, x) goes to 13.
  PostDelta(l.get(), pid, EncodeIndexTermDeleteDelta("h", 13, false, "x"), 0);
  CHECK(child("p").child == 13);
  CHECK(child("g").child == 11);
  PostDelta(l.get(), pid, EncodeSplitDelta("r", 70), 0);
  CHECK(child("s").redirect == 70);
  CHECK(child("s").redirect_kind == RedirectKind::kSplit);
  CHECK(child("p").child == 13);
  CHECK(Lookup(ReadHead(l.get(), pid), "p").status().IsCorruption());
}

TEST_CASE("Byte-copying inner consolidation equals gathering", "[dc][bwtree]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rnd(seed);
  auto env = NewMemEnv();
  auto l = OpenOrDie(env.get());
  const std::string high = NodeKey(80);
  int copies = 0, gathers = 0;
  for (int round = 0; round < 300; ++round) {
    INFO("round " << round);
    // An inner base as the tree writes them (no neighbours share a child)
    // over even keys from its low key; children come from a small set, so
    // that a delta's child often equals a neighbour's.
    BaseHeader h;
    h.type = NodeType::kInner;
    h.level = 1 + static_cast<uint8_t>(rnd.Uniform(3));
    const int first = 2 * static_cast<int>(rnd.Uniform(5));
    std::vector<std::string> seps;
    std::vector<InnerEntry> entries;
    for (int i = first; i < 80; i += 2 + 2 * static_cast<int>(rnd.Uniform(3))) {
      seps.push_back(i == first && first == 0 ? std::string() : NodeKey(i));
    }
    for (size_t i = 0; i < seps.size(); ++i) {
      PageId child = 0;
      do {
        child = 10 + rnd.Uniform(6);
      } while (i > 0 && child == entries.back().child);
      entries.push_back(InnerEntry{seps[i], child});
    }
    h.low_key = entries.front().separator;
    if (rnd.OneIn(2)) {
      h.high_infinite = false;
      h.high_key = high;
      h.right_sibling = 99;
    }
    const PageId pid = CreatePage(l.get(), EncodeInnerBase(h, entries));
    auto g = l->Enter();
    // Usually one index delta (a split's post or a merge's term delete) at
    // an existing or a new separator, sometimes below or above the range;
    // sometimes two, or a split delta as well.
    const int deltas = rnd.OneIn(5) ? 2 : 1;
    for (int i = 0; i < deltas; ++i) {
      const std::string sep = NodeKey(static_cast<int>(rnd.Uniform(90)));
      const PageId child = 10 + rnd.Uniform(7);
      PostDelta(l.get(), pid,
                rnd.OneIn(3) ? EncodeIndexTermDeleteDelta(sep, child, true, "")
                             : EncodeIndexEntryDelta(sep, child, true, ""));
    }
    if (rnd.OneIn(10)) PostDelta(l.get(), pid, EncodeSplitDelta(NodeKey(60), 98));
    const PageNode* head = ReadHead(l.get(), pid);
    size_t count = 0;
    bool copied = false;
    auto node = ConsolidateInnerChain(l.get(), head, &count, &copied);
    INFO(node.status().ToString());
    REQUIRE(node.ok());
    (copied ? copies : gathers)++;
    InnerImage image;
    REQUIRE(GatherInner(head, &image).ok());
    CHECK(std::string((*node)->payload(), (*node)->size) ==
          EncodeInnerBase(image.header, image.entries));
    CHECK(count == image.entries.size());
    CHECK((*node)->tag == 0);
    auto view = BaseView::Parse(Slice((*node)->payload(), (*node)->size));
    REQUIRE(view.ok());
    CHECK(view->count() == count);
    l->DiscardNode(*node);
  }
  // Both ways ran often enough to be compared.
  CHECK(copies > 100);
  CHECK(gathers > 50);
}

TEST_CASE("Stale hints do not change lookups", "[dc][bwtree]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rnd(seed);
  auto env = NewMemEnv();
  auto l = OpenOrDie(env.get());
  std::vector<std::string> keys;
  for (int i = 0; i < 50; ++i) keys.push_back(NodeKey(2 * i));
  std::vector<LeafRecord> recs;
  for (int i = 0; i < 50; ++i) recs.push_back(LeafRecord{keys[i], keys[i], 1, false});
  const PageId pid = CreatePage(l.get(), EncodeLeafBase(BaseHeader{}, recs), 1, 1);
  auto g = l->Enter();
  for (int i = 0; i < 20; ++i) {
    const int k = 2 * static_cast<int>(rnd.Uniform(50)) + 1;  // odd: not in the base
    const auto hint = static_cast<uint32_t>(rnd.Uniform(60));
    PostDelta(l.get(), pid, EncodeRecordDelta(DeltaType::kInsert, NodeKey(k), "d", 2 + i, hint), 2 + i);
  }
  const PageNode* head = ReadHead(l.get(), pid);
  for (int i = 0; i < 50; ++i) {
    LookupResult r = MustLookup(head, keys[i]);
    CHECK(r.outcome == LookupOutcome::kFound);
    CHECK(r.value == Slice(keys[i]));
    CHECK(r.hint == static_cast<uint32_t>(i));
  }
}

TEST_CASE("Keys and values over the limits are TooLarge", "[dc][bwtree]") {
  auto env = NewMemEnv();
  auto l = OpenOrDie(env.get());
  const PageId pid = CreatePage(l.get(), EmptyLeaf());
  auto g = l->Enter();
  const PageNode* head = ReadHead(l.get(), pid);
  const std::string big_key(4097, 'k');
  const std::string max_key(4096, 'k');
  CHECK(Lookup(head, big_key).status().code() == Code::kTooLarge);
  CHECK(Lookup(head, max_key).ok());
  CHECK(MakeRecordDelta(head, DeltaType::kInsert, "k", std::string((64 << 10) + 1, 'v'), 1)
            .status()
            .code() == Code::kTooLarge);
  CHECK(MakeRecordDelta(head, DeltaType::kInsert, "k", std::string(64 << 10, 'v'), 1).ok());
  Limits small;
  small.max_key_size = 3;
  small.max_value_size = 2;
  CHECK(CheckRecord(small, "abc", "de").ok());
  CHECK(CheckRecord(small, "abcd", "").code() == Code::kTooLarge);
  CHECK(CheckRecord(small, "a", "def").code() == Code::kTooLarge);
  CHECK(MakeRecordDelta(head, DeltaType::kDelete, "abc", "ignored", 1, small).ok());
  CHECK(MakeRecordDelta(head, DeltaType::kSplit, "a", "", 1).status().IsInvalidArgument());
}

TEST_CASE("Corrupt chain payloads are Corruption in page ops", "[dc][bwtree]") {
  auto env = NewMemEnv();
  auto l = OpenOrDie(env.get());
  const PageId pid = CreatePage(l.get(), EmptyLeaf());
  auto g = l->Enter();
  PostDelta(l.get(), pid, std::string("\x01\x02", 2), 1);  // a truncated insert
  const PageNode* head = ReadHead(l.get(), pid);
  CHECK(Lookup(head, "a").status().IsCorruption());
  CHECK(Consolidate(head, 10).status().IsCorruption());
}

// An empty leaf whose keys end below "t", with right sibling 77.
PageId CreateBoundedLeaf(Llama* l) {
  BaseHeader h;
  h.high_infinite = false;
  h.high_key = "t";
  h.right_sibling = 77;
  return CreatePage(l, EncodeLeafBase(h, {}));
}

TEST_CASE("RouteOf follows structure only", "[dc][bwtree]") {
  auto env = NewMemEnv();
  auto l = OpenOrDie(env.get());
  const PageId pid = CreateBoundedLeaf(l.get());
  auto g = l->Enter();
  auto route = [&](Slice key, bool through_remove = false) {
    auto r = RouteOf(ReadHead(l.get(), pid), key, through_remove);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    return *r;
  };
  CHECK(route("a").outcome == LookupOutcome::kNotFound);
  LookupResult r = route("u");  // at or above the base's high key
  CHECK(r.outcome == LookupOutcome::kRedirect);
  CHECK(r.redirect_kind == RedirectKind::kSibling);
  CHECK(r.redirect == 77);
  CHECK(r.redirect_key == Slice("t"));
  // A split; then a record delta for a key above it (as a merge's left page
  // holds): the record is passed over, the split decides.
  PostDelta(l.get(), pid, EncodeSplitDelta("m", 66), 0);
  PostDelta(l.get(), pid, EncodeRecordDelta(DeltaType::kUpsert, "p", "v", 9, kNoHint), 9);
  r = route("p");
  CHECK(r.outcome == LookupOutcome::kRedirect);
  CHECK(r.redirect_kind == RedirectKind::kSplit);
  CHECK(r.redirect == 66);
  CHECK(r.redirect_key == Slice("m"));
  CHECK(route("c").outcome == LookupOutcome::kNotFound);
  // A remove-node delta on top: removed, unless passed over.
  PostDelta(l.get(), pid, EncodeRemoveNodeDelta(), 0);
  CHECK(route("c").outcome == LookupOutcome::kRemoved);
  CHECK(route("c", true).outcome == LookupOutcome::kNotFound);
  CHECK(route("p", true).redirect == 66);
}

// Plain chains (page_ops.h): record deltas over a base are routed by the
// base alone and counted without a walk, through flush nodes; any structure
// delta ends that; consolidation's kept deltas are plain again.
TEST_CASE("Plain chains are known without a walk only while plain", "[dc][bwtree]") {
  auto env = NewMemEnv();
  auto l = OpenOrDie(env.get());
  const PageId pid = CreateBoundedLeaf(l.get());
  auto g = l->Enter();
  auto base_of = [](const PageNode* n) {
    while (n != nullptr && n->kind != NodeKind::kBase) n = n->next;
    return n;
  };
  const PageNode* base = base_of(ReadHead(l.get(), pid));
  REQUIRE(base != nullptr);
  auto post = [&](const std::string& payload, uint64_t tag, bool plain) {
    const PageNode* head = ReadHead(l.get(), pid);
    PageNode* d = MakeNode(l.get(), NodeKind::kDelta, payload, tag);
    if (plain) d->user_flags = PlainFlagsOver(head);
    REQUIRE(l->UpdateD(pid, head, d));
  };
  auto deltas = [&]() -> int {
    size_t n = 0;
    return PlainDeltas(ReadHead(l.get(), pid), &n) ? static_cast<int>(n) : -1;
  };
  auto route = [&](Slice key) {
    auto r = RouteOf(ReadHead(l.get(), pid), key);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    return *r;
  };
  CHECK(PlainBase(base) == base);
  CHECK(PlainBase(ReadHead(l.get(), pid)) == base);  // through a commit's flush node
  CHECK(deltas() == 0);
  for (int i = 1; i <= 3; ++i) {
    post(EncodeRecordDelta(DeltaType::kUpsert, NodeKey(i), "v", i, kNoHint), i, true);
    CHECK(PlainBase(ReadHead(l.get(), pid)) == base);
    CHECK(ReadHead(l.get(), pid)->base_hint == base);
    CHECK(deltas() == i);
  }
  CHECK(route("a").outcome == LookupOutcome::kNotFound);
  CHECK(route("u").redirect == 77);
  // A flush node on top is passed over and not counted.
  auto f = l->Flush(pid, 100, 0);
  REQUIRE(f.ok());
  REQUIRE(f->outcome == llama::FlushOutcome::kFlushed);
  CHECK(ReadHead(l.get(), pid)->kind == NodeKind::kFlush);
  CHECK(PlainBase(ReadHead(l.get(), pid)) == base);
  CHECK(deltas() == 3);
  post(EncodeRecordDelta(DeltaType::kUpsert, NodeKey(4), "v", 4, kNoHint), 4, true);
  CHECK(deltas() == 4);
  // A split: not plain any more, and a record delta above it is not either;
  // the split routes again.
  post(EncodeSplitDelta("m", 66), 0, false);
  CHECK(PlainBase(ReadHead(l.get(), pid)) == nullptr);
  post(EncodeRecordDelta(DeltaType::kUpsert, "c", "v", 9, kNoHint), 9, true);
  CHECK(ReadHead(l.get(), pid)->user_flags == 0);
  CHECK(deltas() == -1);
  CHECK(route("p").redirect == 66);
  CHECK(route("c").outcome == LookupOutcome::kNotFound);
  // Consolidated with deltas kept above a bound: plain again, counted.
  const PageNode* head = ReadHead(l.get(), pid);
  ConsolidatedPage stats;
  auto chain = ConsolidateChain(l.get(), head, 2, 0, &stats);
  REQUIRE(chain.ok());
  REQUIRE(l->UpdateR(pid, head, *chain));
  CHECK(stats.deltas.size() == 3);  // keys 3, 4 and "c"
  CHECK(deltas() == 3);
  const PageNode* top = ReadHead(l.get(), pid);
  CHECK(PlainBase(top) == base_of(top));
  CHECK(PlainBase(top) != nullptr);
  CHECK(route("p").redirect == 66);  // the split is the new base's high key
}

}  // namespace
}  // namespace deuteron::bwtree
