// The DC's contracts (DESIGN.md 1, 2, 3 and the protocol's errors), checked
// through DataComponent& only, over every binding the harness knows
// (tests/dc/dc_harness.h): in process now; the remote binding adds itself
// there and runs these same cases.
//
// The TC is played by the test: it hands out LSNs, moves the ESL, proposes
// RSSPs, crashes the DC and replays from the RSSP. A std::map model gives the
// state each key must have.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "common/random.h"
#include "protocol/data_component.h"
#include "tests/dc/dc_contract_util.h"
#include "tests/dc/dc_harness.h"

namespace deuteron::test {

TEST_CASE("DC contract: nothing above the ESL reaches the LSS", "[dc][contract]") {
  const std::string kind = GENERATE(from_range(HarnessKinds()));
  const size_t budget = GENERATE(size_t{0}, size_t{96} << 10);  // with eviction
  const uint64_t seed = TestSeed();
  INFO("binding " << kind << " budget " << budget << " seed " << seed);
  Random64 rnd(seed);
  HarnessConfig config;
  config.memory_budget = budget;
  config.seed = seed;
  std::unique_ptr<DcHarness> h = MakeHarness(kind, config);
  constexpr uint64_t kKeys = 150;
  std::vector<Op> history;  // what the TC's log made durable, and more
  uint64_t next = 1, acked = 0;
  for (int round = 0; round < 4; ++round) {
    INFO("round " << round);
    std::vector<Op> ops = MakeOps(&rnd, next, 300, kKeys);
    next += ops.size();
    const uint64_t esl = next - 1 - (20 + rnd.Uniform(150));
    ShuffleAcrossKeys(&ops, &rnd);  // out-of-order arrival across keys and pages
    // Half piggy-backs the ESL, half sets it alone afterwards.
    ApplyAll(h->dc(), ops, rnd.OneIn(2) ? esl : 0, 32, &rnd);
    RequireOk(h->dc()->SetEsl(esl, 0));
    RequireOk(h->dc()->SetEsl(esl / 2, 0));  // lower: ignored
    CHECK(HealthOf(h->dc()).esl == esl);
    for (const Op& op : ops) history.push_back(op);
    const bool propose = round % 2 == 0;
    if (propose) {
      RequireOk(h->dc()->ProposeRssp(esl + 1, 0));

      acked = esl + 1;
    }
    h->Crash();
    const DcHealth health = HealthOf(h->dc());
    CHECK(health.rssp == acked);
    CHECK(health.max_durable_lsn <= esl);
    if (propose) {
      CHECK(health.max_durable_lsn >= acked - 1);
      CheckExact(h->dc(), BuildModel(history, esl), kKeys);
    } else {
      CheckBetween(h->dc(), history, acked, esl, kKeys);
      // The TC replays from its RSSP; then the DC is exact again.
      ApplyAll(h->dc(), Slice_(history, acked, esl, &rnd), esl, 32, &rnd);
      CheckExact(h->dc(), BuildModel(history, esl), kKeys);
    }
    // What the ESL never covered is gone for good: the TC never logged it.
    std::erase_if(history, [esl](const Op& op) { return op.lsn > esl; });
  }
}

TEST_CASE("DC contract: replays and out-of-order batches give the same state",
          "[dc][contract]") {
  const std::string kind = GENERATE(from_range(HarnessKinds()));
  const uint64_t seed = TestSeed();
  INFO("binding " << kind << " seed " << seed);
  Random64 rnd(seed);
  constexpr uint64_t kKeys = 80;
  const std::vector<Op> ops = MakeOps(&rnd, 1, 600, kKeys, 4);
  const Model model = BuildModel(ops, ~0ull);
  HarnessConfig config;
  config.seed = seed;

  std::unique_ptr<DcHarness> ordered = MakeHarness(kind, config);
  // The ESL in the middle: consolidation folds half the records into bases.
  ApplyResult first = ApplyAll(ordered->dc(), ops, 300, 50);
  CHECK(first.applied == ops.size());  // in LSN order every op is newer
  CHECK(first.skipped == 0);
  ApplyResult again = ApplyAll(ordered->dc(), ops, 0, 50);
  CHECK(again.applied == 0);
  CHECK(again.skipped == ops.size());
  CheckExact(ordered->dc(), model, kKeys);

  std::unique_ptr<DcHarness> shuffled = MakeHarness(kind, config);
  std::vector<Op> order = ops;
  Shuffle(&order, &rnd);
  ApplyResult r = ApplyAll(shuffled->dc(), order, 300, 64, &rnd);
  CHECK(r.applied + r.skipped == ops.size());
  CHECK(r.skipped > 0);  // older operations behind newer ones of their keys
  // Redo of a random half, in another order.
  std::vector<Op> redo;
  for (const Op& op : order) {
    if (rnd.OneIn(2)) redo.push_back(op);
  }
  Shuffle(&redo, &rnd);
  ApplyResult rr = ApplyAll(shuffled->dc(), redo, 0, 64, &rnd);
  CHECK(rr.applied == 0);
  CheckExact(shuffled->dc(), model, kKeys);
  std::vector<ScanItem> a = ScanAll(ordered->dc()), b = ScanAll(shuffled->dc());
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].key == b[i].key);
    CHECK(a[i].value == b[i].value);
    CHECK(a[i].lsn == b[i].lsn);
  }
}

