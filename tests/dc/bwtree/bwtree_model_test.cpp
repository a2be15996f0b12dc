// Model-based tests of the Bw-tree: long random sequences of inserts,
// updates, upserts, deletes, reads and scans checked against std::map.
//  - One thread, checked at every step (test::Driver).
//  - 2-4 threads on disjoint keys (contiguous ranges, or interleaved keys
//    that share every leaf): each thread owns a model of its keys and checks
//    exactly; scans are filtered to the keys the thread owns.
//  - 3 threads on the same keys: each key's writes run under a per-key mutex
//    that also draws the LSN, so per-key LSN order is completion order and
//    the state under the mutex is exact. Reads and scans without the mutex
//    check what must hold anyway: every value read is one written for that
//    key, with the LSN it was written at, no older than the last write that
//    completed before the read began, no newer than the last LSN drawn.
// Small nodes and short thresholds make splits, merges and consolidations
// constant. Threads stop at sync points (join), where Check() and a full
// comparison run, then start again on the same tree.
//
// Threads never use Catch assertions (not thread-safe): they keep the first
// failure's text, and the test checks after joining.
#include "dc/bwtree/bwtree.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "common/random.h"
#include "tests/dc/bwtree/bwtree_test_util.h"

namespace deuteron::bwtree {
namespace {

using llama::Llama;
using test::CompareAll;
using test::CompareRecord;
using test::Describe;
using test::Driver;
using test::DriverOptions;
using test::Esc;
using test::Expect;
using test::Item;
using test::Model;
using test::ModelRecord;
using test::OpenLlama;
using test::OpenTree;
using test::RequireCheck;
using test::SmallNodeOptions;
using test::SpaceKey;
using test::TestOptions;
using test::TreeLlamaOptions;

// Tombstones this many LSNs old may be purged.
constexpr uint64_t kPurgeLag = 300;

// A purge bound trailing the LSN counter by kPurgeLag (monotonic, so its
// value at a check bounds every value the tree used before).
std::function<uint64_t()> TrailingPurge(const std::atomic<uint64_t>* lsn) {
  return [lsn] {
    const uint64_t v = lsn->load();
    return v > kPurgeLag ? v - kPurgeLag : 0;
  };
}

std::vector<std::string> SpaceKeys(uint64_t begin, uint64_t end, uint64_t stride = 1,
                                   uint64_t offset = 0) {
  std::vector<std::string> keys;
  for (uint64_t i = begin + offset; i < end; i += stride) keys.push_back(SpaceKey(i));
  return keys;
}

void RequireStats(const BwTree::Stats& s, bool merges) {
  INFO("splits " << s.splits << ", root splits " << s.root_splits << ", merges " << s.merges
                 << ", consolidations " << s.consolidations << ", height " << s.height);
  CHECK(s.splits > 0);
  CHECK(s.root_splits > 0);
  CHECK(s.consolidations > 0);
  CHECK(s.height >= 3);
  if (merges) CHECK(s.merges > 0);
}

// ---------------------------------------------------------------------------
// One thread

void RunSingle(uint64_t seed, BwTreeOptions o, bool purge, uint64_t key_space, int steps,
               int check_every, bool want_merges, bool want_inner_merges = false) {
  INFO("seed " << seed);
  auto env = NewMemEnv();
  auto l = OpenLlama(env.get(), TreeLlamaOptions());
  std::atomic<uint64_t> lsn{0};
  if (purge) o.purge_bound = TrailingPurge(&lsn);
  auto tree = OpenTree(l.get(), o);
  DriverOptions d;
  d.keys = SpaceKeys(0, key_space);
  Driver driver(tree.get(), &lsn, purge ? TrailingPurge(&lsn) : nullptr, d, seed, 0);
  // Merges need leaves to shrink, which a random mix does only now and then:
  // when they are wanted, keep going (up to 10x) until one has happened.
  // Inner merges likewise.
  auto wanting = [&] {
    const BwTree::Stats s = tree->GetStats();
    return (want_merges && s.merges == 0) || (want_inner_merges && s.inner_merges == 0);
  };
  for (int done = 0; done < steps || (wanting() && done < 10 * steps); done += check_every) {
    const bool ok = driver.Run(check_every);
    INFO(driver.failure());
    REQUIRE(ok);
    const std::string diff = CompareAll(tree.get(), driver.model(), driver.PurgeBelow());
    INFO("after step " << driver.step() << ":\n" << diff);
    REQUIRE(diff.empty());
    RequireCheck(tree.get());
  }
  RequireStats(tree->GetStats(), want_merges);
  if (want_inner_merges) {
    const BwTree::Stats s = tree->GetStats();
    INFO("inner merges " << s.inner_merges << ", root collapses " << s.root_collapses);
    CHECK(s.inner_merges > 0);
  }
}

TEST_CASE("One thread's random operations match a std::map model", "[dc][bwtree][model]") {
  const uint64_t seed = TestSeed();
  SECTION("small nodes, tombstones kept") {
    RunSingle(seed, SmallNodeOptions(), false, 600, 3000, 500, false);
  }
  SECTION("small nodes, tombstones purged") {
    RunSingle(seed, SmallNodeOptions(), true, 600, 3000, 500, true);
  }
  SECTION("wider nodes, longer chains") {
    BwTreeOptions o = TestOptions();
    o.leaf_max_records = 24;
    o.inner_max_entries = 8;
    o.leaf_delta_threshold = 6;
    o.inner_delta_threshold = 3;
    o.leaf_merge_records = 4;
    RunSingle(seed, o, true, 1500, 2000, 1000, false);
  }
}

// Deletes heavy enough, with inner pages small enough, that inner pages
// merge under the model's checks (and, in some runs, the root collapses).
TEST_CASE("Random operations with inner merges match a std::map model", "[dc][bwtree][model]") {
  const uint64_t seed = TestSeed();
  BwTreeOptions o = SmallNodeOptions();
  o.inner_merge_entries = 2;
  o.inner_delta_threshold = 0;
  RunSingle(seed, o, true, 900, 3000, 500, true, /*want_inner_merges=*/true);
}

TEST_CASE("One thread's random operations match a std::map model (long)", "[dc][bwtree][model][.]") {
  const uint64_t seed = TestSeed();
  RunSingle(seed, SmallNodeOptions(), true, 3000, 100000, 5000, true);
  RunSingle(seed + 1, SmallNodeOptions(), false, 3000, 100000, 5000, false);
}

// ---------------------------------------------------------------------------
// Threads on disjoint keys

void RunDisjoint(uint64_t seed, int threads, bool interleaved, uint64_t key_space, int rounds,
                 int steps) {
  INFO("seed " << seed << ", " << threads << " threads, "
               << (interleaved ? "interleaved" : "contiguous") << " keys");
  auto env = NewMemEnv();
  auto l = OpenLlama(env.get(), TreeLlamaOptions());
  std::atomic<uint64_t> lsn{0};
  BwTreeOptions o = SmallNodeOptions();
  o.purge_bound = TrailingPurge(&lsn);
  auto tree = OpenTree(l.get(), o);
  std::vector<std::unique_ptr<Driver>> drivers;
  std::atomic<bool> stop{false};
  const uint64_t per = key_space / static_cast<uint64_t>(threads);
  for (int t = 0; t < threads; ++t) {
    const uint64_t ut = static_cast<uint64_t>(t);
    DriverOptions d;
    d.keys = interleaved ? SpaceKeys(0, key_space, static_cast<uint64_t>(threads), ut)
                         : SpaceKeys(ut * per, (ut + 1) * per);
    d.phase_steps = steps;  // rounds alternate growing and shrinking
    drivers.push_back(std::make_unique<Driver>(tree.get(), &lsn, TrailingPurge(&lsn), d,
                                               seed + 1000003 * ut, t));
    drivers.back()->set_stop(&stop);
  }
  for (int round = 0; round < rounds; ++round) {
    INFO("round " << round);
    std::vector<std::thread> workers;
    for (auto& d : drivers) workers.emplace_back([&d, steps] { d->Run(steps); });
    for (auto& w : workers) w.join();
    std::string failures;
    for (auto& d : drivers) failures += d->failure();
    // The sync point: all models together are the whole tree.
    Model all;
    for (auto& d : drivers) {
      for (const auto& [key, r] : d->model().records()) all.mutable_records()[key] = r;
    }
    const uint64_t purge_below = drivers[0]->PurgeBelow();
    if (!failures.empty()) {
      // How the tree looks once quiet (a thread stopped at its failure, so
      // its model may lack its last write).
      Status check = tree->Check();
      failures += "after joining: Check: " + check.ToString() + "; differences:\n" +
                  CompareAll(tree.get(), all, purge_below);
    }
    INFO(failures);
    REQUIRE(failures.empty());
    const std::string diff = CompareAll(tree.get(), all, purge_below);
    INFO(diff);
    REQUIRE(diff.empty());
    RequireCheck(tree.get());
  }
  RequireStats(tree->GetStats(), true);
}

TEST_CASE("Threads on disjoint key ranges each match their model", "[dc][bwtree][model]") {
  const uint64_t seed = TestSeed();
  SECTION("2 threads, contiguous ranges") { RunDisjoint(seed, 2, false, 600, 4, 500); }
  SECTION("3 threads, interleaved keys") { RunDisjoint(seed, 3, true, 600, 4, 400); }
  SECTION("4 threads, interleaved keys") { RunDisjoint(seed, 4, true, 600, 3, 200); }
}

TEST_CASE("Threads on disjoint key ranges each match their model (long)",
          "[dc][bwtree][model][.]") {
  const uint64_t seed = TestSeed();
  RunDisjoint(seed, 4, false, 4000, 6, 10000);
  RunDisjoint(seed + 1, 4, true, 4000, 6, 10000);
}

// ---------------------------------------------------------------------------
// Threads on the same keys

// A value that names its key and LSN: "<key>|<lsn>|<thread>|<padding>".
std::string SelfValue(const std::string& key, uint64_t lsn, int thread, size_t pad) {
  return key + "|" + std::to_string(lsn) + "|" + std::to_string(thread) + "|" +
         std::string(pad, 'p');
}

// Empty when `value` was written for `key` at `lsn`; else why not.
std::string CheckSelfValue(const std::string& key, const std::string& value, uint64_t lsn) {
  const std::string prefix = key + "|" + std::to_string(lsn) + "|";
  if (value.compare(0, prefix.size(), prefix) == 0) return "";
  return "key " + Esc(key) + " @" + std::to_string(lsn) + " holds value " + Esc(value) +
         " written for another key or LSN";
}

Expect ExpectFor(WriteKind kind, const std::optional<ModelRecord>& state) {
  const bool present = state.has_value() && !state->deleted;
  switch (kind) {
    case WriteKind::kInsert:
      return present ? Expect::kAlreadyExists : Expect::kOk;
    case WriteKind::kUpdate:
    case WriteKind::kDelete:
      return present ? Expect::kOk : Expect::kNotFound;
    default:
      return Expect::kOk;
  }
}

struct Shared {
  explicit Shared(std::vector<std::string> k)
      : keys(std::move(k)),
        mu(keys.size()),
        state(keys.size()),
        history(keys.size()),
        done(keys.size()) {}
  const std::vector<std::string> keys;
  std::vector<std::mutex> mu;
  std::vector<std::optional<ModelRecord>> state;  // GUARDED_BY(mu[i])
  std::vector<std::string> history;                // GUARDED_BY(mu[i]): the key's writes
  // LSN of the newest write of key i that has returned (0: none). Stored
  // under mu[i] after the tree call, read without it by lock-free readers.
  std::vector<std::atomic<uint64_t>> done;
  std::atomic<uint64_t> lsn{0};
  std::function<uint64_t()> purge;
  // Set by the first thread that fails: the others stop too, so the tree
  // after joining is the one the failure saw.
  std::atomic<bool> stop{false};
};

class OverlapWorker {
 public:
  OverlapWorker(BwTree* tree, Shared* shared, uint64_t seed, int id)
      : tree_(tree), shared_(shared), seed_(seed), rnd_(seed), id_(id) {}

