#include "common/fault_env.h"
#include "tests/common/env_test_util.h"

#include <stdlib.h>

#include <atomic>
#include <bitset>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

namespace deuteron {
namespace {

using Op = FaultInjectionEnv::Op;

// Base Envs under the fault Env, each with an existing, durable directory.
struct MemBase {
  MemBase() { REQUIRE(base->CreateDirs(dir).ok()); }
  std::unique_ptr<Env> owned = NewMemEnv();
  Env* base = owned.get();
  std::string dir = "/db";
};

struct PosixBase {
  PosixBase() {
    char tmpl[] = "/tmp/deuteron_fault_test_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
  }
  ~PosixBase() { std::filesystem::remove_all(dir); }
  Env* base = Env::Posix();
  std::string dir;
};

std::string Content(Env* env, const std::string& path) {
  Result<std::string> r = ReadFileToString(env, path);
  INFO(path << ": " << r.status().ToString());
  REQUIRE(r.ok());
  return *r;
}

using test::Open;

// Creates `path` with durable content `data` (file synced, directory synced).
void WriteDurable(Env* env, const std::string& path, const std::string& data) {
  REQUIRE(WriteStringToFile(env, data, path, true).ok());
  REQUIRE(env->SyncDir(ParentDir(path)).ok());
}

TEMPLATE_TEST_CASE("Crash loses exactly the unsynced bytes", "[common][fault_env]", MemBase,
                   PosixBase) {
  TestType t;
  FaultInjectionEnv env(t.base, 7);
  const std::string path = JoinPath(t.dir, "log");
  auto f = Open(&env, path, OpenMode::kCreateNew);
  REQUIRE(env.SyncDir(t.dir).ok());

  SECTION("append after sync") {
    REQUIRE(f->Append("AAAA").ok());
    REQUIRE(f->Sync().ok());
    REQUIRE(f->Append("BBBB").ok());
    REQUIRE(f->WriteAt(10, "C").ok());  // a hole, then C
    CHECK(env.UnsyncedChangeCount(path) == 2);
    REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
    CHECK(Content(&env, path) == "AAAA");
  }
  SECTION("overwrite of a synced region gets the old bytes back") {
    REQUIRE(f->Append("0123456789").ok());
    REQUIRE(f->Sync().ok());
    REQUIRE(f->WriteAt(2, "xx").ok());
    REQUIRE(f->WriteAt(3, "yyyyyyyyyyyy").ok());  // overlaps, extends
    REQUIRE(f->Append("tail").ok());
    REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
    CHECK(Content(&env, path) == "0123456789");
  }
  SECTION("unsynced truncates come undone, synced ones stay") {
    REQUIRE(f->Append("0123456789").ok());
    REQUIRE(f->Truncate(8).ok());
    REQUIRE(f->Sync().ok());
    REQUIRE(f->Truncate(3).ok());
    REQUIRE(f->Append("abc").ok());
    REQUIRE(f->Truncate(20).ok());
    REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
    CHECK(Content(&env, path) == "01234567");
  }
  SECTION("reopening with kTruncate is undone") {
    REQUIRE(f->Append("keep me").ok());
    REQUIRE(f->Sync().ok());
    auto again = Open(&env, path, OpenMode::kTruncate);
    REQUIRE(again->Append("new").ok());
    CHECK(Content(&env, path) == "new");
    REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
    CHECK(Content(&env, path) == "keep me");
  }
  SECTION("a sync through another handle counts") {
    REQUIRE(f->Append("one").ok());
    auto other = Open(&env, path, OpenMode::kReadWrite);
    REQUIRE(other->Sync().ok());
    REQUIRE(f->Append("two").ok());
    REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
    CHECK(Content(&env, path) == "one");
  }
  SECTION("several syncs: everything up to the last sync stays") {
    REQUIRE(f->Append("a").ok());
    REQUIRE(f->Sync().ok());
    REQUIRE(f->Append("b").ok());
    REQUIRE(f->Sync().ok());
    REQUIRE(f->Append("c").ok());
    REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
    CHECK(Content(&env, path) == "ab");
  }

  // Handles opened before the crash are dead; the Env works again.
  char c;
  Result<size_t> r = f->ReadAt(0, &c, 1);
  CHECK(r.status().IsIOError());
  CHECK(r.status().message().find("crashed") != std::string_view::npos);
  CHECK(f->WriteAt(0, "x").IsIOError());
  CHECK(f->Append("x").IsIOError());
  CHECK(f->Sync().IsIOError());
  CHECK(f->Truncate(0).IsIOError());
  CHECK(f->Size().status().IsIOError());
  CHECK(f->Close().IsIOError());
  auto fresh = Open(&env, path, OpenMode::kReadWrite);
  REQUIRE(fresh->Append("!").ok());
  REQUIRE(fresh->Sync().ok());
  REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
  CHECK(Content(&env, path).back() == '!');
}

// The possible results of tearing `writes` (applied in order over `base`):
// the first k-1 writes whole and the first `cut` bytes of write k.
struct Write {
  uint64_t offset;
  std::string data;
};

// With `whole_only`, only the states between writes.
std::set<std::string> TornOutcomes(const std::string& base, const std::vector<Write>& writes,
                                   bool whole_only) {
  auto apply = [](std::string s, const Write& w, size_t n) {
    if (s.size() < w.offset + n) s.resize(w.offset + n, '\0');
    s.replace(w.offset, n, w.data, 0, n);
    return s;
  };
  std::set<std::string> out{base};
  std::string state = base;
  for (const Write& w : writes) {
    for (size_t cut = whole_only ? w.data.size() : 1; cut <= w.data.size(); ++cut) {
      out.insert(apply(state, w, cut));
    }
    state = apply(state, w, w.data.size());
  }
  return out;
}

// Runs a fixed workload with tear mode and returns the file after the crash.
std::string TearRun(uint64_t seed, const std::vector<Write>& writes) {
  MemBase t;
  FaultInjectionEnv env(t.base, seed);
  const std::string path = JoinPath(t.dir, "wal");
  WriteDurable(&env, path, "synced-prefix.");
  auto f = Open(&env, path, OpenMode::kReadWrite);
  for (const Write& w : writes) REQUIRE(f->WriteAt(w.offset, w.data).ok());
  REQUIRE(env.SimulateCrash(CrashMode::kTearUnsynced).ok());
  return Content(&env, path);
}

TEST_CASE("Tear mode keeps a prefix of the unsynced writes, deterministically",
          "[common][fault_env]") {
  const std::vector<Write> writes = {
      {14, "record-one;"}, {25, "record-two;"}, {0, "SYNCED"},  // overwrites synced bytes
      {36, "record-three;"}, {3, "xyz"}, {60, "far"},
  };
  const std::set<std::string> allowed = TornOutcomes("synced-prefix.", writes, false);
  const std::set<std::string> untorn = TornOutcomes("synced-prefix.", writes, true);
  std::set<std::string> seen;
  std::set<size_t> untorn_sizes;
  for (const std::string& s : untorn) untorn_sizes.insert(s.size());
  int torn = 0;
  int torn_appends = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    INFO("seed " << seed);
    const std::string got = TearRun(seed, writes);
    CHECK(allowed.count(got) == 1);
    CHECK(TearRun(seed, writes) == got);  // same seed, same result
    seen.insert(got);
    torn += untorn.count(got) == 0 ? 1 : 0;
    torn_appends += untorn_sizes.count(got.size()) == 0 ? 1 : 0;
  }
  CHECK(seen.size() >= 5);  // different seeds tear differently
  CHECK(torn >= 5);         // some cut a write in the middle
  CHECK(torn_appends >= 2); // including writes that extended the file
}

TEST_CASE("Tear mode works per file over appends", "[common][fault_env]") {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    INFO("seed " << seed);
    MemBase t;
    FaultInjectionEnv env(t.base, seed);
    const std::string a = JoinPath(t.dir, "a");
    const std::string b = JoinPath(t.dir, "b");
    WriteDurable(&env, a, "A:");
    WriteDurable(&env, b, "B:");
    auto fa = Open(&env, a, OpenMode::kReadWrite);
    auto fb = Open(&env, b, OpenMode::kReadWrite);
    std::string all_a = "A:";
    std::string all_b = "B:";
    for (int i = 0; i < 5; ++i) {
      const std::string chunk = std::to_string(i) + "-abcdefg;";
      REQUIRE(fa->Append(chunk).ok());
      REQUIRE(fb->Append(chunk).ok());
      all_a += chunk;
      all_b += chunk;
    }
    REQUIRE(env.SimulateCrash(CrashMode::kTearUnsynced).ok());
    const std::string got_a = Content(&env, a);
    const std::string got_b = Content(&env, b);
    CHECK(got_a.size() >= 2);
    CHECK(all_a.compare(0, got_a.size(), got_a) == 0);  // a prefix
    CHECK(all_b.compare(0, got_b.size(), got_b) == 0);
  }
}