TEST_CASE("DC contract: an acknowledged RSSP survives a crash", "[dc][contract]") {
  const std::string kind = GENERATE(from_range(HarnessKinds()));
  const uint64_t seed = TestSeed();
  INFO("binding " << kind << " seed " << seed);
  Random64 rnd(seed);
  HarnessConfig config;
  config.seed = seed;

  SECTION("records below the RSSP in a base consolidated above it") {
    // Few keys, one leaf, the ESL far ahead: consolidation folds records up
    // to LSN 60 into the base, whose tag is then above rssp - 1. A flush
    // bounded by rssp - 1 could not write that base.
    std::unique_ptr<DcHarness> h = MakeHarness(kind, config);
    constexpr uint64_t kKeys = 5;
    const std::vector<Op> ops = MakeOps(&rnd, 1, 60, kKeys, 6);
    ApplyAll(h->dc(), ops, 60, 1);
    RequireOk(h->dc()->ProposeRssp(10, 0));
    h->Crash();
    CHECK(HealthOf(h->dc()).rssp == 10);
    CheckBetween(h->dc(), ops, 10, 60, kKeys);
  }
  SECTION("random ESLs and RSSPs") {
    std::unique_ptr<DcHarness> h = MakeHarness(kind, config);
    constexpr uint64_t kKeys = 120;
    std::vector<Op> history;
    uint64_t next = 1;
    for (int round = 0; round < 3; ++round) {
      INFO("round " << round);
      std::vector<Op> ops = MakeOps(&rnd, next, 250, kKeys);
      next += ops.size();
      const uint64_t esl = next - 1 - rnd.Uniform(100);
      ShuffleAcrossKeys(&ops, &rnd);
      ApplyAll(h->dc(), ops, esl, 40, &rnd);
      for (const Op& op : ops) history.push_back(op);
      const uint64_t rssp = esl + 1 - rnd.Uniform(std::min<uint64_t>(esl, 200));
      RequireOk(h->dc()->ProposeRssp(rssp, 0));
      h->Crash();
      CHECK(HealthOf(h->dc()).rssp == rssp);
      CheckBetween(h->dc(), history, rssp, esl, kKeys);
      ApplyAll(h->dc(), Slice_(history, rssp, esl, &rnd), esl, 40, &rnd);
      std::erase_if(history, [esl](const Op& op) { return op.lsn > esl; });
      CheckExact(h->dc(), BuildModel(history, esl), kKeys);
    }
  }
}