  bool Run(int steps) {
    for (int i = 0; i < steps && failure_.empty() && !shared_->stop.load(); ++i, ++step_) Step();
    return failure_.empty();
  }
  const std::string& failure() const { return failure_; }

 private:
  void Fail(const std::string& what) {
    if (!failure_.empty()) return;
    shared_->stop = true;
    failure_ = "thread " + std::to_string(id_) + " (seed " + std::to_string(seed_) + ") step " +
               std::to_string(step_) + ": " + what + "\n  last operations, oldest first:\n";
    for (const std::string& op : recent_) failure_ += "    " + op + "\n";
  }
  void Note(std::string op) {
    recent_.push_back(std::move(op));
    if (recent_.size() > 24) recent_.erase(recent_.begin());
  }

  void Step() {
    const size_t n = shared_->keys.size();
    // A hot set, so that threads meet on the same keys.
    const size_t i = rnd_.OneIn(2) ? rnd_.Uniform(std::max<size_t>(1, n / 16)) * 16 % n
                                   : rnd_.Uniform(n);
    const uint64_t r = rnd_.Uniform(100);
    if (r < 50) return LockedWrite(i);
    if (r < 60) return LockedRead(i);
    if (r < 85) return LockFreeRead(i);
    return LockFreeScan(i);
  }

