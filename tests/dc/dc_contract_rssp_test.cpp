// DC contract 3 under races (issue 35): RSSPs proposed while writers move the
// ESL with every batch, a crash right after each acknowledgement, over every
// binding of tests/dc/dc_harness.h.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/random.h"
#include "protocol/data_component.h"
#include "tests/dc/dc_contract_util.h"
#include "tests/dc/dc_harness.h"

namespace deuteron::test {
namespace {

// Issue 35: RSSPs proposed while writers advance the ESL with every batch.
// A flush that skipped a leaf consolidated under an ESL newer than the one
// the proposal read acknowledged R with records below R only in memory.
// Each cycle: writers (disjoint keys, so each key's operations arrive in LSN
// order, as the TC's locks make them) and a proposer run until an RSSP is
// acknowledged; then the DC crashes, every key must hold at least its newest
// operation below R, and the test replays from R as the TC would.
void RunRsspRace(const std::string& kind, uint64_t seed, int cycles) {
  INFO("binding " << kind << " seed " << seed);
  HarnessConfig config;
  config.seed = seed;
  std::unique_ptr<DcHarness> h = MakeHarness(kind, config);
  constexpr int kWriters = 2;
  constexpr uint64_t kKeys = 96;
  Random64 rnd(seed);
  std::vector<Op> history;
  uint64_t next = 1;  // the first LSN of the cycle
  uint64_t acknowledged = 0;
  for (int cycle = 0; cycle < cycles; ++cycle) {
    INFO("cycle " << cycle);
    DataComponent* dc = h->dc();
    // Writer t's i-th operation: LSN next + i * kWriters + t, on a key
    // = t (mod kWriters).
    constexpr int kOpsPerWriter = 400;
    std::vector<std::vector<Op>> per_writer(kWriters);
    for (int t = 0; t < kWriters; ++t) {
      for (int i = 0; i < kOpsPerWriter; ++i) {
        Op op;
        op.lsn = next + static_cast<uint64_t>(i) * kWriters + t;
        op.key = KeyName(rnd.Uniform(kKeys / kWriters) * kWriters + t);
        if (rnd.OneIn(6)) {
          op.kind = RecordOpKind::kDelete;
        } else {
          op.value = ValueFor(op.lsn, &rnd);
        }
        per_writer[t].push_back(std::move(op));
      }
    }
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> errors{0};
    std::atomic<uint64_t> rssp{0};
    std::vector<std::atomic<uint64_t>> progress(kWriters);
    for (int t = 0; t < kWriters; ++t) progress[t].store(per_writer[t][0].lsn);
    std::vector<std::thread> threads;
    for (int t = 0; t < kWriters; ++t) {
      threads.emplace_back([&, t] {
        Random64 r(seed * 131 + cycle * 7 + t);
        const std::vector<Op>& ops = per_writer[t];
        for (size_t i = 0; i < ops.size() && !stop.load();) {
          const size_t end = std::min(ops.size(), i + 1 + r.Uniform(6));
          std::vector<RecordOp> views = Views(ops, i, end);
          // The ESL moves with every batch: up to this batch's last LSN, so
          // consolidation folds everything just written.
          if (!dc->Apply(views, ops[end - 1].lsn, 0).ok()) errors.fetch_add(1);
          progress[t].store(end < ops.size() ? ops[end].lsn : ~0ull);
          i = end;
        }
      });
    }
    threads.emplace_back([&] {
      Random64 r(seed * 173 + cycle);
      // Let the tree grow a few leaves first.
      const uint64_t min_progress = next + 100 + r.Uniform(500);
      while (!stop.load()) {
        uint64_t low = ~0ull;
        for (const auto& p : progress) low = std::min(low, p.load());
        if (low == ~0ull) break;  // the writers are done: nothing races
        if (low < min_progress) {
          std::this_thread::yield();
          continue;
        }
        // Every operation below `low` has been applied; propose below it.
        const uint64_t proposal = low - r.Uniform(std::min<uint64_t>(low - next, 8) + 1);
        if (proposal <= acknowledged + 1 || r.OneIn(2)) {
          std::this_thread::yield();
          continue;
        }
        if (!dc->SetEsl(proposal - 1, 0).ok()) errors.fetch_add(1);
        Status s = dc->ProposeRssp(proposal, 0);
        if (!s.ok()) {
          errors.fetch_add(1);
          break;
        }
        rssp.store(proposal);
        break;
      }
      stop.store(true);
    });
    for (std::thread& t : threads) t.join();
    REQUIRE(errors.load() == 0);
    uint64_t last = next - 1;
    for (int t = 0; t < kWriters; ++t) {
      const uint64_t p = progress[t].load();
      for (const Op& op : per_writer[t]) {
        if (p != ~0ull && op.lsn >= p) break;
        history.push_back(op);
        last = std::max(last, op.lsn);
      }
    }
    if (rssp.load() != 0) acknowledged = rssp.load();
    // The process dies right after the acknowledgement.
    h->Crash();
    dc = h->dc();
    CHECK(HealthOf(dc).rssp == acknowledged);
    CheckBetween(dc, history, acknowledged, last, kKeys);
    // The TC's redo from the RSSP (its log holds everything applied).
    ApplyAll(dc, Slice_(history, acknowledged, last, &rnd), last, 16, &rnd);
    CheckExact(dc, BuildModel(history, last), kKeys);
    next = last + 1;
  }
}

}  // namespace

TEST_CASE("DC contract: an RSSP acknowledged while writers move the ESL survives a crash",
          "[dc][contract]") {
  const std::string kind = GENERATE(from_range(HarnessKinds()));
  RunRsspRace(kind, TestSeed(), 20);
}

TEST_CASE("DC contract: RSSPs racing ESL-moving writers over many cycles", "[dc][contract][.]") {
  const std::string kind = GENERATE(from_range(HarnessKinds()));
  RunRsspRace(kind, TestSeed(), 100);
}

}  // namespace deuteron::test
