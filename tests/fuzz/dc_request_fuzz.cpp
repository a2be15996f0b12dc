// libFuzzer target for the DC server's request decoding and dispatch: each
// input is a sequence of DataComponentService request payloads (the format
// of tests/fuzz/fuzz_client.h), sent framed on one connection to a real
// DcServer (dc/dc_server.h) over a fresh in-memory DC (dc::Dc on MemEnv),
// then a sentinel `health` call. Every decoded request is executed: apply,
// the reads, setEsl, proposeRssp (flushes), restartTo (recovers the
// store), stats, health. The server must answer every request, never crash,
// hang, leak or over-allocate, and the DC must still close cleanly.
//
// A fresh DC and server per input keep a finding reproducible from its
// input alone.
//
// DEUTERON_FUZZ_WRITE_SEEDS=<dir>: writes the seed corpus (well-formed calls
// of every method, built with the generated Thrift code) into <dir> and
// exits (tests/fuzz/make_corpus.py runs it).
//
// Built only by scripts/fuzz (clang, -fsanitize=fuzzer).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "DataComponentService.h"
#include "common/env.h"
#include "dc/dc.h"
#include "dc/dc_server.h"
#include "tests/fuzz/fuzz_client.h"
#include "tests/fuzz/fuzz_dc_options.h"

namespace {

namespace proto = ::deuteron::protocol;
namespace fuzz = ::deuteron::fuzz;
namespace dc = ::deuteron::dc;
using deuteron::Result;
using deuteron::Status;

dc::DcOptions DcOptions() {
  dc::DcOptions o = fuzz::SmallDcOptions();
  o.llama.memory_budget = 4 << 20;
  o.max_batch_ops = 4096;
  o.max_batch_bytes = 4 << 20;
  o.max_scan_items = 1000;
  o.max_multiget_keys = 1024;
  return o;
}

dc::DcServerOptions ServerOptions() {
  dc::DcServerOptions o;
  fuzz::SetServerLimits(&o);
  o.worker_threads = 1;
  o.string_limit = 256 << 10;
  o.max_multiget_keys = 1024;
  o.name = "fuzz DC server";
  return o;
}

proto::RecordOp Op(proto::RecordOpKind::type kind, const std::string& key, const std::string& value,
                   int64_t lsn) {
  proto::RecordOp op;
  op.kind = kind;
  op.key = key;
  op.value = value;
  op.lsn = lsn;
  return op;
}

// Well-formed calls of every method, alone and in sequences.
std::vector<std::pair<std::string, std::string>> Seeds() {
  int32_t seq = 1;
  auto apply = [&](std::vector<proto::RecordOp> ops, int64_t esl, int64_t incarnation) {
    proto::DataComponentService_apply_args a;
    a.request.ops = std::move(ops);
    a.request.esl = esl;
    a.request.incarnation = incarnation;
    return fuzz::Chunk(fuzz::CallPayload("apply", seq++, a));
  };
  std::vector<proto::RecordOp> some;
  for (int i = 0; i < 12; ++i) {
    some.push_back(Op(proto::RecordOpKind::UPSERT, "k" + std::to_string(i), "value" + std::to_string(i), i + 1));
  }
  some.push_back(Op(proto::RecordOpKind::DELETE, "k3", "", 13));
  proto::ReadFence fence;
  fence.__set_incarnation(1);
  auto get = [&](const std::string& key, bool fenced) {
    proto::DataComponentService_get_args a;
    a.key = key;
    if (fenced) a.fence = fence;
    return fuzz::Chunk(fuzz::CallPayload("get", seq++, a));
  };
  auto multi_get = [&](std::vector<std::string> keys) {
    proto::DataComponentService_multiGet_args a;
    a.keys = std::move(keys);
    return fuzz::Chunk(fuzz::CallPayload("multiGet", seq++, a));
  };
  auto scan = [&](bool reverse, bool bounded, int32_t limit) {
    proto::DataComponentService_scan_args a;
    a.request.reverse = reverse;
    a.request.limit = limit;
    if (bounded) {
      a.request.__set_lower("k1");
      a.request.__set_upper("k7");
      a.request.upper_inclusive = true;
    }
    return fuzz::Chunk(fuzz::CallPayload("scan", seq++, a));
  };
  auto set_esl = [&](int64_t esl, int64_t inc) {
    proto::DataComponentService_setEsl_args a;
    a.esl = esl;
    a.incarnation = inc;
    return fuzz::Chunk(fuzz::CallPayload("setEsl", seq++, a));
  };
  auto rssp = [&](int64_t r, int64_t inc) {
    proto::DataComponentService_proposeRssp_args a;
    a.rssp = r;
    a.incarnation = inc;
    return fuzz::Chunk(fuzz::CallPayload("proposeRssp", seq++, a));
  };
  auto restart = [&](int64_t end, const std::string& store) {
    proto::DataComponentService_restartTo_args a;
    a.stable_end = end;
    a.store_id = store;
    return fuzz::Chunk(fuzz::CallPayload("restartTo", seq++, a));
  };
  const std::string stats = fuzz::Chunk(fuzz::CallPayload("stats", 90, proto::DataComponentService_stats_args()));
  const std::string health = fuzz::Chunk(fuzz::CallPayload("health", 91, proto::DataComponentService_health_args()));
  proto::DataComponentService_authenticate_args auth;
  auth.token = "token";
  const std::string authenticate = fuzz::Chunk(fuzz::CallPayload("authenticate", 92, auth));
  return {
      {"apply", apply(some, 13, 0)},
      {"apply_then_reads", apply(some, 0, 0) + get("k1", false) + multi_get({"k1", "k3", "zz"}) +
                               scan(false, false, 0) + scan(true, true, 3)},
      {"get", get("k1", false)},
      {"get_fenced", restart(0, "") + get("k1", true)},
      {"multiget", multi_get({"a", "b", "c", std::string(300, 'k')})},
      {"scan", scan(false, true, 5)},
      {"scan_reverse", scan(true, false, 0)},
      {"set_esl", set_esl(10, 0)},
      {"propose_rssp", apply(some, 13, 0) + rssp(14, 0)},
      {"restart_to", apply(some, 0, 0) + restart(6, "") + health + scan(false, false, 0)},
      {"restart_to_store", restart(0, std::string(16, 's')) + apply(some, 13, 1) + rssp(14, 1)},
      {"stats", stats},
      {"health", health},
      {"authenticate", authenticate},
      {"many", apply(some, 5, 0) + set_esl(13, 0) + rssp(14, 0) + get("k2", false) + stats + restart(9, "") +
                   apply({Op(proto::RecordOpKind::UPSERT, "k9", "again", 20)}, 20, 1) + scan(false, false, 2)},
  };
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  fuzz::InitializeRequestFuzzer(Seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string sentinel =
      fuzz::SentinelFrame("health", proto::DataComponentService_health_args());
  std::unique_ptr<deuteron::Env> env = deuteron::NewMemEnv();
  Result<std::unique_ptr<dc::Dc>> d = dc::Dc::Open(env.get(), "/dc", DcOptions());
  if (!d.ok()) fuzz::Die("open the DC: " + d.status().ToString());
  {
    dc::DcServer server(d->get(), ServerOptions());
    fuzz::ServeInput(server, data, size, sentinel, "health");
  }
  // Whatever the calls did, the DC closes: flushes and checkpoints.
  const Status closed = (*d)->Close();
  if (!closed.ok()) fuzz::Die("close the DC: " + closed.ToString());
  return 0;
}
