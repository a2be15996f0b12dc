// Concurrency stress tests of the LLAMA cache layer: updaters (Update-D with
// rising tags), consolidators (Update-R by the DC's rule), flushers with a
// moving bound, an evictor (a small memory budget, EnforceBudget, SwapOut) and
// readers, all on the same few pages; and system transactions (split-like
// SMOs, aborts, frees) running against flushes, evictions and checkpoints.
// Meant for the tsan and asan presets; each case is bounded by operation
// counts, not time.
//
// Logical entries: every delta carries one id ("u<thread>.<k>": the k-th
// update of that thread to that page); a consolidation folds the ids of the
// nodes it replaces into the new base's payload, so a page's set of ids only
// grows. Updates of one thread to one page are acknowledged in order, so
// "every id acknowledged before a read is present" is a per-thread prefix.
//
// Threads never use Catch assertions (not thread-safe): they count failures
// and keep the first message; the test checks after joining.
#include "dc/llama/llama.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "common/random.h"
#include "dc/llama/checkpoint.h"
#include "tests/dc/llama/llama_test_util.h"

namespace deuteron::llama {
namespace {

using test::Contents;
using test::CreatePage;
using test::kAll;
using test::MakeNode;
using test::OpenOrDie;

LlamaOptions StressOptions() {
  LlamaOptions o;
  o.lss.segment_size = 1 << 20;
  o.lss.buffer_size = 64 << 10;
  o.lss.buffer_count = 4;
  o.lss.io_threads = 1;
  o.mapping.max_pages = 1 << 16;
  // Far below the working set: threads that allocate nodes run the evictor.
  o.memory_budget = 48 << 10;
  return o;
}

// Ids in a payload: ';'-terminated tokens.
std::vector<std::string_view> Ids(std::string_view payload) {
  std::vector<std::string_view> out;
  while (!payload.empty()) {
    const size_t end = payload.find(';');
    if (end == std::string_view::npos) {
      out.push_back("<unterminated>");
      break;
    }
    out.push_back(payload.substr(0, end));
    payload.remove_prefix(end + 1);
  }
  return out;
}

// Failures seen by threads; checked after they are joined.
class Failures {
 public:
  void Add(const std::string& what) {
    std::lock_guard<std::mutex> l(mu_);
    if (count_++ == 0) first_ = what;
  }
  int count() const {
    std::lock_guard<std::mutex> l(mu_);
    return count_;
  }
  std::string first() const {
    std::lock_guard<std::mutex> l(mu_);
    return first_;
  }

 private:
  mutable std::mutex mu_;
  int count_ = 0;
  std::string first_;
};

// The pages under test and the ids written to them. A slot is one page; its
// per-updater counters say which ids exist (issued) and which every reader
// must see (acked).
constexpr int kMaxUpdaters = 2;
constexpr size_t kMaxSlots = 1024;

struct Slot {
  std::atomic<PageId> pid{0};
  std::atomic<uint64_t> issued[kMaxUpdaters] = {};
  std::atomic<uint64_t> acked[kMaxUpdaters] = {};
};

struct Pages {
  Slot slots[kMaxSlots];
  // Slots [0, published) are in use. Release by the publisher, after the
  // slot's pid; acquire by users.
  std::atomic<size_t> published{0};

