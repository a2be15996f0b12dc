// Crash tests of the LLAMA cache layer through the fault-injecting Env: a
// deterministic workload (page creation by system transactions, split-like
// SMOs, frees, deltas with scattered tags, flushes under bounds, Update-R
// consolidations, swap-outs, Mk-Stable, checkpoints and cleaning over several
// segments) is run against a model; the store dies at the N-th read, write,
// sync or metadata I/O (or at a random point without an error), is reopened,
// and every page must come back exactly as the model says.
//
// The model (what it assumes):
//  1. A page's durable state changes only by records in the LSS: a flush, a
//     system transaction's inner records, a relocation by the cleaner. A
//     relocation copies the page's durable state unchanged, so it is not
//     modeled. Every other record is stamped with an LSS address inside it.
//  2. Recovery restores a prefix of the LSS: everything below P, Hi-Stable
//     after reopening (the first invalid position). P is at least Hi-Stable
//     before the crash: whatever was reported stable survives. A record lies
//     in one flush buffer and Hi-Stable is a buffer base, so a record is in the
//     prefix iff its address is below P.
//  3. Hence each page's expected state is the one its newest record below P
//     gave it: the flushed data nodes at that flush, in chain order; empty
//     for an allocation without a state; absent (NotFound) for a free or when
//     no record is below P. System transactions are stamped with one address,
//     so all of their records are in the prefix or none is.
//  4. Flushed-ness follows page_node.h: a flush with bound B takes every
//     unflushed data node with tag <= max(B, the page's bound), which is B
//     after an Update-R (the new chain has no flush node); nothing to take is
//     kClean, and a page with something to take whose base is unflushed with
//     a tag above that is kBlocked. The model predicts each
//     outcome and the test checks it, and before each change it checks the
//     in-memory chain against the model, so the model cannot drift silently.
//  5. The workload runs on one thread with io_threads 0, so it is replayed
//     exactly from its seed and the N-th I/O is the same point in every run.
//     The random-point variant uses an I/O thread and is not replayable
//     exactly; its checks hold for any interleaving.
//
// Every data node's payload is its unique name, '#', and filler derived from
// the name, so a node of void, torn or foreign bytes cannot pass as one the
// workload wrote.
#include "dc/llama/llama.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "common/fault_env.h"
#include "common/random.h"
#include "tests/dc/llama/llama_test_util.h"