TEST_CASE("DC contract: a tombstone is kept until the RSSP passes it", "[dc][contract]") {
  const std::string kind = GENERATE(from_range(HarnessKinds()));
  const uint64_t seed = TestSeed();
  INFO("binding " << kind << " seed " << seed);
  Random64 rnd(seed);
  std::unique_ptr<DcHarness> h = HarnessFor(kind, seed);
  DataComponent* dc = h->dc();
  const std::string k = KeyName(3);
  auto apply = [&](RecordOpKind op_kind, const std::string& key, uint64_t lsn) {
    const std::string value = op_kind == RecordOpKind::kUpsert ? "x" + std::to_string(lsn) : "";
    RecordOp op{op_kind, key, value, lsn};
    Result<ApplyResult> r = dc->Apply(std::span<const RecordOp>(&op, 1), 0, 0);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    return r->applied == 1;
  };
  // Neighbours in the same leaf, written often enough to consolidate it
  // (with the ESL far ahead, the tombstone is folded into the base).
  uint64_t lsn = 100;
  auto churn = [&] {
    for (int i = 0; i < 12; ++i) {
      REQUIRE(apply(RecordOpKind::kUpsert, KeyName(rnd.Uniform(3) == 0 ? 2 : 4), ++lsn));
    }
  };
  RequireOk(dc->SetEsl(1000, 0));
  REQUIRE(apply(RecordOpKind::kUpsert, k, 10));
  REQUIRE(apply(RecordOpKind::kDelete, k, 20));
  churn();
  // Redo of older operations: skipped against the tombstone.
  CHECK(!apply(RecordOpKind::kUpsert, k, 10));
  CHECK(!apply(RecordOpKind::kUpsert, k, 15));
  CHECK(!apply(RecordOpKind::kDelete, k, 20));
  ReadResult r = GetKey(dc, k);
  CHECK(!r.found);
  CHECK(r.lsn == 20);
  // An RSSP at the tombstone does not pass it.
  RequireOk(dc->ProposeRssp(20, 0));
  churn();
  CHECK(!apply(RecordOpKind::kUpsert, k, 19));
  r = GetKey(dc, k);
  CHECK(!r.found);
  CHECK(r.lsn == 20);
  // Crash: the tombstone is durable (below the next RSSP) and still wins.
  RequireOk(dc->ProposeRssp(21, 0));
  h->Crash();
  dc = h->dc();
  churn();
  r = GetKey(dc, k);
  CHECK(!r.found);
  CHECK((r.lsn == 20 || r.lsn == 0));  // purged or not: both allowed now
  // A newer write of the key is applied whatever happened to the tombstone.
  CHECK(apply(RecordOpKind::kUpsert, k, ++lsn));
  r = GetKey(dc, k);
  CHECK(r.found);
  CHECK(r.lsn == lsn);
}

TEST_CASE("DC contract: restart-to drops everything above the stable end", "[dc][contract]") {
  const std::string kind = GENERATE(from_range(HarnessKinds()));
  // A fixed seed too: with it a descent once met a merged-away leaf through a
  // parent route past the leaf's high key, and the merge of its right
  // neighbour looped until Busy.
  const uint64_t fixed = GENERATE(as<uint64_t>{}, 0, 7926780106092639552ull);
  const uint64_t seed = fixed != 0 ? fixed : TestSeed();
  INFO("binding " << kind << " seed " << seed);
  Random64 rnd(seed);
  std::unique_ptr<DcHarness> h = HarnessFor(kind, seed);
  constexpr uint64_t kKeys = 60;

  SECTION("all below the stable end durable: the old values come back") {
    std::vector<Op> ops = MakeOps(&rnd, 1, 300, kKeys);
    ApplyAll(h->dc(), ops, 300, 30, &rnd);
    RequireOk(h->dc()->ProposeRssp(301, 0));
    // The same keys again above E = 300: updates and deletes the TC's log
    // never made durable (its ESL stays 300).
    std::vector<Op> above = MakeOps(&rnd, 301, 300, kKeys);
    ApplyAll(h->dc(), above, 0, 30, &rnd);
    Result<DcReady> ready = h->dc()->RestartTo(300);
    INFO(ready.status().ToString());
    REQUIRE(ready.ok());
    CHECK(ready->rssp == 301);
    CHECK(ready->max_durable_lsn == 300);
    const DcHealth health = HealthOf(h->dc());
    CHECK(health.state == DcState::kServing);
    CHECK(health.esl == 300);
    CheckExact(h->dc(), BuildModel(ops, 300), kKeys);
    // The restart wrote nothing above the stable end either.
    h->Crash();
    CheckExact(h->dc(), BuildModel(ops, 300), kKeys);
    // The DC serves on: new operations above the stable end apply (a DC
    // crash keeps the incarnation).
    std::vector<Op> more = MakeOps(&rnd, 301, 200, kKeys);
    ApplyAll(h->dc(), more, 400, 30, &rnd, ready->incarnation);
    for (const Op& op : more) ops.push_back(op);
    CheckExact(h->dc(), BuildModel(ops, ~0ull), kKeys);
  }
  SECTION("some below the stable end only in memory: lost, then replayed") {
    std::vector<Op> ops = MakeOps(&rnd, 1, 400, kKeys);
    std::vector<Op> first(ops.begin(), ops.begin() + 200);
    std::vector<Op> second(ops.begin() + 200, ops.begin() + 300);
    std::vector<Op> above(ops.begin() + 300, ops.end());
    ApplyAll(h->dc(), first, 200, 30, &rnd);
    RequireOk(h->dc()->ProposeRssp(201, 0));
    ApplyAll(h->dc(), second, 300, 30, &rnd);
    ApplyAll(h->dc(), above, 0, 30, &rnd);
    Result<DcReady> ready = h->dc()->RestartTo(300);
    INFO(ready.status().ToString());
    REQUIRE(ready.ok());
    CHECK(ready->rssp == 201);
    CHECK(ready->max_durable_lsn <= 300);
    CheckBetween(h->dc(), ops, 201, 300, kKeys);
    ApplyAll(h->dc(), Slice_(ops, 201, 300, &rnd), 300, 30, &rnd, ready->incarnation);
    CheckExact(h->dc(), BuildModel(ops, 300), kKeys);
    // And again, after a crash right after the replay was made durable.
    RequireOk(h->dc()->ProposeRssp(301, ready->incarnation));
    h->Crash();
    CheckExact(h->dc(), BuildModel(ops, 300), kKeys);
  }
  SECTION("a stable end below what the LSS holds is refused") {
    std::vector<Op> ops = MakeOps(&rnd, 1, 100, kKeys);
    ApplyAll(h->dc(), ops, 100, 30, &rnd);
    RequireOk(h->dc()->ProposeRssp(101, 0));
    Result<DcReady> ready = h->dc()->RestartTo(50);
    CHECK(ready.status().IsInvalidArgument());
    CHECK(HealthOf(h->dc()).state == DcState::kServing);
    CheckExact(h->dc(), BuildModel(ops, 100), kKeys);
  }
}

