// LLAMA cleaning (dc/llama/llama_clean.cpp; llama.md, "Cleaning"): live
// states relocated, old segments released, automatic cleaning bounded, and
// no segment released under a reader that may still hold an address in it.
#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "dc/llama/llama.h"
#include "tests/dc/llama/llama_test_util.h"

namespace deuteron::llama {
namespace {

using test::AddDelta;
using test::Consolidate;
using test::CreatePage;
using test::FlushPage;
using test::kAll;
using test::MakeNode;
using test::OpenOrDie;
using test::ReadContents;
using test::SmallOptions;

constexpr int kChainRounds = 30;  // enough flushed deltas to fill several segments

// Options under which each page's C-delta chain grows with the rounds,
// spread over the segments (with the chain limit, flushes would write these
// pages whole every few rounds); a page's whole state fits one buffer.
LlamaOptions ChainOptions() {
  LlamaOptions o = SmallOptions();
  o.lss.buffer_size = 256 << 10;
  o.max_lss_chain = 0;
  return o;
}

// Forty pages, then kChainRounds rounds of a delta per page flushed one by one:
// C-delta chains spread over several segments. Returns the pages.
std::vector<PageId> FillChains(Llama* l) {
  const std::string filler(3000, 'c');
  std::vector<PageId> pages;
  for (int i = 0; i < 40; ++i) pages.push_back(CreatePage(l, std::to_string(i) + filler));
  for (int round = 0; round < kChainRounds; ++round) {
    for (PageId pid : pages) {
      AddDelta(l, pid, "r" + std::to_string(round) + filler, static_cast<uint64_t>(round));
      CHECK(FlushPage(l, pid, kAll) == FlushOutcome::kFlushed);
    }
  }
  return pages;
}

TEST_CASE("Cleaning relocates live states and releases old segments", "[dc][llama][clean]") {
  auto mem = NewMemEnv();
  LlamaOptions o = ChainOptions();
  o.lss.recycle_pool = 1;
  std::map<PageId, std::vector<std::string>> expected;
  PageId consolidated = 0;
  {
    auto l = OpenOrDie(mem.get(), o);
    const std::vector<PageId> pages = FillChains(l.get());
    // One page consolidated but not flushed: its durable state is its prior.
    consolidated = pages[3];
    {
      auto g = l->Enter();
      auto head = l->Read(consolidated);
      REQUIRE(head.ok());
      PageNode* base = MakeNode(l.get(), NodeKind::kBase, "consolidated", kAll);
      REQUIRE(l->UpdateR(consolidated, *head, base));
    }
    REQUIRE(l->MakeStable(l->Tail()).ok());
    // A mix of residencies: some pages wholly swapped out, one partly.
    AddDelta(l.get(), pages[5], "unflushed", kAll);
    {
      auto g = l->Enter();
      for (size_t i = 0; i < pages.size(); i += 2) {
        if (pages[i] != consolidated) l->SwapOut(pages[i]);
      }
      l->SwapOut(pages[5]);
    }
    for (PageId pid : pages) expected[pid] = ReadContents(l.get(), pid);
    {
      auto g = l->Enter();
      for (size_t i = 0; i < pages.size(); i += 2) {
        if (pages[i] != consolidated) l->SwapOut(pages[i]);
      }
    }
    const auto before = l->lss()->GetStats();
    const uint64_t lowest = l->lss()->LowestSegment();
    REQUIRE(l->lss()->TailSegment() > lowest + 2);
    auto cleaned = l->Clean(2);
    INFO(cleaned.status().ToString());
    REQUIRE(cleaned.ok());
    CHECK(cleaned->segments_cleaned == 2);
    CHECK(cleaned->segments_released == 2);
    CHECK(cleaned->pages_relocated > 0);
    CHECK(l->lss()->LowestSegment() == lowest + 2);
    CHECK(l->lss()->GetStats().segments_released > before.segments_released);
    for (PageId pid : pages) CHECK(ReadContents(l.get(), pid) == expected[pid]);
    REQUIRE(l->Close().ok());
  }
  auto l = OpenOrDie(mem.get(), o);
  for (const auto& [pid, contents] : expected) {
    INFO("page " << pid);
    if (pid == consolidated) {
      // The unflushed consolidation is gone; the relocated prior state is back.
      const auto c = ReadContents(l.get(), pid);
      CHECK(c.size() == kChainRounds + 1);
    } else if (contents.front() == "unflushed@" + std::to_string(kAll)) {
      CHECK(ReadContents(l.get(), pid) ==
            std::vector<std::string>(contents.begin() + 1, contents.end()));
    } else {
      CHECK(ReadContents(l.get(), pid) == contents);
    }
  }
}

TEST_CASE("Automatic cleaning keeps the segments held bounded", "[dc][llama][clean]") {
  auto mem = NewMemEnv();
  LlamaOptions o = SmallOptions();
  o.lss.buffer_size = 256 << 10;
  o.cleaning_trigger_segments = 3;
  o.cleaning_target_segments = 2;
  const std::string filler(4000, 'a');
  std::map<PageId, std::vector<std::string>> expected;
  uint64_t max_held = 0;
  {
    auto l = OpenOrDie(mem.get(), o);
    std::vector<PageId> pages;
    for (int i = 0; i < 20; ++i) pages.push_back(CreatePage(l.get(), "p" + std::to_string(i)));
    // About 10 MiB of flushes: enough 1 MiB segments for batched releases.
    for (int round = 0; round < 2500; ++round) {
      const PageId pid = pages[static_cast<size_t>(round) % pages.size()];
      if ((round / 20) % 5 == 4) {
        Consolidate(l.get(), pid);  // old states become garbage
      } else {
        AddDelta(l.get(), pid, std::to_string(round) + filler, 1);
      }
      REQUIRE(FlushPage(l.get(), pid, kAll) != FlushOutcome::kBlocked);
      const uint64_t held = l->lss()->TailSegment() - l->lss()->LowestSegment() + 1;
      max_held = std::max(max_held, held);
    }
    const auto s = l->GetStats();
    CHECK(s.segments_cleaned > 0);
    CHECK(s.lss.segments_released > 0);
    // Cleaning starts above the trigger and releases in batches of the trigger.
    CHECK(max_held <= 2 * o.cleaning_trigger_segments + 2);
    for (PageId pid : pages) expected[pid] = ReadContents(l.get(), pid);
    REQUIRE(l->Close().ok());
  }
  auto l = OpenOrDie(mem.get(), o);
  for (const auto& [pid, contents] : expected) CHECK(ReadContents(l.get(), pid) == contents);
}

// A reader inside a guard may hold a page's LSS address (an entry or a
// partial-swap node it loaded) and read it next: cleaning relocates the
// page, but releases the old segment only once that guard ends. Without the
// wait, such a read met "LSS segment released" (a flush materializing a
// swapped-out part; about 3% of runs of the live-bytes race test) or a
// recycled file's new records.
TEST_CASE("Cleaning releases no segment until the guards open before it end",
          "[dc][llama][clean]") {
  auto mem = NewMemEnv();
  auto l = OpenOrDie(mem.get(), ChainOptions());
  const std::vector<PageId> pages = FillChains(l.get());
  std::map<PageId, std::vector<std::string>> expected;
  for (PageId pid : pages) expected[pid] = ReadContents(l.get(), pid);
  {
    auto g = l->Enter();
    for (PageId pid : pages) l->SwapOut(pid);  // states read from the LSS from now on
  }
  const uint64_t lowest = l->lss()->LowestSegment();
  REQUIRE(l->lss()->TailSegment() > lowest + 2);

  std::atomic<int> step{0};
  std::thread reader([&] {
    auto g = l->Enter();
    step.store(1, std::memory_order_release);
    while (step.load(std::memory_order_acquire) != 2) std::this_thread::yield();
  });
  while (step.load(std::memory_order_acquire) != 1) std::this_thread::yield();
  std::atomic<bool> done{false};
  Result<CleanResult> cleaned = Status::Internal("not run");
  std::thread cleaner([&] {
    cleaned = l->Clean(2);
    done.store(true, std::memory_order_release);
  });
  // Relocating and checkpointing take milliseconds; then it waits.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK_FALSE(done.load(std::memory_order_acquire));
  CHECK(l->lss()->LowestSegment() == lowest);
  step.store(2, std::memory_order_release);
  reader.join();
  cleaner.join();
  INFO(cleaned.status().ToString());
  REQUIRE(cleaned.ok());
  CHECK(cleaned->segments_cleaned == 2);
  CHECK(cleaned->segments_released == 2);
  CHECK(l->lss()->LowestSegment() == lowest + 2);
  for (PageId pid : pages) CHECK(ReadContents(l.get(), pid) == expected[pid]);
  REQUIRE(l->Close().ok());
}

}  // namespace
}  // namespace deuteron::llama
