// The live bytes (dc/llama/llama.md, "Live bytes"): the LSS bytes the pages'
// current states need, kept as flushes add records, C-deltas chain them,
// whole-page flushes and consolidations replace them, the cleaner relocates
// them and system transactions free pages (merges, deletes), and recovered
// at open. Checked against Llama::RecountLiveBytes, a walk of every page's
// LSS state, after random workloads and after reopening.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "common/random.h"
#include "dc/llama/llama.h"
#include "tests/dc/llama/llama_test_util.h"

namespace deuteron::llama {
namespace {

using test::CreatePage;
using test::MakeNode;
using test::OpenOrDie;
using test::SmallOptions;

// A workload over a few dozen pages, one thread. Tags are LSNs; flushes go
// under a lagging ESL, as the DC's do.
class LiveWorkload {
 public:
  LiveWorkload(Env* env, LlamaOptions o, uint64_t seed) : env_(env), o_(o), rng_(seed) {
    l_ = OpenOrDie(env_, o_);
  }

  Llama* llama() { return l_.get(); }

  // Counts of the work done, over every open.
  void Tally() {
    const auto s = l_->GetStats();
    relocated += s.pages_relocated;
    commits += s.txn_commits;
    whole_flushes += s.whole_flush_bytes > 0;
  }
  uint64_t relocated = 0, commits = 0, whole_flushes = 0;

  void Reopen(bool crash) {
    Tally();
    if (crash) {
      REQUIRE(l_->lss()->MakeStable(l_->lss()->Tail()).ok());
      l_->TEST_SkipCloseOnDestroy();
    } else {
      REQUIRE(l_->Close().ok());
    }
    l_.reset();
    l_ = OpenOrDie(env_, o_);
    // Pages are what the recovered store holds.
    std::vector<PageId> kept;
    for (PageId p : pages_) {
      auto g = l_->Enter();
      if (l_->Read(p).ok()) kept.push_back(p);
    }
    pages_ = kept;
  }

  void Step() {
    const uint32_t r = rng_.Uniform(100);
    if (pages_.size() < 4 || r < 6) return Create();
    const PageId pid = pages_[rng_.Uniform(pages_.size())];
    if (r < 40) return Delta(pid);
    if (r < 60) return FlushOne(pid);
    if (r < 66) return Consolidate(pid, /*flushing=*/false);
    if (r < 76) return Consolidate(pid, /*flushing=*/true);
    if (r < 84) {
      auto g = l_->Enter();
      (void)l_->SwapOut(pid);
      return;
    }
    if (r < 88) return Delete(pid);
    if (r < 93) return Merge(pid);
    if (r < 96) {
      auto c = l_->Clean(1);
      INFO(c.status().ToString());
      REQUIRE(c.ok());
      return;
    }
    REQUIRE(l_->Checkpoint().ok());
  }

  // Flushes everything (bound: all) so that the store can be reopened whole.
  void FlushAll() {
    esl_ = lsn_;
    for (PageId p : pages_) FlushOne(p);
  }

 private:
  std::string Payload() { return std::string(20 + rng_.Uniform(800), 'a' + rng_.Uniform(26)); }

  void Create() {
    // New pages are written by their commit, under the ESL.
    pages_.push_back(CreatePage(l_.get(), Payload(), esl_, esl_));
  }

  void Delta(PageId pid) {
    auto g = l_->Enter();
    auto head = l_->Read(pid);
    REQUIRE(head.ok());
    ++lsn_;
    if (rng_.Uniform(3) == 0) esl_ = lsn_ - std::min<uint64_t>(lsn_, rng_.Uniform(4));
    REQUIRE(l_->UpdateD(pid, *head, MakeNode(l_.get(), NodeKind::kDelta, Payload(), lsn_)));
  }

  void FlushOne(PageId pid) {
    auto g = l_->Enter();
    auto r = l_->Flush(pid, esl_, esl_);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
  }

  // A new base (tag: the ESL) under one kept delta above it, by Update-R or
  // by the incremental UpdateRFlush.
  void Consolidate(PageId pid, bool flushing) {
    auto g = l_->Enter();
    auto head = l_->Read(pid);
    REQUIRE(head.ok());
    PageNode* top = MakeNode(l_.get(), NodeKind::kDelta, "kept", ++lsn_);
    top->next = MakeNode(l_.get(), NodeKind::kBase, Payload() + Payload(), esl_);
    const bool ok = flushing ? l_->UpdateRFlush(pid, *head, top, esl_, esl_)
                             : l_->UpdateR(pid, *head, top);
    if (!ok) l_->DiscardChain(top);
  }

  void Delete(PageId pid) {
    auto g = l_->Enter();
    auto txn = l_->TBegin();
    REQUIRE(l_->TFree(txn.get(), pid).ok());
    auto c = l_->TCommit(txn.get(), 0, nullptr, nullptr, esl_, esl_);
    INFO(c.status().ToString());
    REQUIRE(c.ok());
    REQUIRE(*c);
    pages_.erase(std::find(pages_.begin(), pages_.end(), pid));
  }