// A TC crashes with requests still on their way: its apply (with an ESL
// piggy-backed) and setEsl reach the DC after the new TC's restartTo, over
// a connection of their own. They must be refused, and nothing above the
// new TC's stable end may become durable: not when the new TC proposes an
// RSSP (a stale ESL would let it flush the stale operations), and not after
// the DC crashes and comes back.
TEST_CASE("DC contract: a superseded TC incarnation is fenced off", "[dc][contract]") {
  const std::string kind = GENERATE(from_range(HarnessKinds()));
  const uint64_t seed = TestSeed();
  INFO("binding " << kind << " seed " << seed);
  Random64 rnd(seed);
  std::unique_ptr<DcHarness> h = HarnessFor(kind, seed);
  constexpr uint64_t kKeys = 60;
  constexpr uint64_t kStableEnd = 200;
  CHECK(HealthOf(h->dc()).incarnation == 0);  // no restart-to yet

  // The old TC: started, applied up to LSN 300, its log durable up to 200.
  Result<DcReady> old_ready = h->dc()->RestartTo(0);
  REQUIRE(old_ready.ok());
  const uint64_t old_tc = old_ready->incarnation;
  CHECK(old_tc == 1);
  const std::vector<Op> ops = MakeOps(&rnd, 1, 300, kKeys);
  ApplyAll(h->dc(), std::vector<Op>(ops.begin(), ops.begin() + 250), kStableEnd, 30, &rnd,
           old_tc);
  RequireOk(h->dc()->ProposeRssp(101, old_tc));

  // The new TC (another connection) restarts the DC to its stable end.
  Result<DcReady> new_ready = h->peer()->RestartTo(kStableEnd);
  INFO(new_ready.status().ToString());
  REQUIRE(new_ready.ok());
  const uint64_t new_tc = new_ready->incarnation;
  CHECK(new_tc == old_tc + 1);

  // The old TC's late requests: the rest of its operations with an ESL that
  // would cover them, a bare ESL, an RSSP; and incarnations never started.
  auto stale_calls = [&](DataComponent* stale) {
    std::vector<RecordOp> late = Views(ops, 200, 300);
    CHECK(stale->Apply(late, 300, old_tc).status().IsStaleIncarnation());
    CHECK(stale->Apply(late, 0, old_tc).status().IsStaleIncarnation());
    CHECK(stale->Apply(late, 0, 0).status().IsStaleIncarnation());
    CHECK(stale->SetEsl(300, old_tc).IsStaleIncarnation());
    CHECK(stale->ProposeRssp(201, old_tc).IsStaleIncarnation());
    CHECK(stale->SetEsl(300, new_tc + 1).IsInvalidArgument());
    const DcHealth health = HealthOf(stale);
    CHECK(health.esl == kStableEnd);
    CHECK(health.incarnation == new_tc);
  };
  stale_calls(h->dc());
  CheckBetween(h->peer(), ops, 101, kStableEnd, kKeys);

  // The new TC replays from the RSSP and makes it all durable: the flush
  // runs under its ESL, so nothing above the stable end goes with it.
  ApplyAll(h->peer(), Slice_(ops, 101, kStableEnd, &rnd), 0, 30, &rnd, new_tc);
  RequireOk(h->peer()->ProposeRssp(kStableEnd + 1, new_tc));
  CheckExact(h->peer(), BuildModel(ops, kStableEnd), kKeys);
  Result<DcHealth> health = h->peer()->Health();
  REQUIRE(health.ok());
  CHECK(health->max_durable_lsn <= kStableEnd);

  // The DC crashes: the fence and the data come back as they were.
  h->Crash();
  CHECK(HealthOf(h->peer()).max_durable_lsn <= kStableEnd);
  stale_calls(h->dc());
  CheckExact(h->peer(), BuildModel(ops, kStableEnd), kKeys);
  // The new TC goes on.
  std::vector<Op> more = MakeOps(&rnd, 301, 100, kKeys);
  ApplyAll(h->peer(), more, 400, 30, &rnd, new_tc);
  std::vector<Op> all(ops.begin(), ops.begin() + kStableEnd);
  all.insert(all.end(), more.begin(), more.end());
  CheckExact(h->peer(), BuildModel(all, ~0ull), kKeys);
}

