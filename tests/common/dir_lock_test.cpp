#include "common/dir_lock.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "common/fault_env.h"

namespace deuteron {
namespace {

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/deuteron_dirlock_test_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
};

void CheckExcludes(Env* env, const std::string& dir) {
  Result<std::unique_ptr<DirLock>> first = DirLock::Acquire(env, dir);
  REQUIRE(first.ok());
  CHECK((*first)->dir() == dir);
  Result<std::string> pid = ReadFileToString(env, JoinPath(dir, DirLock::kFileName));
  REQUIRE(pid.ok());
  CHECK(*pid == std::to_string(::getpid()) + "\n");

  Result<std::unique_ptr<DirLock>> second = DirLock::Acquire(env, dir);
  REQUIRE(second.status().IsBusy());
  const std::string msg(second.status().message());
  INFO(msg);
  CHECK(msg.find("data directory " + dir + " is in use") != std::string::npos);
  CHECK(msg.find("(pid " + std::to_string(::getpid()) + ")") != std::string::npos);

  first.value().reset();  // release
  Result<std::unique_ptr<DirLock>> third = DirLock::Acquire(env, dir);
  CHECK(third.ok());
}

TEST_CASE("DirLock excludes a second owner until released (mem)", "[common][dir_lock]") {
  std::unique_ptr<Env> env = NewMemEnv();
  REQUIRE(env->CreateDirs("/data").ok());
  CheckExcludes(env.get(), "/data");
}

TEST_CASE("DirLock excludes a second owner until released (posix)", "[common][dir_lock]") {
  TempDir dir;
  CheckExcludes(Env::Posix(), dir.path);
}

TEST_CASE("DirLock on a missing directory is NotFound", "[common][dir_lock]") {
  std::unique_ptr<Env> env = NewMemEnv();
  Result<std::unique_ptr<DirLock>> lock = DirLock::Acquire(env.get(), "/nowhere");
  CHECK(lock.status().IsNotFound());
  CHECK(lock.status().message().find("/nowhere") != std::string_view::npos);
}

TEST_CASE("DirLock reports a failure to write the pid", "[common][dir_lock]") {
  std::unique_ptr<Env> mem = NewMemEnv();
  REQUIRE(mem->CreateDirs("/data").ok());
  FaultInjectionEnv env(mem.get(), 1);
  env.FailNth(FaultInjectionEnv::Op::kWrite, 1, Code::kNoSpace);
  Result<std::unique_ptr<DirLock>> lock = DirLock::Acquire(&env, "/data");
  CHECK(lock.status().IsNoSpace());
  // The failed Acquire released its lock.
  CHECK(DirLock::Acquire(&env, "/data").ok());
}

TEST_CASE("DirLock held by another process blocks this one", "[common][dir_lock]") {
  TempDir dir;
  int ready[2];  // child -> parent: "locked" (or "failed")
  int done[2];   // parent -> child: "exit now"
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(done) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(ready[0]);
    ::close(done[1]);
    Result<std::unique_ptr<DirLock>> lock = DirLock::Acquire(Env::Posix(), dir.path);
    const char verdict = lock.ok() ? 'L' : 'F';
    if (::write(ready[1], &verdict, 1) != 1) ::_exit(2);
    char c;
    while (::read(done[0], &c, 1) < 0) {
    }
    ::_exit(lock.ok() ? 0 : 1);  // exit drops the lock
  }
  ::close(ready[1]);
  ::close(done[0]);
  char verdict = 0;
  REQUIRE(::read(ready[0], &verdict, 1) == 1);
  REQUIRE(verdict == 'L');

  Result<std::unique_ptr<DirLock>> blocked = DirLock::Acquire(Env::Posix(), dir.path);
  REQUIRE(blocked.status().IsBusy());
  const std::string msg(blocked.status().message());
  INFO(msg);
  CHECK(msg.find(dir.path) != std::string::npos);
  CHECK(msg.find("(pid " + std::to_string(child) + ")") != std::string::npos);

  const char go = 'x';
  REQUIRE(::write(done[1], &go, 1) == 1);
  int wstatus = 0;
  REQUIRE(::waitpid(child, &wstatus, 0) == child);
  CHECK(WIFEXITED(wstatus));
  CHECK(WEXITSTATUS(wstatus) == 0);
  ::close(ready[0]);
  ::close(done[1]);

  Result<std::unique_ptr<DirLock>> after = DirLock::Acquire(Env::Posix(), dir.path);
  CHECK(after.ok());
}

}  // namespace
}  // namespace deuteron
