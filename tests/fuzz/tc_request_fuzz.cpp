// libFuzzer target for the TC server's request decoding and dispatch: each
// input is a sequence of TransactionService request payloads (the format of
// tests/fuzz/fuzz_client.h), sent framed on one connection to a real
// TcServer (tc/server/tc_server.h) over a fresh embedded store in memory
// (tc::Database on MemEnv: TxnManager, log and DC), then a sentinel
// `tcStats` call. Every decoded request is executed: transactions begin,
// read, write, scan, commit and abort through the connection's session. The
// server must answer every request, never crash, hang, leak or
// over-allocate; the store must close cleanly and then reopen (recovery
// replays what the calls committed).
//
// A fresh store and server per input keep a finding reproducible from its
// input alone, and make transaction ids predictable (1, 2, ...), which the
// seeds use.
//
// DEUTERON_FUZZ_WRITE_SEEDS=<dir>: writes the seed corpus (well-formed calls
// of every method, built with the generated Thrift code) into <dir> and
// exits (tests/fuzz/make_corpus.py runs it).
//
// Built only by scripts/fuzz (clang, -fsanitize=fuzzer).
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "TransactionService.h"
#include "common/env.h"
#include "tc/database.h"
#include "tc/server/tc_server.h"
#include "tests/fuzz/fuzz_client.h"
#include "tests/fuzz/fuzz_dc_options.h"

namespace {

namespace proto = ::deuteron::protocol;
namespace fuzz = ::deuteron::fuzz;
namespace tc = ::deuteron::tc;
using deuteron::Result;
using deuteron::Status;

tc::DatabaseOptions StoreOptions(deuteron::Env* env) {
  tc::DatabaseOptions o;
  o.env = env;
  o.dc = fuzz::SmallDcOptions();
  o.dc.llama.memory_budget = 4 << 20;
  o.log.segment_size = 64 << 10;
  o.log.buffer_size = 64 << 10;
  o.log.spare_segments = 0;
  o.log.committer_spin_us = 0;
  // A transaction of the connection waiting for a lock that another of its
  // transactions holds waits this long (the session serializes its calls).
  o.txn.lock_timeout = std::chrono::milliseconds(20);
  o.txn.checkpoint_interval = std::chrono::milliseconds(0);
  o.txn.max_key_size = 256;
  o.txn.max_value_size = 4096;
  o.txn.scan_page = 64;
  return o;
}

tc::TcServerOptions ServerOptions() {
  tc::TcServerOptions o;
  fuzz::SetServerLimits(&o);
  o.worker_threads = 2;
  o.string_limit = 64 << 10;
  o.service.max_open_transactions = 8;
  o.service.max_scan_page = 64;
  o.service.max_execute_ops = 256;
  o.service.remember_finished = 16;
  o.name = "fuzz TC server";
  return o;
}

// Well-formed calls of every method, in the sequences a client makes. The
// store is fresh for each input, so the first transaction is 1.
std::vector<std::pair<std::string, std::string>> Seeds() {
  int32_t seq = 1;
  auto call = [&](const std::string& method, const auto& args) {
    return fuzz::Chunk(fuzz::CallPayload(method, seq++, args));
  };
  auto begin = [&] { return call("beginTransaction", proto::TransactionService_beginTransaction_args()); };
  auto put = [&](int64_t txn, const std::string& k, const std::string& v) {
    proto::TransactionService_put_args a;
    a.txn = txn;
    a.key = k;
    a.value = v;
    return call("put", a);
  };
  auto get = [&](int64_t txn, const std::string& k) {
    proto::TransactionService_get_args a;
    a.txn = txn;
    a.key = k;
    return call("get", a);
  };
  auto remove = [&](int64_t txn, const std::string& k) {
    proto::TransactionService_remove_args a;
    a.txn = txn;
    a.key = k;
    return call("remove", a);
  };
  auto scan = [&](int64_t txn, bool reverse, bool bounded, int32_t limit) {
    proto::TransactionService_scan_args a;
    a.txn = txn;
    a.request.reverse = reverse;
    a.request.limit = limit;
    if (bounded) {
      a.request.__set_lower("a");
      a.request.__set_upper("m");
    }
    return call("scan", a);
  };
  auto commit = [&](int64_t txn) {
    proto::TransactionService_commit_args a;
    a.txn = txn;
    return call("commit", a);
  };
  auto abort = [&](int64_t txn) {
    proto::TransactionService_abort_args a;
    a.txn = txn;
    return call("abort", a);
  };
  auto execute = [&](std::vector<proto::TcOp> ops) {
    proto::TransactionService_execute_args a;
    a.request.ops = std::move(ops);
    return call("execute", a);
  };
  auto op = [](proto::TcOpKind::type kind, const std::string& k, const std::string& v) {
    proto::TcOp o;
    o.kind = kind;
    o.key = k;
    o.value = v;
    if (kind == proto::TcOpKind::SCAN) o.scan.limit = 10;
    return o;
  };
  proto::TransactionService_authenticate_args auth;
  auth.token = "token";
  std::string writes;
  for (int i = 0; i < 10; ++i) writes += put(1, "key" + std::to_string(i), std::string(i * 3, 'v'));
  return {
      {"begin", begin()},
      {"put_commit", begin() + put(1, "a", "1") + put(1, "b", "2") + commit(1)},
      {"read_own_writes", begin() + put(1, "a", "1") + get(1, "a") + get(1, "zz") + commit(1)},
      {"remove", begin() + put(1, "a", "1") + commit(1) + begin() + remove(2, "a") + get(2, "a") + commit(2)},
      {"scan", begin() + writes + scan(1, false, false, 0) + scan(1, true, true, 3) + commit(1)},
      {"abort", begin() + put(1, "a", "1") + abort(1) + abort(1) + commit(1)},
      {"two_txns", begin() + begin() + put(1, "k", "1") + put(2, "k", "2") + commit(1) + commit(2)},
      {"execute", execute({op(proto::TcOpKind::PUT, "x", "1"), op(proto::TcOpKind::GET, "x", ""),
                           op(proto::TcOpKind::REMOVE, "y", ""), op(proto::TcOpKind::SCAN, "", "")})},
      {"unknown_txn", get(77, "a") + commit(77)},
      {"authenticate", call("authenticate", auth) + begin() + commit(1)},
      {"stats", call("tcStats", proto::TransactionService_tcStats_args())},
  };
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  fuzz::InitializeRequestFuzzer(Seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string sentinel =
      fuzz::SentinelFrame("tcStats", proto::TransactionService_tcStats_args());
  std::unique_ptr<deuteron::Env> env = deuteron::NewMemEnv();
  {
    Result<std::unique_ptr<tc::Database>> db = tc::Database::Open("/store", StoreOptions(env.get()));
    if (!db.ok()) fuzz::Die("open the store: " + db.status().ToString());
    {
      tc::TcServer server(&(*db)->txn(), ServerOptions());
      fuzz::ServeInput(server, data, size, sentinel, "tcStats");
      if (server.open_transactions() != 0) fuzz::Die("transactions left open after Stop");
    }
    const Status closed = (*db)->Close();
    if (!closed.ok()) fuzz::Die("close the store: " + closed.ToString());
  }
  // Recovery replays what the calls committed.
  Result<std::unique_ptr<tc::Database>> again = tc::Database::Open("/store", StoreOptions(env.get()));
  if (!again.ok()) fuzz::Die("reopen the store: " + again.status().ToString());
  const Status closed = (*again)->Close();
  if (!closed.ok()) fuzz::Die("close the reopened store: " + closed.ToString());
  return 0;
}