TEST_CASE("FailNth fails the n-th call of each kind, with the chosen code",
          "[common][fault_env]") {
  for (Code code : {Code::kIOError, Code::kNoSpace}) {
    for (Op op : {Op::kOpen, Op::kRead, Op::kWrite, Op::kSync, Op::kMetadata, Op::kAny}) {
      INFO("op " << static_cast<int>(op) << " code " << CodeName(code));
      MemBase t;
      FaultInjectionEnv env(t.base, 3);
      const std::string path = JoinPath(t.dir, "f");
      WriteDurable(&env, path, "0123");
      auto f = Open(&env, path, OpenMode::kReadWrite);
      const uint64_t before = env.OpCount(op);
      env.FailNth(op, 2, code);
      char buf[4];
      // Two calls of the kind: the first passes, the second fails.
      auto expect_failure = [&](const Status& s) {
        CHECK(s.code() == code);
        CHECK(s.message().find("injected") != std::string_view::npos);
      };
      switch (op) {
        case Op::kOpen: {
          REQUIRE(env.OpenFile(path, OpenMode::kRead).ok());
          const std::string g = JoinPath(t.dir, "g");
          Result<std::unique_ptr<File>> r = env.OpenFile(g, OpenMode::kCreateNew);
          expect_failure(r.status());
          CHECK_FALSE(env.FileExists(JoinPath(t.dir, "g")));  // nothing created
          CHECK(env.OpenFile(JoinPath(t.dir, "g"), OpenMode::kCreateNew).ok());
          break;
        }
        case Op::kRead: {
          REQUIRE(f->ReadAt(0, buf, 4).ok());
          expect_failure(f->ReadAt(0, buf, 4).status());
          CHECK(f->ReadAt(0, buf, 4).ok());
          break;
        }
        case Op::kWrite: {
          REQUIRE(f->WriteAt(0, "ab").ok());
          expect_failure(f->Append("cd"));  // WriteAt and Append share the count
          CHECK(Content(&env, path) == "ab23");  // the failed write wrote nothing
          REQUIRE(f->Truncate(1).ok());
          CHECK(Content(&env, path) == "a");
          break;
        }
        case Op::kSync: {
          REQUIRE(f->Sync().ok());
          REQUIRE(f->Append("lost").ok());
          expect_failure(f->Sync());
          CHECK(env.UnsyncedChangeCount(path) == 1);  // still unsynced
          REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
          CHECK(Content(&env, path) == "0123");
          break;
        }
        case Op::kMetadata: {
          REQUIRE(env.CreateDir(JoinPath(t.dir, "d")).ok());
          expect_failure(env.RenameFile(path, JoinPath(t.dir, "h")));
          CHECK(env.FileExists(path));  // the failed rename did nothing
          CHECK_FALSE(env.FileExists(JoinPath(t.dir, "h")));
          CHECK(env.DeleteFile(path).ok());
          break;
        }
        case Op::kAny: {
          REQUIRE(f->ReadAt(0, buf, 4).ok());
          expect_failure(f->WriteAt(0, "zz"));
          CHECK(Content(&env, path) == "0123");
          break;
        }
      }
      CHECK(env.OpCount(op) >= before + 2);
    }
  }
}