  // As the Bw-tree's merge: `pid` gets a new base, a neighbour is freed, in
  // one transaction.
  void Merge(PageId pid) {
    PageId victim = pid;
    while (victim == pid) victim = pages_[rng_.Uniform(pages_.size())];
    auto g = l_->Enter();
    auto head = l_->Read(pid);
    REQUIRE(head.ok());
    auto txn = l_->TBegin();
    REQUIRE(l_->TFree(txn.get(), victim).ok());
    PageNode* base = MakeNode(l_.get(), NodeKind::kBase, Payload() + Payload(), esl_);
    auto c = l_->TCommitReplace(txn.get(), pid, *head, base, esl_, esl_);
    if (!c.ok()) {  // its base above the bound: not this time
      l_->DiscardChain(base);
      l_->TAbort(txn.get());
      return;
    }
    REQUIRE(*c);
    pages_.erase(std::find(pages_.begin(), pages_.end(), victim));
  }

  Env* env_;
  LlamaOptions o_;
  Random64 rng_;
  std::unique_ptr<Llama> l_;
  std::vector<PageId> pages_;
  uint64_t lsn_ = 1;
  uint64_t esl_ = 1;
};

void CheckLiveBytes(Llama* l) {
  auto recount = l->RecountLiveBytes();
  INFO(recount.status().ToString());
  REQUIRE(recount.ok());
  CHECK(l->GetStats().live_bytes == *recount);
  REQUIRE(*recount > 0);
}

TEST_CASE("The live bytes equal a recount of every page's LSS state", "[llama][livebytes]") {
  const uint64_t seed = GENERATE(1, 2, 3, 4);
  LlamaOptions o = SmallOptions();
  // Small segments, so that the cleaner has old ones to clean.
  o.lss.segment_size = 256 << 10;
  o.lss.buffer_size = 32 << 10;
  // Short chains, so that flushes also rewrite pages whole for the limit.
  o.max_lss_chain = GENERATE(0u, 4u);
  auto mem = NewMemEnv();
  LiveWorkload w(mem.get(), o, seed);
  for (int round = 0; round < 6; ++round) {
    for (int i = 0; i < 400; ++i) w.Step();
    INFO("seed " << seed << " max_lss_chain " << o.max_lss_chain << " round " << round);
    CheckLiveBytes(w.llama());
    if (round % 2 == 1) {
      w.FlushAll();
      w.Reopen(/*crash=*/round == 3);
      CheckLiveBytes(w.llama());
    }
  }
  // The workload did what the counter must follow.
  w.Tally();
  CHECK(w.relocated > 0);
  CHECK(w.commits > 0);
  CHECK(w.whole_flushes > 0);
}

// Threads racing on the same pages: flushes, consolidations (incremental
// and plain), swap-outs and cleaning, each change counted by the thread whose
// CAS won; notes made in the other order than the CASes are misses that the
// count walks. Exact once the threads are done.
TEST_CASE("The live bytes stay exact under racing flushes, consolidations and cleaning",
          "[llama][livebytes]") {
  LlamaOptions o = SmallOptions();
  o.lss.segment_size = 256 << 10;
  o.lss.buffer_size = 32 << 10;
  o.max_lss_chain = 4;
  auto mem = NewMemEnv();
  auto l = OpenOrDie(mem.get(), o);
  std::vector<PageId> pages;
  for (int i = 0; i < 8; ++i) pages.push_back(CreatePage(l.get(), std::string(300, 'p')));
  std::atomic<uint64_t> lsn{1}, errors{0};
  auto worker = [&](uint64_t seed) {
    Random64 rng(seed);
    for (int i = 0; i < 1500; ++i) {
      const PageId pid = pages[rng.Uniform(pages.size())];
      const uint32_t r = static_cast<uint32_t>(rng.Uniform(100));
      if (r < 3 && seed == 1) {
        if (!l->Clean(1).ok()) errors.fetch_add(1);
        continue;
      }
      auto g = l->Enter();
      auto head = l->Read(pid);
      if (!head.ok()) {
        errors.fetch_add(1);
        continue;
      }
      const uint64_t tag = lsn.fetch_add(1);
      if (r < 45) {
        PageNode* d = MakeNode(l.get(), NodeKind::kDelta, std::string(20 + rng.Uniform(200), 'd'), tag);
        if (!l->UpdateD(pid, *head, d)) l->DiscardChain(d);
      } else if (r < 75) {
        if (!l->Flush(pid, tag, tag).ok()) errors.fetch_add(1);
      } else if (r < 92) {
        PageNode* top = MakeNode(l.get(), NodeKind::kDelta, "kept", lsn.fetch_add(1));
        top->next = MakeNode(l.get(), NodeKind::kBase, std::string(400, 'b'), tag);
        const bool ok = rng.Uniform(2) == 0 ? l->UpdateRFlush(pid, *head, top, tag, tag)
                                            : l->UpdateR(pid, *head, top);
        if (!ok) l->DiscardChain(top);
      } else {
        (void)l->SwapOut(pid);
      }
    }
  };
  std::vector<std::thread> threads;
  for (uint64_t t = 1; t <= 3; ++t) threads.emplace_back(worker, t);
  for (std::thread& t : threads) t.join();
  CHECK(errors.load() == 0);
  CheckLiveBytes(l.get());
}

}  // namespace
}  // namespace deuteron::llama
