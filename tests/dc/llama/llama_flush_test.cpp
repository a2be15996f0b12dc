// Incremental flushing (dc/llama/llama.md, "Incremental flushing"): an
// Update-R over a page whose base is in the LSS writes the deltas its new base
// folded as a C-delta, never the base; a page's LSS chain stays under
// max_lss_chain records, past which a flush writes the page whole.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "dc/llama/llama.h"
#include "tests/dc/llama/llama_test_util.h"

namespace deuteron::llama {
namespace {

using test::Contents;
using test::CreatePage;
using test::MakeNode;
using test::OpenOrDie;
using test::SmallOptions;

// A base bigger than the 4 KiB its C-deltas may reach whatever its size.
const std::string kBase(6000, 'b');

std::vector<std::string> ReadContents(Llama* l, PageId pid) {
  auto g = l->Enter();
  auto r = l->Read(pid);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return Contents(*r);
}

void AddDelta(Llama* l, PageId pid, const std::string& text, uint64_t tag) {
  auto g = l->Enter();
  auto head = l->Read(pid);
  REQUIRE(head.ok());
  REQUIRE(l->UpdateD(pid, *head, MakeNode(l, NodeKind::kDelta, text, tag)));
}

FlushOutcome FlushPage(Llama* l, PageId pid, uint64_t bound) {
  auto g = l->Enter();
  auto r = l->Flush(pid, bound, bound);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return r->outcome;
}

// Consolidates as the Bw-tree does under `bound`: a new base `base` (tag
// base_tag) under a kept delta "hot" (tag 900, above the bound).
bool ConsolidateFlushing(Llama* l, PageId pid, const std::string& base, uint64_t base_tag,
                         uint64_t bound) {
  auto g = l->Enter();
  auto head = l->Read(pid);
  REQUIRE(head.ok());
  PageNode* top = MakeNode(l, NodeKind::kDelta, "hot", 900);
  top->next = MakeNode(l, NodeKind::kBase, base, base_tag);
  if (l->UpdateRFlush(pid, *head, top, bound, bound)) return true;
  l->DiscardChain(top);
  return false;
}

TEST_CASE("A consolidation of a flushed page writes only the deltas it folded",
          "[dc][llama][flush]") {
  auto mem = NewMemEnv();
  PageId pid;
  {
    auto l = OpenOrDie(mem.get());
    pid = CreatePage(l.get(), kBase);  // written whole by its commit
    AddDelta(l.get(), pid, "d1", 10);
    CHECK(FlushPage(l.get(), pid, 15) == FlushOutcome::kFlushed);
    AddDelta(l.get(), pid, "d2", 20);
    AddDelta(l.get(), pid, "hot", 900);
    const Llama::Stats before = l->GetStats();
    REQUIRE(ConsolidateFlushing(l.get(), pid, kBase + "+d1+d2", 20, 100));
    const Llama::Stats after = l->GetStats();
    CHECK(after.incremental_replacements == before.incremental_replacements + 1);
    // One small record (d2), not the 6000-byte base.
    CHECK(after.flush_bytes - before.flush_bytes < 200);
    CHECK(after.whole_flush_bytes == 0);
    // The new base counts as flushed: the next flushes write only "hot".
    CHECK(FlushPage(l.get(), pid, 100) == FlushOutcome::kClean);
    CHECK(FlushPage(l.get(), pid, 1000) == FlushOutcome::kFlushed);
    CHECK(l->GetStats().whole_flush_bytes == 0);
    CHECK(ReadContents(l.get(), pid) ==
          std::vector<std::string>{"hot@900", kBase + "+d1+d2@20"});
    REQUIRE(l->Close().ok());
  }
  auto l = OpenOrDie(mem.get());
  // Read back, the page is its old base under the pieces, in chain order:
  // what the consolidated base held.
  CHECK(ReadContents(l.get(), pid) ==
        std::vector<std::string>{"hot@900", "d2@20", "d1@10", kBase + "@0"});
  CHECK(l->GetStats().page_load_reads == 4);
}

TEST_CASE("A consolidation that breaks the tag rule, or with incremental flushing off, is a "
          "plain Update-R",
          "[dc][llama][flush]") {
  auto mem = NewMemEnv();
  LlamaOptions o = SmallOptions();
  const bool off = GENERATE(false, true);
  if (off) o.max_lss_chain = 0;
  auto l = OpenOrDie(mem.get(), o);
  const PageId pid = CreatePage(l.get(), kBase);
  AddDelta(l.get(), pid, "d1", 10);
  // Off, or a new base above the bound: nothing written, the base unflushed.
  const uint64_t base_tag = off ? 10 : 500;
  REQUIRE(ConsolidateFlushing(l.get(), pid, kBase + "+d1", base_tag, 100));
  CHECK(l->GetStats().incremental_replacements == 0);
  CHECK(FlushPage(l.get(), pid, 1000) == FlushOutcome::kFlushed);
  CHECK(l->GetStats().whole_flush_bytes > 6000);
}

TEST_CASE("A page's LSS chain stays under max_lss_chain records", "[dc][llama][flush]") {
  auto mem = NewMemEnv();
  LlamaOptions o = SmallOptions();
  o.max_lss_chain = 3;
  PageId pid;
  {
    auto l = OpenOrDie(mem.get(), o);
    pid = CreatePage(l.get(), kBase);  // chain: 1 record
    AddDelta(l.get(), pid, "d1", 10);
    CHECK(FlushPage(l.get(), pid, 10) == FlushOutcome::kFlushed);  // 2
    AddDelta(l.get(), pid, "d2", 20);
    CHECK(FlushPage(l.get(), pid, 20) == FlushOutcome::kFlushed);  // 3
    CHECK(l->GetStats().chain_rewrites == 0);
    AddDelta(l.get(), pid, "d3", 30);
    CHECK(FlushPage(l.get(), pid, 30) == FlushOutcome::kFlushed);  // whole: 1
    CHECK(l->GetStats().chain_rewrites == 1);
    CHECK(l->GetStats().whole_flush_bytes > 6000);
    // And a consolidation over a full chain leaves its base to the next flush.
    AddDelta(l.get(), pid, "d4", 40);
    CHECK(FlushPage(l.get(), pid, 40) == FlushOutcome::kFlushed);  // 2
    AddDelta(l.get(), pid, "d5", 50);
    CHECK(FlushPage(l.get(), pid, 50) == FlushOutcome::kFlushed);  // 3
    AddDelta(l.get(), pid, "d6", 60);
    REQUIRE(ConsolidateFlushing(l.get(), pid, kBase + "+all", 60, 100));
    CHECK(l->GetStats().incremental_replacements == 0);
    CHECK(FlushPage(l.get(), pid, 100) == FlushOutcome::kFlushed);  // the new base: 1
    REQUIRE(l->Close().ok());
  }
  auto l = OpenOrDie(mem.get(), o);
  CHECK(ReadContents(l.get(), pid) == std::vector<std::string>{kBase + "+all@60"});
  CHECK(l->GetStats().page_load_reads == 1);
}

}  // namespace
}  // namespace deuteron::llama
