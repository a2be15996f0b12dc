// A failed write or fdatasync stops the write-ahead log: every waiting and
// later committer gets the error (IOError, or NoSpace for ENOSPC), nothing is
// retried as if it had worked, and nothing reported durable is lost.
#include <catch2/catch.hpp>

#include <set>
#include <thread>
#include <vector>

#include "common/fault_env.h"
#include "tests/tc/wal/wal_test_util.h"

namespace deuteron::wal::test {
namespace {

using Op = FaultInjectionEnv::Op;

void FailAt(Op op, uint64_t n, Code code) {
  INFO(FaultInjectionEnv::OpName(op) << " #" << n << " fails with " << CodeName(code));
  auto mem = NewMemEnv();
  FaultInjectionEnv env(mem.get(), n);
  const LogOptions o = SmallOptions(8192, 4096);
  constexpr int kThreads = 4;
  std::vector<std::vector<std::string>> acked(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<Code> codes(kThreads, Code::kOk);
  {
    auto log = OpenLog(&env, o);
    env.FailNth(op, n, code);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (uint64_t i = 0; i < 200; ++i) {
          const std::string p = Payload("t" + std::to_string(t), i, 20 + i % 100);
          Result<LogSpan> span = log->Commit(p);
          if (!span.ok()) {
            errors[t] = span.status().ToString();
            codes[t] = span.status().code();
            return;
          }
          acked[t].push_back(p);
        }
      });
    }
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) {
      INFO("thread " << t << ": " << errors[t]);
      REQUIRE(codes[t] == code);  // every committer saw the failure
    }
    // Later calls fail the same way; nothing is retried.
    REQUIRE(log->Append("later").status().code() == code);
    REQUIRE(log->WaitDurable(log->Tail() + 1).code() == code);
    REQUIRE(log->Close().code() == code);
  }
  // The process dies: unsynced data is gone. What was acknowledged is not.
  REQUIRE(env.SimulateCrash(CrashMode::kDropUnsynced).ok());
  env.ClearFailures();
  auto log = OpenLog(&env, o);
  std::set<std::string> found;
  for (const ReadBack& r : ReadAll(*log, log->DurableRssp())) found.insert(r.payload);
  for (const auto& a : acked) {
    for (const std::string& p : a) {
      INFO("acknowledged record " << p << " lost");
      REQUIRE(found.count(p) == 1);
    }
  }
}

TEST_CASE("wal: EIO and ENOSPC at the Nth write fail every waiter and lose nothing durable",
          "[wal][failure]") {
  for (uint64_t n = 1; n <= 6; ++n) {
    FailAt(Op::kWrite, n, Code::kIOError);
    FailAt(Op::kWrite, n, Code::kNoSpace);
  }
}

TEST_CASE("wal: EIO and ENOSPC at the Nth sync fail every waiter and lose nothing durable",
          "[wal][failure]") {
  for (uint64_t n = 1; n <= 6; ++n) {
    FailAt(Op::kSync, n, Code::kIOError);
    FailAt(Op::kSync, n, Code::kNoSpace);
  }
}

TEST_CASE("wal: failures at every write and sync up to 40", "[.][wal][failure]") {
  for (uint64_t n = 1; n <= 40; ++n) {
    for (Op op : {Op::kWrite, Op::kSync}) {
      FailAt(op, n, Code::kIOError);
      FailAt(op, n, Code::kNoSpace);
    }
  }
}

}  // namespace
}  // namespace deuteron::wal::test