  // One publisher at a time. False when every slot is taken.
  bool Publish(PageId pid) {
    const size_t s = published.load();
    if (s == kMaxSlots) return false;
    slots[s].pid.store(pid);
    published.store(s + 1);
    return true;
  }
};

// Checks a page state read at one moment. `acked` is what was acknowledged
// before the read began; the ids must be exactly one base's and the deltas'
// ids above it, none twice, none never written, none acknowledged missing.
// Returns "" or what is wrong.
std::string CheckChain(const PageNode* head, const Slot& slot, const uint64_t* acked,
                       int updaters) {
  if (head == nullptr) return "no state";
  std::set<std::string_view> seen;
  std::vector<std::vector<bool>> have(static_cast<size_t>(updaters));
  const PageNode* base = nullptr;
  uint64_t last_seq = ~0ull;
  uint64_t flush_bound = kAll;
  for (const PageNode* n = head; n != nullptr; n = n->next) {
    if (n->seq >= last_seq) return "seq " + std::to_string(n->seq) + " does not decrease";
    last_seq = n->seq;
    if (n->kind == NodeKind::kPartialSwap || (n->flags & kNodeSwapped) != 0) {
      return "Read returned a partly swapped-out chain";
    }
    if (n->kind == NodeKind::kFlush) {
      // Bounds only grow up a chain.
      if (n->tag > flush_bound) return "a flush bound grows down the chain";
      flush_bound = n->tag;
    }
    if (!n->is_data()) continue;
    if (base != nullptr) return "a data node below the base";
    if (n->kind == NodeKind::kBase) {
      base = n;
      if (n->next != nullptr) return "a node below the base";
    }
    for (std::string_view id : Ids(std::string_view(n->payload(), n->size))) {
      if (!seen.insert(id).second) return "id " + std::string(id) + " twice";
      if (id.empty()) return "empty id";
      if (id[0] != 'u') continue;  // a page's own base, or an SMO's
      const size_t dot = id.find('.');
      if (dot == std::string_view::npos) return "id " + std::string(id) + " is malformed";
      const int t = std::atoi(std::string(id.substr(1, dot - 1)).c_str());
      const uint64_t k = std::strtoull(std::string(id.substr(dot + 1)).c_str(), nullptr, 10);
      if (t < 0 || t >= updaters || k == 0 || k > slot.issued[t].load()) {
        return "id " + std::string(id) + " was never written";
      }
      auto& h = have[static_cast<size_t>(t)];
      if (h.size() <= k) h.resize(k + 1);
      h[k] = true;
    }
  }
  if (base == nullptr) return "no base";
  for (int t = 0; t < updaters; ++t) {
    const auto& h = have[static_cast<size_t>(t)];
    for (uint64_t k = 1; k <= acked[t]; ++k) {
      if (k >= h.size() || !h[k]) {
        return "acknowledged id u" + std::to_string(t) + "." + std::to_string(k) + " missing";
      }
    }
  }
  return "";
}

// Reads slot `s` and checks it; "" or what is wrong.
std::string ReadAndCheck(Llama* l, const Slot& slot, int updaters) {
  uint64_t acked[kMaxUpdaters] = {};
  for (int t = 0; t < updaters; ++t) acked[t] = slot.acked[t].load();
  auto g = l->Enter();
  auto r = l->Read(slot.pid.load());
  if (!r.ok()) return "read: " + r.status().ToString();
  const std::string why = CheckChain(*r, slot, acked, updaters);
  return why.empty() ? why : "page " + std::to_string(slot.pid.load()) + ": " + why;
}

// Update-D of the next id of updater `t` on slot `s`, retried until its CAS
// wins; acknowledged after.
bool Update(Llama* l, Slot* slot, int t, std::atomic<uint64_t>* next_tag, Failures* f) {
  const uint64_t k = slot->issued[t].fetch_add(1) + 1;
  const std::string payload = "u" + std::to_string(t) + "." + std::to_string(k) + ";";
  {
    auto g = l->Enter();
    PageNode* d = MakeNode(l, NodeKind::kDelta, payload, next_tag->fetch_add(1));
    for (;;) {
      auto head = l->Read(slot->pid.load());
      if (!head.ok()) {
        l->DiscardNode(d);
        f->Add("update: " + head.status().ToString());
        return false;
      }
      if (l->UpdateD(slot->pid.load(), *head, d)) break;
    }
  }
  slot->acked[t].store(k);
  return true;
}

// Update-R by the DC's rule: nodes with tag <= bound, and the base, fold into
// a new base holding their ids; nodes above the bound stay on top as copies.
// False if the page changed meanwhile.
// The chain it reads is checked like a reader's.
bool Consolidate(Llama* l, const Slot& slot, uint64_t bound, int updaters, Failures* f) {
  uint64_t acked[kMaxUpdaters] = {};
  for (int t = 0; t < updaters; ++t) acked[t] = slot.acked[t].load();
  const PageId pid = slot.pid.load();
  auto g = l->Enter();
  auto head = l->Read(pid);
  if (!head.ok()) {
    f->Add("consolidate: " + head.status().ToString());
    return false;
  }
  if (const std::string why = CheckChain(*head, slot, acked, updaters); !why.empty()) {
    f->Add("consolidate: page " + std::to_string(pid) + ": " + why);
    return false;
  }
  std::vector<const PageNode*> data;
  for (const PageNode* n = *head; n != nullptr; n = n->next) {
    if (n->is_data()) data.push_back(n);
  }
  std::string folded;
  uint64_t base_tag = 0;
  std::vector<const PageNode*> kept;
  // Oldest first, so the base's ids stay in chain order (not required).
  for (auto it = data.rbegin(); it != data.rend(); ++it) {
    const PageNode* n = *it;
    if (n->tag <= bound || n->kind == NodeKind::kBase) {
      folded.append(n->payload(), n->size);
      base_tag = std::max(base_tag, n->tag);
    } else {
      kept.push_back(n);
    }
  }
  PageNode* top = MakeNode(l, NodeKind::kBase, folded, base_tag);
  for (const PageNode* n : kept) {
    PageNode* d = MakeNode(l, NodeKind::kDelta, std::string_view(n->payload(), n->size), n->tag);
    d->next = top;
    top = d;
  }
  if (l->UpdateR(pid, *head, top)) return true;
  l->DiscardChain(top);
  return false;
}

// Flushes the page under no bound until clean, and returns its contents.
std::vector<std::string> FlushAllOf(Llama* l, PageId pid) {
  auto g = l->Enter();
  for (;;) {
    auto r = l->Flush(pid, kAll, 0);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    REQUIRE(r->outcome != FlushOutcome::kBlocked);
    if (r->outcome == FlushOutcome::kClean) break;
  }
  auto head = l->Read(pid);
  REQUIRE(head.ok());
  return Contents(*head);
}

// The end state: every id written is present exactly once (CheckChain with
// everything acknowledged); then flushed, closed (or not), reopened, equal.
void CheckEndState(Llama* l, Pages* pages, int updaters) {
  for (size_t s = 0; s < pages->published.load(); ++s) {
    Slot& slot = pages->slots[s];
    for (int t = 0; t < updaters; ++t) REQUIRE(slot.issued[t].load() == slot.acked[t].load());
    INFO("slot " << s);
    CHECK(ReadAndCheck(l, slot, updaters) == "");
  }
}

TEST_CASE("Update-D, Update-R, flushes, eviction and reads on shared pages",
          "[dc][llama][stress]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  constexpr int kPages = 6;
  constexpr int kUpdates = 1500;  // per updater
  constexpr int kMinRounds = 300;  // of every other thread
  auto mem = NewMemEnv();
  LlamaOptions o = StressOptions();
  Pages pages;
  std::map<PageId, std::vector<std::string>> expected;
  {
    auto l = OpenOrDie(mem.get(), o);
    for (int i = 0; i < kPages; ++i) {
      REQUIRE(pages.Publish(CreatePage(l.get(), "B" + std::to_string(i) + ";", 0, kAll)));
    }
    std::atomic<uint64_t> next_tag{1};
    std::atomic<int> updaters_done{0};
    Failures failures;
    std::atomic<uint64_t> consolidations{0}, flushes{0}, swaps{0}, reads{0};
    auto running = [&](int round) {
      return round < kMinRounds || updaters_done.load() < kMaxUpdaters;
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < kMaxUpdaters; ++t) {
      threads.emplace_back([&, t] {
        Random64 rnd(seed + static_cast<uint64_t>(t));
        for (int i = 0; i < kUpdates; ++i) {
          if (!Update(l.get(), &pages.slots[rnd.Uniform(kPages)], t, &next_tag, &failures)) break;
        }
        updaters_done++;
      });
    }
    threads.emplace_back([&] {  // consolidator
      Random64 rnd(seed + 10);
      for (int round = 0; running(round); ++round) {
        const uint64_t tag = next_tag.load();
        const uint64_t bound = tag - std::min(tag, rnd.Uniform(40));
        if (Consolidate(l.get(), pages.slots[rnd.Uniform(kPages)], bound, kMaxUpdaters,
                        &failures)) {
          consolidations++;
        }
      }
    });
    threads.emplace_back([&] {  // flusher
      Random64 rnd(seed + 11);
      for (int round = 0; running(round); ++round) {
        const uint64_t tag = next_tag.load();
        const uint64_t bound = rnd.OneIn(4) ? kAll : tag - std::min(tag, rnd.Uniform(40));
        {
          auto g = l->Enter();
          auto r = l->Flush(pages.slots[rnd.Uniform(kPages)].pid.load(), bound, round);
          if (!r.ok()) failures.Add("flush: " + r.status().ToString());
          if (r.ok() && r->outcome == FlushOutcome::kFlushed) flushes++;
        }
        if (round % 8 == 0) {
          Status s = l->MakeStable(l->Tail());
          if (!s.ok()) failures.Add("make stable: " + s.ToString());
        }
      }
    });
    threads.emplace_back([&] {  // evictor
      Random64 rnd(seed + 12);
      for (int round = 0; running(round); ++round) {
        Status s = l->EnforceBudget();
        if (!s.ok()) failures.Add("enforce budget: " + s.ToString());
        s = l->MakeStable(l->Tail());
        if (!s.ok()) failures.Add("make stable: " + s.ToString());
        auto g = l->Enter();
        for (int i = 0; i < 3; ++i) {
          swaps += l->SwapOut(pages.slots[rnd.Uniform(kPages)].pid.load());
        }
      }
    });
    threads.emplace_back([&] {  // reader
      Random64 rnd(seed + 13);
      for (int round = 0; running(round); ++round) {
        const std::string why =
            ReadAndCheck(l.get(), pages.slots[rnd.Uniform(kPages)], kMaxUpdaters);
        if (!why.empty()) failures.Add(why);
        reads++;
      }
    });
    for (auto& t : threads) t.join();
    INFO("first failure: " << failures.first());
    CHECK(failures.count() == 0);
    const auto stats = l->GetStats();
    INFO("consolidations " << consolidations << " flushes " << flushes << " swaps " << swaps
                           << " reads " << reads << " page loads " << stats.page_loads
                           << " eviction passes " << stats.eviction_passes);
    CHECK(consolidations.load() > 0);
    CHECK(flushes.load() > 0);
    CHECK(stats.eviction_passes > 0);
    CHECK(stats.page_loads > 0);
    CheckEndState(l.get(), &pages, kMaxUpdaters);
    for (size_t s = 0; s < kPages; ++s) {
      const PageId pid = pages.slots[s].pid.load();
      expected[pid] = FlushAllOf(l.get(), pid);
    }
    REQUIRE(l->Close().ok());
  }
  auto l = OpenOrDie(mem.get(), o);
  for (const auto& [pid, contents] : expected) {
    INFO("page " << pid);
    auto g = l->Enter();
    auto r = l->Read(pid);
    REQUIRE(r.ok());
    CHECK(Contents(*r) == contents);
  }
  CheckEndState(l.get(), &pages, kMaxUpdaters);
}

// What the SMO thread did, for the checks after joining.
struct SmoRecord {
  PageId left = 0, right = 0;
  std::string id;  // "Q<i>" on right's base, "S<i>" as left's delta
  bool committed = false;
};

// The address of the page's newest LSS state (its topmost flush node, or the
// entry of a page that is wholly swapped out).
LssAddress LssHead(Llama* l, PageId pid) {
  const uint64_t e = l->mapping_table()->Load(pid);
  if (MappingTable::IsLss(e)) return MappingTable::ToLss(e);
  if (!MappingTable::IsMemory(e)) return 0;
  for (const PageNode* n = MappingTable::ToPointer<const PageNode>(e); n != nullptr; n = n->next) {
    if (n->kind == NodeKind::kFlush || n->kind == NodeKind::kPartialSwap) {
      return AsFlush(n)->address;
    }
  }
  return 0;
}

TEST_CASE("System transactions commit whole against flushes, evictions and checkpoints",
          "[dc][llama][stress][txn]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  constexpr int kPages = 4;
  constexpr int kSmos = 600;
  constexpr int kUpdates = 1500;  // per updater
  constexpr int kMinRounds = 200;
  auto mem = NewMemEnv();
  LlamaOptions o = StressOptions();
  o.checkpoint_on_close = false;
  Pages pages;
  std::vector<SmoRecord> smos;
  std::vector<PageId> frees;  // freed by committed SMOs
  std::set<PageId> allocated_later;  // PIDs the SMO thread got more than once
  std::map<PageId, std::vector<std::string>> expected;
  {
    auto l = OpenOrDie(mem.get(), o);
    for (int i = 0; i < kPages; ++i) {
      REQUIRE(pages.Publish(CreatePage(l.get(), "B" + std::to_string(i) + ";", 0, kAll)));
    }
    std::atomic<uint64_t> next_tag{1};
    std::atomic<bool> smos_done{false};
    std::atomic<int> updaters_done{0};
    Failures failures;
    auto running = [&](int round) {
      return round < kMinRounds || !smos_done.load() || updaters_done.load() < kMaxUpdaters;
    };
    std::vector<std::thread> threads;
    threads.emplace_back([&] {  // SMOs: split-like commits, aborts, frees of unpublished pages
      Random64 rnd(seed + 20);
      std::vector<PageId> doomed;  // committed, never published: free to free
      std::map<PageId, int> times_allocated;
      for (int i = 0; i < kSmos; ++i) {
        auto g = l->Enter();
        auto txn = l->TBegin();
        SmoRecord rec;
        rec.id = std::to_string(i);
        rec.left = pages.slots[rnd.Uniform(pages.published.load())].pid.load();
        auto right = l->TAllocate(txn.get());
        if (!right.ok()) {
          failures.Add("allocate: " + right.status().ToString());
          break;
        }
        rec.right = *right;
        if (++times_allocated[rec.right] > 1) allocated_later.insert(rec.right);
        auto u = l->TUpdateD(txn.get(), rec.right, nullptr,
                             MakeNode(l.get(), NodeKind::kBase, "Q" + rec.id + ";", 0));
        if (!u.ok() || !*u) failures.Add("TUpdateD on a private page failed");
        PageId extra = 0;
        if (rnd.OneIn(3)) {  // a second new page, kept unpublished (freed later)
          auto e = l->TAllocate(txn.get());
          if (!e.ok()) {
            failures.Add("allocate: " + e.status().ToString());
            l->TAbort(txn.get());
            break;
          }
          extra = *e;
          if (++times_allocated[extra] > 1) allocated_later.insert(extra);
          auto ue = l->TUpdateD(txn.get(), extra, nullptr,
                                MakeNode(l.get(), NodeKind::kBase, "X" + rec.id + ";", 0));
          if (!ue.ok() || !*ue) failures.Add("TUpdateD on a private page failed");
        }
        PageId victim = 0;
        if (!doomed.empty() && rnd.OneIn(2)) {
          const size_t at = rnd.Uniform(doomed.size());
          victim = doomed[at];
          Status s = l->TFree(txn.get(), victim);
          if (!s.ok()) failures.Add("free: " + s.ToString());
          doomed.erase(doomed.begin() + static_cast<std::ptrdiff_t>(at));
        }
        if (rnd.OneIn(6)) {
          l->TAbort(txn.get());
          if (victim != 0) doomed.push_back(victim);
          smos.push_back(rec);
          continue;
        }
        PageNode* d = MakeNode(l.get(), NodeKind::kDelta, "S" + rec.id + ";", 0);
        bool committed = false;
        for (int attempt = 0; attempt < 1000 && !committed; ++attempt) {
          auto head = l->Read(rec.left);
          if (!head.ok()) {
            failures.Add("read: " + head.status().ToString());
            break;
          }
          auto c = l->TCommit(txn.get(), rec.left, *head, d, kAll, static_cast<uint64_t>(i));
          if (!c.ok()) {
            failures.Add("commit: " + c.status().ToString());
            break;
          }
          committed = *c;
        }
        if (!committed) {
          failures.Add("SMO " + rec.id + " never committed");
          l->DiscardNode(d);
          l->TAbort(txn.get());
          break;
        }
        rec.committed = true;
        if (LssHead(l.get(), rec.right) == 0) {
          failures.Add("SMO " + rec.id + ": new page has no LSS state");
        }
        if (victim != 0) frees.push_back(victim);
        if (extra != 0) doomed.push_back(extra);
        smos.push_back(rec);
        // Now updaters, flushers and readers use it.
        if (!pages.Publish(rec.right)) failures.Add("out of slots");
      }
      smos_done = true;
    });
    for (int t = 0; t < kMaxUpdaters; ++t) {
      threads.emplace_back([&, t] {
        Random64 rnd(seed + static_cast<uint64_t>(t));
        for (int i = 0; i < kUpdates; ++i) {
          Slot* slot = &pages.slots[rnd.Uniform(pages.published.load())];
          if (!Update(l.get(), slot, t, &next_tag, &failures)) break;
        }
        updaters_done++;
      });
    }
    threads.emplace_back([&] {  // flusher and consolidator
      Random64 rnd(seed + 21);
      for (int round = 0; running(round); ++round) {
        const Slot& slot = pages.slots[rnd.Uniform(pages.published.load())];
        const PageId pid = slot.pid.load();
        const uint64_t tag = next_tag.load();
        const uint64_t bound = tag - std::min(tag, rnd.Uniform(30));
        if (rnd.OneIn(4)) {
          Consolidate(l.get(), slot, bound, kMaxUpdaters, &failures);
          continue;
        }
        auto g = l->Enter();
        auto r = l->Flush(pid, rnd.OneIn(3) ? kAll : bound, round);
        if (!r.ok()) failures.Add("flush: " + r.status().ToString());
      }
    });
    threads.emplace_back([&] {  // evictor and checkpointer
      Random64 rnd(seed + 22);
      for (int round = 0; running(round); ++round) {
        Status s = l->EnforceBudget();
        if (!s.ok()) failures.Add("enforce budget: " + s.ToString());
        {
          // Any PID, private ones included: SwapOut must leave those alone.
          auto g = l->Enter();
          const PageId hw = l->mapping_table()->high_water();
          for (int i = 0; i < 4; ++i) (void)l->SwapOut(1 + rnd.Uniform(hw - 1));
        }
        if (round % 4 == 0) {
          s = l->Checkpoint();
          if (!s.ok()) failures.Add("checkpoint: " + s.ToString());
        }
      }
    });
    threads.emplace_back([&] {  // reader
      Random64 rnd(seed + 23);
      for (int round = 0; running(round); ++round) {
        const std::string why =
            ReadAndCheck(l.get(), pages.slots[rnd.Uniform(pages.published.load())], kMaxUpdaters);
        if (!why.empty()) failures.Add(why);
      }
    });
    for (auto& t : threads) t.join();
    INFO("first failure: " << failures.first());
    REQUIRE(failures.count() == 0);
    CHECK(l->GetStats().txn_commits > kSmos / 2);
    CHECK(l->GetStats().txn_aborts > 0);
    CHECK(!frees.empty());
    CheckEndState(l.get(), &pages, kMaxUpdaters);

    // End state: every committed SMO is whole, aborted ones left nothing.
    for (size_t s = 0; s < pages.published.load(); ++s) {
      const PageId pid = pages.slots[s].pid.load();
      expected[pid] = FlushAllOf(l.get(), pid);
    }
    // A quiescent checkpoint, then no closing one: recovery replays the LSS
    // after it. (Recovering from a checkpoint written concurrently with
    // commits is the next case's subject.)
    REQUIRE(l->Checkpoint().ok());
    REQUIRE(l->MakeStable(l->Tail()).ok());
    l->TEST_SkipCloseOnDestroy();
  }
  auto l = OpenOrDie(mem.get(), o);
  auto holds = [&](PageId pid, const std::string& id) {
    auto g = l->Enter();
    auto r = l->Read(pid);
    if (!r.ok() || *r == nullptr) return false;
    for (const std::string& c : Contents(*r)) {
      for (std::string_view x : Ids(std::string_view(c).substr(0, c.rfind('@')))) {
        if (x == id) return true;
      }
    }
    return false;
  };
  for (const auto& [pid, contents] : expected) {
    INFO("page " << pid);
    auto g = l->Enter();
    auto r = l->Read(pid);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    CHECK(Contents(*r) == contents);
  }
  CheckEndState(l.get(), &pages, kMaxUpdaters);
  for (const SmoRecord& s : smos) {
    INFO("SMO " << s.id << ": page " << s.left << " -> page " << s.right);
    CHECK(holds(s.left, "S" + s.id) == s.committed);
    if (s.committed) {
      CHECK(holds(s.right, "Q" + s.id));
    } else if (allocated_later.count(s.right) == 0) {
      auto g = l->Enter();
      CHECK(l->Read(s.right).status().IsNotFound());
    }
  }
  for (PageId f : frees) {
    if (allocated_later.count(f) != 0) continue;
    INFO("freed page " << f);
    auto g = l->Enter();
    CHECK(l->Read(f).status().IsNotFound());
  }
}

// A checkpoint is a promise about recovery: its entries, with the LSS
// replayed from its RSP, give every page's state. So a system transaction
// whose record lies below the RSP (it is not replayed) must show in the
// checkpoint whole: its new page allocated, its freed pages free. This case
// commits transactions (each with one new page and a batch of frees) while
// another thread seals buffers and a third checkpoints the moment Hi-Stable
// moves, and checks every checkpoint against the transactions' records.
//
// Regression: TCommit used to free PIDs and drop its pages from the private
// set only after lss_->Commit(), when the record can already be stable
// (io_threads 0: the committer writes a sealed buffer inside Commit). A
// checkpoint starting in that window took an RSP above the record, yet
// recorded the new pages as free (still private) and the freed ones as
// allocated; recovery from it lost the SMO's new page while keeping its
// final delta.
TEST_CASE("A checkpoint taken as a transaction becomes stable sees the transaction whole",
          "[dc][llama][stress][txn]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  constexpr int kTxns = 600;
  constexpr int kFreesPerTxn = 24;
  auto mem = NewMemEnv();
  LlamaOptions o = StressOptions();
  o.memory_budget = 0;
  o.lss.io_threads = 0;  // the committing thread writes a sealed buffer itself
  o.checkpoint_on_close = false;
  auto l = OpenOrDie(mem.get(), o);
  const uint64_t store_id = l->lss()->identity().store_id;
  const PageId left = CreatePage(l.get(), "L;", 0, kAll);

  // A PID's events in order; `began` is the tick before its transaction began.
  struct PidEvent {
    LssAddress address;  // inside the transaction's record
    bool allocated;      // else freed
    uint64_t began;
  };
  std::map<PageId, std::vector<PidEvent>> events;  // written by the committer only
  struct Snapshot {
    LssAddress rsp;
    uint64_t ended;  // tick after the checkpoint returned
    std::vector<uint64_t> entries;
  };
  std::vector<Snapshot> snapshots;  // written by the checkpointer only
  std::atomic<uint64_t> ticks{1};
  std::atomic<bool> done{false};
  std::atomic<int> checkpoints_taken{0};
  Failures failures;

  std::thread committer([&] {
    std::vector<PageId> unused;  // allocated by earlier transactions, never used
    for (int i = 0; i < kTxns; ++i) {
      if (i % 100 == 99) {
        // On a loaded machine the checkpointer may not run at all while the
        // transactions do: wait (a bounded time) for one checkpoint after
        // the commits so far, so that every run checks some.
        const int want = checkpoints_taken.load() + 1;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (checkpoints_taken.load() < want && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::yield();
        }
      }
      const uint64_t began = ticks.fetch_add(1);
      auto g = l->Enter();
      auto txn = l->TBegin();
      auto right = l->TAllocate(txn.get());
      if (!right.ok()) {
        failures.Add("allocate: " + right.status().ToString());
        break;
      }
      auto u = l->TUpdateD(txn.get(), *right, nullptr,
                           MakeNode(l.get(), NodeKind::kBase, "R" + std::to_string(i) + ";", 0));
      if (!u.ok() || !*u) failures.Add("TUpdateD on a private page failed");
      std::vector<PageId> fresh, freed;
      for (int k = 0; k < kFreesPerTxn; ++k) {
        auto e = l->TAllocate(txn.get());
        if (!e.ok()) {
          failures.Add("allocate: " + e.status().ToString());
          break;
        }
        fresh.push_back(*e);
      }
      while (!unused.empty() && freed.size() < kFreesPerTxn) {
        Status s = l->TFree(txn.get(), unused.back());
        if (!s.ok()) failures.Add("free: " + s.ToString());
        freed.push_back(unused.back());
        unused.pop_back();
      }
      auto head = l->Read(left);
      if (!head.ok()) {
        failures.Add("read: " + head.status().ToString());
        l->TAbort(txn.get());
        break;
      }
      PageNode* d = MakeNode(l.get(), NodeKind::kDelta, "J" + std::to_string(i) + ";", 0);
      auto c = l->TCommit(txn.get(), left, *head, d, kAll, 0);
      if (!c.ok() || !*c) {
        failures.Add("commit failed");
        l->DiscardNode(d);
        l->TAbort(txn.get());
        break;
      }
      const LssAddress at = LssHead(l.get(), left);
      events[*right].push_back(PidEvent{at, true, began});
      for (PageId p : fresh) events[p].push_back(PidEvent{at, true, began});
      for (PageId p : freed) events[p].push_back(PidEvent{at, false, began});
      unused.insert(unused.end(), fresh.begin(), fresh.end());
    }
    done = true;
  });
  std::thread sealer([&] {
    while (!done.load()) {
      Status s = l->MakeStable(l->Tail());
      if (!s.ok()) failures.Add("make stable: " + s.ToString());
    }
  });
  std::thread checkpointer([&] {
    LssAddress seen = l->HiStable();
    while (!done.load()) {
      const LssAddress now = l->HiStable();
      if (now == seen) continue;  // spin: checkpoint the moment Hi-Stable moves
      seen = now;
      Status s = l->Checkpoint();
      if (!s.ok()) failures.Add("checkpoint: " + s.ToString());
      const uint64_t ended = ticks.fetch_add(1);
      auto c = ReadLatestCheckpoint(mem.get(), "/db", store_id);
      if (!c.ok()) {
        failures.Add("read checkpoint: " + c.status().ToString());
        continue;
      }
      snapshots.push_back(Snapshot{c->rsp, ended, c->entries});
      checkpoints_taken.fetch_add(1);
    }
  });
  committer.join();
  sealer.join();
  checkpointer.join();
  INFO("first failure: " << failures.first());
  REQUIRE(failures.count() == 0);
  INFO(snapshots.size() << " checkpoints");
  int checked = 0;
  for (const Snapshot& c : snapshots) {
    for (const auto& [pid, list] : events) {
      // The PID's newest event below the RSP; the checkpoint may show it or a
      // later one that began before the checkpoint ended, nothing older.
      size_t last = list.size();
      for (size_t i = 0; i < list.size(); ++i) {
        if (list[i].address < c.rsp) last = i;
      }
      if (last == list.size()) continue;
      if (last + 1 < list.size() && list[last + 1].began < c.ended) continue;
      const uint64_t entry = pid - 1 < c.entries.size() ? c.entries[pid - 1] : 0;
      INFO("checkpoint with RSP " << c.rsp << ": page " << pid << " was "
           << (list[last].allocated ? "allocated" : "freed") << " by the transaction at "
           << list[last].address << "; checkpoint entry " << entry);
      CHECK((entry != 0) == list[last].allocated);
      ++checked;
    }
  }
  CHECK(checked > 0);
  REQUIRE(l->MakeStable(l->Tail()).ok());
  l->TEST_SkipCloseOnDestroy();
}

// The evictor walks PIDs without knowing the access method's structure, so
// pages it looks at may be freed by a committing transaction under it; that
// must not fail eviction.
//
// Regression: EnforceBudget checked that the page was in memory, then called
// Flush, whose Read returns NotFound once a TCommit freed the page in
// between; EnforceBudget returned that error and stopped its pass.
TEST_CASE("Eviction tolerates pages freed under it",
          "[dc][llama][stress][txn][budget]") {
  constexpr int kRounds = 400;
  auto mem = NewMemEnv();
  LlamaOptions o = StressOptions();
  o.memory_budget = 1;  // always over: every pass walks every page
  auto l = OpenOrDie(mem.get(), o);
  std::atomic<bool> done{false};
  Failures failures;
  std::thread churn([&] {
    for (int i = 0; i < kRounds; ++i) {
      auto g = l->Enter();
      auto txn = l->TBegin();
      auto pid = l->TAllocate(txn.get());
      if (!pid.ok()) {
        failures.Add("allocate: " + pid.status().ToString());
        break;
      }
      auto u = l->TUpdateD(txn.get(), *pid, nullptr, MakeNode(l.get(), NodeKind::kBase, "x;", 0));
      auto c = l->TCommit(txn.get(), 0, nullptr, nullptr, kAll, 0);
      if (!u.ok() || !*u || !c.ok() || !*c) {
        failures.Add("create failed");
        break;
      }
      // An unflushed delta: the evictor must flush the page to drop it.
      PageNode* d = MakeNode(l.get(), NodeKind::kDelta, "y;", 1);
      bool updated = false;
      for (int attempt = 0; attempt < 1000 && !updated; ++attempt) {
        auto head = l->Read(*pid);  // the evictor may change the page: retry
        if (!head.ok()) break;
        updated = l->UpdateD(*pid, *head, d);
      }
      if (!updated) {
        l->DiscardNode(d);
        failures.Add("update failed");
        break;
      }
      auto txn2 = l->TBegin();
      Status s = l->TFree(txn2.get(), *pid);
      auto c2 = l->TCommit(txn2.get(), 0, nullptr, nullptr, kAll, 0);
      if (!s.ok() || !c2.ok() || !*c2) {
        failures.Add("free failed");
        break;
      }
    }
    done = true;
  });
  std::thread evictor([&] {
    while (!done.load()) {
      Status s = l->EnforceBudget();
      if (!s.ok()) failures.Add("enforce budget: " + s.ToString());
    }
  });
  churn.join();
  evictor.join();
  INFO(failures.count() << " failures, first: " << failures.first());
  CHECK(failures.count() == 0);
}

// Issue 37: the undo of a failed commit freed the flush nodes it had put on
// its private pages at once, while Flush (as FlushAll runs it), SwapOut, the
// evictor and checkpoints may have loaded them from the mapping table. Here
// every other commit of a split-like transaction fails at its commit point
// (TEST_SetCommitFault) while those run on every page; under ASan a node
// freed at once is a use after free, under TSan a race. A failed commit is
// retried once, then aborted.
TEST_CASE("Failed commits under concurrent flushes, swap-outs and checkpoints",
          "[dc][llama][stress][txn]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  constexpr int kSmos = 600;
  auto mem = NewMemEnv();
  LlamaOptions o = StressOptions();
  o.checkpoint_on_close = false;
  auto l = OpenOrDie(mem.get(), o);
  std::vector<PageId> pages;
  for (int i = 0; i < 4; ++i) pages.push_back(CreatePage(l.get(), "B" + std::to_string(i) + ";", 0, kAll));
  std::atomic<uint64_t> commits{0}, faults{0};
  l->TEST_SetCommitFault([&](PageId) {
    if (commits.fetch_add(1) % 2 != 0) return false;
    faults.fetch_add(1);
    return true;
  });
  std::atomic<bool> done{false};
  Failures failures;
  std::vector<std::thread> threads;
  threads.emplace_back([&] {  // flushes of every page, as FlushAll
    while (!done.load()) {
      const PageId high = l->mapping_table()->high_water();
      for (PageId pid = 1; pid < high; ++pid) {
        auto g = l->Enter();
        auto f = l->Flush(pid, kAll, 0);
        if (!f.ok() && !f.status().IsNotFound()) failures.Add("flush: " + f.status().ToString());
      }
    }
  });
  threads.emplace_back([&] {  // swap-outs of every page
    while (!done.load()) {
      const PageId high = l->mapping_table()->high_water();
      for (PageId pid = 1; pid < high; ++pid) {
        auto g = l->Enter();
        l->SwapOut(pid);
      }
    }
  });
  threads.emplace_back([&] {  // checkpoints and the evictor
    while (!done.load()) {
      Status s = l->Checkpoint();
      if (!s.ok()) failures.Add("checkpoint: " + s.ToString());
      s = l->EnforceBudget();
      if (!s.ok()) failures.Add("enforce budget: " + s.ToString());
    }
  });
  Random64 rnd(seed);
  for (int i = 0; i < kSmos && failures.count() == 0; ++i) {
    auto g = l->Enter();
    auto txn = l->TBegin();
    const int news = 1 + static_cast<int>(rnd.Uniform(2));
    bool ok = true;
    for (int j = 0; j < news && ok; ++j) {
      auto pid = l->TAllocate(txn.get());
      if (!pid.ok()) {
        failures.Add("allocate: " + pid.status().ToString());
        ok = false;
        break;
      }
      auto u = l->TUpdateD(txn.get(), *pid, nullptr,
                           MakeNode(l.get(), NodeKind::kBase, "N" + std::to_string(i) + ";", 0));
      if (!u.ok() || !*u) {
        failures.Add("TUpdateD on a private page failed");
        ok = false;
      }
    }
    const PageId left = pages[rnd.Uniform(pages.size())];
    PageNode* d = MakeNode(l.get(), NodeKind::kDelta, "S" + std::to_string(i) + ";", 0);
    bool committed = false;
    for (int attempt = 0; ok && attempt < 2 && !committed; ++attempt) {
      auto head = l->Read(left);
      if (!head.ok()) {
        failures.Add("read: " + head.status().ToString());
        break;
      }
      auto c = l->TCommit(txn.get(), left, *head, d, kAll, 0);
      if (!c.ok()) {
        failures.Add("commit: " + c.status().ToString());
        break;
      }
      committed = *c;
    }
    if (!committed) {
      l->DiscardNode(d);
      l->TAbort(txn.get());
    }
  }
  done = true;
  for (std::thread& t : threads) t.join();
  l->TEST_SetCommitFault(nullptr);
  INFO(failures.count() << " failures, first: " << failures.first());
  CHECK(failures.count() == 0);
  CHECK(faults.load() > 0);
  REQUIRE(l->Close().ok());
}

}  // namespace
}  // namespace deuteron::llama