  void LockedWrite(size_t i) {
    static constexpr WriteKind kKinds[] = {WriteKind::kInsert, WriteKind::kInsert,
                                           WriteKind::kUpdate, WriteKind::kUpsert,
                                           WriteKind::kUpsert, WriteKind::kUpsert,
                                           WriteKind::kDelete, WriteKind::kDelete,
                                           WriteKind::kBlindDelete};
    const WriteKind kind = kKinds[rnd_.Uniform(std::size(kKinds))];
    const bool del = kind == WriteKind::kDelete || kind == WriteKind::kBlindDelete;
    const std::string& key = shared_->keys[i];
    const size_t pad = rnd_.Uniform(16);
    std::lock_guard<std::mutex> lock(shared_->mu[i]);
    std::optional<ModelRecord>& state = shared_->state[i];
    const uint64_t lsn = shared_->lsn.fetch_add(1) + 1;
    const std::string value = del ? std::string() : SelfValue(key, lsn, id_, pad);
    const Expect want = ExpectFor(kind, state);
    Status s = tree_->Write(kind, key, value, lsn);
    Note(std::string(test::KindName(kind)) + " " + Esc(key) + " @" + std::to_string(lsn) +
         " -> " + s.ToString());
    shared_->history[i] += " " + std::string(test::KindName(kind)) + "@" + std::to_string(lsn) +
                           "(t" + std::to_string(id_) + ")->" + std::string(CodeName(s.code()));
    if (!test::Matches(s, want)) {
      return Fail(std::string(test::KindName(kind)) + " " + Esc(key) + " @" +
                  std::to_string(lsn) + " returned " + s.ToString() + ", want " +
                  test::ExpectName(want));
    }
    if (want == Expect::kOk) {
      state = ModelRecord{value, lsn, del};
      shared_->done[i].store(lsn);
    }
    const std::string diff = CompareRecord(tree_, key, state ? &*state : nullptr, shared_->purge);
    if (!diff.empty()) {
      Fail("read back under the key's lock: " + diff + "; the key's writes:" + shared_->history[i]);
    }
  }

