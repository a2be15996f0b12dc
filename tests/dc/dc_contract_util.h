// Helpers of the DC contract tests: operations the test owns, a std::map
// model of the state each key must have, and checks of a DataComponent
// against it (through DataComponent& only, over any binding of
// tests/dc/dc_harness.h). The test plays the TC: it hands out LSNs, moves the
// ESL, proposes RSSPs, crashes the DC and replays.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "common/random.h"
#include "protocol/data_component.h"
#include "tests/dc/dc_harness.h"

namespace deuteron::test {


// An operation the test owns the bytes of.
struct Op {
  RecordOpKind kind = RecordOpKind::kUpsert;
  std::string key;
  std::string value;
  uint64_t lsn = 0;
};

inline std::string KeyName(uint64_t i) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "key%05llu", static_cast<unsigned long long>(i));
  return buf;
}

inline std::string ValueFor(uint64_t lsn, Random64* rnd) {
  std::string v = "v" + std::to_string(lsn) + "-";
  v.append(rnd->Uniform(40), static_cast<char>('a' + lsn % 26));
  return v;
}

// Ops with LSNs first, first + 1, ..., over `keys` keys, about one in
// `delete_one_in` a delete; in LSN order.
inline std::vector<Op> MakeOps(Random64* rnd, uint64_t first, size_t n, uint64_t keys,
                        uint64_t delete_one_in = 5) {
  std::vector<Op> ops;
  ops.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    Op op;
    op.lsn = first + i;
    op.key = KeyName(rnd->Uniform(keys));
    if (rnd->OneIn(delete_one_in)) {
      op.kind = RecordOpKind::kDelete;
    } else {
      op.value = ValueFor(op.lsn, rnd);
    }
    ops.push_back(std::move(op));
  }
  return ops;
}

inline void Shuffle(std::vector<Op>* ops, Random64* rnd) {
  for (size_t i = ops->size(); i > 1; --i) std::swap((*ops)[i - 1], (*ops)[rnd->Uniform(i)]);
}

// Out-of-order arrival as a TC makes it: keys interleaved in a random order,
// each key's operations in LSN order (per-key LSN order is the TC's lock
// order; dc/dc.md says why the DC relies on it across an ESL).
inline void ShuffleAcrossKeys(std::vector<Op>* ops, Random64* rnd) {
  Shuffle(ops, rnd);
  std::map<std::string, std::vector<size_t>> slots;
  for (size_t i = 0; i < ops->size(); ++i) slots[(*ops)[i].key].push_back(i);
  for (auto& [key, where] : slots) {
    std::vector<Op> mine;
    for (size_t i : where) mine.push_back(std::move((*ops)[i]));
    std::sort(mine.begin(), mine.end(), [](const Op& a, const Op& b) { return a.lsn < b.lsn; });
    for (size_t j = 0; j < where.size(); ++j) (*ops)[where[j]] = std::move(mine[j]);
  }
}

inline std::vector<RecordOp> Views(const std::vector<Op>& ops, size_t from, size_t to) {
  std::vector<RecordOp> out;
  for (size_t i = from; i < to; ++i) {
    out.push_back(RecordOp{ops[i].kind, ops[i].key, ops[i].value, ops[i].lsn});
  }
  return out;
}

// Applies `ops` in order, in batches of at most `batch` (random sizes when
// rnd is given); `esl` piggy-backed on each call, as TC incarnation
// `incarnation`. Returns the totals.
inline ApplyResult ApplyAll(DataComponent* dc, const std::vector<Op>& ops, uint64_t esl,
                            size_t batch, Random64* rnd = nullptr, uint64_t incarnation = 0) {
  ApplyResult total;
  for (size_t i = 0; i < ops.size();) {
    const size_t n = rnd != nullptr ? 1 + rnd->Uniform(batch) : batch;
    const size_t end = std::min(ops.size(), i + n);
    std::vector<RecordOp> views = Views(ops, i, end);
    Result<ApplyResult> r = dc->Apply(views, esl, incarnation);
    INFO("apply [" << i << ", " << end << "): " << r.status().ToString());
    REQUIRE(r.ok());
    REQUIRE(r->applied + r->skipped == end - i);
    total.applied += r->applied;
    total.skipped += r->skipped;
    i = end;
  }
  return total;
}

struct ModelRecord {
  bool deleted = false;
  std::string value;
  uint64_t lsn = 0;
};
using Model = std::map<std::string, ModelRecord>;

// Each key's newest operation with LSN in [lo, hi].
inline Model BuildModel(const std::vector<Op>& ops, uint64_t hi, uint64_t lo = 0) {
  Model m;
  for (const Op& op : ops) {
    if (op.lsn > hi || op.lsn < lo) continue;
    ModelRecord& r = m[op.key];
    if (op.lsn < r.lsn) continue;
    r = ModelRecord{op.kind == RecordOpKind::kDelete, op.value, op.lsn};
  }
  return m;
}

