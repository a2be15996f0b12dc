// The Bw-tree model test (test::Driver) over a cache too small for the tree,
// and across crashes.
//  - Eviction: a memory budget far below the tree's size, so that most pages
//    live only in the LSS and are brought back by reads; every step is still
//    checked exactly, and LLAMA's counters show that pages left and came back.
//  - Crash and recover: the workload writes at increasing LSNs; now and then
//    the ESL moves to a bound a little below the newest LSN and the tree is
//    flushed under it (FlushAll, which also makes the LSS stable). The tree's
//    flush_bound (and the evictor's) is that ESL, so nothing above it may
//    reach the LSS. The process then dies (FaultInjectionEnv drops or tears
//    everything unsynced), LLAMA and the tree are reopened, and the
//    recovered tree must be exactly the writes with LSN <= the last bound
//    flushed: no more, no less, Check() passing. The workload then goes on
//    from the recovered state, for several cycles.
// Threads (where there are several) own disjoint keys and stop at sync points
// for flushes, checks and crashes.
#include "dc/bwtree/bwtree.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "common/fault_env.h"
#include "common/random.h"
#include "tests/dc/bwtree/bwtree_test_util.h"

namespace deuteron::bwtree {
namespace {

using llama::Llama;
using llama::LlamaOptions;
using test::CompareAll;
using test::Driver;
using test::DriverOptions;
using test::Expect;
using test::LoggedWrite;
using test::Model;
using test::OpenLlama;
using test::OpenTree;
using test::RequireCheck;
using test::SpaceKey;
using test::TreeLlamaOptions;

struct Config {
  int threads = 1;
  uint64_t key_space = 900;
  size_t memory_budget = 0;  // 0: none
  int io_threads = 0;        // LLAMA's: 0, the filling thread writes buffers
  size_t buffer_size = 0;    // LSS flush buffer bytes; 0: TreeLlamaOptions
  size_t max_value = 24;
  bool preload = false;      // upsert every key first
  int cycles = 0;            // crashes; 0: no crash, only sync points
  int chunks = 6;            // sync points per cycle
  int chunk_steps = 150;     // steps per driver between sync points
  uint64_t max_lag = 40;     // the ESL trails the newest LSN by up to this
  // Each life ends with a FlushAll under a new ESL that fails at a random
  // write or sync (and the crash right after it): every key must then come
  // back as of the old bound or as of the new one.
  bool crash_in_flush = false;
};

BwTreeOptions NodeOptions() {
  BwTreeOptions o;
  o.leaf_max_records = 8;
  o.inner_max_entries = 6;
  o.leaf_delta_threshold = 4;
  o.inner_delta_threshold = 2;
  o.leaf_merge_records = 2;
  return o;
}

// The model of a set of drivers at a sync point: their models merged (they
// own disjoint keys).
Model MergedModel(const std::vector<std::unique_ptr<Driver>>& drivers) {
  Model all;
  for (const auto& d : drivers) {
    for (const auto& [key, r] : d->model().records()) all.mutable_records()[key] = r;
  }
  return all;
}

// Runs `steps` steps on every driver, each on its own thread when there are
// several; with `preload`, upserts the keys [preload->first, preload->second)
// of each driver's list instead.
void RunDrivers(const std::vector<std::unique_ptr<Driver>>& drivers, int steps,
                std::optional<std::pair<size_t, size_t>> preload = std::nullopt) {
  auto run = [steps, preload](Driver* d) {
    if (preload) {
      d->Preload(preload->first, preload->second);
    } else {
      d->Run(steps);
    }
  };
  if (drivers.size() == 1) {
    run(drivers[0].get());
  } else {
    std::vector<std::thread> threads;
    for (const auto& d : drivers) threads.emplace_back([&d, &run] { run(d.get()); });
    for (auto& t : threads) t.join();
  }
  std::string failures;
  for (const auto& d : drivers) failures += d->failure();
  INFO(failures);
  REQUIRE(failures.empty());
}

struct Totals {
  uint64_t swap_outs = 0, partial_swaps = 0, page_loads = 0, splits = 0, merges = 0;
  uint64_t crashes = 0, flushes = 0, lost_writes = 0;
  // crash_in_flush: torn flushes, and the keys that came back as of the old
  // bound, as of the new one, or in a state in between
  uint64_t torn_flushes = 0, keys_old = 0, keys_new = 0, keys_between = 0;
  uint64_t memory_bytes = 0;  // at the end of the last life

