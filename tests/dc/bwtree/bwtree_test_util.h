// Helpers shared by the Bw-tree tests (bwtree_test, bwtree_model_test,
// bwtree_crash_test): key names, small-node options, a std::map model of the
// tree's semantics, and scans turned into comparable text.
//
// Thread safety: the functions with Catch assertions (OpenTree, RequireCheck,
// ScanText) run on the test's thread only (Catch 2 is not thread-safe). Model
// is a value: one thread at a time. TryScan and the Describe helpers use no
// Catch and may run on any thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "common/slice.h"
#include "common/status.h"
#include "dc/bwtree/bwtree.h"
#include "dc/llama/llama.h"

namespace deuteron::bwtree::test {

// A flush bound that takes everything.
inline constexpr uint64_t kAll = ~0ull;

// "k000042": fixed width, so numeric order is key order.
inline std::string Key(uint64_t i) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "k%06llu", static_cast<unsigned long long>(i));
  return buf;
}

// Printable form of bytes (keys and values may hold any byte).
inline std::string Esc(std::string_view s) { return Slice(s).ToEscaped(); }

// Nodes so small that a few hundred keys make a tree of several levels, and
// every few writes consolidate, split or merge something.
inline BwTreeOptions SmallNodeOptions() {
  BwTreeOptions o;
  o.leaf_max_records = 6;
  o.inner_max_entries = 5;
  o.leaf_delta_threshold = 3;
  o.inner_delta_threshold = 2;
  o.leaf_merge_records = 2;
  return o;
}

// Small LLAMA buffers and segments, I/O done by the thread filling a buffer
// (deterministic from a seed).
inline llama::LlamaOptions TreeLlamaOptions() {
  llama::LlamaOptions o;
  o.lss.segment_size = 1 << 20;
  o.lss.buffer_size = 64 << 10;
  o.lss.buffer_count = 4;
  o.lss.io_threads = 0;
  o.mapping.max_pages = 1 << 18;
  return o;
}

inline std::unique_ptr<llama::Llama> OpenLlama(Env* env, const llama::LlamaOptions& o) {
  auto r = llama::Llama::Open(env, "/db", o);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return std::move(r).value();
}

inline std::unique_ptr<BwTree> OpenTree(llama::Llama* l, const BwTreeOptions& o) {
  auto r = BwTree::Open(l, o);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return std::move(r).value();
}

inline void RequireCheck(BwTree* tree) {
  Status s = tree->Check();
  INFO("Check: " << s.ToString());
  REQUIRE(s.ok());
}

// The header promises AlreadyExists for an Insert over a present key.
// Matched by code name so these tests do not depend on where in the Code
// enum it was added.
inline bool IsAlreadyExists(const Status& s) { return CodeName(s.code()) == "AlreadyExists"; }

// What a write must return.
enum class Expect { kOk, kAlreadyExists, kNotFound };

inline const char* ExpectName(Expect e) {
  switch (e) {
    case Expect::kOk:
      return "OK";
    case Expect::kAlreadyExists:
      return "AlreadyExists";
    case Expect::kNotFound:
      return "NotFound";
  }
  return "?";
}

inline bool Matches(const Status& s, Expect e) {
  switch (e) {
    case Expect::kOk:
      return s.ok();
    case Expect::kAlreadyExists:
      return IsAlreadyExists(s);
    case Expect::kNotFound:
      return s.IsNotFound();
  }
  return false;
}

inline const char* KindName(WriteKind k) {
  switch (k) {
    case WriteKind::kInsert:
      return "Insert";
    case WriteKind::kUpdate:
      return "Update";
    case WriteKind::kUpsert:
      return "Upsert";
    case WriteKind::kDelete:
      return "Delete";
    case WriteKind::kBlindDelete:
      return "BlindDelete";
  }
  return "?";
}

// One record as a scan returns it.
struct Item {
  std::string key;
  std::string value;
  uint64_t lsn = 0;
};

// "key=value@lsn" lines: one string compare checks a whole scan, and a
// mismatch prints readably.
inline std::string Describe(const std::vector<Item>& items) {
  std::string out;
  for (const Item& i : items) {
    out += Esc(i.key) + "=" + Esc(i.value) + "@" + std::to_string(i.lsn) + "\n";
  }
  return out;
}

inline std::string Describe(const ScanOptions& o) {
  std::string out = o.reverse ? "reverse " : "forward ";
  out += o.lower ? (o.lower_inclusive ? "[" : "(") + Esc(*o.lower) : std::string("(-inf");
  out += ", ";
  out += o.upper ? Esc(*o.upper) + (o.upper_inclusive ? "]" : ")") : std::string("+inf)");
  return out;
}

// Runs a scan to its end. No Catch: any thread.
inline Status TryScan(BwTree* tree, const ScanOptions& o, std::vector<Item>* out) {
  out->clear();
  ASSIGN_OR_RETURN(std::unique_ptr<Iterator> it, tree->Scan(o));
  for (; it->Valid(); it->Next()) {
    out->push_back(Item{it->key().ToString(), it->value().ToString(), it->lsn()});
  }
  return it->status();
}

inline std::vector<Item> ScanItems(BwTree* tree, const ScanOptions& o = {}) {
  std::vector<Item> items;
  Status s = TryScan(tree, o, &items);
  INFO("scan " << Describe(o) << ": " << s.ToString());
  REQUIRE(s.ok());
  return items;
}

inline std::string ScanText(BwTree* tree, const ScanOptions& o = {}) {
  return Describe(ScanItems(tree, o));
}