  void LockedRead(size_t i) {
    const std::string& key = shared_->keys[i];
    std::lock_guard<std::mutex> lock(shared_->mu[i]);
    Note("locked Get " + Esc(key));
    const std::optional<ModelRecord>& state = shared_->state[i];
    const std::string diff = CompareRecord(tree_, key, state ? &*state : nullptr, shared_->purge);
    if (!diff.empty()) Fail("under the key's lock: " + diff + "; the key's writes:" + shared_->history[i]);
  }

  void LockFreeRead(size_t i) {
    const std::string& key = shared_->keys[i];
    const uint64_t before = shared_->done[i].load();
    auto got = tree_->Get(key);
    auto lsn = tree_->GetLsn(key);
    const uint64_t after = shared_->lsn.load();
    Note("Get " + Esc(key) + " (done before: " + std::to_string(before) + ")");
    uint64_t floor = before;
    if (got.ok()) {
      const std::string bad = CheckSelfValue(key, got->value, got->lsn);
      if (!bad.empty()) return Fail("Get: " + bad);
      if (got->lsn < before || got->lsn > after) {
        return Fail("Get " + Esc(key) + " found LSN " + std::to_string(got->lsn) +
                    " outside [" + std::to_string(before) + ", " + std::to_string(after) + "]");
      }
      floor = got->lsn;
    } else if (!got.status().IsNotFound()) {
      return Fail("Get " + Esc(key) + ": " + got.status().ToString());
    }
    if (!lsn.ok()) return Fail("GetLsn " + Esc(key) + ": " + lsn.status().ToString());
    // GetLsn ran after Get: at least as new, unless the newest write is a
    // purged tombstone (possible only once the purge bound passed it).
    if (*lsn == 0 ? (floor != 0 && shared_->purge() <= floor) : (*lsn < floor || *lsn > after)) {
      Fail("GetLsn " + Esc(key) + " = " + std::to_string(*lsn) + ", Get/done said at least " +
           std::to_string(floor) + ", last LSN drawn " + std::to_string(after));
    }
  }