TEST_CASE("FailNth counts only calls of its kind and fires once", "[common][fault_env]") {
  MemBase t;
  FaultInjectionEnv env(t.base, 3);
  auto f = Open(&env, JoinPath(t.dir, "f"), OpenMode::kCreate);
  env.FailNth(Op::kSync, 1, Code::kIOError);
  char c;
  REQUIRE(f->Append("x").ok());        // a write: not counted toward the sync
  REQUIRE(f->ReadAt(0, &c, 1).ok());
  CHECK(f->Sync().IsIOError());
  CHECK(f->Sync().ok());
  // Armed twice for the same call: the call fails once, nothing is left.
  env.FailNth(Op::kWrite, 1, Code::kNoSpace);
  env.FailNth(Op::kAny, 1, Code::kIOError);
  CHECK_FALSE(f->Append("y").ok());
  CHECK(f->Append("y").ok());
  CHECK(f->Sync().ok());
  env.FailNth(Op::kWrite, 1, Code::kIOError);
  env.ClearFailures();
  CHECK(f->Append("z").ok());
  CHECK(env.OpCount(Op::kWrite) == 4);
  CHECK(env.OpCount(Op::kSync) == 3);
  CHECK(env.OpCount(Op::kRead) == 1);
  CHECK(env.OpCount(Op::kOpen) == 1);
  CHECK(env.OpCount(Op::kAny) == 9);
}