inline bool InRange(const ScanOptions& o, const std::string& key) {
  if (o.lower) {
    if (o.lower_inclusive ? key < *o.lower : key <= *o.lower) return false;
  }
  if (o.upper) {
    if (o.upper_inclusive ? key > *o.upper : key >= *o.upper) return false;
  }
  return true;
}

// The tree's semantics over std::map: the newest write of each key, a
// delete's tombstone included (its LSN is what GetLsn returns until a purge
// drops it).
struct ModelRecord {
  std::string value;
  uint64_t lsn = 0;
  bool deleted = false;
};

class Model {
 public:
  // What the tree must answer to this write; applies it when the answer is
  // OK.
  Expect Apply(WriteKind kind, const std::string& key, std::string_view value, uint64_t lsn) {
    auto it = map_.find(key);
    const bool present = it != map_.end() && !it->second.deleted;
    switch (kind) {
      case WriteKind::kInsert:
        if (present) return Expect::kAlreadyExists;
        break;
      case WriteKind::kUpdate:
      case WriteKind::kDelete:
        if (!present) return Expect::kNotFound;
        break;
      case WriteKind::kUpsert:
      case WriteKind::kBlindDelete:
        break;
    }
    const bool del = kind == WriteKind::kDelete || kind == WriteKind::kBlindDelete;
    map_[key] = ModelRecord{del ? std::string() : std::string(value), lsn, del};
    return Expect::kOk;
  }

  // The newest write of the key, tombstones included.
  const ModelRecord* Find(const std::string& key) const {
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : &it->second;
  }
  bool Present(const std::string& key) const {
    const ModelRecord* r = Find(key);
    return r != nullptr && !r->deleted;
  }

  // Live records in the scan's range and order.
  std::vector<Item> Scan(const ScanOptions& o) const {
    std::vector<Item> out;
    for (const auto& [key, r] : map_) {
      if (!r.deleted && InRange(o, key)) out.push_back(Item{key, r.value, r.lsn});
    }
    if (o.reverse) std::reverse(out.begin(), out.end());
    return out;
  }

  size_t LiveCount() const {
    size_t n = 0;
    for (const auto& [key, r] : map_) n += r.deleted ? 0 : 1;
    return n;
  }

  const std::map<std::string, ModelRecord>& records() const { return map_; }
  std::map<std::string, ModelRecord>& mutable_records() { return map_; }

 private:
  std::map<std::string, ModelRecord> map_;
};

// Compares the tree's view of one key with the model, as text (empty when
// they agree). `purge_below`: tombstones with a smaller LSN may have been
// purged (GetLsn then says 0). No Catch: any thread.
inline std::string CompareKey(BwTree* tree, const Model& model, const std::string& key,
                              uint64_t purge_below) {
  const ModelRecord* want = model.Find(key);
  auto got = tree->Get(key);
  auto lsn = tree->GetLsn(key);
  std::string why;
  if (!lsn.ok()) {
    why = "GetLsn failed: " + lsn.status().ToString();
  } else if (want == nullptr) {
    if (*lsn != 0) why = "GetLsn " + std::to_string(*lsn) + ", want 0";
  } else if (*lsn != want->lsn &&
             !(want->deleted && want->lsn < purge_below && *lsn == 0)) {
    why = "GetLsn " + std::to_string(*lsn) + ", want " + std::to_string(want->lsn);
  }
  if (want == nullptr || want->deleted) {
    if (got.ok()) {
      why += " Get found " + Esc(got->value) + "@" + std::to_string(got->lsn) + ", want NotFound";
    } else if (!got.status().IsNotFound()) {
      why += " Get: " + got.status().ToString();
    }
  } else if (!got.ok()) {
    why += " Get: " + got.status().ToString() + ", want " + Esc(want->value) + "@" +
           std::to_string(want->lsn);
  } else if (got->value != want->value || got->lsn != want->lsn) {
    why += " Get " + Esc(got->value) + "@" + std::to_string(got->lsn) + ", want " +
           Esc(want->value) + "@" + std::to_string(want->lsn);
  }
  if (why.empty()) return why;
  return "key " + Esc(key) + ":" + why;
}

// Every key the model knows (and `extra` ones it may not) read back through
// Get and GetLsn, then a full scan each way. Text of the first differences;
// empty when all agree. No Catch: any thread.
inline std::string CompareAll(BwTree* tree, const Model& model, uint64_t purge_below,
                              const std::vector<std::string>& extra = {}) {
  std::string out;
  int shown = 0;
  auto note = [&](const std::string& s) {
    if (!s.empty() && shown++ < 8) out += s + "\n";
  };
  for (const auto& [key, r] : model.records()) note(CompareKey(tree, model, key, purge_below));
  for (const std::string& key : extra) {
    if (model.Find(key) == nullptr) note(CompareKey(tree, model, key, purge_below));
  }
  for (bool reverse : {false, true}) {
    ScanOptions o;
    o.reverse = reverse;
    std::vector<Item> got;
    Status s = TryScan(tree, o, &got);
    if (!s.ok()) {
      note("full " + Describe(o) + " scan failed: " + s.ToString());
      continue;
    }
    const std::string g = Describe(got), w = Describe(model.Scan(o));
    if (g != w) {
      // The first differing line, not two whole trees.
      size_t i = 0;
      while (i < g.size() && i < w.size() && g[i] == w[i]) ++i;
      const size_t line = g.rfind('\n', i == 0 ? 0 : i - 1);
      const size_t at = line == std::string::npos ? 0 : line + 1;
      note("full " + Describe(o) + " scan differs at line starting: got '" +
           g.substr(at, 60) + "' want '" + w.substr(at, 60) + "' (" +
           std::to_string(got.size()) + " vs " + std::to_string(model.LiveCount()) + " records)");
    }
  }
  return out;
}

}  // namespace deuteron::bwtree::test
