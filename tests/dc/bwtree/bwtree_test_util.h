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
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "common/random.h"
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

// Key and value limits that TreeLlamaOptions' 64 KiB LSS buffers hold with
// nodes at the store's limit: Open requires node_max_bytes (here up to
// NodeBytesLimit, 21,760 bytes) plus NodeBytesRoom (5 records of 512-byte
// keys and 1536-byte values at the default leaf_delta_threshold, 10,480
// bytes) within 1.5 times NodeBytesLimit. The defaults (4 KiB keys, 64 KiB
// values) need larger buffers.
inline Limits TestLimits() {
  Limits l;
  l.max_key_size = 512;
  l.max_value_size = 1536;
  return l;
}

// The default options with TestLimits.
inline BwTreeOptions TestOptions() {
  BwTreeOptions o;
  o.limits = TestLimits();
  return o;
}

// Nodes so small that a few hundred keys make a tree of several levels, and
// every few writes consolidate, split or merge something.
inline BwTreeOptions SmallNodeOptions() {
  BwTreeOptions o = TestOptions();
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

inline bool IsAlreadyExists(const Status& s) { return s.IsAlreadyExists(); }

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

inline bool operator==(const Item& a, const Item& b) {
  return a.lsn == b.lsn && a.key == b.key && a.value == b.value;
}

// A value in an operation log: its first bytes and its length.
inline std::string Brief(std::string_view v) {
  if (v.size() <= 12) return Esc(v);
  return Esc(v.substr(0, 12)) + "...(" + std::to_string(v.size()) + " bytes)";
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

// Compares the tree's view of one key with `want` (null: never written), as
// text (empty when they agree). Tombstones with an LSN below `purge_below()`
// may have been purged (GetLsn then says 0); it is read after the lookups,
// since with other threads writing the tree's purge bound moves meanwhile.
// No Catch: any thread.
inline std::string CompareRecord(BwTree* tree, const std::string& key, const ModelRecord* want,
                                 const std::function<uint64_t()>& purge) {
  auto got = tree->Get(key);
  auto lsn = tree->GetLsn(key);
  const uint64_t purge_below = purge ? purge() : 0;
  std::string why;
  if (!lsn.ok()) {
    why = "GetLsn failed: " + lsn.status().ToString();
  } else if (want == nullptr) {
    if (*lsn != 0) why = "GetLsn " + std::to_string(*lsn) + ", want 0";
  } else if (*lsn != want->lsn &&
             !(want->deleted && want->lsn < purge_below && *lsn == 0)) {
    why = "GetLsn " + std::to_string(*lsn) + ", want " + std::to_string(want->lsn) +
          (want->deleted ? " (a tombstone; purge bound " + std::to_string(purge_below) + ")" : "");
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

inline std::string CompareRecord(BwTree* tree, const std::string& key, const ModelRecord* want,
                                 uint64_t purge_below) {
  return CompareRecord(tree, key, want, [purge_below] { return purge_below; });
}

inline std::string CompareKey(BwTree* tree, const Model& model, const std::string& key,
                              uint64_t purge_below) {
  return CompareRecord(tree, key, model.Find(key), purge_below);
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
    const std::vector<Item> want = model.Scan(o);
    if (got != want) {
      const std::string g = Describe(got), w = Describe(want);
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

// Key i of a model test's key space: Key(i / 3), alone or followed by "\0"
// or "\xffz" (keys that are prefixes of others, bytes at both ends of the
// range). Ascending in i.
inline std::string SpaceKey(uint64_t i) {
  std::string k = Key(i / 3);
  if (i % 3 == 1) k.push_back('\0');
  if (i % 3 == 2) k += "\xff" "z";
  return k;
}

// One successful write, for tests that need the state at an older LSN.
struct LoggedWrite {
  uint64_t lsn = 0;
  WriteKind kind = WriteKind::kUpsert;
  std::string key;
  std::string value;
};

struct DriverOptions {
  std::vector<std::string> keys;  // the keys this driver owns, ascending
  int phase_steps = 400;          // growing and shrinking phases alternate
  size_t max_scan_span = 40;      // keys (of the owned list) a scan's bounds span
  size_t max_value = 24;          // value bytes
  bool log_writes = false;        // keep every successful write in log()
};

// A random workload on the keys one thread owns, each step checked exactly
// against a Model: the outcome of every write, the key read back after it,
// reads, and scans (their items filtered to the owned keys, so that other
// threads may own the keys in between). No Catch: runs on any thread; the
// first disagreement stops it and failure() says what happened, with the
// driver's last operations.
class Driver {
 public:
  Driver(BwTree* tree, std::atomic<uint64_t>* lsn, std::function<uint64_t()> purge_below,
         DriverOptions o, uint64_t seed, int id)
      : tree_(tree),
        lsn_(lsn),
        purge_below_(std::move(purge_below)),
        o_(std::move(o)),
        seed_(seed),
        rnd_(seed),
        id_(id) {}

  // Runs up to `steps` steps; false at the first disagreement.
  bool Run(int steps) {
    for (int i = 0; i < steps && failure_.empty() && (stop_ == nullptr || !stop_->load()); ++i) {
      Step();
      ++step_;
    }
    return failure_.empty();
  }

  // Upserts the owned keys [begin, end) of the key list once each (checked
  // like any step).
  bool Preload(size_t begin, size_t end) {
    for (size_t i = begin; i < end && i < o_.keys.size() && failure_.empty(); ++i) {
      DoWrite(WriteKind::kUpsert, o_.keys[i]);
    }
    return failure_.empty();
  }
  size_t key_count() const { return o_.keys.size(); }

  const std::string& failure() const { return failure_; }
  Model& model() { return model_; }
  const std::vector<LoggedWrite>& log() const { return log_; }
  std::vector<LoggedWrite>& mutable_log() { return log_; }
  uint64_t step() const { return step_; }
  uint64_t writes() const { return writes_; }
  uint64_t scans() const { return scans_; }
  // After a reopen.
  void set_tree(BwTree* tree) { tree_ = tree; }
  // A flag shared by drivers on other threads: the first failure sets it and
  // every driver stops, so the tree after joining is the one it saw.
  void set_stop(std::atomic<bool>* stop) { stop_ = stop; }
  uint64_t PurgeBelow() const { return purge_below_ ? purge_below_() : 0; }

 private:
  bool Owned(const std::string& key) const {
    return std::binary_search(o_.keys.begin(), o_.keys.end(), key);
  }

  void Note(std::string op) {
    recent_.push_back(std::move(op));
    if (recent_.size() > 24) recent_.erase(recent_.begin());
  }

  void Fail(const std::string& what) {
    if (!failure_.empty()) return;
    if (stop_ != nullptr) stop_->store(true);
    failure_ = "driver " + std::to_string(id_) + " (seed " + std::to_string(seed_) + ") step " +
               std::to_string(step_) + ": " + what + "\n  last operations, oldest first:\n";
    for (const std::string& op : recent_) failure_ += "    " + op + "\n";
  }

  std::string RandomValue() {
    std::string v(rnd_.Uniform(o_.max_value + 1), '\0');
    rnd_.Fill(v.data(), v.size());
    return v;
  }

  void Step() {
    // Most keys come from a small hot set, so that keys are rewritten and
    // deleted often.
    const size_t n = o_.keys.size();
    const size_t hot = std::max<size_t>(1, n / 8);
    const size_t index = rnd_.OneIn(3) ? rnd_.Uniform(hot) * (n / hot) : rnd_.Uniform(n);
    const std::string& key = o_.keys[index];
    const bool growing = (step_ / static_cast<uint64_t>(o_.phase_steps)) % 2 == 0;
    // Weights in percent: insert, update, upsert, delete, blind delete, get,
    // getlsn; the rest scans.
    static constexpr int kGrow[] = {30, 10, 20, 8, 2, 14, 4};
    static constexpr int kShrink[] = {8, 8, 6, 34, 10, 14, 4};
    const int* w = growing ? kGrow : kShrink;
    int r = static_cast<int>(rnd_.Uniform(100));
    int op = 0;
    while (op < 7 && r >= w[op]) r -= w[op++];
    switch (op) {
      case 0:
        return DoWrite(WriteKind::kInsert, key);
      case 1:
        return DoWrite(WriteKind::kUpdate, key);
      case 2:
        return DoWrite(WriteKind::kUpsert, key);
      case 3:
        return DoWrite(WriteKind::kDelete, key);
      case 4:
        return DoWrite(WriteKind::kBlindDelete, key);
      case 5:
      case 6:
        Note("Get " + Esc(key));
        return Verify(key);
      default:
        return DoScan(index);
    }
  }

  void Verify(const std::string& key) {
    const std::string diff =
        CompareRecord(tree_, key, model_.Find(key), [this] { return PurgeBelow(); });
    if (!diff.empty()) Fail(diff);
  }

  void DoWrite(WriteKind kind, const std::string& key) {
    const bool del = kind == WriteKind::kDelete || kind == WriteKind::kBlindDelete;
    const std::string value = del ? std::string() : RandomValue();
    const uint64_t lsn = lsn_->fetch_add(1) + 1;
    const Expect want = model_.Apply(kind, key, value, lsn);
    Status s = tree_->Write(kind, key, value, lsn);
    Note(std::string(KindName(kind)) + " " + Esc(key) + " = " + Brief(value) + " @" +
         std::to_string(lsn) + " -> " + s.ToString());
    if (!Matches(s, want)) {
      return Fail(std::string(KindName(kind)) + " " + Esc(key) + " @" + std::to_string(lsn) +
                  " returned " + s.ToString() + ", want " + ExpectName(want));
    }
    if (want == Expect::kOk) {
      ++writes_;
      if (o_.log_writes) log_.push_back(LoggedWrite{lsn, kind, key, value});
    }
    Verify(key);
  }

  void DoScan(size_t index) {
    ScanOptions o;
    const size_t n = o_.keys.size();
    if (!rnd_.OneIn(40)) {
      const size_t span = rnd_.Uniform(o_.max_scan_span + 1);
      // Bounds that are owned keys, or just beside them.
      auto bound = [&](size_t i) {
        std::string k = o_.keys[std::min(i, n - 1)];
        if (rnd_.OneIn(4)) k.push_back('\x01');
        return k;
      };
      if (!rnd_.OneIn(10)) o.lower = bound(index);
      if (!rnd_.OneIn(10)) o.upper = bound(index + span);
    }
    o.lower_inclusive = !rnd_.OneIn(3);
    o.upper_inclusive = rnd_.OneIn(3);
    o.reverse = rnd_.OneIn(2);
    Note("Scan " + Describe(o));
    ++scans_;
    std::vector<Item> got;
    Status s = TryScan(tree_, o, &got);
    if (!s.ok()) return Fail("scan " + Describe(o) + " failed: " + s.ToString());
    // Strictly ordered and in range, whoever owns the keys.
    for (size_t i = 0; i < got.size(); ++i) {
      if (!InRange(o, got[i].key)) return Fail("scan " + Describe(o) + " returned " + Esc(got[i].key));
      if (i > 0 && (o.reverse ? got[i].key >= got[i - 1].key : got[i].key <= got[i - 1].key)) {
        return Fail("scan " + Describe(o) + " returned " + Esc(got[i].key) + " after " +
                    Esc(got[i - 1].key));
      }
    }
    std::vector<Item> mine;
    for (Item& i : got) {
      if (Owned(i.key)) mine.push_back(std::move(i));
    }
    const std::vector<Item> want = model_.Scan(o);
    if (mine != want) {
      Fail("scan " + Describe(o) + " returned\n" + Describe(mine) + "  want\n" + Describe(want));
    }
  }

  BwTree* tree_;
  std::atomic<uint64_t>* const lsn_;
  const std::function<uint64_t()> purge_below_;
  const DriverOptions o_;
  const uint64_t seed_;
  Random64 rnd_;
  const int id_;
  Model model_;
  std::vector<LoggedWrite> log_;
  std::vector<std::string> recent_;
  std::string failure_;
  std::atomic<bool>* stop_ = nullptr;
  uint64_t step_ = 0, writes_ = 0, scans_ = 0;
};

}  // namespace deuteron::bwtree::test