std::vector<bool> RandomFailurePattern(uint64_t seed, double p) {
  MemBase t;
  FaultInjectionEnv env(t.base, seed);
  auto f = Open(&env, JoinPath(t.dir, "f"), OpenMode::kCreate);
  env.SetRandomFailures(Op::kWrite, p, Code::kNoSpace);
  std::vector<bool> failed;
  for (int i = 0; i < 200; ++i) {
    Status s = f->Append("x");
    if (!s.ok()) CHECK(s.IsNoSpace());
    failed.push_back(!s.ok());
  }
  // Reads are not writes: never fail.
  char c;
  for (int i = 0; i < 20; ++i) CHECK(f->ReadAt(0, &c, 1).ok());
  // The file holds exactly the appends that succeeded.
  size_t ok = 0;
  for (bool b : failed) ok += b ? 0 : 1;
  CHECK(*f->Size() == ok);
  return failed;
}

TEST_CASE("Random failures are reproducible from the seed", "[common][fault_env]") {
  const std::vector<bool> a = RandomFailurePattern(11, 0.3);
  CHECK(RandomFailurePattern(11, 0.3) == a);
  CHECK(RandomFailurePattern(12, 0.3) != a);
  size_t failures = 0;
  for (bool b : a) failures += b ? 1 : 0;
  CHECK(failures > 30);
  CHECK(failures < 90);
  for (bool b : RandomFailurePattern(11, 0.0)) CHECK_FALSE(b);
}

// A small "update a file atomically" workload: the classic write-temp,
// sync, rename, sync-directory sequence.
Status AtomicReplace(Env* env, const std::string& dir, const std::string& value) {
  const std::string tmp = JoinPath(dir, "CURRENT.tmp");
  RETURN_IF_ERROR(WriteStringToFile(env, value, tmp, true));
  RETURN_IF_ERROR(env->RenameFile(tmp, JoinPath(dir, "CURRENT")));
  return env->SyncDir(dir);
}