  void LockFreeScan(size_t i) {
    const size_t n = shared_->keys.size();
    ScanOptions o;
    o.lower = shared_->keys[i];
    o.upper = shared_->keys[std::min(n - 1, i + rnd_.Uniform(60))];
    o.upper_inclusive = rnd_.OneIn(2);
    o.reverse = rnd_.OneIn(2);
    Note("Scan " + Describe(o));
    std::vector<Item> got;
    Status s = test::TryScan(tree_, o, &got);
    const uint64_t after = shared_->lsn.load();
    if (!s.ok()) return Fail("scan " + Describe(o) + ": " + s.ToString());
    for (size_t k = 0; k < got.size(); ++k) {
      const Item& it = got[k];
      if (!test::InRange(o, it.key)) return Fail("scan " + Describe(o) + " returned " + Esc(it.key));
      if (k > 0 && (o.reverse ? it.key >= got[k - 1].key : it.key <= got[k - 1].key)) {
        return Fail("scan " + Describe(o) + " returned " + Esc(it.key) + " after " +
                    Esc(got[k - 1].key));
      }
      const std::string bad = CheckSelfValue(it.key, it.value, it.lsn);
      if (!bad.empty()) return Fail("scan " + Describe(o) + ": " + bad);
      if (it.lsn > after) return Fail("scan returned LSN " + std::to_string(it.lsn) + " not yet drawn");
    }
  }