namespace deuteron::llama {
namespace {

using test::kAll;
using test::MakeNode;
using test::OpenOrDie;

using Op = FaultInjectionEnv::Op;

constexpr uint64_t kDefaultSeed = 0x11a3a5eedull;
constexpr int kSteps = 500;                 // workload steps per run
constexpr size_t kMaxPageBytes = 24 << 10;  // consolidate above this (a state fits a buffer)
constexpr size_t kMinLivePages = 6;         // frees keep at least this many pages

// Fixed by default, so the I/O points are the same on every machine;
// DEUTERON_SEED replays or explores another workload.
uint64_t CrashSeed() {
  const char* e = std::getenv("DEUTERON_SEED");
  return e != nullptr && *e != '\0' ? TestSeed() : kDefaultSeed;
}

// Small segments so that the workload's ~1.5 MiB of records span several
// (cleaning needs whole segments behind the tail); a page state fits one
// 64 KiB buffer.
LlamaOptions CrashOptions() {
  LlamaOptions o;
  o.lss.segment_size = 256 << 10;
  o.lss.buffer_size = 64 << 10;
  o.lss.buffer_count = 4;
  o.lss.io_threads = 0;
  o.lss.recycle_pool = 1;
  o.mapping.max_pages = 1 << 16;
  // Automatic cleaning too, as a DC runs (issue 33), besides the workload's
  // own Clean calls.
  o.cleaning_trigger_segments = 3;
  o.cleaning_target_segments = 2;
  return o;
}


uint64_t Fnv(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

// Filler bytes: the alphabet repeated, long enough for any offset + length.
constexpr size_t kMaxFiller = 16 + 6000;
const std::string& FillerPool() {
  static const std::string pool = [] {
    std::string p;
    while (p.size() < kMaxFiller + 26) p += "abcdefghijklmnopqrstuvwxyz";
    return p;
  }();
  return pool;
}

// A node's filler: 16..6015 bytes of the alphabet, length and offset derived
// from its name.
std::string_view FillerFor(std::string_view name) {
  const uint64_t h = Fnv(name);
  return std::string_view(FillerPool()).substr(h % 26, 16 + (h >> 8) % (kMaxFiller - 16));
}

// A node's payload: its name, '#', then its filler.
std::string PayloadFor(std::string_view name) {
  std::string p(name);
  p.push_back('#');
  p.append(FillerFor(name));
  return p;
}

// A data node named `name` (its payload is PayloadFor(name)).
PageNode* MakeNamedNode(Llama* l, NodeKind kind, std::string_view name, uint64_t tag) {
  return MakeNode(l, kind, PayloadFor(name), tag);
}

// Data nodes of a chain, newest first, as "name@tag"; a payload that is not
// exactly PayloadFor(its name) shows as "BAD:<first bytes>".
std::vector<std::string> Nodes(const PageNode* head) {
  std::vector<std::string> out;
  for (const PageNode* n = head; n != nullptr; n = n->next) {
    if (!n->is_data()) continue;
    const std::string_view p(n->payload(), n->size);
    const size_t hash = p.find('#');
    const std::string_view name = p.substr(0, hash == std::string_view::npos ? 0 : hash);
    if (hash == std::string_view::npos || p.substr(hash + 1) != FillerFor(name)) {
      out.push_back("BAD:" + std::string(p.substr(0, 24)));
    } else {
      out.push_back(std::string(name) + "@" + std::to_string(n->tag));
    }
  }
  return out;
}

// The topmost flush node's record address: the page was just written by a
// flush or a system transaction.
LssAddress TopFlushAddress(Llama* l, PageId pid) {
  auto r = l->Read(pid);
  REQUIRE(r.ok());
  REQUIRE(*r != nullptr);
  REQUIRE((*r)->kind == NodeKind::kFlush);
  return AsFlush(*r)->address;
}

// ---------------------------------------------------------------------------
// The model

struct MNode {
  std::string name;
  uint64_t tag = 0;
  bool flushed = false;
  size_t bytes = 0;
  std::string Text() const { return name + "@" + std::to_string(tag); }
};

struct MPage {
  std::vector<MNode> nodes;  // newest first; empty: allocated without a state
  bool has_flush = false;    // a flush node defines flushed-ness
  uint64_t bound = 0;        // its bound

  size_t Bytes() const {
    size_t b = 0;
    for (const MNode& n : nodes) b += n.bytes;
    return b;
  }
  std::vector<std::string> Chain() const {
    std::vector<std::string> out;
    for (const MNode& n : nodes) out.push_back(n.Text());
    return out;
  }
  std::vector<std::string> Flushed() const {
    std::vector<std::string> out;
    for (const MNode& n : nodes) {
      if (n.flushed) out.push_back(n.Text());
    }
    return out;
  }
  // Rule 4: the outcome of Flush(max_tag), applied when `apply`.
  FlushOutcome Flush(uint64_t max_tag, bool apply) {
    if (nodes.empty()) return FlushOutcome::kClean;
    const uint64_t eff = has_flush ? std::max(bound, max_tag) : max_tag;
    // An unflushed base above the bound blocks the flush even with nothing
    // else under it: it may hold records under the bound (llama.md).
    const MNode& base = nodes.back();
    if (!base.flushed && base.tag > eff) return FlushOutcome::kBlocked;
    bool any = false;
    for (const MNode& n : nodes) any |= !n.flushed && n.tag <= eff;
    if (!any) return FlushOutcome::kClean;
    if (apply) {
      for (MNode& n : nodes) n.flushed |= n.tag <= eff;
      has_flush = true;
      bound = eff;
    }
    return FlushOutcome::kFlushed;
  }
};

enum class EventKind { kState, kEmpty, kFree };

struct Event {
  LssAddress address;  // inside the record
  EventKind kind;
  std::vector<std::string> contents;  // kState: the durable state, newest first
};

// A split-like SMO: `right` allocated with base `right_name`, connected by
// delta `connect` on `left`, in one system transaction.
struct Smo {
  PageId left = 0, right = 0;
  std::string right_name, connect;
  bool later_freed = false;  // a later transaction freed left or right
};

class Workload {
 public:
  explicit Workload(uint64_t seed) : rnd_(seed) {}

  // Runs up to kSteps steps, stopping after `stop_after` steps when it is not
  // negative, or at the first failed step, whose status it returns: the
  // process dies there and nothing else runs.
  Status Run(Llama* l, int stop_after) {
    l_ = l;
    for (int i = 0; i < 8; ++i) {
      RETURN_IF_ERROR(CreateTxn());
      ++steps_;
    }
    while (steps_ < kSteps && (stop_after < 0 || steps_ < stop_after)) {
      RETURN_IF_ERROR(Step());
      ++steps_;
    }
    return Status::OK();
  }

  int steps() const { return steps_; }
  int cleans() const { return cleans_; }
  PageId max_pid() const { return max_pid_; }
  const std::map<PageId, std::vector<Event>>& history() const { return history_; }
  const std::vector<Smo>& smos() const { return smos_; }
  // Logical ids a node holds: its own name, and for a consolidated base the
  // ids of every node folded into it.
  const std::set<std::string>* IdsOf(const std::string& text) const {
    const std::string name = text.substr(0, text.find('@'));
    auto it = ids_.find(name);
    return it == ids_.end() ? nullptr : &it->second;
  }

 private:
  Status Step() {
    const uint64_t r = rnd_.Uniform(100);
    if (r < 34) return AddDelta(PickStatePage());
    if (r < 48) return FlushOne(PickStatePage(), FlushBound());
    if (r < 56) {
      const PageId pid = PickStatePage();
      RETURN_IF_ERROR(Consolidate(pid, FlushBound()));
      if (rnd_.OneIn(2)) return FlushOne(pid, FlushBound());
      return Status::OK();
    }
    if (r < 63) return Split();
    if (r < 68) return CreateTxn();
    if (r < 75) return l_->MakeStable(l_->Tail());
    if (r < 79) return l_->Checkpoint();
    if (r < 85) return SwapOut();
    if (r < 90) return Verify(PickStatePage());
    if (r < 94) return Clean();
    return FlushAll();
  }

  std::string NewName(const char* prefix) { return prefix + std::to_string(next_name_++); }

  // Tags arrive out of order (different keys' LSNs), bounds trail the clock.
  uint64_t NextTag() {
    clock_ += 10;
    return clock_ - std::min<uint64_t>(clock_ - 1, rnd_.Uniform(60));
  }
  uint64_t FlushBound() {
    if (rnd_.OneIn(5)) return kAll;
    return clock_ - std::min(clock_, rnd_.Uniform(100));
  }

  PageId PickStatePage() {
    std::vector<PageId> pids;
    for (const auto& [pid, m] : live_) {
      if (!m.nodes.empty()) pids.push_back(pid);
    }
    REQUIRE(!pids.empty());
    return pids[rnd_.Uniform(pids.size())];
  }
  // A page to free, or 0 (not `keep`; only while enough pages are left).
  PageId PickVictim(PageId keep) {
    if (live_.size() <= kMinLivePages || !rnd_.OneIn(2)) return 0;
    std::vector<PageId> pids;
    for (const auto& [pid, m] : live_) {
      if (pid != keep) pids.push_back(pid);
    }
    return pids[rnd_.Uniform(pids.size())];
  }

  void Record(PageId pid, LssAddress address, EventKind kind, std::vector<std::string> contents) {
    history_[pid].push_back({address, kind, std::move(contents)});
    max_pid_ = std::max(max_pid_, pid);
  }

  void ModelFree(PageId victim, LssAddress address) {
    live_.erase(victim);
    Record(victim, address, EventKind::kFree, {});
    for (Smo& s : smos_) s.later_freed |= s.left == victim || s.right == victim;
  }

  // Reads the page and checks the in-memory chain against the model.
  Result<const PageNode*> ReadChecked(PageId pid) {
    ASSIGN_OR_RETURN(const PageNode* head, l_->Read(pid));
    INFO("page " << pid << " at step " << steps_);
    REQUIRE(Nodes(head) == live_[pid].Chain());
    return head;
  }

  Status Verify(PageId pid) {
    auto g = l_->Enter();
    return ReadChecked(pid).status();
  }

  Status AddDelta(PageId pid) {
    MPage& m = live_[pid];
    // The DC consolidates long chains; so does the model, keeping every page
    // state far below a flush buffer.
    if (m.Bytes() > kMaxPageBytes) return Consolidate(pid, kAll);
    const std::string name = NewName("d");
    const uint64_t tag = NextTag();
    auto g = l_->Enter();
    ASSIGN_OR_RETURN(const PageNode* head, ReadChecked(pid));
    PageNode* d = MakeNamedNode(l_, NodeKind::kDelta, name, tag);
    REQUIRE(l_->UpdateD(pid, head, d));
    m.nodes.insert(m.nodes.begin(), MNode{name, tag, false, d->size});
    ids_[name] = {name};
    return Status::OK();
  }

  Status FlushOne(PageId pid, uint64_t bound) {
    MPage& m = live_[pid];
    auto g = l_->Enter();
    RETURN_IF_ERROR(ReadChecked(pid).status());
    const FlushOutcome want = m.Flush(bound, false);
    ASSIGN_OR_RETURN(FlushResult r, l_->Flush(pid, bound, steps_));
    INFO("page " << pid << " bound " << bound << " at step " << steps_);
    REQUIRE(static_cast<int>(r.outcome) == static_cast<int>(want));
    if (r.outcome == FlushOutcome::kFlushed) {
      m.Flush(bound, true);
      Record(pid, r.address, EventKind::kState, m.Flushed());
    }
    return Status::OK();
  }

  Status FlushAll() {
    std::vector<PageId> pids;
    for (const auto& [pid, m] : live_) {
      if (!m.nodes.empty()) pids.push_back(pid);
    }
    for (PageId pid : pids) RETURN_IF_ERROR(FlushOne(pid, kAll));
    return l_->MakeStable(l_->Tail());
  }

  // Update-R by the DC's rule: nodes with tag <= bound (and the base) are
  // folded into a new base; nodes above it stay on top as copied deltas.
  Status Consolidate(PageId pid, uint64_t bound) {
    MPage& m = live_[pid];
    auto g = l_->Enter();
    ASSIGN_OR_RETURN(const PageNode* head, ReadChecked(pid));
    const std::string name = NewName("c");
    std::set<std::string> folded;
    uint64_t base_tag = 0;
    std::vector<MNode> kept;
    for (size_t i = 0; i < m.nodes.size(); ++i) {
      const MNode& n = m.nodes[i];
      if (n.tag <= bound || i + 1 == m.nodes.size()) {
        folded.insert(ids_[n.name].begin(), ids_[n.name].end());
        base_tag = std::max(base_tag, n.tag);
      } else {
        kept.push_back(MNode{n.name, n.tag, false, n.bytes});
      }
    }
    PageNode* base = MakeNamedNode(l_, NodeKind::kBase, name, base_tag);
    PageNode* top = base;
    for (auto it = kept.rbegin(); it != kept.rend(); ++it) {
      PageNode* d = MakeNamedNode(l_, NodeKind::kDelta, it->name, it->tag);
      d->next = top;
      top = d;
    }
    REQUIRE(l_->UpdateR(pid, head, top));
    ids_[name] = std::move(folded);
    kept.push_back(MNode{name, base_tag, false, base->size});
    m.nodes = std::move(kept);
    m.has_flush = false;
    m.bound = 0;
    return Status::OK();
  }

  // A split-like SMO: allocate `right`, give it a base, maybe free another
  // page, and commit with the connecting delta on `left` as the final update.
  Status Split() {
    const PageId left = PickStatePage();
    const std::string right_name = NewName("s");
    const std::string connect = NewName("j");
    auto g = l_->Enter();
    auto txn = l_->TBegin();
    Result<PageId> right = l_->TAllocate(txn.get());
    if (!right.ok()) {
      l_->TAbort(txn.get());
      return right.status();
    }
    auto u = l_->TUpdateD(txn.get(), *right, nullptr,
                          MakeNamedNode(l_, NodeKind::kBase, right_name, 0));
    REQUIRE(u.ok());
    REQUIRE(*u);
    const PageId victim = PickVictim(left);
    if (victim != 0) REQUIRE(l_->TFree(txn.get(), victim).ok());
    Result<const PageNode*> head = ReadChecked(left);
    if (!head.ok()) {
      l_->TAbort(txn.get());
      return head.status();
    }
    MPage& lm = live_[left];
    uint64_t max_tag = FlushBound();
    if (!lm.nodes.back().flushed && lm.nodes.back().tag > max_tag) max_tag = kAll;
    PageNode* d = MakeNamedNode(l_, NodeKind::kDelta, connect, 0);
    Result<bool> c = l_->TCommit(txn.get(), left, *head, d, max_tag, steps_);
    if (!c.ok()) {
      l_->DiscardNode(d);
      l_->TAbort(txn.get());
      return c.status();
    }
    REQUIRE(*c);
    lm.nodes.insert(lm.nodes.begin(), MNode{connect, 0, false, d->size});
    ids_[connect] = {connect};
    REQUIRE(lm.Flush(max_tag, true) == FlushOutcome::kFlushed);
    MPage rm;
    rm.nodes.push_back(MNode{right_name, 0, true, PayloadFor(right_name).size()});
    rm.has_flush = true;
    rm.bound = max_tag;
    ids_[right_name] = {right_name};
    live_[*right] = rm;
    const LssAddress at = TopFlushAddress(l_, left);
    Record(left, at, EventKind::kState, lm.Flushed());
    Record(*right, at, EventKind::kState, rm.Flushed());
    if (victim != 0) ModelFree(victim, at);
    smos_.push_back(Smo{left, *right, right_name, connect, false});
    return Status::OK();
  }

  // A system transaction that creates a page (flushed by the commit), maybe
  // allocates one without a state, and maybe frees one.
  Status CreateTxn() {
    const std::string name = NewName("n");
    const uint64_t bound = FlushBound();
    const uint64_t tag = bound == kAll ? NextTag() : rnd_.Uniform(bound + 1);
    auto g = l_->Enter();
    auto txn = l_->TBegin();
    Result<PageId> pid = l_->TAllocate(txn.get());
    if (!pid.ok()) {
      l_->TAbort(txn.get());
      return pid.status();
    }
    auto u = l_->TUpdateD(txn.get(), *pid, nullptr, MakeNamedNode(l_, NodeKind::kBase, name, tag));
    REQUIRE(u.ok());
    REQUIRE(*u);
    PageId empty = 0;
    if (rnd_.OneIn(4)) {
      Result<PageId> e = l_->TAllocate(txn.get());
      if (!e.ok()) {
        l_->TAbort(txn.get());
        return e.status();
      }
      empty = *e;
    }
    const PageId victim = PickVictim(0);
    if (victim != 0) REQUIRE(l_->TFree(txn.get(), victim).ok());
    Result<bool> c = l_->TCommit(txn.get(), 0, nullptr, nullptr, bound, steps_);
    if (!c.ok()) {
      l_->TAbort(txn.get());
      return c.status();
    }
    REQUIRE(*c);
    MPage m;
    m.nodes.push_back(MNode{name, tag, true, PayloadFor(name).size()});
    m.has_flush = true;
    m.bound = bound;
    ids_[name] = {name};
    live_[*pid] = m;
    const LssAddress at = TopFlushAddress(l_, *pid);
    Record(*pid, at, EventKind::kState, m.Flushed());
    if (empty != 0) {
      live_[empty] = MPage{};
      Record(empty, at, EventKind::kEmpty, {});
    }
    if (victim != 0) ModelFree(victim, at);
    return Status::OK();
  }

  Status SwapOut() {
    RETURN_IF_ERROR(l_->MakeStable(l_->Tail()));
    auto g = l_->Enter();
    for (int i = 0; i < 3; ++i) (void)l_->SwapOut(PickStatePage());
    return Status::OK();
  }

  Status Clean() {
    RETURN_IF_ERROR(l_->MakeStable(l_->Tail()));
    if (l_->lss()->TailSegment() < l_->lss()->LowestSegment() + 2) return Status::OK();
    ASSIGN_OR_RETURN(CleanResult r, l_->Clean(1));
    cleans_ += static_cast<int>(r.segments_cleaned);
    return Status::OK();
  }

  Random64 rnd_;
  Llama* l_ = nullptr;
  int steps_ = 0;
  int next_name_ = 0;
  int cleans_ = 0;
  uint64_t clock_ = 0;
  PageId max_pid_ = 0;
  std::map<PageId, MPage> live_;  // allocated pages and their in-memory chains
  std::map<PageId, std::vector<Event>> history_;
  std::vector<Smo> smos_;
  std::map<std::string, std::set<std::string>> ids_;
};

// ---------------------------------------------------------------------------
// Running and checking

struct Expected {
  EventKind kind;  // kFree also for a page with no record in the prefix
  std::vector<std::string> contents;
};

// Rule 3: each page's state given the recovered prefix [.., recovered).
std::map<PageId, Expected> ExpectedAt(const Workload& w, LssAddress recovered) {
  std::map<PageId, Expected> out;
  for (PageId pid = 1; pid <= w.max_pid(); ++pid) out[pid] = Expected{EventKind::kFree, {}};
  for (const auto& [pid, events] : w.history()) {
    for (const Event& e : events) {
      if (e.address < recovered) out[pid] = Expected{e.kind, e.contents};
    }
  }
  return out;
}

// Checks every page against `expected`; returns the recovered states.
// `also_known` names a node written after recovery.
std::map<PageId, std::vector<std::string>> CheckPages(Llama* l, const Workload& w,
                                                      const std::map<PageId, Expected>& expected,
                                                      const std::string& also_known = "") {
  std::map<PageId, std::vector<std::string>> got;
  auto g = l->Enter();
  for (const auto& [pid, want] : expected) {
    INFO("page " << pid);
    auto r = l->Read(pid);
    if (want.kind == EventKind::kFree) {
      INFO(r.status().ToString());
      CHECK(r.status().IsNotFound());
      continue;
    }
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    if (want.kind == EventKind::kEmpty) {
      CHECK(*r == nullptr);
      continue;
    }
    got[pid] = Nodes(*r);
    CHECK(got[pid] == want.contents);
    // No void, torn or unknown content: every node is one the workload wrote.
    for (const std::string& text : got[pid]) {
      INFO(text);
      CHECK((w.IdsOf(text) != nullptr || text == also_known));
    }
  }
  return got;
}

// Each SMO is all or nothing: the right page has its base iff the left page
// has the connecting delta (or a base consolidated from it).
void CheckSmos(const Workload& w, const std::map<PageId, std::vector<std::string>>& got) {
  auto holds = [&](PageId pid, const std::string& id) {
    auto it = got.find(pid);
    if (it == got.end()) return false;
    for (const std::string& text : it->second) {
      const std::set<std::string>* ids = w.IdsOf(text);
      if (ids != nullptr && ids->count(id) != 0) return true;
    }
    return false;
  };
  for (const Smo& s : w.smos()) {
    if (s.later_freed) continue;
    INFO("SMO " << s.connect << ": page " << s.left << " -> page " << s.right);
    CHECK(holds(s.right, s.right_name) == holds(s.left, s.connect));
  }
}

struct CrashPoint {
  Op op = Op::kWrite;
  uint64_t n = 0;        // fail the n-th I/O of kind op after opening; 0: none
  int stop_after = -1;   // without a failure: crash after this many steps
  CrashMode mode = CrashMode::kDropUnsynced;
  int io_threads = 0;
  // Also fail the recovery_n-th I/O of kind recovery_op of the first reopen
  // and crash again (opened or not) before the reopen that is checked.
  Op recovery_op = Op::kWrite;
  uint64_t recovery_n = 0;
};

struct RunCounts {
  uint64_t reads = 0, writes = 0, syncs = 0, metadata = 0;
  int steps = 0, cleans = 0;
  uint64_t segments = 0;
};

// One life of the store: run the workload until it fails (or stops), crash,
// reopen, check; then write once more, close, reopen and check again.
RunCounts CrashAndRecover(uint64_t seed, const CrashPoint& p) {
  INFO("seed " << seed << ", " << (p.n != 0 ? FaultInjectionEnv::OpName(p.op) : "no") << " failure at " << p.n
               << ", stop after " << p.stop_after << ", "
               << (p.mode == CrashMode::kDropUnsynced ? "drop" : "tear") << " mode, io_threads "
               << p.io_threads << ", " << (p.recovery_n != 0 ? FaultInjectionEnv::OpName(p.recovery_op) : "no")
               << " failure in recovery at " << p.recovery_n);
  LlamaOptions o = CrashOptions();
  o.lss.io_threads = p.io_threads;
  auto mem = NewMemEnv();
  FaultInjectionEnv env(mem.get(), seed + p.n);
  Workload w(seed);
  RunCounts counts;
  LssAddress stable = 0;
  std::string died;
  {
    auto l = OpenOrDie(&env, o);
    const uint64_t r0 = env.OpCount(Op::kRead), w0 = env.OpCount(Op::kWrite),
                   s0 = env.OpCount(Op::kSync), m0 = env.OpCount(Op::kMetadata);
    if (p.n != 0) env.FailNth(p.op, p.n, Code::kIOError);
    Status s = w.Run(l.get(), p.stop_after);
    died = s.ToString();
    counts.reads = env.OpCount(Op::kRead) - r0;
    counts.writes = env.OpCount(Op::kWrite) - w0;
    counts.syncs = env.OpCount(Op::kSync) - s0;
    counts.metadata = env.OpCount(Op::kMetadata) - m0;
    counts.steps = w.steps();
    counts.cleans = w.cleans();
    counts.segments = l->lss()->TailSegment() + 1;
    // What was reported stable; the process dies now, nothing else runs.
    stable = l->HiStable();
    REQUIRE(env.SimulateCrash(p.mode).ok());
    l->TEST_SkipCloseOnDestroy();
  }
  INFO("stopped after " << counts.steps << " steps: " << died << "; stable " << stable);
  env.ClearFailures();
  if (p.recovery_n != 0) {
    // The process dies again while recovering (cutting the torn tail, say).
    env.FailNth(p.recovery_op, p.recovery_n, Code::kIOError);
    auto r = Llama::Open(&env, "/db", o);
    INFO("interrupted recovery: " << r.status().ToString());
    REQUIRE(env.SimulateCrash(p.mode == CrashMode::kDropUnsynced ? CrashMode::kTearUnsynced
                                                                 : CrashMode::kDropUnsynced)
                .ok());
    if (r.ok()) (*r)->TEST_SkipCloseOnDestroy();
    env.ClearFailures();
  }
  std::map<PageId, Expected> expected;
  PageId extra = 0;
  {
    auto l = OpenOrDie(&env, o);  // recovery never fails: torn tails are cut
    const LssAddress recovered = l->HiStable();
    INFO("recovered up to " << recovered);
    CHECK(recovered >= stable);
    expected = ExpectedAt(w, recovered);
    const auto got = CheckPages(l.get(), w, expected);
    CheckSmos(w, got);
    // The reopened store takes new writes after the cut tail: a delta on a
    // page that survived, and a new page.
    for (const auto& [pid, want] : expected) {
      if (want.kind == EventKind::kState) {
        extra = pid;
        break;
      }
    }
    {
    auto g = l->Enter();
    if (extra != 0) {
      auto head = l->Read(extra);
      REQUIRE(head.ok());
      PageNode* d = MakeNamedNode(l.get(), NodeKind::kDelta, "after-crash", 7);
      REQUIRE(l->UpdateD(extra, *head, d));
      auto f = l->Flush(extra, kAll, 0);
      REQUIRE(f.ok());
      CHECK(f->outcome == FlushOutcome::kFlushed);
      expected[extra].contents.insert(expected[extra].contents.begin(), "after-crash@7");
    }
    auto txn = l->TBegin();
    auto created = l->TAllocate(txn.get());
    REQUIRE(created.ok());
    auto u = l->TUpdateD(txn.get(), *created, nullptr,
                         MakeNamedNode(l.get(), NodeKind::kBase, "after-crash", 7));
    REQUIRE(u.ok());
    REQUIRE(*u);
    auto c = l->TCommit(txn.get(), 0, nullptr, nullptr, kAll, 0);
    REQUIRE(c.ok());
    REQUIRE(*c);
    expected[*created] = Expected{EventKind::kState, {"after-crash@7"}};
    }
    REQUIRE(l->Close().ok());
  }
  auto l = OpenOrDie(&env, o);
  CheckPages(l.get(), w, expected, "after-crash@7");
  return counts;
}

// The I/O points to crash at: every one, or about `samples` spread evenly
// (always including the first and the last).
std::vector<uint64_t> CrashPoints(uint64_t count, uint64_t samples) {
  std::vector<uint64_t> out;
  if (count == 0) return out;
  const uint64_t stride = samples == 0 ? 1 : std::max<uint64_t>(1, count / samples);
  for (uint64_t n = 1; n <= count; n += stride) out.push_back(n);
  if (out.back() != count) out.push_back(count);
  return out;
}

void CrashAtIoPoints(uint64_t samples) {
  const uint64_t seed = CrashSeed();
  INFO("seed " << seed);
  // Dry run: the workload completes; count its I/Os.
  const RunCounts dry = CrashAndRecover(seed, CrashPoint{});
  INFO("dry run: " << dry.reads << " reads, " << dry.writes << " writes, " << dry.syncs
                   << " syncs, " << dry.metadata << " metadata I/Os, " << dry.cleans
                   << " segments cleaned, " << dry.segments << " segments");
  REQUIRE(dry.steps == kSteps);
  // The workload must reach what it is meant to test.
  REQUIRE(dry.cleans >= 2);
  REQUIRE(dry.segments >= 4);
  int round = 0;
  for (Op op : {Op::kWrite, Op::kSync, Op::kMetadata, Op::kRead}) {
    const uint64_t count = op == Op::kRead    ? dry.reads
                           : op == Op::kWrite ? dry.writes
                           : op == Op::kSync  ? dry.syncs
                                              : dry.metadata;
    REQUIRE(count > 0);
    for (uint64_t n : CrashPoints(count, samples)) {
      CrashPoint p;
      p.op = op;
      p.n = n;
      p.mode = round % 2 == 0 ? CrashMode::kDropUnsynced : CrashMode::kTearUnsynced;
      // Every third run also dies in its first recovery, at one of its
      // first few writes, syncs or metadata changes.
      if (round % 3 == 2) {
        const Op ops[] = {Op::kWrite, Op::kSync, Op::kMetadata};
        p.recovery_op = ops[(round / 3) % 3];
        p.recovery_n = 1 + static_cast<uint64_t>(round / 9) % 3;
      }
      ++round;
      CrashAndRecover(seed, p);
    }
  }
}

TEST_CASE("Crash at sampled I/O points recovers exactly the stable page states",
          "[dc][llama][crash]") {
  CrashAtIoPoints(16);
}

TEST_CASE("Crash at every I/O point recovers exactly the stable page states",
          "[dc][llama][crash][.]") {
  CrashAtIoPoints(0);
}

TEST_CASE("Crash at random points with flushes in flight recovers the stable states",
          "[dc][llama][crash]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rnd(seed);
  for (int round = 0; round < 12; ++round) {
    CrashPoint p;
    p.stop_after = 8 + static_cast<int>(rnd.Uniform(kSteps - 8));
    p.mode = round % 2 == 0 ? CrashMode::kTearUnsynced : CrashMode::kDropUnsynced;
    p.io_threads = 1;  // buffers are written behind the workload's back
    CrashAndRecover(seed + static_cast<uint64_t>(round), p);
  }
}

TEST_CASE("Crash while creating the store leaves one that opens", "[dc][llama][crash]") {
  const LlamaOptions o = CrashOptions();
  std::map<Op, uint64_t> counts;
  {
    auto mem = NewMemEnv();
    FaultInjectionEnv env(mem.get(), 1);
    auto l = OpenOrDie(&env, o);
    for (Op op : {Op::kOpen, Op::kWrite, Op::kSync, Op::kMetadata}) counts[op] = env.OpCount(op);
  }
  int round = 0;
  for (const auto& [op, count] : counts) {
    for (uint64_t n = 1; n <= count; ++n, ++round) {
      INFO(FaultInjectionEnv::OpName(op) << " failure at " << n << " of " << count);
      auto mem = NewMemEnv();
      FaultInjectionEnv env(mem.get(), n);
      env.FailNth(op, n, Code::kIOError);
      {
        auto r = Llama::Open(&env, "/db", o);
        INFO(r.status().ToString());
        REQUIRE(env.SimulateCrash(round % 2 == 0 ? CrashMode::kDropUnsynced
                                                 : CrashMode::kTearUnsynced)
                    .ok());
        if (r.ok()) (*r)->TEST_SkipCloseOnDestroy();
      }
      env.ClearFailures();
      PageId pid = 0;
      {
        auto l = OpenOrDie(&env, o);
        auto g = l->Enter();
        auto txn = l->TBegin();
        auto a = l->TAllocate(txn.get());
        REQUIRE(a.ok());
        pid = *a;
        auto u = l->TUpdateD(txn.get(), pid, nullptr, MakeNamedNode(l.get(), NodeKind::kBase, "b", 1));
        REQUIRE(u.ok());
        REQUIRE(*u);
        auto c = l->TCommit(txn.get(), 0, nullptr, nullptr, kAll, 0);
        REQUIRE(c.ok());
        REQUIRE(*c);
      }
      auto l = OpenOrDie(&env, o);
      auto g = l->Enter();
      auto r = l->Read(pid);
      REQUIRE(r.ok());
      CHECK(Nodes(*r) == std::vector<std::string>{"b@1"});
    }
  }
}

}  // namespace
}  // namespace deuteron::llama