TEST_CASE("Crash at every I/O point of a workload", "[common][fault_env]") {
  uint64_t points = 0;
  {
    MemBase t;
    FaultInjectionEnv env(t.base, 5);
    WriteDurable(&env, JoinPath(t.dir, "CURRENT"), "old");
    const uint64_t start = env.OpCount(Op::kAny);
    REQUIRE(AtomicReplace(&env, t.dir, "new").ok());
    points = env.OpCount(Op::kAny) - start;
  }
  REQUIRE(points >= 5);  // open, write, sync, rename, sync dir
  for (uint64_t n = 1; n <= points; ++n) {
    for (CrashMode mode : {CrashMode::kDropUnsynced, CrashMode::kTearUnsynced}) {
      INFO("failing I/O " << n << " mode " << static_cast<int>(mode));
      MemBase t;
      FaultInjectionEnv env(t.base, n);
      WriteDurable(&env, JoinPath(t.dir, "CURRENT"), "old");
      env.FailNth(Op::kAny, n, Code::kIOError);
      CHECK_FALSE(AtomicReplace(&env, t.dir, "new").ok());
      REQUIRE(env.SimulateCrash(mode).ok());
      const std::string got = Content(&env, JoinPath(t.dir, "CURRENT"));
      CHECK((got == "old" || got == "new"));
    }
  }
}

TEST_CASE("Rename is undone at a crash unless the target directory was synced",
          "[common][fault_env]") {
  MemBase t;
  FaultInjectionEnv env(t.base, 9);
  const std::string current = JoinPath(t.dir, "CURRENT");
  const std::string tmp = JoinPath(t.dir, "tmp");
  WriteDurable(&env, current, "v1");
  WriteDurable(&env, tmp, "v2");
  REQUIRE(env.RenameFile(tmp, current).ok());
  CHECK(Content(&env, current) == "v2");
  REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
  CHECK(Content(&env, current) == "v1");
  CHECK(Content(&env, tmp) == "v2");

  REQUIRE(env.RenameFile(tmp, current).ok());
  REQUIRE(env.SyncDir(t.dir).ok());
  REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
  CHECK(Content(&env, current) == "v2");
  CHECK_FALSE(env.FileExists(tmp));

  // Renaming over a file with unsynced changes (a hole past its end, a
  // shrink) brings back its durable content.
  WriteDurable(&env, tmp, "durable-tmp");
  auto target = Open(&env, current, OpenMode::kReadWrite);
  REQUIRE(target->WriteAt(100, "past the end").ok());
  REQUIRE(target->Truncate(1).ok());
  REQUIRE(env.RenameFile(tmp, current).ok());
  REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
  CHECK(Content(&env, current) == "v2");
  CHECK(Content(&env, tmp) == "durable-tmp");
  REQUIRE(env.RenameFile(tmp, current).ok());
  REQUIRE(env.SyncDir(t.dir).ok());

  // A renamed file's unsynced data is lost at its new name.
  auto f = Open(&env, current, OpenMode::kReadWrite);
  REQUIRE(f->Append("+unsynced").ok());
  REQUIRE(env.RenameFile(current, tmp).ok());
  REQUIRE(env.SyncDir(t.dir).ok());
  REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
  CHECK(Content(&env, tmp) == "durable-tmp");
}

TEMPLATE_TEST_CASE("A file created without SyncDir disappears at a crash",
                   "[common][fault_env]", MemBase, PosixBase) {
  TestType t;
  FaultInjectionEnv env(t.base, 4);
  // Deleted durable file: stays deleted.
  const std::string deleted = JoinPath(t.dir, "deleted");
  WriteDurable(&env, deleted, "x");
  REQUIRE(env.DeleteFile(deleted).ok());

  const std::string sub = JoinPath(t.dir, "sub");
  REQUIRE(env.CreateDir(sub).ok());
  const std::string lost = JoinPath(t.dir, "lost");
  const std::string kept = JoinPath(t.dir, "kept");
  const std::string lost_in_sub = JoinPath(sub, "lost");
  REQUIRE(WriteStringToFile(&env, "data", lost, /*sync=*/true).ok());
  REQUIRE(WriteStringToFile(&env, "data", lost_in_sub, /*sync=*/true).ok());
  REQUIRE(WriteStringToFile(&env, "data", kept, /*sync=*/true).ok());
  REQUIRE(env.SyncDir(t.dir).ok());  // covers lost and kept, not sub/lost
  // Recreated after the sync: lost again.
  REQUIRE(env.DeleteFile(lost).ok());
  REQUIRE(WriteStringToFile(&env, "data", lost, true).ok());

  REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
  CHECK_FALSE(env.FileExists(lost));
  CHECK_FALSE(env.FileExists(lost_in_sub));
  CHECK_FALSE(env.FileExists(deleted));
  CHECK(Content(&env, kept) == "data");
  Result<std::vector<std::string>> children = env.GetChildren(t.dir);
  REQUIRE(children.ok());
  CHECK(*children == std::vector<std::string>{"kept", "sub"});
}