  BwTree* const tree_;
  Shared* const shared_;
  const uint64_t seed_;
  Random64 rnd_;
  const int id_;
  std::vector<std::string> recent_;
  std::string failure_;
  uint64_t step_ = 0;
};

void RunOverlapping(uint64_t seed, int threads, uint64_t key_space, int rounds, int steps) {
  INFO("seed " << seed << ", " << threads << " threads on " << key_space << " shared keys");
  auto env = NewMemEnv();
  auto l = OpenLlama(env.get(), TreeLlamaOptions());
  Shared shared(SpaceKeys(0, key_space));
  shared.purge = TrailingPurge(&shared.lsn);
  BwTreeOptions o = SmallNodeOptions();
  o.purge_bound = shared.purge;
  auto tree = OpenTree(l.get(), o);
  std::vector<std::unique_ptr<OverlapWorker>> workers;
  for (int t = 0; t < threads; ++t) {
    workers.push_back(std::make_unique<OverlapWorker>(
        tree.get(), &shared, seed + 7919 * static_cast<uint64_t>(t), t));
  }
  for (int round = 0; round < rounds; ++round) {
    INFO("round " << round);
    std::vector<std::thread> running;
    for (auto& w : workers) running.emplace_back([&w, steps] { w->Run(steps); });
    for (auto& t : running) t.join();
    std::string failures;
    for (auto& w : workers) failures += w->failure();
    // The sync point: each key's state is the one its last write left.
    Model all;
    for (size_t i = 0; i < shared.keys.size(); ++i) {
      if (shared.state[i]) all.mutable_records()[shared.keys[i]] = *shared.state[i];
    }
    if (!failures.empty()) {
      // How the tree looks once quiet: does the failure persist?
      Status check = tree->Check();
      failures += "after joining: Check: " + check.ToString() + "; differences:\n" +
                  CompareAll(tree.get(), all, shared.purge(), shared.keys);
    }
    INFO(failures);
    REQUIRE(failures.empty());
    const std::string diff = CompareAll(tree.get(), all, shared.purge(), shared.keys);
    INFO(diff);
    REQUIRE(diff.empty());
    RequireCheck(tree.get());
  }
  RequireStats(tree->GetStats(), true);
}

TEST_CASE("Threads writing the same keys leave the last write of each", "[dc][bwtree][model]") {
  const uint64_t seed = TestSeed();
  SECTION("2 threads") { RunOverlapping(seed, 2, 400, 3, 1200); }
  SECTION("3 threads") { RunOverlapping(seed, 3, 600, 3, 900); }
}

TEST_CASE("Threads writing the same keys leave the last write of each (long)",
          "[dc][bwtree][model][.]") {
  const uint64_t seed = TestSeed();
  RunOverlapping(seed, 4, 3000, 10, 20000);
}

// ---------------------------------------------------------------------------
// Threads racing on one leaf with large values

// Every thread upserts values of up to 4000 bytes over its own few keys, all
// in one or two leaves, with 64 KiB LSS buffers: each consolidation of the
// contended leaf is long and loses its Update-R to another thread's post
// (bwtree.md, "Held posts"). Before the bound, most runs of two
// threads ended with a page a split's record could not hold: thousands of
// writes failed TooLarge and the page never split again. Every write must
// succeed, and the tree must then hold each key's last write, check, flush
// and reopen.
void RunLargeRacing(uint64_t seed, int threads, int writes) {
  INFO("seed " << seed << ", " << threads << " threads, " << writes << " writes each");
  auto env = NewMemEnv();
  auto l = OpenLlama(env.get(), TreeLlamaOptions());
  BwTreeOptions o;
  o.limits.max_key_size = 16;
  o.limits.max_value_size = 4000;
  auto tree = OpenTree(l.get(), o);
  constexpr uint64_t kKeys = 60;
  std::atomic<uint64_t> lsn{0};
  std::vector<std::string> failures(static_cast<size_t>(threads));
  std::vector<Model> models(static_cast<size_t>(threads));
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t) {
    running.emplace_back([&, t] {
      const auto ut = static_cast<uint64_t>(t);
      Random64 rnd(seed + 7919 * ut);
      for (int i = 0; i < writes && failures[ut].empty(); ++i) {
        // Thread t owns the keys equal to t modulo `threads`.
        const uint64_t k = rnd.Uniform(kKeys / static_cast<uint64_t>(threads)) *
                               static_cast<uint64_t>(threads) + ut;
        const size_t size = rnd.OneIn(2) ? 4000 : rnd.Uniform(200);
        const std::string key = SpaceKey(k);
        const std::string value(size, static_cast<char>('a' + (i + t) % 26));
        const uint64_t at = lsn.fetch_add(1) + 1;
        Status st = tree->Upsert(key, value, at);
        if (!st.ok()) {
          failures[ut] = "thread " + std::to_string(t) + " write " + std::to_string(i) + ": " +
                         st.ToString();
          break;
        }
        models[ut].Apply(WriteKind::kUpsert, key, value, at);
      }
    });
  }
  for (auto& r : running) r.join();
  std::string failed;
  for (const std::string& f : failures) failed += f;
  const BwTree::Stats s = tree->GetStats();
  INFO("held posts " << s.held_posts << ", overruns " << s.bound_overruns << ", splits "
                     << s.splits << ", failed consolidations " << s.failed_consolidations
                     << ", longest chain seen " << s.chain_length_max);
  INFO(failed);
  REQUIRE(failed.empty());
  CHECK(s.bound_overruns == 0);
  CHECK(s.deferred_restructures == 0);
  CHECK(s.splits > 0);
  Model all;
  for (const Model& m : models) {
    for (const auto& [key, r] : m.records()) all.mutable_records()[key] = r;
  }
  const std::string diff = CompareAll(tree.get(), all, 0);
  INFO(diff);
  REQUIRE(diff.empty());
  RequireCheck(tree.get());
  REQUIRE(tree->FlushAll(test::kAll).ok());
}

TEST_CASE("Threads racing on one leaf with large values never fail a write",
          "[dc][bwtree][model]") {
  const uint64_t seed = TestSeed();
  SECTION("2 threads") { RunLargeRacing(seed, 2, 6000); }
  SECTION("4 threads") { RunLargeRacing(seed, 4, 3000); }
}

TEST_CASE("Threads racing on one leaf with large values never fail a write (long)",
          "[dc][bwtree][model][.]") {
  const uint64_t seed = TestSeed();
  for (int threads : {2, 4, 8, 16}) {
    RunLargeRacing(seed + static_cast<uint64_t>(threads), threads, 160000 / threads);
  }
}

}  // namespace
}  // namespace deuteron::bwtree