TEST_CASE("DC contract: a restarted DC reports its RSSP and durable bound", "[dc][contract]") {
  const std::string kind = GENERATE(from_range(HarnessKinds()));
  const uint64_t seed = TestSeed();
  INFO("binding " << kind << " seed " << seed);
  Random64 rnd(seed);
  std::unique_ptr<DcHarness> h = HarnessFor(kind, seed);
  DcHealth health = HealthOf(h->dc());
  CHECK(health.state == DcState::kServing);
  CHECK(health.rssp == 0);
  CHECK(health.max_durable_lsn == 0);

  const std::vector<Op> ops = MakeOps(&rnd, 1, 100, 40);
  ApplyAll(h->dc(), ops, 0, 25);
  RequireOk(h->dc()->SetEsl(80, 0));
  RequireOk(h->dc()->ProposeRssp(50, 0));
  RequireOk(h->dc()->ProposeRssp(81, 0));
  RequireOk(h->dc()->ProposeRssp(60, 0));  // lower: acknowledged, changes nothing
  health = HealthOf(h->dc());
  CHECK(health.rssp == 81);
  CHECK(health.max_durable_lsn == 80);
  h->Crash();
  health = HealthOf(h->dc());
  CHECK(health.state == DcState::kServing);
  CHECK(health.rssp == 81);
  CHECK(health.max_durable_lsn == 80);
  CHECK(health.esl >= 80);  // what the LSS proves the TC had made durable
  CheckExact(h->dc(), BuildModel(ops, 80), 40);
  h->Reopen();
  health = HealthOf(h->dc());
  CHECK(health.rssp == 81);
  CHECK(health.max_durable_lsn == 80);
  Result<DcReady> ready = h->dc()->RestartTo(90);
  REQUIRE(ready.ok());
  CHECK(ready->rssp == 81);
  CHECK(ready->max_durable_lsn == 80);
  Result<DcStats> stats = h->dc()->GetStats();
  REQUIRE(stats.ok());
  CHECK(stats->rssp == 81);
  CHECK(stats->esl == 90);
  CHECK(stats->restarts == 1);
}