TEST_CASE("Changes to a deleted file do not follow its path", "[common][fault_env]") {
  MemBase t;
  FaultInjectionEnv env(t.base, 4);
  const std::string path = JoinPath(t.dir, "f");
  WriteDurable(&env, path, "AAAA");
  auto old_file = Open(&env, path, OpenMode::kReadWrite);
  REQUIRE(old_file->Append("unsynced").ok());
  REQUIRE(env.DeleteFile(path).ok());
  auto new_file = Open(&env, path, OpenMode::kCreateNew);
  REQUIRE(env.SyncDir(t.dir).ok());
  REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
  CHECK(Content(&env, path).empty());  // the new, empty file; nothing undone into it
}

size_t BitsDiffering(const std::string& a, const std::string& b, uint64_t lo, uint64_t hi,
                     bool* outside) {
  REQUIRE(a.size() == b.size());
  size_t n = 0;
  *outside = false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto x = static_cast<uint8_t>(a[i] ^ b[i]);
    if (x != 0 && (i < lo || i >= hi)) *outside = true;
    n += std::bitset<8>(x).count();
  }
  return n;
}

TEST_CASE("CorruptRange flips exactly the asked bits inside the range", "[common][fault_env]") {
  std::mt19937_64 gen(1);
  std::string original(1000, '\0');
  for (char& ch : original) ch = static_cast<char>(gen());
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    for (int bits : {0, 1, 7, 64, 400}) {
      INFO("seed " << seed << " bits " << bits);
      MemBase t;
      FaultInjectionEnv env(t.base, seed);
      const std::string path = JoinPath(t.dir, "page");
      WriteDurable(&env, path, original);
      REQUIRE(env.CorruptRange(path, 100, 50, bits).ok());
      bool outside = true;
      CHECK(BitsDiffering(original, Content(&env, path), 100, 150, &outside) == size_t(bits));
      CHECK_FALSE(outside);
      REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());  // it is durable
      CHECK(BitsDiffering(original, Content(&env, path), 100, 150, &outside) == size_t(bits));
    }
  }
}

TEST_CASE("CorruptRange also damages the durable version under unsynced writes",
          "[common][fault_env]") {
  const std::string synced(200, 'S');
  const std::string overwrite(70, 'T');
  MemBase t;
  FaultInjectionEnv env(t.base, 21);
  const std::string path = JoinPath(t.dir, "page");
  WriteDurable(&env, path, synced);
  auto f = Open(&env, path, OpenMode::kReadWrite);
  REQUIRE(f->WriteAt(90, overwrite).ok());  // unsynced, covers the range
  std::string current = synced;
  current.replace(90, 70, overwrite);
  REQUIRE(env.CorruptRange(path, 100, 50, 5).ok());
  bool outside = true;
  const std::string damaged = Content(&env, path);
  CHECK(BitsDiffering(current, damaged, 100, 150, &outside) == 5);
  CHECK_FALSE(outside);
  REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
  const std::string recovered = Content(&env, path);
  CHECK(BitsDiffering(synced, recovered, 100, 150, &outside) == 5);
  CHECK_FALSE(outside);
  // The same bit positions in both versions.
  for (size_t i = 0; i < synced.size(); ++i) {
    CHECK((current[i] ^ damaged[i]) == (synced[i] ^ recovered[i]));
  }
}

