// Read fences (protocol/data_component.h, "Read fences"), over every
// binding: a fenced read carries the reader's TC incarnation and the DC
// instance it restarted, and the DC refuses it once someone else restarted
// the DC (StaleIncarnation), once the DC process reopened its store (a new
// instance: StaleIncarnation), or for an incarnation never started
// (InvalidArgument). Plain reads stay unfenced (older clients, tools).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "protocol/data_component.h"
#include "tests/dc/dc_contract_util.h"
#include "tests/dc/dc_harness.h"

namespace deuteron::test {
namespace {

// Every fenced read of `key` under `fence` fails with `code`.
void CheckRefused(DataComponent* dc, const std::string& key, const ReadFence& fence, Code code) {
  INFO("fence incarnation " << fence.incarnation << " instance " << fence.instance);
  Result<ReadResult> g = dc->GetFenced(key, fence);
  CHECK(g.status().code() == code);
  const Slice k(key);
  Result<std::vector<ReadResult>> m = dc->MultiGetFenced(std::span<const Slice>(&k, 1), fence);
  CHECK(m.status().code() == code);
  Result<ScanResult> s = dc->ScanFenced(ScanRequest{}, fence);
  CHECK(s.status().code() == code);
}

// Every fenced read of `key` under `fence` succeeds and finds it.
void CheckServed(DataComponent* dc, const std::string& key, const ReadFence& fence) {
  INFO("fence incarnation " << fence.incarnation << " instance " << fence.instance);
  Result<ReadResult> g = dc->GetFenced(key, fence);
  INFO(g.status().ToString());
  REQUIRE(g.ok());
  CHECK(g->found);
  const Slice k(key);
  Result<std::vector<ReadResult>> m = dc->MultiGetFenced(std::span<const Slice>(&k, 1), fence);
  REQUIRE(m.ok());
  REQUIRE(m->size() == 1);
  CHECK((*m)[0].found);
  Result<ScanResult> s = dc->ScanFenced(ScanRequest{}, fence);
  REQUIRE(s.ok());
  CHECK(s->items.size() == 1);
}

}  // namespace

TEST_CASE("DC read fence: a read of a superseded incarnation or another DC instance is refused",
          "[dc][contract][fence]") {
  const std::string kind = GENERATE(from_range(HarnessKinds()));
  INFO("binding " << kind);
  std::unique_ptr<DcHarness> h = HarnessFor(kind, 1);
  Result<DcReady> ready = h->dc()->RestartTo(0);
  REQUIRE(ready.ok());
  REQUIRE(ready->instance != 0);
  const std::string key = KeyName(1);
  RecordOp op{RecordOpKind::kUpsert, key, "v", 1};
  REQUIRE(h->dc()->Apply(std::span<const RecordOp>(&op, 1), 1, ready->incarnation).ok());
  // Stable in the LSS: the key survives the restarts and the crash below.
  RequireOk(h->dc()->ProposeRssp(2, ready->incarnation));

  const ReadFence mine{ready->incarnation, ready->instance};
  CheckServed(h->dc(), key, mine);
  CheckServed(h->dc(), key, ReadFence{ready->incarnation, 0});  // instance not checked
  // An incarnation never started here.
  CheckRefused(h->dc(), key, ReadFence{ready->incarnation + 1, ready->instance},
               Code::kInvalidArgument);
  // Another instance than the one the reader restarted.
  CheckRefused(h->dc(), key, ReadFence{ready->incarnation, ready->instance ^ 1},
               Code::kStaleIncarnation);

  // Someone else restarts the DC: the reader's fence is stale, plain reads
  // still work.
  Result<DcReady> rogue = h->peer()->RestartTo(1);
  REQUIRE(rogue.ok());
  CheckRefused(h->dc(), key, mine, Code::kStaleIncarnation);
  Result<ReadResult> plain = h->dc()->Get(key);
  REQUIRE(plain.ok());
  CHECK(plain->found);
  const ReadFence now{rogue->incarnation, rogue->instance};
  CHECK(rogue->instance == ready->instance);  // the same DC process
  CheckServed(h->dc(), key, now);

  // The DC process dies and reopens its store: same incarnation, a new
  // instance. A reader that has not restarted it since is refused.
  h->Crash();
  const DcHealth health = HealthOf(h->dc());
  CHECK(health.incarnation == rogue->incarnation);
  REQUIRE(health.instance != rogue->instance);
  CheckRefused(h->dc(), key, now, Code::kStaleIncarnation);
  CheckServed(h->dc(), key, ReadFence{health.incarnation, health.instance});
}

}  // namespace deuteron::test