TEST_CASE("DC contract: bad input gets typed errors", "[dc][contract]") {
  const std::string kind = GENERATE(from_range(HarnessKinds()));
  INFO("binding " << kind);
  HarnessConfig config;
  std::unique_ptr<DcHarness> h = MakeHarness(kind, config);
  DataComponent* dc = h->dc();
  auto apply = [&](std::vector<RecordOp> ops) { return dc->Apply(ops, 0, 0); };
  const std::string big_key(config.max_key_size + 1, 'k');
  const std::string big_value(config.max_value_size + 1, 'v');

  CHECK(apply({RecordOp{RecordOpKind::kUpsert, "a", "1", 0}}).status().IsInvalidArgument());
  // Both bindings: the remote client rejects a kind it cannot send with the
  // same typed error the DC gives (the server's check is tested with raw
  // bytes in dc_server_test.cpp).
  CHECK(apply({RecordOp{static_cast<RecordOpKind>(7), "a", "1", 1}}).status().IsInvalidArgument());
  CHECK(apply({RecordOp{RecordOpKind::kDelete, "a", "1", 1}}).status().IsInvalidArgument());
  CHECK(HasCode(apply({RecordOp{RecordOpKind::kUpsert, big_key, "1", 1}}).status(), Code::kTooLarge));
  CHECK(HasCode(apply({RecordOp{RecordOpKind::kUpsert, "a", big_value, 1}}).status(), Code::kTooLarge));
  CHECK(HasCode(apply({RecordOp{RecordOpKind::kDelete, big_key, "", 1}}).status(), Code::kTooLarge));
  {
    std::vector<RecordOp> many(config.max_batch_ops + 1,
                               RecordOp{RecordOpKind::kUpsert, "m", "1", 5});
    CHECK(HasCode(apply(many).status(), Code::kTooLarge));
    // The limit itself is fine.
    many.resize(config.max_batch_ops);
    for (size_t i = 0; i < many.size(); ++i) many[i].lsn = 100 + i;
    Result<ApplyResult> r = apply(many);
    REQUIRE(r.ok());
    CHECK(r->applied == many.size());
  }
  {
    const std::string value(config.max_value_size, 'v');
    std::vector<RecordOp> heavy;
    for (size_t i = 0; i * value.size() <= config.max_batch_bytes; ++i) {
      heavy.push_back(RecordOp{RecordOpKind::kUpsert, "h", value, 1000 + i});
    }
    CHECK(HasCode(apply(heavy).status(), Code::kTooLarge));
    CHECK(!GetKey(dc, "h").found);  // refused whole
  }
  // An error stops the batch: the operations before it are applied, the
  // rest are not.
  {
    Result<ApplyResult> r = apply({RecordOp{RecordOpKind::kUpsert, "b1", "1", 2001},
                                   RecordOp{RecordOpKind::kUpsert, "b2", "2", 0},
                                   RecordOp{RecordOpKind::kUpsert, "b3", "3", 2003}});
    CHECK(r.status().IsInvalidArgument());
    CHECK(GetKey(dc, "b1").found);
    CHECK(!GetKey(dc, "b2").found);
    CHECK(!GetKey(dc, "b3").found);
  }
  CHECK(HasCode(dc->Get(big_key).status(), Code::kTooLarge));
  {
    std::vector<Slice> keys(config.max_multiget_keys + 1, Slice("a"));
    CHECK(HasCode(dc->MultiGet(keys).status(), Code::kTooLarge));
    std::vector<Slice> bad = {Slice("b1"), Slice(big_key)};
    CHECK(HasCode(dc->MultiGet(bad).status(), Code::kTooLarge));
  }
  {
    ScanRequest req;
    req.lower = big_key;
    CHECK(HasCode(dc->Scan(req).status(), Code::kTooLarge));
  }
  RequireOk(dc->SetEsl(10, 0));
  CHECK(dc->ProposeRssp(12, 0).IsInvalidArgument());
  RequireOk(dc->ProposeRssp(11, 0));
  // The DC keeps serving.
  Result<ApplyResult> r = apply({RecordOp{RecordOpKind::kUpsert, "after", "ok", 3000}});
  REQUIRE(r.ok());
  CHECK(r->applied == 1);
  CHECK(HealthOf(dc).state == DcState::kServing);
}

TEST_CASE("DC contract: reads", "[dc][contract]") {
  const std::string kind = GENERATE(from_range(HarnessKinds()));
  const uint64_t seed = TestSeed();
  INFO("binding " << kind << " seed " << seed);
  Random64 rnd(seed);
  HarnessConfig config;
  config.seed = seed;
  std::unique_ptr<DcHarness> h = MakeHarness(kind, config);
  DataComponent* dc = h->dc();
  constexpr uint64_t kKeys = 200;
  const std::vector<Op> ops = MakeOps(&rnd, 1, 500, kKeys, 3);
  ApplyAll(dc, ops, 250, 50, &rnd);
  const Model model = BuildModel(ops, ~0ull);
  CheckExact(dc, model, kKeys);

  // MultiGet: one result per key, in order, tombstones' LSNs included.
  std::vector<std::string> names;
  for (uint64_t i = 0; i < 100; ++i) names.push_back(KeyName(rnd.Uniform(kKeys + 20)));
  std::vector<Slice> keys(names.begin(), names.end());
  Result<std::vector<ReadResult>> mg = dc->MultiGet(keys);
  REQUIRE(mg.ok());
  REQUIRE(mg->size() == keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const ReadResult one = GetKey(dc, names[i]);
    CHECK((*mg)[i].found == one.found);
    CHECK((*mg)[i].value == one.value);
    CHECK((*mg)[i].lsn == one.lsn);
  }

  // Bounded, reverse and limited scans against the model.
  std::vector<std::pair<std::string, ModelRecord>> live;
  for (const auto& [k, rec] : model) {
    if (!rec.deleted) live.emplace_back(k, rec);
  }
  for (int trial = 0; trial < 20; ++trial) {
    ScanRequest req;
    std::string lo = KeyName(rnd.Uniform(kKeys)), hi = KeyName(rnd.Uniform(kKeys));
    if (hi < lo) std::swap(lo, hi);
    if (!rnd.OneIn(4)) req.lower = lo;
    if (!rnd.OneIn(4)) req.upper = hi;
    req.lower_inclusive = rnd.OneIn(2);
    req.upper_inclusive = rnd.OneIn(2);
    req.reverse = rnd.OneIn(2);
    req.limit = static_cast<uint32_t>(rnd.Uniform(3) == 0 ? 0 : 1 + rnd.Uniform(30));
    std::vector<std::string> expect;
    for (const auto& [k, rec] : live) {
      if (req.lower && (k < *req.lower || (k == *req.lower && !req.lower_inclusive))) continue;
      if (req.upper && (k > *req.upper || (k == *req.upper && !req.upper_inclusive))) continue;
      expect.push_back(k);
    }
    if (req.reverse) std::reverse(expect.begin(), expect.end());
    const size_t cap = req.limit == 0 ? config.max_scan_items
                                      : std::min<size_t>(req.limit, config.max_scan_items);
    const ScanResult page = ScanPage(dc, req);
    INFO("trial " << trial << " limit " << req.limit << " reverse " << req.reverse);
    CHECK(page.more == (expect.size() > cap));
    REQUIRE(page.items.size() == std::min(cap, expect.size()));
    for (size_t i = 0; i < page.items.size(); ++i) {
      CHECK(page.items[i].key == expect[i]);
      CHECK(page.items[i].lsn == model.at(expect[i]).lsn);
    }
  }
}

