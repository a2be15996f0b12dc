// `deuteron dc` as a process: it serves the DC protocol on the port it
// prints, shuts down cleanly on SIGTERM and SIGINT (exit 0, data up to the
// ESL kept), keeps exactly what the TC's log holds across kill -9 (after
// leaf merges too), and rejects bad usage with exit status 2.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "protocol/data_component.h"
#include "protocol/remote_dc.h"
#include "tests/tc/cli/dc_child.h"

namespace deuteron {
namespace {

std::unique_ptr<protocol::RemoteDataComponent> Connect(uint16_t port) {
  protocol::RemoteOptions ro;
  ro.host = "127.0.0.1";
  ro.port = port;
  Result<std::unique_ptr<protocol::RemoteDataComponent>> r =
      protocol::RemoteDataComponent::Connect(ro);
  REQUIRE(r.ok());
  return std::move(r).value();
}

TEST_CASE("deuteron dc serves, and shuts down cleanly on SIGTERM and SIGINT", "[tc][cli]") {
  const std::string dir = TempDir();
  const int sig = GENERATE(SIGTERM, SIGINT);
  {
    Child child({"dc", "--dir", dir, "--listen", "127.0.0.1:0"});
    auto dc = Connect(StartDc(&child));
    std::vector<RecordOp> ops;
    ops.push_back({RecordOpKind::kUpsert, "alpha", "1", 10});
    ops.push_back({RecordOpKind::kUpsert, "beta", "2", 11});
    ops.push_back({RecordOpKind::kUpsert, "gamma", "3", 12});  // above the ESL
    Result<ApplyResult> applied = dc->Apply(ops, 11, 0);
    REQUIRE(applied.ok());
    CHECK(applied->applied == 3);
    Result<ReadResult> got = dc->Get("gamma");
    REQUIRE(got.ok());
    CHECK(got->found);
    dc.reset();
    CHECK(child.Stop(sig) == 0);
    CHECK(child.ReadLine().find("shutting down") != std::string::npos);
    CHECK(child.ReadLine().find("closed cleanly") != std::string::npos);
  }
  {
    // Reopened: what the ESL covered is there; the write above it is not.
    Child child({"dc", "--dir", dir, "--listen", "127.0.0.1:0"});
    auto dc = Connect(StartDc(&child));
    Result<ReadResult> a = dc->Get("alpha");
    REQUIRE(a.ok());
    CHECK(a->found);
    CHECK(a->value == "1");
    CHECK(a->lsn == 10);
    Result<ReadResult> b = dc->Get("beta");
    REQUIRE(b.ok());
    CHECK(b->found);
    Result<ReadResult> g = dc->Get("gamma");
    REQUIRE(g.ok());
    CHECK_FALSE(g->found);
    dc.reset();
    CHECK(child.Stop(SIGTERM) == 0);
  }
  std::system(("rm -rf " + dir).c_str());
}

// The TC's side of the kill -9 test: its log (every operation up to its
// ESL, which it never loses) and what each key must hold.
struct TcLog {
  struct Entry {
    bool deleted = false;
    std::string value;
    uint64_t lsn = 0;
  };
  std::vector<RecordOp> ops;  // LSN order; slices into `bytes`
  std::vector<std::unique_ptr<std::string>> bytes;
  std::map<std::string, Entry> model;
  uint64_t esl = 0;

  RecordOp Make(RecordOpKind kind, const std::string& key, uint64_t lsn) {
    bytes.push_back(std::make_unique<std::string>(key));
    const std::string* k = bytes.back().get();
    bytes.push_back(std::make_unique<std::string>(
        kind == RecordOpKind::kUpsert ? "v" + std::to_string(lsn) : ""));
    return RecordOp{kind, Slice(*k), Slice(*bytes.back()), lsn};
  }
  void Log(const RecordOp& op) {
    ops.push_back(op);
    Entry& e = model[op.key.ToString()];
    e.deleted = op.kind == RecordOpKind::kDelete;
    e.value = op.value.ToString();
    e.lsn = op.lsn;
  }
};

std::string CliKey(int i) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "k%06d", i);
  return buf;
}