TEST_CASE("CorruptRange rejects bad arguments", "[common][fault_env]") {
  MemBase t;
  FaultInjectionEnv env(t.base, 1);
  const std::string path = JoinPath(t.dir, "f");
  WriteDurable(&env, path, "0123456789");
  CHECK(env.CorruptRange(path, 5, 10, 1).IsInvalidArgument());  // past the end
  CHECK(env.CorruptRange(path, 0, 2, 17).IsInvalidArgument());  // too many bits
  CHECK(env.CorruptRange(JoinPath(t.dir, "missing"), 0, 1, 1).IsNotFound());
  CHECK(Content(&env, path) == "0123456789");
}

TEST_CASE("Injected errors reach callers over the POSIX Env", "[common][fault_env]") {
  PosixBase t;
  FaultInjectionEnv env(t.base, 2);
  auto f = Open(&env, JoinPath(t.dir, "f"), OpenMode::kCreate);
  env.FailNth(Op::kWrite, 1, Code::kNoSpace);
  Status s = f->Append("x");
  CHECK(s.IsNoSpace());
  CHECK(*f->Size() == 0);
  env.FailNth(Op::kOpen, 1, Code::kIOError);
  CHECK(env.OpenFile(JoinPath(t.dir, "f"), OpenMode::kRead).status().IsIOError());
}

TEST_CASE("Concurrent writes through the fault Env, then a crash", "[common][fault_env]") {
  MemBase t;
  FaultInjectionEnv env(t.base, 8);
  const std::string path = JoinPath(t.dir, "segment");
  auto f = Open(&env, path, OpenMode::kCreateNew);
  REQUIRE(env.SyncDir(t.dir).ok());
  constexpr int kThreads = 4;
  constexpr int kBlocks = 32;
  constexpr size_t kBlock = 256;
  std::atomic<int> failures{0};
  auto write_all = [&](char base_char) {
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&, i] {
        for (int b = i; b < kBlocks; b += kThreads) {
          const std::string block(kBlock, static_cast<char>(base_char + b % 20));
          if (!f->WriteAt(b * kBlock, block).ok()) ++failures;
          char c;
          if (!f->ReadAt(b * kBlock, &c, 1).ok()) ++failures;
        }
      });
    }
    for (std::thread& th : threads) th.join();
  };
  write_all('a');
  REQUIRE(f->Sync().ok());
  const std::string synced = Content(&env, path);
  write_all('A');
  CHECK(Content(&env, path) != synced);
  CHECK(failures.load() == 0);
  REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
  CHECK(Content(&env, path) == synced);
}

}  // namespace
}  // namespace deuteron

namespace deuteron {

// HoldSyncs holds File::Sync open; a sync released normally syncs, one
// released after a crash fails and leaves nothing durable.
TEST_CASE("HoldSyncs holds syncs until released; after a crash they fail", "[common][fault_env]") {
  std::unique_ptr<Env> mem = NewMemEnv();
  REQUIRE(mem->CreateDirs("/db").ok());
  FaultInjectionEnv env(mem.get(), 3);
  WriteDurable(&env, "/db/a", "");
  for (bool crash : {false, true}) {
    INFO("crash " << crash);
    auto f = Open(&env, "/db/a", OpenMode::kReadWrite);
    REQUIRE(f->Append("X").ok());
    env.HoldSyncs();
    std::atomic<bool> done{false};
    Status synced;
    std::thread t([&] {
      synced = f->Sync();
      done = true;
    });
    for (int i = 0; i < 5000 && env.held_syncs() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHECK(env.held_syncs() == 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK_FALSE(done.load());
    if (crash) REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
    env.ReleaseSyncs();
    t.join();
    CHECK(env.held_syncs() == 0);
    CHECK(synced.ok() == !crash);
    synced.PermitUncheckedError();
    REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
    CHECK(Content(&env, "/db/a") == "X");  // the first round's, synced; the second's lost
  }
}

}  // namespace deuteron