  void Add(Llama* l, BwTree* t) {
    const Llama::Stats ls = l->GetStats();
    memory_bytes = ls.memory_bytes;
    swap_outs += ls.swap_outs;
    partial_swaps += ls.partial_swaps;
    page_loads += ls.page_loads;
    const BwTree::Stats ts = t->GetStats();
    splits += ts.splits;
    merges += ts.merges;
  }
};

// The state of one driver's keys at `bound`: its writes up to there.
Model Replay(const std::vector<LoggedWrite>& log, uint64_t bound) {
  Model m;
  for (const LoggedWrite& w : log) {
    if (w.lsn > bound) continue;
    // A prefix of each key's writes: every outcome is the same as it was.
    REQUIRE(m.Apply(w.kind, w.key, w.value, w.lsn) == Expect::kOk);
  }
  return m;
}

// After a crash in the middle of FlushAll(new_bound): each key of `d` must
// be in a state it had between old_bound and new_bound: as of old_bound, or
// after one of its writes up to new_bound. Not only the two ends: each page's
// flush record lands or not on its own, and a merge moves a key's later
// writes to another page than its earlier ones (the absorbing left page, the
// merged page keeping the earlier ones), so the earlier ones can come back
// without the later. Every such state is one the key had, under the new ESL,
// so redo from the log brings the key up to date as from either end.
// Makes the driver's model and log what came back.
void ChooseRecovered(BwTree* tree, Driver* d, const std::vector<std::string>& keys,
                     uint64_t old_bound, uint64_t new_bound, uint64_t purge_below,
                     Totals* totals);

Totals Run(uint64_t seed, const Config& c) {
  INFO("seed " << seed << ", " << c.threads << " threads, budget " << c.memory_budget << ", "
               << c.cycles << " crashes");
  Random64 rnd(seed);
  auto mem = NewMemEnv();
  FaultInjectionEnv env(mem.get(), seed);
  std::atomic<uint64_t> lsn{0};
  std::atomic<uint64_t> esl{c.cycles > 0 ? 0 : test::kAll};
  auto esl_fn = [&esl] { return esl.load(); };
  BwTreeOptions o = NodeOptions();
  // What the drivers write, so that 8 KiB buffers hold the tree (Open).
  o.limits.max_key_size = 16;
  o.limits.max_value_size = c.max_value;
  o.flush_bound = esl_fn;
  // Tombstones below the ESL may go (the RSSP never passes ESL + 1).
  o.purge_bound = esl_fn;
  LlamaOptions lo = TreeLlamaOptions();
  lo.memory_budget = c.memory_budget;
  lo.lss.io_threads = c.io_threads;
  if (c.buffer_size != 0) lo.lss.buffer_size = c.buffer_size;
  lo.eviction_flush_bound = esl_fn;

  std::vector<std::unique_ptr<Driver>> drivers;
  std::atomic<bool> stop{false};
  std::vector<std::string> all_keys;
  for (int t = 0; t < c.threads; ++t) {
    DriverOptions d;
    for (uint64_t i = static_cast<uint64_t>(t); i < c.key_space;
         i += static_cast<uint64_t>(c.threads)) {
      d.keys.push_back(SpaceKey(i));
    }
    all_keys.insert(all_keys.end(), d.keys.begin(), d.keys.end());
    d.max_value = c.max_value;
    d.phase_steps = c.chunk_steps * 3;
    d.log_writes = c.cycles > 0;
    drivers.push_back(std::make_unique<Driver>(nullptr, &lsn, esl_fn, d,
                                               seed + 1000003 * static_cast<uint64_t>(t), t));
    drivers.back()->set_stop(&stop);
  }
  std::sort(all_keys.begin(), all_keys.end());

  Totals totals;
  uint64_t stable_bound = 0;  // the last bound flushed
  // The last life died in FlushAll(torn_bound); stable_bound is the old one.
  uint64_t torn_bound = 0;
  for (int cycle = 0; cycle <= c.cycles; ++cycle) {
    INFO("cycle " << cycle << ", stable up to LSN " << stable_bound);
    auto l = OpenLlama(&env, lo);
    auto tree = OpenTree(l.get(), o);
    for (auto& d : drivers) d->set_tree(tree.get());
    if (cycle > 0 && torn_bound != 0) {
      for (int t = 0; t < c.threads; ++t) {
        std::vector<std::string> keys;
        for (size_t i = static_cast<size_t>(t); i < all_keys.size(); i += static_cast<size_t>(c.threads)) {
          keys.push_back(SpaceKey(i));
        }
        ChooseRecovered(tree.get(), drivers[t].get(), keys, stable_bound, torn_bound, esl.load(),
                        &totals);
      }
      stable_bound = torn_bound;  // whatever did not come back is gone from the logs
      torn_bound = 0;
    }
    if (cycle > 0) {
      // The recovered tree is the stable snapshot, exactly.
      const std::string diff = CompareAll(tree.get(), MergedModel(drivers), esl.load(), all_keys);
      INFO("after recovery:\n" << diff);
      REQUIRE(diff.empty());
      RequireCheck(tree.get());
    }
    if (cycle == 0 && c.preload) {
      // In slices, each flushed under an ESL that covers it: a cache over
      // budget with nothing it may write would sweep for every allocation.
      const size_t slice = 64;
      for (size_t begin = 0; begin < drivers[0]->key_count(); begin += slice) {
        RunDrivers(drivers, 0, std::make_pair(begin, begin + slice));
        if (c.cycles > 0) {
          esl = lsn.load();
          REQUIRE(tree->FlushAll(esl.load()).ok());
          stable_bound = esl.load();
        }
      }
    }
    for (int chunk = 0; chunk < c.chunks; ++chunk) {
      INFO("chunk " << chunk);
      RunDrivers(drivers, c.chunk_steps);
      if (c.cycles > 0 && rnd.Uniform(3) != 0) {
        const uint64_t newest = lsn.load();
        const uint64_t bound = std::max(esl.load(), newest - std::min(newest, rnd.Uniform(c.max_lag + 1)));
        esl = bound;
        Status s = tree->FlushAll(bound);
        INFO("FlushAll(" << bound << "): " << s.ToString());
        REQUIRE(s.ok());
        stable_bound = bound;
        ++totals.flushes;
      }
      // Every step was checked already; the full comparison and Check() run
      // at the end of each chunk without crashes, at the end of each life
      // with them (and after each recovery, above).
      if (c.cycles == 0 || chunk + 1 == c.chunks) {
        const std::string diff = CompareAll(tree.get(), MergedModel(drivers), esl.load());
        INFO(diff);
        REQUIRE(diff.empty());
        RequireCheck(tree.get());
      }
    }
    totals.Add(l.get(), tree.get());
    if (cycle == c.cycles) break;
    if (c.crash_in_flush) {
      // More writes, then a flush under a new ESL that dies at an I/O.
      RunDrivers(drivers, c.chunk_steps);
      const uint64_t bound = std::max(esl.load(), lsn.load() - std::min(lsn.load(), rnd.Uniform(c.max_lag + 1)));
      esl = bound;
      // Fail the flush's first sync, its first buffer write, or a later
      // buffer write (which may not come: then nothing fails). The first
      // life fails its sync, which every FlushAll that wrote anything
      // reaches, and so does the last if none failed since.
      const bool force = cycle == 0 || (cycle + 1 == c.cycles && totals.torn_flushes == 0);
      const uint64_t pick = force ? 0 : rnd.Uniform(3);
      if (pick == 0) {
        env.FailNth(FaultInjectionEnv::Op::kSync, 1, Code::kIOError);
      } else {
        env.FailNth(FaultInjectionEnv::Op::kWrite, pick == 1 ? 1 : 2 + rnd.Uniform(2),
                    Code::kIOError);
      }
      Status s = tree->FlushAll(bound);
      if (s.ok()) {
        stable_bound = bound;  // the failure came too late to matter
      } else {
        torn_bound = bound;
        ++totals.torn_flushes;
      }
    }
    // The process dies: nothing after this reaches the files.
    l->TEST_SkipCloseOnDestroy();
    REQUIRE(env.SimulateCrash(cycle % 2 == 0 ? CrashMode::kDropUnsynced
                                             : CrashMode::kTearUnsynced)
                .ok());
    env.ClearFailures();
    tree.reset();
    l.reset();
    ++totals.crashes;
    if (torn_bound != 0) continue;  // resolved key by key after reopening
    // What must come back: each driver's writes up to the bound.
    for (auto& d : drivers) {
      std::vector<LoggedWrite>& log = d->mutable_log();
      Model stable;
      size_t kept = 0;
      for (const LoggedWrite& w : log) {
        if (w.lsn > stable_bound) continue;
        REQUIRE(stable.Apply(w.kind, w.key, w.value, w.lsn) == Expect::kOk);
        log[kept++] = w;
      }
      totals.lost_writes += log.size() - kept;
      log.resize(kept);
      d->model() = std::move(stable);
    }
  }
  return totals;
}

void ChooseRecovered(BwTree* tree, Driver* d, const std::vector<std::string>& keys,
                     uint64_t old_bound, uint64_t new_bound, uint64_t purge_below,
                     Totals* totals) {
  std::vector<LoggedWrite>& log = d->mutable_log();
  // Each key's states, oldest first, with the LSN each holds from: as of
  // old_bound, then after each of its writes up to new_bound.
  struct State {
    uint64_t from;
    std::optional<test::ModelRecord> record;
  };
  std::map<std::string, std::vector<State>> states;
  Model m = Replay(log, old_bound);
  auto state_of = [&m](const std::string& key, uint64_t from) {
    const test::ModelRecord* r = m.Find(key);
    return State{from, r != nullptr ? std::optional<test::ModelRecord>(*r) : std::nullopt};
  };
  for (const std::string& key : keys) states[key].push_back(state_of(key, old_bound));
  for (const LoggedWrite& w : log) {
    if (w.lsn <= old_bound || w.lsn > new_bound) continue;
    REQUIRE(m.Apply(w.kind, w.key, w.value, w.lsn) == Expect::kOk);
    states[w.key].push_back(state_of(w.key, w.lsn));
  }
  std::map<std::string, uint64_t> back_from;  // the state each key came back in
  std::string failures;
  for (const std::string& key : keys) {
    const std::vector<State>& candidates = states[key];
    std::string why;
    for (const State& st : candidates) {
      const std::string diff =
          test::CompareRecord(tree, key, st.record ? &*st.record : nullptr, purge_below);
      if (diff.empty()) {
        back_from[key] = st.from;
        break;
      }
      if (why.size() < 600) why += " as of LSN " + std::to_string(st.from) + ": " + diff + ";";
    }
    const auto back = back_from.find(key);
    if (back == back_from.end()) {
      if (failures.size() < 2000) failures += "in no state between the bounds:" + why + "\n";
    } else if (candidates.size() > 1) {  // counted only where the states differ
      if (back->second == old_bound) {
        ++totals->keys_old;
      } else if (back->second == candidates.back().from) {
        ++totals->keys_new;
      } else {
        ++totals->keys_between;
      }
    }
  }
  INFO("after a crash inside FlushAll(" << new_bound << "), stable before up to " << old_bound
                                        << ":\n" << failures);
  REQUIRE(failures.empty());
  // The writes that did not come back are gone: drop them from the log.
  size_t kept = 0;
  for (const LoggedWrite& w : log) {
    if (w.lsn > new_bound) continue;
    if (w.lsn > old_bound && w.lsn > back_from.at(w.key)) continue;
    log[kept++] = w;
  }
  totals->lost_writes += log.size() - kept;
  log.resize(kept);
  d->model() = Replay(log, new_bound);
}

TEST_CASE("Model test with a cache far smaller than the tree", "[dc][bwtree][evict]") {
  const uint64_t seed = TestSeed();
  Config c;
  c.key_space = 1000;
  c.memory_budget = 96 << 10;
  c.max_value = 160;
  c.preload = true;  // ~120 KiB of records, ~200 KiB of pages
  c.chunks = 2;
  SECTION("one thread") { c.chunk_steps = 200; }
  SECTION("two threads") {
    c.threads = 2;
    c.chunk_steps = 100;
  }
  const Totals t = Run(seed, c);
  INFO("swap-outs " << t.swap_outs << ", partial swaps " << t.partial_swaps << ", page loads "
                    << t.page_loads << ", splits " << t.splits << ", merges " << t.merges
                    << ", memory " << t.memory_bytes);
  CHECK(t.swap_outs > 0);
  CHECK(t.page_loads > 0);
  CHECK(t.splits > 0);
}

void CrashCycles(const Config& c) {
  const uint64_t seed = TestSeed();
  const Totals t = Run(seed, c);
  INFO("seed " << seed << ": crashes " << t.crashes << ", flushes " << t.flushes
               << ", writes lost " << t.lost_writes << ", splits " << t.splits << ", merges "
               << t.merges << ", swap-outs " << t.swap_outs << ", page loads " << t.page_loads);
  CHECK(t.crashes == static_cast<uint64_t>(c.cycles));
  CHECK(t.flushes > 0);
  CHECK(t.lost_writes > 0);  // the crashes did drop writes above the ESL
  CHECK(t.splits > 0);
  if (c.memory_budget != 0) {
    CHECK(t.swap_outs > 0);
    CHECK(t.page_loads > 0);
  }
}

Config CrashConfig() {
  Config c;
  c.cycles = 3;
  c.chunks = 4;
  c.chunk_steps = 120;
  return c;
}

TEST_CASE("Crashes recover exactly the writes at or below the last flushed ESL",
          "[dc][bwtree][crash]") {
  CrashCycles(CrashConfig());
}

TEST_CASE("Crashes recover the flushed ESL with most pages evicted", "[dc][bwtree][crash]") {
  Config c = CrashConfig();
  c.key_space = 450;
  c.memory_budget = 48 << 10;
  c.max_value = 160;
  c.preload = true;
  c.chunk_steps = 80;
  CrashCycles(c);
}

TEST_CASE("Crashes recover the flushed ESL with two threads writing", "[dc][bwtree][crash]") {
  Config c = CrashConfig();
  c.threads = 2;
  c.io_threads = 1;  // buffers written behind the writers' backs, torn by the crash
  c.chunk_steps = 80;
  CrashCycles(c);
}

TEST_CASE("A crash inside FlushAll leaves each key in a state it had between the old and new ESL",
          "[dc][bwtree][crash]") {
  const uint64_t seed = TestSeed();
  Config c = CrashConfig();
  c.cycles = 4;
  c.chunks = 2;
  c.crash_in_flush = true;
  c.max_lag = 10;
  c.buffer_size = 8 << 10;  // a FlushAll writes several buffers: some may land
  const Totals t = Run(seed, c);
  INFO("seed " << seed << ": torn flushes " << t.torn_flushes << ", keys back as of the old ESL "
               << t.keys_old << ", as of the new " << t.keys_new << ", in between "
               << t.keys_between);
  CHECK(t.crashes == 4);
  CHECK(t.torn_flushes > 0);
}

TEST_CASE("Crashes recover exactly the writes at or below the last flushed ESL (long)",
          "[dc][bwtree][crash][.]") {
  const uint64_t seed = TestSeed();
  Config c;
  c.cycles = 10;
  c.key_space = 3000;
  c.chunks = 6;
  c.chunk_steps = 1000;
  c.max_lag = 400;
  SECTION("one thread, evicting") {
    c.memory_budget = 192 << 10;
    c.max_value = 200;
    c.preload = true;
  }
  SECTION("three threads, evicting, I/O thread") {
    c.threads = 3;
    c.chunk_steps = 400;
    c.memory_budget = 256 << 10;
    c.max_value = 100;
    c.preload = true;
    c.io_threads = 1;
  }
  SECTION("crashes inside FlushAll") {
    c.crash_in_flush = true;
    c.max_lag = 40;
  }
  const Totals t = Run(seed, c);
  CHECK(t.lost_writes > 0);
}

// Crashes between the steps of an inner merge and of a root collapse
// (BwTree::MergeStep): the process dies in the step hook, right after
// `step` of the first such change, with the tree flushed there first
// (every write stable, with the partial change; the delete under way may or
// may not be in) or not (the change and the writes since the last flush
// lost). The ESL leads (each write may be flushed at once), so that
// consolidations purge the tombstones and pages merge; only FlushAll makes
// the LSS stable, so nothing past the last one survives a crash. After
// recovery the tree must hold exactly the stable writes, pass Check, and
// hold the partial change where it was flushed; the deletes then go on,
// and help-along completes it.
struct StepCrash {
  bool stopped = false;          // the hook stopped a change
  bool partial_survived = false; // the removed page came back with its remove-node
  uint64_t inner_merges = 0, root_collapses = 0;
};

StepCrash CrashAtStep(uint64_t seed, BwTree::MergeStep step, bool flush_first, uint64_t n) {
  INFO("seed " << seed << ", " << n << " keys, step " << static_cast<int>(step)
                << (flush_first ? ", flushed" : ""));
  auto mem = NewMemEnv();
  FaultInjectionEnv env(mem.get(), seed);
  std::atomic<uint64_t> esl{0};
  auto esl_fn = [&esl] { return esl.load(); };
  BwTreeOptions o = NodeOptions();
  o.limits.max_key_size = 16;
  o.limits.max_value_size = 24;
  o.inner_merge_entries = 2;
  o.flush_bound = esl_fn;
  o.purge_bound = esl_fn;
  LlamaOptions lo = TreeLlamaOptions();
  lo.eviction_flush_bound = esl_fn;
  Random64 rnd(seed);
  std::vector<uint64_t> order(n);
  for (uint64_t i = 0; i < n; ++i) order[i] = i;
  for (uint64_t i = n; i > 1; --i) std::swap(order[i - 1], order[rnd.Uniform(i)]);
  std::vector<LoggedWrite> log;  // every write
  uint64_t lsn = 0;
  uint64_t stable = 0;  // the last bound flushed
  StepCrash out;
  PageId removed = 0;
  std::string in_flight;  // the delete the crash came in
  {
    auto l = OpenLlama(&env, lo);
    auto tree = OpenTree(l.get(), o);
    for (uint64_t i = 0; i < n; ++i) {
      const std::string key = test::Key(i);
      REQUIRE(tree->Upsert(key, "v" + key, ++lsn).ok());
      log.push_back(LoggedWrite{lsn, WriteKind::kUpsert, key, "v" + key});
      if (lsn % 64 == 0 || i + 1 == n) {  // the ESL follows, so pages fold
        esl = lsn;
        REQUIRE(tree->FlushAll(lsn).ok());
        stable = lsn;
      }
    }
    Status flushed = Status::OK();
    Status crashed = Status::OK();
    flushed.PermitUncheckedError();
    crashed.PermitUncheckedError();
    tree->TEST_SetMergeStepHook([&](BwTree::MergeStep at, PageId pid) {
      if (out.stopped || at != step) return true;
      out.stopped = true;
      removed = pid;
      if (flush_first) {
        // From another thread: this one holds its epoch guard in the middle
        // of the change.
        std::thread other([&] { flushed = tree->FlushAll(lsn); });
        other.join();
        stable = lsn - 1;  // and the delete under way, if it was posted
      }
      crashed = env.SimulateCrash(CrashMode::kDropUnsynced);
      return false;
    });
    // Delete every key (all of them if need be, so that the root collapses
    // too), flushing now and then, until the hook crashes the process; then
    // delete them blindly again, a few times, so that every leaf takes
    // enough writes to be consolidated, drop its tombstones and merge.
    for (size_t i = 0; i < 5 * n && !out.stopped; ++i) {
      const std::string key = test::Key(order[i % n]);
      const WriteKind kind = i < n ? WriteKind::kDelete : WriteKind::kBlindDelete;
      ++lsn;
      esl = lsn;
      Status s = tree->Write(kind, key, Slice(), lsn);
      if (out.stopped) {  // died inside: whatever it returned is lost
        s.PermitUncheckedError();
        in_flight = key;
        break;
      }
      REQUIRE(s.ok());
      log.push_back(LoggedWrite{lsn, kind, key, ""});
      if (lsn % 64 == 0) {
        esl = lsn;
        REQUIRE(tree->FlushAll(lsn).ok());
        stable = lsn;
      }
    }
    REQUIRE(out.stopped);
    INFO("the flush in the hook: " << flushed.ToString() << "; the crash: " << crashed.ToString());
    REQUIRE(flushed.ok());
    REQUIRE(crashed.ok());
    tree->TEST_SetMergeStepHook(nullptr);
    l->TEST_SkipCloseOnDestroy();
  }
  // What must come back: the writes up to the stable bound.
  Model want = Replay(log, stable);
  // The ESL the LSS was last flushed under (and tombstones purged below).
  const uint64_t flushed_under = flush_first ? stable + 1 : stable;
  esl = flushed_under;
  auto l = OpenLlama(&env, lo);
  auto tree = OpenTree(l.get(), o);
  // Before anything reads the tree (and helps the change along).
  {
    auto guard = l->Enter();
    Result<const llama::PageNode*> head = l->Read(removed);
    if (head.ok() && *head != nullptr) {
      for (const llama::PageNode* n = *head; n != nullptr; n = n->next) {
        if (n->kind == llama::NodeKind::kDelta && n->size > 0 &&
            static_cast<DeltaType>(n->payload()[0]) == DeltaType::kRemoveNode) {
          out.partial_survived = true;
        }
      }
    }
  }
  if (flush_first) {
    // The delete under way came back if its delta was posted before the
    // flush in the hook.
    Result<uint64_t> got = tree->GetLsn(in_flight);
    REQUIRE(got.ok());
    if (*got == stable + 1) want.Apply(WriteKind::kBlindDelete, in_flight, "", stable + 1);
  }
  std::string diff = CompareAll(tree.get(), want, flushed_under);
  INFO("after recovery (stable up to " << stable << "):\n" << diff);
  REQUIRE(diff.empty());
  RequireCheck(tree.get());
  // The deletes go on; whoever meets the partial change completes it.
  lsn = std::max(lsn, stable) + 1;
  for (size_t i = 0; i < n; ++i) {
    const std::string key = test::Key(order[i]);
    if (i % 10 == 0 || !want.Present(key)) continue;
    esl = ++lsn;
    REQUIRE(tree->Delete(key, lsn).ok());
    want.Apply(WriteKind::kDelete, key, "", lsn);
  }
  for (uint64_t i = 0; i < n; ++i) REQUIRE(tree->GetLsn(test::Key(i)).ok());
  diff = CompareAll(tree.get(), want, lsn);
  INFO("after the deletes went on:\n" << diff);
  REQUIRE(diff.empty());
  RequireCheck(tree.get());
  const BwTree::Stats s = tree->GetStats();
  out.inner_merges = s.inner_merges;
  out.root_collapses = s.root_collapses;
  return out;
}

void CrashAtEveryStep(uint64_t seed, uint64_t n) {
  INFO("seed " << seed);
  using Step = BwTree::MergeStep;
  for (Step step : {Step::kRemoveNode, Step::kMergeDelta, Step::kRoutesMoved,
                    Step::kParentsFlushed, Step::kRootRemoveNode}) {
    for (bool flush_first : {true, false}) {
      const StepCrash c = CrashAtStep(seed, step, flush_first, n);
      INFO("step " << static_cast<int>(step) << (flush_first ? ", flushed" : "")
                   << ": inner merges after recovery " << c.inner_merges
                   << ", root collapses " << c.root_collapses);
      CHECK(c.stopped);
      // Flushed, every step leaves the removed page with its remove-node
      // for recovery to find; unflushed, the change was lost with it.
      CHECK(c.partial_survived == flush_first);
    }
  }
}

// A fixed seed in CI; the hidden case below runs random seeds. Before
// 2026-11-26 about one random run in six found no remove-node on the removed
// page after a flushed crash at the remove-node step: FlushAll made stable
// only what it flushed itself, and with every page clean it left the remove-
// node's system-transaction record in an unsynced buffer (bwtree.md, "Two
// findings explained"); now it makes the LSS stable up to its tail.
TEST_CASE("A crash between any two steps of an inner merge or root collapse loses nothing",
          "[dc][bwtree][crash][inner_merge]") {
  CrashAtEveryStep(1, 500);
}

TEST_CASE("A crash between any two steps of an inner merge, random seeds (long)",
          "[.][dc][bwtree][crash][inner_merge]") {
  for (int i = 0; i < 20; ++i) CrashAtEveryStep(TestSeed(), 1500);
}

}  // namespace
}  // namespace deuteron::bwtree
