#include "protocol/convert.h"

#include <catch2/catch.hpp>

#include <limits>

namespace deuteron::protocol {
namespace {

constexpr uint64_t kMaxI64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

TEST_CASE("Apply requests survive the wire round trip", "[protocol][convert]") {
  const std::string big(300, 'v');
  const ::deuteron::RecordOp ops[] = {
      {::deuteron::RecordOpKind::kUpsert, Slice("k1"), Slice(big), 7},
      {::deuteron::RecordOpKind::kDelete, Slice("k2"), Slice(), kMaxI64},
      {::deuteron::RecordOpKind::kUpsert, Slice(std::string_view("\0\xff", 2)), Slice(""), 1},
  };
  ApplyRequest w;
  REQUIRE(ToWireApply(ops, 42, &w).ok());
  std::vector<::deuteron::RecordOp> back;
  uint64_t esl = 0;
  REQUIRE(FromWireApply(w, &back, &esl).ok());
  CHECK(esl == 42);
  REQUIRE(back.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(back[i].kind == ops[i].kind);
    CHECK(back[i].key == ops[i].key);
    CHECK(back[i].value == ops[i].value);
    CHECK(back[i].lsn == ops[i].lsn);
  }
}

TEST_CASE("Decoded apply requests are validated", "[protocol][convert]") {
  ApplyRequest w;
  w.ops.resize(2);
  w.ops[0].kind = RecordOpKind::UPSERT;
  w.ops[0].lsn = 5;
  w.ops[1].kind = RecordOpKind::DELETE;
  w.ops[1].lsn = 6;
  std::vector<::deuteron::RecordOp> ops;
  uint64_t esl = 0;
  REQUIRE(FromWireApply(w, &ops, &esl).ok());

  SECTION("unknown kind") {
    for (int kind : {0, 3, -1, 1000}) {
      INFO("kind " << kind);
      w.ops[1].kind = static_cast<RecordOpKind::type>(kind);
      CHECK(FromWireApply(w, &ops, &esl).IsInvalidArgument());
    }
  }
  SECTION("negative LSN") {
    w.ops[0].lsn = -1;
    CHECK(FromWireApply(w, &ops, &esl).IsInvalidArgument());
  }
  SECTION("negative ESL") {
    w.esl = std::numeric_limits<int64_t>::min();
    CHECK(FromWireApply(w, &ops, &esl).IsInvalidArgument());
  }
}

TEST_CASE("Unknown op kinds are rejected before sending", "[protocol][convert]") {
  const ::deuteron::RecordOp op{static_cast<::deuteron::RecordOpKind>(3), Slice("k"), Slice("v"), 1};
  ApplyRequest w;
  CHECK(ToWireApply({&op, 1}, 0, &w).IsInvalidArgument());
}

TEST_CASE("LSNs the wire cannot carry are rejected before sending", "[protocol][convert]") {
  const ::deuteron::RecordOp op{::deuteron::RecordOpKind::kUpsert, Slice("k"), Slice("v"), kMaxI64 + 1};
  ApplyRequest w;
  CHECK(ToWireApply({&op, 1}, 0, &w).IsInvalidArgument());
  const ::deuteron::RecordOp ok_op{::deuteron::RecordOpKind::kUpsert, Slice("k"), Slice("v"), 1};
  CHECK(ToWireApply({&ok_op, 1}, kMaxI64 + 1, &w).IsInvalidArgument());
  CHECK(ToWireLsn(kMaxI64 + 1, "ESL").status().IsInvalidArgument());
  CHECK(*ToWireLsn(kMaxI64, "ESL") == std::numeric_limits<int64_t>::max());
  CHECK(FromWireLsn(-5, "RSSP").status().IsInvalidArgument());
  CHECK(*FromWireLsn(0, "RSSP") == 0);
}

TEST_CASE("Scan requests keep absent and present bounds apart", "[protocol][convert]") {
  ::deuteron::ScanRequest r;
  r.upper = std::string("");  // present but empty: not the same as absent
  r.upper_inclusive = true;
  r.lower_inclusive = false;
  r.reverse = true;
  r.limit = 17;
  auto back = FromWireScan(ToWireScan(r));
  REQUIRE(back.ok());
  CHECK(!back->lower.has_value());
  REQUIRE(back->upper.has_value());
  CHECK(back->upper->empty());
  CHECK(back->upper_inclusive);
  CHECK(!back->lower_inclusive);
  CHECK(back->reverse);
  CHECK(back->limit == 17);

  r.lower = "a";
  r.limit = std::numeric_limits<uint32_t>::max();
  const ScanRequest w = ToWireScan(r);
  CHECK(w.limit == std::numeric_limits<int32_t>::max());
  CHECK(*FromWireScan(w)->lower == "a");

  ScanRequest bad;
  bad.limit = -1;
  CHECK(FromWireScan(bad).status().IsInvalidArgument());
}

TEST_CASE("Replies survive the wire round trip", "[protocol][convert]") {
  const auto a = FromWire(ToWire(::deuteron::ApplyResult{3, 4}));
  CHECK(a.applied == 3);
  CHECK(a.skipped == 4);

  const auto rr = FromWire(ToWire(::deuteron::ReadResult{true, "val", 99}));
  CHECK(rr.found);
  CHECK(rr.value == "val");
  CHECK(rr.lsn == 99);

  ::deuteron::ScanResult sr;
  sr.items = {{"a", "1", 5}, {"b", "", 6}};
  sr.more = true;
  const auto sb = FromWire(ToWire(sr));
  REQUIRE(sb.items.size() == 2);
  CHECK(sb.items[1].key == "b");
  CHECK(sb.items[0].value == "1");
  CHECK(sb.items[1].lsn == 6);
  CHECK(sb.more);

  const auto ready = FromWire(ToWire(::deuteron::DcReady{10, 20, 7}));
  CHECK(ready.rssp == 10);
  CHECK(ready.max_durable_lsn == 20);
  CHECK(ready.incarnation == 7);
  CHECK(ready.store_id.nil());  // not said: the fields stay absent
  CHECK(ready.instance == 0);
  {
    ::deuteron::DcReady r{10, 20, 7};
    r.store_id = ::deuteron::StoreId::Random();
    r.instance = 99;
    const auto wire = ToWire(r);
    CHECK(wire.__isset.store_id);
    const auto back = FromWire(wire);
    CHECK(back.store_id == r.store_id);
    CHECK(back.instance == 99);
    ::deuteron::DcHealth hh;
    hh.store_id = r.store_id;
    hh.instance = 5;
    auto h = FromWire(ToWire(hh));
    REQUIRE(h.ok());
    CHECK(h->store_id == r.store_id);
    CHECK(h->instance == 5);
    // A store id of the wrong size reads as none.
    auto bad = ToWire(r);
    bad.__set_store_id("short");
    CHECK(FromWire(bad).store_id.nil());
  }

  for (auto state : {::deuteron::DcState::kServing, ::deuteron::DcState::kRestarting,
                     ::deuteron::DcState::kShuttingDown}) {
    auto h = FromWire(ToWire(::deuteron::DcHealth{state, 1, 2, 3, 4}));
    REQUIRE(h.ok());
    CHECK(h->state == state);
    CHECK(h->esl == 1);
    CHECK(h->rssp == 2);
    CHECK(h->max_durable_lsn == 3);
    CHECK(h->incarnation == 4);
  }

  ::deuteron::DcStats st;
  uint64_t v = 100;
  for (uint64_t* f : {&st.applies, &st.ops_applied, &st.ops_skipped, &st.gets, &st.scans,
                      &st.scan_items, &st.rssp_proposals, &st.restarts, &st.esl, &st.rssp,
                      &st.max_durable_lsn, &st.pages, &st.memory_bytes, &st.flushes,
                      &st.flush_bytes, &st.lss_bytes_written, &st.memory_budget, &st.node_bytes,
                      &st.checkpoints, &st.segments_cleaned, &st.pages_relocated, &st.bytes_relocated,
                      &st.lss_disk_bytes, &st.lss_segments, &st.page_loads, &st.swap_outs}) {
    *f = v++;
  }
  st.tree_height = 7;
  const auto sb2 = FromWire(ToWire(st));
  CHECK(sb2.applies == 100);
  CHECK(sb2.flush_bytes == 114);
  CHECK(sb2.lss_bytes_written == 115);
  CHECK(sb2.max_durable_lsn == 110);
  CHECK(sb2.tree_height == 7);
  CHECK(sb2.memory_budget == 116);
  CHECK(sb2.lss_disk_bytes == 122);
  CHECK(sb2.swap_outs == 125);
  // From a server that sends none of the appended fields: zeros.
  DcStats old = ToWire(st);
  old.__isset.memory_budget = false;
  old.__isset.swap_outs = false;
  const auto sb3 = FromWire(old);
  CHECK(sb3.memory_budget == 0);
  CHECK(sb3.swap_outs == 0);
  CHECK(sb3.lss_disk_bytes == 122);
}

TEST_CASE("A DC state from a newer peer decodes as Internal", "[protocol][convert]") {
  DcHealth w;
  w.state = static_cast<DcState::type>(9);
  CHECK(FromWire(w).status().code() == Code::kInternal);
}

}  // namespace
}  // namespace deuteron::protocol
