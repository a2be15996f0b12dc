// LLAMA's eviction policy for warm pages (Llama::KeepWarm) and its cleaning
// on a thread of its own (LlamaOptions::clean_in_background): llama.md,
// "Memory budget: which pages the evictor drops" and "Cleaning".
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "dc/llama/llama.h"
#include "dc/llama/op_phases.h"
#include "tests/dc/llama/llama_test_util.h"

namespace deuteron::llama {
namespace {

using test::CreatePage;
using test::kAll;
using test::MakeNode;
using test::OpenOrDie;
using test::SmallOptions;

// Leaves `warm` of `pages` marked warm, then a budget that holds about five
// of them: an eviction pass must drop nearly everything.
struct WarmResult {
  std::vector<bool> resident_warm;  // per warm page, after the pass
  Llama::Stats stats;
};

WarmResult EvictWithWarmPages(uint8_t warm_page_sweeps) {
  auto mem = NewMemEnv();
  constexpr int kPages = 200, kWarm = 10;
  const std::string filler(1000, 'x');
  LlamaOptions o = SmallOptions();
  std::vector<PageId> pages;
  size_t before = 0, per_page = 0;
  {
    auto l = OpenOrDie(mem.get(), o);
    before = l->MemoryUsage();
    for (int i = 0; i < kPages; ++i) {
      pages.push_back(CreatePage(l.get(), std::to_string(i) + filler));
    }
    per_page = (l->MemoryUsage() - before) / kPages;
    REQUIRE(l->Close().ok());
  }
  // Reopened, every page is in the LSS; read them all back under one guard
  // (no eviction until it goes), marking some warm, as the Bw-tree marks the
  // inner pages on its paths. Warm pages are spread over the table.
  o.memory_budget = before + 5 * per_page;
  o.warm_page_sweeps = warm_page_sweeps;
  auto l = OpenOrDie(mem.get(), o);
  auto warm = [&](int i) { return pages[static_cast<size_t>(i * kPages / kWarm + 7)]; };
  {
    auto g = l->Enter();
    for (PageId pid : pages) REQUIRE(l->Read(pid).ok());
    for (int i = 0; i < kWarm; ++i) l->KeepWarm(warm(i));
  }
  REQUIRE(l->EnforceBudget().ok());
  WarmResult out;
  auto g = l->Enter();
  for (int i = 0; i < kWarm; ++i) out.resident_warm.push_back(l->ReadResident(warm(i)) != nullptr);
  out.stats = l->GetStats();
  return out;
}

TEST_CASE("The evictor drops cold pages before pages marked warm", "[dc][llama][budget][evict]") {
  const WarmResult r = EvictWithWarmPages(4);
  CHECK(r.stats.swap_outs >= 150);  // the cold pages went
  CHECK(r.stats.warm_swap_outs == 0);
  for (bool resident : r.resident_warm) CHECK(resident);
}

TEST_CASE("With one sweep a warm page is evicted like any other", "[dc][llama][budget][evict]") {
  // The comparison that shows the test above can fail: the budget cannot
  // hold the warm pages either, and with one sweep nothing protects them.
  const WarmResult r = EvictWithWarmPages(1);
  CHECK(r.stats.warm_swap_outs > 0);
}

TEST_CASE("A warm page read back is counted as a warm load", "[dc][llama][budget][evict]") {
  auto mem = NewMemEnv();
  LlamaOptions o = SmallOptions();
  o.warm_page_sweeps = 1;
  auto l = OpenOrDie(mem.get(), o);
  const PageId warm = CreatePage(l.get(), "inner");
  const PageId cold = CreatePage(l.get(), "leaf");
  l->KeepWarm(warm);
  REQUIRE(l->lss()->MakeWritten(l->lss()->Tail()).ok());  // swappable
  {
    auto g = l->Enter();
    REQUIRE(l->SwapOut(warm));
    REQUIRE(l->SwapOut(cold));
    REQUIRE(l->Read(warm).ok());
    REQUIRE(l->Read(cold).ok());
  }
  const Llama::Stats s = l->GetStats();
  CHECK(s.page_loads == 2);
  CHECK(s.warm_page_loads == 1);
}

// Fills 1 MiB segments with flushes from this thread until cleaning has
// released segments; returns the nanoseconds this thread spent cleaning.
uint64_t FlushUntilCleaned(bool in_background) {
  auto mem = NewMemEnv();
  LlamaOptions o = SmallOptions();
  o.lss.buffer_size = 256 << 10;
  o.cleaning_trigger_segments = 3;
  o.cleaning_target_segments = 2;
  o.clean_in_background = in_background;
  EnableOpPhaseTiming(true);
  const uint64_t cleaning0 = ThreadOpPhases()[static_cast<size_t>(OpPhase::kCleaning)];
  auto l = OpenOrDie(mem.get(), o);
  std::vector<PageId> pages;
  for (int i = 0; i < 20; ++i) pages.push_back(CreatePage(l.get(), "p" + std::to_string(i)));
  const std::string filler(4000, 'a');
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int round = 0; l->GetStats().segments_cleaned == 0; ++round) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    const PageId pid = pages[static_cast<size_t>(round) % pages.size()];
    auto g = l->Enter();
    auto head = l->Read(pid);
    REQUIRE(head.ok());
    REQUIRE(l->UpdateD(pid, *head, MakeNode(l.get(), NodeKind::kDelta, filler, 1)));
    auto f = l->Flush(pid, kAll, 0);
    REQUIRE(f.ok());
  }
  const uint64_t spent = ThreadOpPhases()[static_cast<size_t>(OpPhase::kCleaning)] - cleaning0;
  REQUIRE(l->Close().ok());
  EnableOpPhaseTiming(false);
  return spent;
}

TEST_CASE("With clean_in_background no flushing thread cleans", "[dc][llama][clean][evict]") {
  CHECK(FlushUntilCleaned(/*in_background=*/true) == 0);
  // Without it, the flushing thread cleans as it leaves its guard (the
  // comparison that shows the check above can fail).
  CHECK(FlushUntilCleaned(/*in_background=*/false) > 0);
}

}  // namespace
}  // namespace deuteron::llama