// Applies `ops` in batches, as incarnation `inc`, with `esl` piggy-backed.
void ApplyBatches(DataComponent* dc, const std::vector<RecordOp>& ops, uint64_t esl,
                  uint64_t inc) {
  constexpr size_t kBatch = 200;
  for (size_t i = 0; i < ops.size(); i += kBatch) {
    const size_t n = std::min(kBatch, ops.size() - i);
    Result<ApplyResult> r = dc->Apply(std::span<const RecordOp>(ops.data() + i, n), esl, inc);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
  }
}

// Every key in [0, keys) holds what the log says (a purged tombstone reads
// as LSN 0), nothing else.
void CheckAgainstLog(DataComponent* dc, const TcLog& log, int keys) {
  std::vector<std::string> names;
  for (int i = 0; i < keys; ++i) names.push_back(CliKey(i));
  std::vector<Slice> slices(names.begin(), names.end());
  Result<std::vector<ReadResult>> got = dc->MultiGet(slices);
  INFO(got.status().ToString());
  REQUIRE(got.ok());
  int wrong = 0;
  for (int i = 0; i < keys; ++i) {
    const ReadResult& r = (*got)[static_cast<size_t>(i)];
    auto it = log.model.find(names[static_cast<size_t>(i)]);
    bool ok = false;
    if (it == log.model.end()) {
      ok = !r.found && r.lsn == 0;
    } else if (it->second.deleted) {
      ok = !r.found && (r.lsn == it->second.lsn || r.lsn == 0);
    } else {
      ok = r.found && r.lsn == it->second.lsn && r.value == it->second.value;
    }
    if (!ok && ++wrong <= 5) {
      UNSCOPED_INFO("key " << names[static_cast<size_t>(i)] << ": found " << r.found << " lsn "
                           << r.lsn << ", log lsn "
                           << (it == log.model.end() ? 0 : it->second.lsn));
    }
  }
  CHECK(wrong == 0);
}