inline ScanResult ScanPage(DataComponent* dc, const ScanRequest& req) {
  Result<ScanResult> r = dc->Scan(req);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return std::move(r).value();
}

// Every live item among the KeyName keys, by repeated scans that continue
// after the last key.
inline std::vector<ScanItem> ScanAll(DataComponent* dc) {
  std::vector<ScanItem> all;
  ScanRequest req;
  req.upper = "kez";  // above every "key....." name
  for (;;) {
    ScanResult page = ScanPage(dc, req);
    for (ScanItem& item : page.items) all.push_back(std::move(item));
    if (!page.more) break;
    REQUIRE(!all.empty());
    req.lower = all.back().key;
    req.lower_inclusive = false;
  }
  return all;
}

inline ReadResult GetKey(DataComponent* dc, const std::string& key) {
  Result<ReadResult> r = dc->Get(key);
  INFO("get " << key << ": " << r.status().ToString());
  REQUIRE(r.ok());
  return std::move(r).value();
}

// The DC holds exactly `model` for every key in [0, keys).
inline void CheckExact(DataComponent* dc, const Model& model, uint64_t keys) {
  for (uint64_t i = 0; i < keys; ++i) {
    const std::string key = KeyName(i);
    const ReadResult r = GetKey(dc, key);
    auto it = model.find(key);
    INFO("key " << key << " found " << r.found << " lsn " << r.lsn);
    if (it == model.end()) {
      CHECK(!r.found);
      CHECK(r.lsn == 0);
      continue;
    }
    INFO("model lsn " << it->second.lsn << " deleted " << it->second.deleted);
    CHECK(r.found == !it->second.deleted);
    CHECK(r.value == it->second.value);
    // A tombstone may be purged once an acknowledged RSSP passed it.
    if (it->second.deleted && r.lsn == 0) continue;
    CHECK(r.lsn == it->second.lsn);
  }
  std::vector<ScanItem> items = ScanAll(dc);
  std::vector<ScanItem> expected;
  for (const auto& [key, rec] : model) {
    if (!rec.deleted) expected.push_back(ScanItem{key, rec.value, rec.lsn});
  }
  REQUIRE(items.size() == expected.size());
  for (size_t i = 0; i < items.size(); ++i) {
    INFO("scan item " << i);
    CHECK(items[i].key == expected[i].key);
    CHECK(items[i].value == expected[i].value);
    CHECK(items[i].lsn == expected[i].lsn);
  }
}

// After losing what was not durable: each key holds the state of one of its
// operations with LSN at most `esl` (or nothing), and at least its newest
// one below `rssp`.
inline void CheckBetween(DataComponent* dc, const std::vector<Op>& ops, uint64_t rssp,
                         uint64_t esl, uint64_t keys) {
  const Model floor = BuildModel(ops, rssp == 0 ? 0 : rssp - 1);
  std::map<std::pair<std::string, uint64_t>, const Op*> by_lsn;
  for (const Op& op : ops) by_lsn[{op.key, op.lsn}] = &op;
  for (uint64_t i = 0; i < keys; ++i) {
    const std::string key = KeyName(i);
    const ReadResult r = GetKey(dc, key);
    INFO("key " << key << " found " << r.found << " lsn " << r.lsn << " rssp " << rssp
                << " esl " << esl);
    CHECK(r.lsn <= esl);
    auto f = floor.find(key);
    if (f != floor.end() && !(f->second.deleted && r.lsn == 0)) CHECK(r.lsn >= f->second.lsn);
    if (r.lsn == 0) {
      CHECK(!r.found);
      continue;
    }
    auto it = by_lsn.find({key, r.lsn});
    REQUIRE(it != by_lsn.end());
    CHECK(r.found == (it->second->kind == RecordOpKind::kUpsert));
    CHECK(r.value == it->second->value);
  }
}

// The binding `kind`, its FaultInjectionEnv seeded with `seed`.
inline std::unique_ptr<DcHarness> HarnessFor(const std::string& kind, uint64_t seed) {
  HarnessConfig config;
  config.seed = seed;
  return MakeHarness(kind, config);
}

inline DcHealth HealthOf(DataComponent* dc) {
  Result<DcHealth> h = dc->Health();
  REQUIRE(h.ok());
  return *h;
}

inline void RequireOk(const Status& s) {
  INFO(s.ToString());
  REQUIRE(s.ok());
}

// Operations with LSN in [lo, hi], in a random order: the TC's redo.
inline std::vector<Op> Slice_(const std::vector<Op>& ops, uint64_t lo, uint64_t hi,
                              Random64* rnd) {
  std::vector<Op> out;
  for (const Op& op : ops) {
    if (op.lsn >= lo && op.lsn <= hi) out.push_back(op);
  }
  ShuffleAcrossKeys(&out, rnd);
  return out;
}

}  // namespace deuteron::test
