#include "common/status.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <string>

#include <catch2/catch.hpp>

namespace deuteron {
namespace {

Status FailIf(bool fail) { return fail ? Status::IOError("disk") : Status::OK(); }

Status Chain(bool fail, int* reached) {
  RETURN_IF_ERROR(FailIf(fail));
  *reached = 1;
  return Status::OK();
}

Result<std::string> MakeString(bool fail) {
  if (fail) return Status::NotFound("no such thing");
  return std::string("value");
}

Result<size_t> Length(bool fail) {
  ASSIGN_OR_RETURN(std::string s, MakeString(fail));
  return s.size();
}

TEST_CASE("Status carries code and message", "[common][status]") {
  Status ok;
  CHECK(ok.ok());
  CHECK(ok.ToString() == "OK");
  CHECK(ok.message().empty());

  Status s = Status::Corruption("bad crc at 42");
  CHECK_FALSE(s.ok());
  CHECK(s.IsCorruption());
  CHECK(s.code() == Code::kCorruption);
  CHECK(s.message() == "bad crc at 42");
  CHECK(s.ToString() == "Corruption: bad crc at 42");
  CHECK(s.WithContext("segment 3").ToString() == "Corruption: segment 3: bad crc at 42");
}

TEST_CASE("Status copies and moves keep the value", "[common][status]") {
  Status a = Status::Busy("locked");
  Status b = a;
  CHECK(b == a);
  Status c = std::move(b);
  CHECK(c.IsBusy());
  CHECK(c.message() == "locked");
  CHECK(b.ok());  // NOLINT: moved-from is OK by contract
  a = Status::OK();
  CHECK(a.ok());
  a = c;
  CHECK(a.IsBusy());
}

TEST_CASE("Every code has a distinct name", "[common][status]") {
  for (int i = 0; i < static_cast<int>(Code::kMaxCode); ++i) {
    for (int j = i + 1; j < static_cast<int>(Code::kMaxCode); ++j) {
      CHECK(CodeName(static_cast<Code>(i)) != CodeName(static_cast<Code>(j)));
    }
    CHECK(CodeName(static_cast<Code>(i)) != "UnknownCode");
  }
}

TEST_CASE("FromErrno maps disk-full to NoSpace", "[common][status]") {
  CHECK(Status::FromErrno(ENOSPC, "write x").IsNoSpace());
  CHECK(Status::FromErrno(EDQUOT, "write x").IsNoSpace());
  Status eio = Status::FromErrno(EIO, "write x");
  CHECK(eio.IsIOError());
  CHECK(eio.message().find("write x") == 0);
}

TEST_CASE("RETURN_IF_ERROR and ASSIGN_OR_RETURN propagate", "[common][status]") {
  int reached = 0;
  CHECK(Chain(false, &reached).ok());
  CHECK(reached == 1);
  reached = 0;
  Status s = Chain(true, &reached);
  CHECK(s.IsIOError());
  CHECK(reached == 0);

  Result<size_t> good = Length(false);
  REQUIRE(good.ok());
  CHECK(*good == 5);
  Result<size_t> bad = Length(true);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().IsNotFound());
  CHECK(bad.value_or(7) == 7);
}

#ifdef DEUTERON_STATUS_CHECKED
// Runs `body` in a child process and reports whether it died of SIGABRT.
template <typename F>
bool AbortsInChild(F body) {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::signal(SIGABRT, SIG_DFL);  // not Catch's handler: just die
    body();
    _exit(0);
  }
  int wstatus = 0;
  REQUIRE(waitpid(pid, &wstatus, 0) == pid);
  return WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGABRT;
}

TEST_CASE("Checked build aborts on an unchecked Status", "[common][status]") {
  CHECK(AbortsInChild([] { Status s = Status::IOError("ignored"); }));
  CHECK(AbortsInChild([] { Result<int> r = Status::IOError("ignored"); }));
  CHECK_FALSE(AbortsInChild([] { Status s = Status::IOError("seen"); (void)s.ok(); }));
  CHECK_FALSE(AbortsInChild([] { Status::IOError("x").PermitUncheckedError(); }));
}
#endif

}  // namespace
}  // namespace deuteron