// kill -9 of a serving DC, again and again over one store. The test plays
// the TC: each cycle restarts the DC to its ESL (a new incarnation), redoes
// its log from the DC's RSSP and checks every key; then it fills the key
// space, deletes nine keys in ten and rewrites the rest after an RSSP (so
// tombstones are purged and leaves merge: the page count must fall), and
// kills the process while a writer streams operations above the ESL, which
// must all be gone after the next restart.
TEST_CASE("deuteron dc survives kill -9 after leaf merges, keeping what the ESL covers",
          "[tc][cli]") {
  const std::string dir = TempDir();
  constexpr int kKeys = 3000;
  constexpr int kCycles = 3;
  std::mt19937_64 rnd(20261125);
  TcLog log;
  for (int cycle = 0; cycle <= kCycles; ++cycle) {
    INFO("cycle " << cycle);
    Child child({"dc", "--dir", dir, "--listen", "127.0.0.1:0"});
    auto dc = Connect(StartDc(&child));
    Result<DcReady> ready = dc->RestartTo(log.esl);
    INFO(ready.status().ToString());
    REQUIRE(ready.ok());
    const uint64_t inc = ready->incarnation;
    CHECK(inc == static_cast<uint64_t>(cycle) + 1);
    CHECK(ready->max_durable_lsn <= log.esl);
    // Redo from the RSSP (the DC skips what it already has).
    std::vector<RecordOp> redo;
    for (const RecordOp& op : log.ops) {
      if (op.lsn >= ready->rssp) redo.push_back(op);
    }
    ApplyBatches(dc.get(), redo, log.esl, inc);
    CheckAgainstLog(dc.get(), log, kKeys);
    if (cycle == kCycles) {
      dc.reset();
      CHECK(child.Stop(SIGTERM) == 0);
      break;
    }

    uint64_t lsn = log.esl;  // LSNs above the stable end are reused
    // The ESL covers each phase; an RSSP follows it when `rssp`.
    auto phase = [&](const std::vector<RecordOp>& ops, bool rssp) {
      for (const RecordOp& op : ops) log.Log(op);
      log.esl = lsn;
      ApplyBatches(dc.get(), ops, log.esl, inc);
      if (rssp) REQUIRE(dc->ProposeRssp(log.esl + 1, inc).ok());
    };
    std::vector<RecordOp> fill;
    for (int i = 0; i < kKeys; ++i) fill.push_back(log.Make(RecordOpKind::kUpsert, CliKey(i), ++lsn));
    phase(fill, true);
    Result<DcStats> before = dc->GetStats();
    REQUIRE(before.ok());
    std::vector<RecordOp> deletes, rewrites;
    for (int i = 0; i < kKeys; ++i) {
      if (i % 10 != 0) deletes.push_back(log.Make(RecordOpKind::kDelete, CliKey(i), ++lsn));
    }
    phase(deletes, true);  // tombstones below the RSSP may be purged
    for (int round = 0; round < 2; ++round) {
      for (int i = 0; i < kKeys; i += 10) {
        rewrites.push_back(log.Make(RecordOpKind::kUpsert, CliKey(i), ++lsn));
      }
    }
    phase(rewrites, false);  // consolidations purge and merge; redo after the kill
    Result<DcStats> after = dc->GetStats();
    REQUIRE(after.ok());
    // Leaves merged: fewer pages. Compared as a difference: after a
    // recovery the gauge counts from 0 and may wrap below it.
    const auto freed = static_cast<int64_t>(before->pages - after->pages);
    INFO("pages " << before->pages << " -> " << after->pages);
    CHECK(freed > 0);

    // Operations above the ESL, streamed until the kill: none may survive.
    std::atomic<bool> stop{false};
    const auto run_for = std::chrono::milliseconds(30 + rnd() % 50);
    std::thread writer([&, first = lsn + 1, seed = rnd()] {
      std::mt19937_64 pick(seed);
      uint64_t next = first;
      std::vector<std::string> keys;
      while (!stop.load()) {
        std::vector<RecordOp> batch;
        keys.clear();
        for (int j = 0; j < 50; ++j) keys.push_back(CliKey(static_cast<int>(pick() % kKeys)));
        const std::string value = "above";
        for (const std::string& k : keys) {
          batch.push_back(RecordOp{next % 3 == 0 ? RecordOpKind::kDelete : RecordOpKind::kUpsert,
                                   Slice(k), next % 3 == 0 ? Slice() : Slice(value), next});
          ++next;
        }
        if (!dc->Apply(batch, 0, inc).ok()) break;  // the kill
      }
    });
    std::this_thread::sleep_for(run_for);
    CHECK(child.Stop(SIGKILL) == -1);
    stop.store(true);
    writer.join();
  }
  std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("deuteron dc rejects bad usage with status 2", "[tc][cli]") {
  const std::vector<std::vector<std::string>> bad = {
      {"dc"},                                         // no --dir
      {"dc", "--dir"},                                // missing value
      {"dc", "--dir", "/tmp/x", "--listen", "nope"},  // not HOST:PORT
      {"dc", "--dir", "/tmp/x", "--listen", "127.0.0.1:70000"},
      {"dc", "--dir", "/tmp/x", "--bogus", "1"},
      {"dc", "--dir", "/tmp/x", "--max-above-esl-share", "1.5"},
      {"dc", "--dir", "/tmp/x", "--max-above-esl-share", "-0.1"},
      {"dc", "--dir", "/tmp/x", "--max-above-esl-share", "half"},
      {"dc", "--dir", "/tmp/x", "--max-frame-size", "1000", "--request-memory-limit", "999"},
      {"dc", "--dir", "/tmp/x", "--max-frame-size", "63"},
      {"dc", "--dir", "/tmp/x", "--flush-buffer-size", "512KiB"},  // 1 MiB to 32 MiB
      {"dc", "--dir", "/tmp/x", "--flush-buffer-size", "64MiB"},
  };
  for (const auto& args : bad) {
    INFO("args " << args.size());
    Child child(args);
    CHECK(child.Wait() == 2);
  }
  Child help({"dc", "--help"});
  std::string all, line;
  while (!(line = help.ReadLine()).empty()) all += line;
  CHECK(all.find("usage: deuteron dc") != std::string::npos);
  CHECK(all.find("--memory-budget") != std::string::npos);
  CHECK(all.find("--flush-buffer-size") != std::string::npos);
  CHECK(help.Wait() == 0);
}

TEST_CASE("deuteron dc refuses a non-loopback address without a shared secret", "[tc][cli]") {
  char tmpl[] = "/tmp/deuteron-dc-secret-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  ::unsetenv("DEUTERON_SECRET");
  Child child({"dc", "--dir", dir + "/store", "--listen", "0.0.0.0:0"});
  CHECK(child.Wait() == 1);
  Child missing({"dc", "--dir", dir + "/store", "--secret-file", dir + "/no-such-file"});
  CHECK(missing.Wait() == 1);
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace deuteron
