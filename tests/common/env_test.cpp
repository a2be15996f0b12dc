#include "common/env.h"

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/fault_env.h"
#include "common/random.h"
#include "tests/common/env_test_util.h"

namespace deuteron {
namespace {

// Each fixture gives an Env and an existing, empty directory in it. The same
// battery runs against all of them: they must behave alike.
struct PosixFixture {
  PosixFixture() {
    char tmpl[] = "/tmp/deuteron_env_test_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
  }
  ~PosixFixture() { std::filesystem::remove_all(dir); }
  Env* env = Env::Posix();
  std::string dir;
};

struct MemFixture {
  MemFixture() { REQUIRE(env->CreateDirs(dir).ok()); }
  std::unique_ptr<Env> owned = NewMemEnv();
  Env* env = owned.get();
  std::string dir = "/tmp/deuteron_env_test";
};

// A FaultInjectionEnv with nothing armed must be transparent.
struct FaultOverMemFixture {
  FaultOverMemFixture() { REQUIRE(env->CreateDirs(dir).ok()); }
  std::unique_ptr<Env> mem = NewMemEnv();
  FaultInjectionEnv fault{mem.get(), 1};
  Env* env = &fault;
  std::string dir = "/data";
};

std::string ReadAll(const File& f) {
  Result<uint64_t> size = f.Size();
  REQUIRE(size.ok());
  std::string out(*size, '\0');
  REQUIRE(f.ReadExactAt(0, out.data(), out.size()).ok());
  return out;
}

using test::Open;

#define ENV_FIXTURES PosixFixture, MemFixture, FaultOverMemFixture

TEMPLATE_TEST_CASE("Env open modes", "[common][env]", ENV_FIXTURES) {
  TestType t;
  Env* env = t.env;
  const std::string path = JoinPath(t.dir, "f");

  CHECK(env->OpenFile(path, OpenMode::kRead).status().IsNotFound());
  CHECK(env->OpenFile(path, OpenMode::kReadWrite).status().IsNotFound());
  CHECK_FALSE(env->FileExists(path));

  {
    auto f = Open(env, path, OpenMode::kCreate);
    REQUIRE(f->Append("hello").ok());
    CHECK(f->path() == path);
    REQUIRE(f->Close().ok());
  }
  CHECK(env->FileExists(path));
  CHECK(ReadAll(*Open(env, path, OpenMode::kCreate)) == "hello");  // kCreate keeps content
  CHECK(ReadAll(*Open(env, path, OpenMode::kReadWrite)) == "hello");

  Result<std::unique_ptr<File>> again = env->OpenFile(path, OpenMode::kCreateNew);
  CHECK(again.status().IsInvalidArgument());
  CHECK(again.status().message().find(path) != std::string_view::npos);
  auto fresh = Open(env, JoinPath(t.dir, "new"), OpenMode::kCreateNew);
  CHECK(*fresh->Size() == 0);

  CHECK(ReadAll(*Open(env, path, OpenMode::kTruncate)).empty());
  CHECK(*env->GetFileSize(path) == 0);
  CHECK(ReadAll(*Open(env, JoinPath(t.dir, "t"), OpenMode::kTruncate)).empty());

  // Read-only handles refuse writes.
  auto ro = Open(env, path, OpenMode::kRead);
  CHECK(ro->WriteAt(0, "x").IsInvalidArgument());
  CHECK(ro->Append("x").IsInvalidArgument());
  CHECK(ro->Truncate(0).IsInvalidArgument());

  // A missing parent directory is NotFound; a directory is not a file.
  CHECK(env->OpenFile(JoinPath(t.dir, "no/such"), OpenMode::kCreate).status().IsNotFound());
  Result<std::unique_ptr<File>> d = env->OpenFile(t.dir, OpenMode::kRead);
  CHECK(d.status().IsIOError());
}

TEMPLATE_TEST_CASE("Env reads, writes, appends, truncates", "[common][env]", ENV_FIXTURES) {
  TestType t;
  Env* env = t.env;
  const std::string path = JoinPath(t.dir, "data");
  auto f = Open(env, path, OpenMode::kCreateNew);

  REQUIRE(f->Append("0123456789").ok());
  REQUIRE(f->WriteAt(2, "ab").ok());
  REQUIRE(f->Append("XY").ok());
  CHECK(ReadAll(*f) == "01ab456789XY");
  CHECK(*f->Size() == 12);
  CHECK(*env->GetFileSize(path) == 12);

  char buf[16];
  Result<size_t> r = f->ReadAt(8, buf, 10);  // short only at EOF
  REQUIRE(r.ok());
  CHECK(*r == 4);
  CHECK(std::string(buf, 4) == "89XY");
  r = f->ReadAt(12, buf, 4);
  REQUIRE(r.ok());
  CHECK(*r == 0);
  r = f->ReadAt(100, buf, 4);
  REQUIRE(r.ok());
  CHECK(*r == 0);

  Status exact = f->ReadExactAt(10, buf, 5);
  CHECK(exact.IsCorruption());
  CHECK(exact.message().find(path) != std::string_view::npos);
  CHECK(exact.message().find("offset 10") != std::string_view::npos);

  // Writing past the end leaves a hole of zeros.
  REQUIRE(f->WriteAt(14, "Z").ok());
  CHECK(ReadAll(*f) == std::string("01ab456789XY\0\0Z", 15));

  REQUIRE(f->Truncate(4).ok());
  CHECK(ReadAll(*f) == "01ab");
  REQUIRE(f->Truncate(6).ok());
  CHECK(ReadAll(*f) == std::string("01ab\0\0", 6));
  REQUIRE(f->Append("!").ok());
  CHECK(ReadAll(*f) == std::string("01ab\0\0!", 7));
  REQUIRE(f->Sync().ok());

  // Another handle sees the same bytes.
  CHECK(ReadAll(*Open(env, path, OpenMode::kRead)) == std::string("01ab\0\0!", 7));

  // An empty write is fine and changes nothing.
  REQUIRE(f->WriteAt(3, Slice()).ok());
  REQUIRE(f->Append(Slice()).ok());
  CHECK(*f->Size() == 7);
}

TEMPLATE_TEST_CASE("Env directories", "[common][env]", ENV_FIXTURES) {
  TestType t;
  Env* env = t.env;
  const std::string sub = JoinPath(t.dir, "sub");
  REQUIRE(env->CreateDir(sub).ok());
  REQUIRE(env->CreateDir(sub).ok());  // exists: fine
  CHECK(env->FileExists(sub));
  CHECK(env->CreateDir(JoinPath(t.dir, "x/y")).IsNotFound());
  REQUIRE(env->CreateDirs(JoinPath(t.dir, "x/y/z")).ok());
  REQUIRE(env->CreateDirs(JoinPath(t.dir, "x/y/z")).ok());
  CHECK(env->FileExists(JoinPath(t.dir, "x/y/z")));

  for (const char* name : {"c", "a", "b10", "b2"}) {
    REQUIRE(WriteStringToFile(env, name, JoinPath(t.dir, name), false).ok());
  }
  Result<std::vector<std::string>> children = env->GetChildren(t.dir);
  REQUIRE(children.ok());
  CHECK(*children == std::vector<std::string>{"a", "b10", "b2", "c", "sub", "x"});
  children = env->GetChildren(sub);
  REQUIRE(children.ok());
  CHECK(children->empty());
  CHECK(env->GetChildren(JoinPath(t.dir, "missing")).status().IsNotFound());

  // A plain file is not a directory.
  CHECK_FALSE(env->CreateDir(JoinPath(t.dir, "a")).ok());
  CHECK(env->GetFileSize(sub).status().IsIOError());

  CHECK_FALSE(env->DeleteDir(JoinPath(t.dir, "x/y")).ok());  // not empty
  REQUIRE(env->DeleteDir(JoinPath(t.dir, "x/y/z")).ok());
  CHECK_FALSE(env->FileExists(JoinPath(t.dir, "x/y/z")));
  CHECK(env->DeleteDir(JoinPath(t.dir, "x/y/z")).IsNotFound());

  REQUIRE(env->SyncDir(t.dir).ok());
  CHECK(env->SyncDir(JoinPath(t.dir, "missing")).IsNotFound());
}

TEMPLATE_TEST_CASE("Env rename and delete", "[common][env]", ENV_FIXTURES) {
  TestType t;
  Env* env = t.env;
  const std::string a = JoinPath(t.dir, "a");
  const std::string b = JoinPath(t.dir, "b");
  REQUIRE(WriteStringToFile(env, "AAA", a, true).ok());
  REQUIRE(WriteStringToFile(env, "BB", b, true).ok());
  auto held_a = Open(env, a, OpenMode::kRead);
  auto held_b = Open(env, b, OpenMode::kRead);

  REQUIRE(env->RenameFile(a, b).ok());  // replaces b
  CHECK_FALSE(env->FileExists(a));
  CHECK(*ReadFileToString(env, b) == "AAA");
  CHECK(ReadAll(*held_a) == "AAA");  // the handle follows the file
  CHECK(ReadAll(*held_b) == "BB");   // the replaced file lives on while open

  CHECK(env->RenameFile(a, b).IsNotFound());
  CHECK(env->RenameFile(b, JoinPath(t.dir, "no/such")).IsNotFound());
  CHECK(env->DeleteFile(a).IsNotFound());
  CHECK(env->GetFileSize(a).status().IsNotFound());
  CHECK(ReadFileToString(env, a).status().IsNotFound());

  REQUIRE(env->DeleteFile(b).ok());
  CHECK_FALSE(env->FileExists(b));
  CHECK(ReadAll(*held_a) == "AAA");  // deleted, still open: still readable
  Result<std::vector<std::string>> children = env->GetChildren(t.dir);
  REQUIRE(children.ok());
  CHECK(children->empty());
}

TEMPLATE_TEST_CASE("Env file close", "[common][env]", ENV_FIXTURES) {
  TestType t;
  auto f = Open(t.env, JoinPath(t.dir, "f"), OpenMode::kCreate);
  REQUIRE(f->Append("x").ok());
  REQUIRE(f->Close().ok());
  REQUIRE(f->Close().ok());  // idempotent
  char c;
  CHECK(f->ReadAt(0, &c, 1).status().IsIOError());
  CHECK(f->Append("y").IsIOError());
  CHECK(f->Sync().IsIOError());
  CHECK(f->Size().status().IsIOError());
  CHECK(*t.env->GetFileSize(JoinPath(t.dir, "f")) == 1);
}

TEMPLATE_TEST_CASE("Env LockFile is exclusive", "[common][env]", ENV_FIXTURES) {
  TestType t;
  Env* env = t.env;
  const std::string path = JoinPath(t.dir, "LOCK");
  Result<std::unique_ptr<FileLock>> first = env->LockFile(path);
  REQUIRE(first.ok());
  CHECK(env->FileExists(path));
  Result<std::unique_ptr<FileLock>> second = env->LockFile(path);
  REQUIRE(second.status().IsBusy());
  CHECK(second.status().message().find(path) != std::string_view::npos);
  Result<std::unique_ptr<FileLock>> other = env->LockFile(JoinPath(t.dir, "OTHER"));
  CHECK(other.ok());
  first.value().reset();
  Result<std::unique_ptr<FileLock>> third = env->LockFile(path);
  CHECK(third.ok());
  CHECK(env->LockFile(JoinPath(t.dir, "no/LOCK")).status().IsNotFound());
}

TEMPLATE_TEST_CASE("Env concurrent positional I/O on disjoint ranges", "[common][env]",
                   ENV_FIXTURES) {
  TestType t;
  auto f = Open(t.env, JoinPath(t.dir, "segment"), OpenMode::kCreateNew);
  constexpr int kThreads = 4;
  constexpr int kBlocks = 32;
  constexpr size_t kBlock = 512;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int b = i; b < kBlocks; b += kThreads) {
        const std::string block(kBlock, static_cast<char>('a' + b % 26));
        if (!f->WriteAt(b * kBlock, block).ok()) ++failures;
        std::string back(kBlock, '\0');
        if (!f->ReadExactAt(b * kBlock, back.data(), kBlock).ok() || back != block) ++failures;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  CHECK(failures.load() == 0);
  const std::string all = ReadAll(*f);
  REQUIRE(all.size() == kBlocks * kBlock);
  for (int b = 0; b < kBlocks; ++b) {
    CHECK(all.substr(b * kBlock, kBlock) == std::string(kBlock, static_cast<char>('a' + b % 26)));
  }
}

TEST_CASE("Env helpers", "[common][env]") {
  CHECK(JoinPath("/a", "b") == "/a/b");
  CHECK(JoinPath("/a/", "b") == "/a/b");
  CHECK(JoinPath("", "b") == "b");
  CHECK(ParentDir("/x/y/z") == "/x/y");
  CHECK(ParentDir("/x/y/") == "/x");
  CHECK(ParentDir("/x//y") == "/x");
  CHECK(ParentDir("/z") == "/");
  CHECK(ParentDir("/") == "/");
  CHECK(ParentDir("z") == ".");
  CHECK(ParentDir("a/z") == "a");
  CHECK(NormalizePath("/a//b/") == "/a/b");
  CHECK(NormalizePath("/") == "/");
  CHECK(NormalizePath("") == ".");

  std::unique_ptr<Env> env = NewMemEnv();
  REQUIRE(WriteStringToFile(env.get(), Slice("v\0w", 3), "/f", true).ok());
  Result<std::string> back = ReadFileToString(env.get(), "/f");
  REQUIRE(back.ok());
  CHECK(*back == std::string("v\0w", 3));
  REQUIRE(WriteStringToFile(env.get(), "x", "/f", false).ok());  // replaces
  CHECK(*ReadFileToString(env.get(), "/f") == "x");
  CHECK(ReadFileToString(env.get(), "/g").status().IsNotFound());
}

TEST_CASE("Posix Env maps ENOSPC to NoSpace", "[common][env]") {
  // /dev/full fails every write with ENOSPC.
  Env* env = Env::Posix();
  if (!env->FileExists("/dev/full")) return;
  Result<std::unique_ptr<File>> f = env->OpenFile("/dev/full", OpenMode::kReadWrite);
  REQUIRE(f.ok());
  Status s = (*f)->WriteAt(0, "x");
  CHECK(s.IsNoSpace());
  CHECK(s.message().find("/dev/full") != std::string_view::npos);
}

// Random positional writes, appends, truncates and reads against a string
// model, over a few hundred KiB: writes straddle the in-memory Env's 64 KiB
// blocks, leave holes past the end, and regrow over truncated tails (which
// must read back as zeros, not as the bytes once written there).
TEMPLATE_TEST_CASE("Env file bytes match a model under random I/O", "[common][env]",
                   ENV_FIXTURES) {
  TestType fx;
  auto f = Open(fx.env, fx.dir + "/model", OpenMode::kCreate);
  Random64 rnd(20261122);
  std::string model;
  constexpr uint64_t kSpan = 300 << 10;
  for (int step = 0; step < 400; ++step) {
    INFO("step " << step);
    const uint64_t op = rnd.Uniform(10);
    if (op < 5) {
      const uint64_t offset = rnd.Uniform(kSpan);
      std::string data(rnd.Uniform(100000) + 1, '\0');
      for (char& c : data) c = static_cast<char>('a' + rnd.Uniform(26));
      REQUIRE(f->WriteAt(offset, data).ok());
      if (model.size() < offset + data.size()) model.resize(offset + data.size(), '\0');
      model.replace(offset, data.size(), data);
    } else if (op < 6) {
      const std::string data(rnd.Uniform(70000) + 1, static_cast<char>('A' + rnd.Uniform(26)));
      REQUIRE(f->Append(data).ok());
      model += data;
    } else if (op < 7) {
      const uint64_t size = rnd.Uniform(kSpan);
      REQUIRE(f->Truncate(size).ok());
      model.resize(size, '\0');
    } else {
      const uint64_t offset = rnd.Uniform(model.size() + 1000);
      const size_t n = rnd.Uniform(150000) + 1;
      std::string got(n, '?');
      Result<size_t> r = f->ReadAt(offset, got.data(), n);
      REQUIRE(r.ok());
      const size_t want = offset >= model.size() ? 0 : std::min<size_t>(n, model.size() - offset);
      REQUIRE(*r == want);
      CHECK(got.substr(0, want) == model.substr(std::min<uint64_t>(offset, model.size()), want));
    }
    Result<uint64_t> size = f->Size();
    REQUIRE(size.ok());
    REQUIRE(*size == model.size());
  }
  CHECK(ReadAll(*f) == model);
}

TEST_CASE("Mem Env files and locks outlive the Env", "[common][env]") {
  std::unique_ptr<Env> env = NewMemEnv();
  auto f = Open(env.get(), "/f", OpenMode::kCreate);
  Result<std::unique_ptr<FileLock>> lock = env->LockFile("/LOCK");
  REQUIRE(lock.ok());
  env.reset();
  REQUIRE(f->Append("still here").ok());
  CHECK(ReadAll(*f) == "still here");
  lock.value().reset();
}

TEST_CASE("Mem Envs are independent", "[common][env]") {
  std::unique_ptr<Env> a = NewMemEnv();
  std::unique_ptr<Env> b = NewMemEnv();
  REQUIRE(WriteStringToFile(a.get(), "x", "/f", false).ok());
  CHECK(a->FileExists("/f"));
  CHECK_FALSE(b->FileExists("/f"));
  CHECK(a->NowMicros() > 0);
}

}  // namespace
}  // namespace deuteron