TEST_CASE("DC contract: calls during a restart get Unavailable", "[dc][contract]") {
  const std::string kind = GENERATE(from_range(HarnessKinds()));
  const uint64_t seed = TestSeed();
  INFO("binding " << kind << " seed " << seed);
  Random64 rnd(seed);
  std::unique_ptr<DcHarness> h = HarnessFor(kind, seed);
  DataComponent* dc = h->dc();
  constexpr uint64_t kKeys = 50;
  constexpr uint64_t kEsl = uint64_t{1} << 40;  // every LSN below: restarts to it are valid
  const std::vector<Op> base = MakeOps(&rnd, 1, 200, kKeys);
  ApplyAll(dc, base, kEsl, 50);
  RequireOk(dc->ProposeRssp(201, 0));
  const Model model = BuildModel(base, ~0ull);

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ok_calls{0}, unavailable{0}, unexpected{0};
  std::atomic<uint64_t> next_lsn{1000};
  // The TC's incarnation as of the last restart. A fenced call that read
  // it just before a restart is refused as stale: allowed, not counted.
  std::atomic<uint64_t> incarnation{0};
  auto note = [&](const Status& s) {
    if (s.ok()) {
      ok_calls.fetch_add(1);
    } else if (s.IsUnavailable()) {
      unavailable.fetch_add(1);
    } else if (s.IsStaleIncarnation()) {
      // Fenced by a restart that ran after the thread read the incarnation.
    } else {
      unexpected.fetch_add(1);
      std::fprintf(stderr, "unexpected status: %s\n", s.ToString().c_str());
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      Random64 r(seed + 1 + t);
      while (!stop.load()) {
        switch (r.Uniform(6)) {
          case 0: {
            // Writes to keys outside the checked ones.
            const std::string key = "w" + std::to_string(r.Uniform(20));
            RecordOp op{RecordOpKind::kUpsert, key, "v", next_lsn.fetch_add(1)};
            note(dc->Apply(std::span<const RecordOp>(&op, 1), 0, incarnation.load()).status());
            break;
          }
          case 1:
            note(dc->Get(KeyName(r.Uniform(kKeys))).status());
            break;
          case 2: {
            ScanRequest req;
            req.limit = 10;
            note(dc->Scan(req).status());
            break;
          }
          case 3:
            note(dc->SetEsl(kEsl, incarnation.load()));
            break;
          case 4:
            note(dc->ProposeRssp(201, incarnation.load()));
            break;
          default: {
            Result<DcHealth> health = dc->Health();
            note(health.status());
            break;
          }
        }
      }
    });
  }
  int restarts = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (restarts < 4 || (unavailable.load() == 0 && std::chrono::steady_clock::now() < deadline)) {
    Result<DcReady> ready = dc->RestartTo(kEsl);
    INFO(ready.status().ToString());
    REQUIRE(ready.ok());
    CHECK(ready->rssp == 201);
    CHECK(ready->incarnation == static_cast<uint64_t>(restarts) + 1);
    incarnation.store(ready->incarnation);
    ++restarts;
  }
  stop.store(true);
  for (std::thread& t : threads) t.join();
  INFO("restarts " << restarts << " ok " << ok_calls.load() << " unavailable "
                   << unavailable.load());
  CHECK(unexpected.load() == 0);
  CHECK(unavailable.load() > 0);
  CHECK(ok_calls.load() > 0);
  CHECK(HealthOf(dc).state == DcState::kServing);
  CheckExact(dc, model, kKeys);
}

TEST_CASE("DC contract: concurrent applies with overlapping keys", "[dc][contract]") {
  const std::string kind = GENERATE(from_range(HarnessKinds()));
  const uint64_t seed = TestSeed();
  INFO("binding " << kind << " seed " << seed);
  std::unique_ptr<DcHarness> h = HarnessFor(kind, seed);
  DataComponent* dc = h->dc();
  constexpr int kThreads = 3;
  constexpr uint64_t kKeys = 40;
  constexpr int kOpsPerThread = 600;
  // Thread t's i-th operation has LSN i * kThreads + t + 1: unique, and
  // increasing per thread, so per key too within a thread; threads overlap
  // on every key in any order.
  std::vector<std::vector<Op>> per_thread(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    Random64 rnd(seed * 31 + t);
    for (int i = 0; i < kOpsPerThread; ++i) {
      Op op;
      op.lsn = static_cast<uint64_t>(i) * kThreads + t + 1;
      op.key = KeyName(rnd.Uniform(kKeys));
      if (rnd.OneIn(5)) {
        op.kind = RecordOpKind::kDelete;
      } else {
        op.value = ValueFor(op.lsn, &rnd);
      }
      per_thread[t].push_back(std::move(op));
    }
  }
  std::atomic<uint64_t> errors{0}, regressions{0};
  auto fails = [&errors](const Status& s) {
    if (s.ok()) return false;
    std::fprintf(stderr, "unexpected status: %s\n", s.ToString().c_str());
    errors.fetch_add(1);
    return true;
  };
  std::atomic<bool> stop{false};
  // progress[t]: the LSN of thread t's first operation not yet applied. As a
  // TC does, an RSSP is proposed only below every such LSN (every operation
  // below it has been applied), since tombstones below it may be purged.
  std::vector<std::atomic<uint64_t>> progress(kThreads);
  for (int t = 0; t < kThreads; ++t) progress[t].store(per_thread[t][0].lsn);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Random64 rnd(seed * 77 + t);
      const std::vector<Op>& ops = per_thread[t];
      for (size_t i = 0; i < ops.size();) {
        const size_t end = std::min(ops.size(), i + 1 + rnd.Uniform(12));
        std::vector<RecordOp> views = Views(ops, i, end);
        const uint64_t esl = rnd.OneIn(4) ? ops[i].lsn : 0;
        fails(dc->Apply(views, esl, 0).status());
        // Now and then the same batch again (a redo), and an RSSP proposal.
        if (rnd.OneIn(6)) fails(dc->Apply(views, 0, 0).status());
        progress[t].store(end < ops.size() ? ops[end].lsn : ~0ull);
        if (t == 0 && rnd.OneIn(25)) {
          uint64_t rssp = ~0ull;
          for (const auto& p : progress) rssp = std::min(rssp, p.load());
          if (rssp != ~0ull) {
            if (!fails(dc->SetEsl(rssp - 1, 0))) fails(dc->ProposeRssp(rssp, 0));
          }
        }
        i = end;
      }
    });
  }
  // A reader: the LSN held for a key never goes back.
  std::thread reader([&] {
    std::vector<uint64_t> seen(kKeys, 0);
    Random64 rnd(seed * 101);
    while (!stop.load()) {
      const uint64_t k = rnd.Uniform(kKeys);
      Result<ReadResult> r = dc->Get(KeyName(k));
      if (fails(r.status())) continue;
      if (r->lsn < seen[k] && !(r->lsn == 0 && !r->found)) regressions.fetch_add(1);
      seen[k] = std::max(seen[k], r->lsn);
    }
  });
  for (std::thread& t : threads) t.join();
  stop.store(true);
  reader.join();
  CHECK(errors.load() == 0);
  CHECK(regressions.load() == 0);
  std::vector<Op> all;
  for (const auto& ops : per_thread) all.insert(all.end(), ops.begin(), ops.end());
  CheckExact(dc, BuildModel(all, ~0ull), kKeys);
}

}  // namespace deuteron::test
