// DcServer + RemoteDataComponent against a FakeDataComponent: every call
// round-trips, typed errors cross the wire, pipelined requests are answered
// in order, and bad bytes on a socket cost only that connection.
#include "dc/dc_server.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "protocol/remote_dc.h"
#include "tests/protocol/fake_dc.h"
#include "tests/protocol/wire_util.h"

namespace deuteron::dc {
namespace {

namespace proto = ::deuteron::protocol;
namespace thrift = ::apache::thrift;
using deuteron::testing::DecodeReply;
using deuteron::testing::EncodeCall;
using deuteron::testing::EncodeMessage;
using deuteron::testing::FakeDataComponent;
using deuteron::testing::Frame;
using deuteron::testing::GetFrame;
using deuteron::testing::RawSocket;
using proto::RemoteDataComponent;
using proto::RemoteOptions;

DcServerOptions TestOptions() {
  DcServerOptions o;
  o.io_threads = 2;
  o.worker_threads = 2;
  return o;
}

// A fake DC served on an ephemeral port.
struct Served {
  explicit Served(DcServerOptions o = TestOptions()) : server(&fake, o) {
    Status s = server.Start();
    INFO(s.ToString());
    REQUIRE(s.ok());
    REQUIRE(server.port() != 0);
  }

  std::unique_ptr<RemoteDataComponent> Client(size_t max_connections = 4) {
    RemoteOptions o;
    o.port = server.port();
    o.max_connections = max_connections;
    o.recv_timeout_ms = 5000;
    auto r = RemoteDataComponent::Connect(o);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    return std::move(r).value();
  }

  RawSocket Raw() {
    RawSocket s = RawSocket::Connect(server.port());
    REQUIRE(s.valid());
    return s;
  }

  // Waits until the server counts `n` open connections.
  bool WaitConnections(size_t n) {
    for (int i = 0; i < 500; ++i) {
      if (server.connections() == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  FakeDataComponent fake;
  DcServer server;
};

using GetReply = deuteron::testing::Reply<proto::DataComponentService_get_result>;

// A get on `s` answers; the connection is still served.
void CheckServes(RawSocket& s, int32_t seqid = 99) {
  REQUIRE(s.WriteAll(GetFrame(seqid, "probe")));
  auto payload = s.ReadFrame();
  REQUIRE(payload);
  const GetReply r = DecodeReply<proto::DataComponentService_get_result>(*payload);
  CHECK(r.type == thrift::protocol::T_REPLY);
  CHECK(r.seqid == seqid);
  CHECK(r.result.__isset.success);
}

RecordOp Put(const char* key, const char* value, uint64_t lsn) {
  return RecordOp{RecordOpKind::kUpsert, Slice(key), Slice(value), lsn};
}

TEST_CASE("Every call round-trips through server and client", "[dc][server]") {
  Served s;
  auto dc = s.Client();

  const RecordOp ops[] = {Put("a", "1", 10), Put("b", "2", 11), Put("c", "3", 12),
                          {RecordOpKind::kDelete, Slice("b"), Slice(), 13}};
  auto ar = dc->Apply(ops, 5, 0);
  REQUIRE(ar.ok());
  CHECK(ar->applied == 4);
  CHECK(ar->skipped == 0);
  CHECK(s.fake.esl() == 5);

  // Idempotence by LSN: a resend is acknowledged and skipped.
  auto again = dc->Apply(ops, 0, 0);
  REQUIRE(again.ok());
  CHECK(again->applied == 0);
  CHECK(again->skipped == 4);

  auto g = dc->Get(Slice("a"));
  REQUIRE(g.ok());
  CHECK(g->found);
  CHECK(g->value == "1");
  CHECK(g->lsn == 10);
  auto tomb = dc->Get(Slice("b"));
  REQUIRE(tomb.ok());
  CHECK(!tomb->found);
  CHECK(tomb->lsn == 13);
  auto none = dc->Get(Slice("zz"));
  REQUIRE(none.ok());
  CHECK(!none->found);
  CHECK(none->lsn == 0);

  const Slice keys[] = {Slice("c"), Slice("b"), Slice("a")};
  auto mg = dc->MultiGet(keys);
  REQUIRE(mg.ok());
  REQUIRE(mg->size() == 3);
  CHECK((*mg)[0].value == "3");
  CHECK(!(*mg)[1].found);
  CHECK((*mg)[2].lsn == 10);

  ScanRequest all;
  auto sc = dc->Scan(all);
  REQUIRE(sc.ok());
  REQUIRE(sc->items.size() == 2);
  CHECK(sc->items[0].key == "a");
  CHECK(sc->items[1].key == "c");
  CHECK(sc->items[1].lsn == 12);
  CHECK(!sc->more);
  ScanRequest rev;
  rev.reverse = true;
  rev.limit = 1;
  rev.upper = "c";
  rev.upper_inclusive = true;
  auto sr = dc->Scan(rev);
  REQUIRE(sr.ok());
  REQUIRE(sr->items.size() == 1);
  CHECK(sr->items[0].key == "c");
  CHECK(sr->more);

  CHECK(dc->SetEsl(20, 0).ok());
  CHECK(dc->SetEsl(3, 0).ok());  // never moves back
  CHECK(s.fake.esl() == 20);
  CHECK(dc->ProposeRssp(21, 0).ok());
  CHECK(dc->ProposeRssp(22, 0).IsInvalidArgument());  // above ESL + 1

  auto h = dc->Health();
  REQUIRE(h.ok());
  CHECK(h->state == DcState::kServing);
  CHECK(h->esl == 20);
  CHECK(h->rssp == 21);
  CHECK(h->max_durable_lsn == 20);

  auto st = dc->GetStats();
  REQUIRE(st.ok());
  CHECK(st->applies == 2);
  CHECK(st->ops_applied == 4);
  CHECK(st->ops_skipped == 4);
  CHECK(st->gets == 6);
  CHECK(st->scans == 2);
  CHECK(st->rssp_proposals == 1);
  CHECK(st->esl == 20);
  CHECK(st->tree_height == 1);

  auto ready = dc->RestartTo(11);
  REQUIRE(ready.ok());
  CHECK(ready->rssp == 21);
  CHECK(ready->max_durable_lsn == 20);
  CHECK(ready->incarnation == 1);
  CHECK(dc->Get(Slice("a"))->found);
  CHECK(!dc->Get(Slice("c"))->found);  // LSN 12 above the stable end
  CHECK(dc->GetStats()->restarts == 1);
  // The incarnation crosses the wire both ways.
  CHECK(dc->SetEsl(30, 0).IsStaleIncarnation());
  CHECK(dc->SetEsl(30, 1).ok());
  CHECK(dc->Health()->incarnation == 1);
}

// A client that predates read fences sends get without argument 2: the
// server decodes and answers it (an absent fence: an unfenced read). Fenced
// reads and their refusals over the wire: dc_read_fence_test.cpp (remote
// binding, a real Dc).
TEST_CASE("A get without the fence argument is served unfenced", "[dc][server][fence]") {
  Served s;
  RawSocket raw = s.Raw();
  proto::DataComponentService_get_args args;
  args.key = "old";
  std::string msg = EncodeCall("get", 7, args);
  // The empty fence struct (field header, stop) before the arguments' stop.
  REQUIRE(msg.compare(msg.size() - 5, 5, std::string("\x0c\x00\x02\x00\x00", 5)) == 0);
  msg.erase(msg.size() - 5, 4);
  REQUIRE(raw.WriteAll(Frame(msg)));
  auto payload = raw.ReadFrame();
  REQUIRE(payload);
  const GetReply r = DecodeReply<proto::DataComponentService_get_result>(*payload);
  CHECK(r.type == thrift::protocol::T_REPLY);
  CHECK(r.seqid == 7);
  CHECK(r.result.__isset.success);
  CHECK_FALSE(r.result.__isset.error);
}

TEST_CASE("Typed errors cross the wire with their codes", "[dc][server]") {
  Served s;
  auto dc = s.Client();

  SECTION("every code injected into the DC comes back as itself") {
    for (int i = 1; i < static_cast<int>(Code::kMaxCode); ++i) {
      const Status injected(static_cast<Code>(i), "injected " + std::to_string(i));
      INFO(injected.ToString());
      s.fake.InjectError(injected);
      auto r = dc->Get(Slice("k"));
      CHECK(r.status() == injected);
    }
  }
  SECTION("the DC's own checks") {
    const RecordOp zero = Put("k", "v", 0);
    CHECK(dc->Apply({&zero, 1}, 0, 0).status().IsInvalidArgument());
    const std::string big_key(FakeDataComponent::kMaxKey + 1, 'k');
    CHECK(dc->Get(Slice(big_key)).status().code() == Code::kTooLarge);
    s.fake.set_restarting(true);
    const RecordOp op = Put("k", "v", 1);
    CHECK(dc->Apply({&op, 1}, 0, 0).status().IsUnavailable());
    CHECK(dc->ProposeRssp(1, 0).IsUnavailable());
    CHECK(dc->Health()->state == DcState::kRestarting);
    s.fake.set_restarting(false);
    CHECK(dc->Apply({&op, 1}, 0, 0).ok());
  }
  SECTION("an unknown op kind is InvalidArgument (the client's own check)") {
    const RecordOp bad{static_cast<RecordOpKind>(9), Slice("k"), Slice("v"), 1};
    auto r = dc->Apply({&bad, 1}, 0, 0);
    INFO(r.status().ToString());
    CHECK(r.status().IsInvalidArgument());
    CHECK(!dc->Get(Slice("k"))->found);
  }
}

TEST_CASE("Many threads share one client", "[dc][server]") {
  Served s;
  auto dc = s.Client(/*max_connections=*/3);
  constexpr int kThreads = 6;
  constexpr int kOps = 60;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kOps; ++i) {
        const std::string key = "t" + std::to_string(t) + "-" + std::to_string(i);
        const std::string value = "v" + std::to_string(i * kThreads + t);
        const uint64_t lsn = static_cast<uint64_t>(1 + t * kOps + i);
        const RecordOp op{RecordOpKind::kUpsert, Slice(key), Slice(value), lsn};
        auto a = dc->Apply({&op, 1}, 0, 0);
        auto g = dc->Get(Slice(key));
        if (!a.ok() || a->applied != 1 || !g.ok() || g->value != value || g->lsn != lsn) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures.load() == 0);
  CHECK(dc->open_connections() <= 3);
  CHECK(dc->GetStats()->ops_applied == kThreads * kOps);
}

TEST_CASE("Pipelined frames in one write are answered in order", "[dc][server]") {
  Served s;
  std::vector<RecordOp> ops;
  std::vector<std::string> keys, values;
  constexpr int kFrames = 40;
  for (int i = 0; i < kFrames; ++i) {
    keys.push_back("key" + std::to_string(i));
    values.push_back(std::string(static_cast<size_t>(i) * 50, static_cast<char>('a' + i % 26)));
  }
  for (int i = 0; i < kFrames; ++i) ops.push_back(RecordOp{RecordOpKind::kUpsert, Slice(keys[i]), Slice(values[i]), static_cast<uint64_t>(i + 1)});
  REQUIRE(s.fake.Apply(ops, 0, 0).ok());

  RawSocket raw = s.Raw();
  std::string batch;
  for (int i = 0; i < kFrames; ++i) batch += GetFrame(1000 + i, keys[i]);
  REQUIRE(raw.WriteAll(batch));
  for (int i = 0; i < kFrames; ++i) {
    INFO("reply " << i);
    auto payload = raw.ReadFrame();
    REQUIRE(payload);
    const GetReply r = DecodeReply<proto::DataComponentService_get_result>(*payload);
    CHECK(r.seqid == 1000 + i);
    REQUIRE(r.result.__isset.success);
    CHECK(r.result.success.value == values[i]);
    CHECK(r.result.success.lsn == i + 1);
  }
}

// proposeRssp runs on a worker and the other calls on the connection's
// loop: calls pipelined on one connection must still run in arrival order
// (each sees the effects of those before it) and be answered in that order.
TEST_CASE("Pipelined calls on one connection run in arrival order", "[dc][server]") {
  Served s;
  constexpr int kRounds = 25;
  std::vector<std::string> values;
  for (int i = 0; i < kRounds; ++i) values.push_back("v" + std::to_string(i));
  std::string batch;
  for (int i = 0; i < kRounds; ++i) {
    const int64_t lsn = i + 1;
    proto::DataComponentService_apply_args apply;
    proto::RecordOp op;
    op.kind = proto::RecordOpKind::UPSERT;
    op.key = "k";
    op.value = values[static_cast<size_t>(i)];
    op.lsn = lsn;
    apply.request.ops.push_back(op);
    apply.request.esl = lsn;  // lets the RSSP below reach lsn + 1
    batch += Frame(EncodeCall("apply", 4 * i, apply));
    proto::DataComponentService_proposeRssp_args rssp;
    rssp.rssp = lsn + 1;
    batch += Frame(EncodeCall("proposeRssp", 4 * i + 1, rssp));
    batch += Frame(EncodeCall("health", 4 * i + 2, proto::DataComponentService_health_args()));
    batch += GetFrame(4 * i + 3, "k");
  }
  RawSocket raw = s.Raw();
  REQUIRE(raw.WriteAll(batch));
  for (int i = 0; i < kRounds; ++i) {
    INFO("round " << i);
    auto payload = raw.ReadFrame();
    REQUIRE(payload);
    const auto a = DecodeReply<proto::DataComponentService_apply_result>(*payload);
    CHECK(a.seqid == 4 * i);
    CHECK(a.result.__isset.success);
    payload = raw.ReadFrame();
    REQUIRE(payload);
    const auto p = DecodeReply<proto::DataComponentService_proposeRssp_result>(*payload);
    CHECK(p.seqid == 4 * i + 1);
    CHECK(!p.result.__isset.error);
    payload = raw.ReadFrame();
    REQUIRE(payload);
    const auto h = DecodeReply<proto::DataComponentService_health_result>(*payload);
    CHECK(h.seqid == 4 * i + 2);
    REQUIRE(h.result.__isset.success);
    CHECK(h.result.success.rssp == i + 2);  // the proposal before it was honoured
    payload = raw.ReadFrame();
    REQUIRE(payload);
    const GetReply r = DecodeReply<proto::DataComponentService_get_result>(*payload);
    CHECK(r.seqid == 4 * i + 3);
    REQUIRE(r.result.__isset.success);
    CHECK(r.result.success.value == values[static_cast<size_t>(i)]);
    CHECK(r.result.success.lsn == i + 1);
  }
}

TEST_CASE("Incarnations on the wire: stale is typed, negative is invalid", "[dc][server]") {
  Served s;
  RawSocket raw = s.Raw();
  auto set_esl = [&](int32_t seqid, int64_t esl, int64_t incarnation) {
    proto::DataComponentService_setEsl_args args;
    args.esl = esl;
    args.incarnation = incarnation;
    REQUIRE(raw.WriteAll(Frame(EncodeCall("setEsl", seqid, args))));
    auto payload = raw.ReadFrame();
    REQUIRE(payload);
    const auto r = DecodeReply<proto::DataComponentService_setEsl_result>(*payload);
    CHECK(r.seqid == seqid);
    CHECK(r.type == thrift::protocol::T_REPLY);
    return r.result.__isset.error ? r.result.error.code : proto::ErrorCode::OK;
  };
  CHECK(set_esl(1, 5, 0) == proto::ErrorCode::OK);  // a fresh DC: incarnation 0
  CHECK(set_esl(2, 5, -1) == proto::ErrorCode::INVALID_ARGUMENT);
  REQUIRE(s.fake.RestartTo(5).ok());
  CHECK(set_esl(3, 6, 0) == proto::ErrorCode::STALE_INCARNATION);
  CHECK(set_esl(4, 6, 2) == proto::ErrorCode::INVALID_ARGUMENT);
  CHECK(set_esl(5, 6, 1) == proto::ErrorCode::OK);
  CHECK(s.fake.esl() == 6);
}

// A TC that dies leaves requests queued on its connection; run after a new
// TC's restartTo, they would redo what the restart dropped. The server drops
// them when the connection closes: only the call already running finishes.
TEST_CASE("A closed connection's queued requests are dropped, not run", "[dc][server]") {
  Served s;
  s.fake.BlockRssp();
  RawSocket raw = s.Raw();
  proto::DataComponentService_proposeRssp_args rssp;
  rssp.rssp = 1;
  proto::DataComponentService_apply_args apply;
  proto::RecordOp op;
  op.kind = proto::RecordOpKind::UPSERT;
  op.key = "late";
  op.value = "v";
  op.lsn = 5;
  apply.request.ops.push_back(op);
  apply.request.esl = 7;
  proto::DataComponentService_setEsl_args esl;
  esl.esl = 9;
  // One write: the RSSP runs (and blocks), the other two queue behind it.
  REQUIRE(raw.WriteAll(Frame(EncodeCall("proposeRssp", 1, rssp)) +
                       Frame(EncodeCall("apply", 2, apply)) +
                       Frame(EncodeCall("setEsl", 3, esl))));
  s.fake.WaitForBlockedRssp(1);
  raw.Close();
  CHECK(s.WaitConnections(0));  // closed while its call still runs
  s.fake.UnblockRssp();
  // Give a server that (wrongly) runs what was queued the time to do it.
  for (int i = 0; i < 40 && s.fake.esl() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  s.server.Stop();  // waits for the call in progress: nothing can run later
  CHECK(s.fake.esl() == 0);
  Result<DcStats> stats = s.fake.GetStats();
  REQUIRE(stats.ok());
  CHECK(stats->rssp_proposals == 1);
  CHECK(stats->applies == 0);
  CHECK(!s.fake.Get(Slice("late"))->found);
}

TEST_CASE("A blocked RSSP holds neither other connections nor the server", "[dc][server]") {
  Served s;
  auto dc = s.Client(/*max_connections=*/2);
  REQUIRE(dc->SetEsl(100, 0).ok());
  s.fake.BlockRssp();
  std::thread rssp([&] { CHECK(dc->ProposeRssp(50, 0).ok()); });
  s.fake.WaitForBlockedRssp(1);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) REQUIRE(dc->Health().ok());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
  s.fake.UnblockRssp();
  rssp.join();
  CHECK(dc->Health()->rssp == 50);
}

TEST_CASE("Bad bytes cost only their own connection", "[dc][server]") {
  DcServerOptions o = TestOptions();
  o.max_frame_size = 1 << 20;
  o.string_limit = 1024;
  o.container_limit = 16;
  Served s(o);

  // A bad frame header gets one last reply, then the connection closes.
  auto typed_too_large = [](RawSocket* raw) {
    auto payload = raw->ReadFrame();
    REQUIRE(payload);
    const auto r = DecodeReply<proto::DataComponentService_apply_result>(*payload);
    CHECK(r.type == thrift::protocol::T_REPLY);
    REQUIRE(r.result.__isset.error);
    CHECK(r.result.error.code == proto::ErrorCode::TOO_LARGE);
  };
  SECTION("garbage") {
    RawSocket raw = s.Raw();
    REQUIRE(raw.WriteAll("GET / HTTP/1.1\r\nHost: deuteron\r\n\r\n"));  // "GET " is 1.2 GB
    typed_too_large(&raw);
    CHECK(raw.WaitClosed());
  }
  SECTION("a frame length over the limit") {
    RawSocket raw = s.Raw();
    REQUIRE(raw.WriteAll(std::string("\x00\x10\x00\x01", 4)));  // 1 MiB + 1
    typed_too_large(&raw);
    CHECK(raw.WaitClosed());
  }
  SECTION("a good call, then a zero-length frame: the call is answered first") {
    RawSocket raw = s.Raw();
    proto::DataComponentService_get_args args;
    args.key = "k";
    REQUIRE(raw.WriteAll(Frame(EncodeCall("get", 5, args)) + std::string(4, '\0')));
    auto first = raw.ReadFrame();
    REQUIRE(first);
    const auto got = DecodeReply<proto::DataComponentService_get_result>(*first);
    CHECK(got.type == thrift::protocol::T_REPLY);
    CHECK(got.seqid == 5);
    auto last = raw.ReadFrame();
    REQUIRE(last);
    const GetReply bad = DecodeReply<proto::DataComponentService_get_result>(*last);
    CHECK(bad.type == thrift::protocol::T_EXCEPTION);
    CHECK(bad.app.getType() == thrift::TApplicationException::PROTOCOL_ERROR);
    CHECK(raw.WaitClosed());
  }
  SECTION("a truncated frame, then close") {
    RawSocket raw = s.Raw();
    const std::string frame = GetFrame(1, "truncated");
    REQUIRE(raw.WriteAll(frame.substr(0, frame.size() - 3)));
    raw.ShutdownWrite();
    CHECK(raw.WaitClosed());
  }
  SECTION("a valid frame with an unknown method, then a good call") {
    RawSocket raw = s.Raw();
    proto::DataComponentService_get_args args;
    args.key = "k";
    REQUIRE(raw.WriteAll(Frame(EncodeCall("frobnicate", 7, args))));
    auto payload = raw.ReadFrame();
    REQUIRE(payload);
    const GetReply r = DecodeReply<proto::DataComponentService_get_result>(*payload);
    CHECK(r.type == thrift::protocol::T_EXCEPTION);
    CHECK(r.seqid == 7);
    CHECK(r.app.getType() == thrift::TApplicationException::UNKNOWN_METHOD);
    CheckServes(raw);
  }
  SECTION("an apply with an unknown op kind gets a typed INVALID_ARGUMENT") {
    RawSocket raw = s.Raw();
    proto::DataComponentService_apply_args args;
    proto::RecordOp op;
    op.kind = proto::RecordOpKind::UPSERT;
    op.key = "k";
    op.lsn = 1;
    args.request.ops.push_back(op);
    std::string msg = EncodeCall("apply", 3, args);
    // RecordOp field 1 (i32 kind) = 1 becomes 77: the generated enum type
    // cannot hold 77, so it is patched into the bytes.
    REQUIRE(deuteron::testing::ReplaceOnce(&msg, std::string("\x08\x00\x01\x00\x00\x00\x01", 7),
                                           std::string("\x08\x00\x01\x00\x00\x00\x4d", 7)));
    REQUIRE(raw.WriteAll(Frame(msg)));
    auto payload = raw.ReadFrame();
    REQUIRE(payload);
    const auto r = DecodeReply<proto::DataComponentService_apply_result>(*payload);
    CHECK(r.type == thrift::protocol::T_REPLY);
    REQUIRE(r.result.__isset.error);
    CHECK(r.result.error.code == proto::ErrorCode::INVALID_ARGUMENT);
    CheckServes(raw);
  }
  SECTION("a string over the limit gets a typed TOO_LARGE") {
    RawSocket raw = s.Raw();
    REQUIRE(raw.WriteAll(GetFrame(5, std::string(2000, 'k'))));
    auto payload = raw.ReadFrame();
    REQUIRE(payload);
    const GetReply r = DecodeReply<proto::DataComponentService_get_result>(*payload);
    REQUIRE(r.result.__isset.error);
    CHECK(r.result.error.code == proto::ErrorCode::TOO_LARGE);
    CheckServes(raw);
  }
  SECTION("a list over the container limit gets a typed TOO_LARGE") {
    RawSocket raw = s.Raw();
    proto::DataComponentService_multiGet_args args;
    args.keys.assign(17, "k");
    REQUIRE(raw.WriteAll(Frame(EncodeCall("multiGet", 6, args))));
    auto payload = raw.ReadFrame();
    REQUIRE(payload);
    const auto r = DecodeReply<proto::DataComponentService_multiGet_result>(*payload);
    REQUIRE(r.result.__isset.error);
    CHECK(r.result.error.code == proto::ErrorCode::TOO_LARGE);
    CheckServes(raw);
  }
  SECTION("garbage inside a valid frame gets a protocol error") {
    RawSocket raw = s.Raw();
    REQUIRE(raw.WriteAll(Frame("\x80\x01\x00\x01 definitely not thrift")));
    auto payload = raw.ReadFrame();
    REQUIRE(payload);
    const GetReply r = DecodeReply<proto::DataComponentService_get_result>(*payload);
    CHECK(r.type == thrift::protocol::T_EXCEPTION);
    CHECK(r.app.getType() == thrift::TApplicationException::PROTOCOL_ERROR);
    CheckServes(raw);
  }
  SECTION("a message cut short inside its frame gets a protocol error") {
    RawSocket raw = s.Raw();
    proto::DataComponentService_get_args args;
    args.key = "some key";
    const std::string msg = EncodeCall("get", 8, args);
    REQUIRE(raw.WriteAll(Frame(msg.substr(0, msg.size() - 5))));
    auto payload = raw.ReadFrame();
    REQUIRE(payload);
    const GetReply r = DecodeReply<proto::DataComponentService_get_result>(*payload);
    CHECK(r.type == thrift::protocol::T_EXCEPTION);
    CHECK(r.seqid == 8);
    CHECK(r.app.getType() == thrift::TApplicationException::PROTOCOL_ERROR);
    CheckServes(raw);
  }
  SECTION("a message that is not a call is refused") {
    RawSocket raw = s.Raw();
    proto::DataComponentService_get_args args;
    REQUIRE(raw.WriteAll(Frame(EncodeMessage("get", thrift::protocol::T_REPLY, 9, args))));
    auto payload = raw.ReadFrame();
    REQUIRE(payload);
    const GetReply r = DecodeReply<proto::DataComponentService_get_result>(*payload);
    CHECK(r.type == thrift::protocol::T_EXCEPTION);
    CHECK(r.app.getType() == thrift::TApplicationException::INVALID_MESSAGE_TYPE);
    CheckServes(raw);
  }
  SECTION("a list length far beyond the frame") {
    RawSocket raw = s.Raw();
    proto::DataComponentService_multiGet_args args;
    args.keys.assign(3, "k");
    std::string msg = EncodeCall("multiGet", 4, args);
    // Without the (empty) fence argument, as an older client sends it, so
    // the list is the last thing in the frame: its field header and stop
    // (4 bytes) before the arguments' stop byte.
    REQUIRE(msg.compare(msg.size() - 5, 5, std::string("\x0c\x00\x02\x00\x00", 5)) == 0);
    msg.erase(msg.size() - 5, 4);
    // The list header (type byte, then i32 size 3) follows the field header.
    const std::string size3("\x00\x00\x00\x03", 4);
    const size_t at = msg.find(size3);
    REQUIRE(at != std::string::npos);
    msg.replace(at, 4, std::string("\x00\x00\x00\x0f", 4));  // 15: under the limit, beyond the bytes
    REQUIRE(raw.WriteAll(Frame(msg)));
    auto payload = raw.ReadFrame();
    REQUIRE(payload);
    const auto r = DecodeReply<proto::DataComponentService_multiGet_result>(*payload);
    CHECK(r.type == thrift::protocol::T_EXCEPTION);
    CheckServes(raw);
  }
  // Whatever happened above, a new connection is served.
  RawSocket fresh = s.Raw();
  CheckServes(fresh, 1234);
  auto dc = s.Client();
  CHECK(dc->Health().ok());
}

TEST_CASE("A reply over the server's frame limit becomes a typed TooLarge", "[dc][server]") {
  DcServerOptions o = TestOptions();
  o.max_frame_size = 4096;
  Served s(o);
  const std::string big(3000, 'v');
  const RecordOp ops[] = {Put("a", big.c_str(), 1), Put("b", big.c_str(), 2)};
  REQUIRE(s.fake.Apply(ops, 0, 0).ok());
  auto dc = s.Client();
  auto one = dc->Get(Slice("a"));
  REQUIRE(one.ok());
  CHECK(one->value == big);
  auto scan = dc->Scan(ScanRequest{});
  INFO(scan.status().ToString());
  CHECK(scan.status().code() == Code::kTooLarge);
  CHECK(dc->Get(Slice("b")).ok());  // the connection is still in step
}

TEST_CASE("When full, a new connection evicts the longest-idle one", "[dc][server]") {
  DcServerOptions o = TestOptions();
  o.max_connections = 2;
  Served s(o);
  RawSocket a = s.Raw();
  RawSocket b = s.Raw();
  REQUIRE(s.WaitConnections(2));
  CheckServes(a);  // b has now gone longest without a request
  RawSocket c = s.Raw();
  CHECK(b.WaitClosed());
  CHECK(s.server.stats().evicted_connections == 1);
  CheckServes(c);
  CheckServes(a);
  CHECK(s.server.refused_connections() == 0);
}

TEST_CASE("When full and every connection runs a call, a new one is closed", "[dc][server]") {
  DcServerOptions o = TestOptions();
  o.max_connections = 2;
  Served s(o);
  s.fake.BlockRssp();
  RawSocket a = s.Raw();
  RawSocket b = s.Raw();
  proto::DataComponentService_proposeRssp_args rssp;
  rssp.rssp = 1;
  REQUIRE(a.WriteAll(Frame(EncodeCall("proposeRssp", 1, rssp))));
  REQUIRE(b.WriteAll(Frame(EncodeCall("proposeRssp", 1, rssp))));
  s.fake.WaitForBlockedRssp(2);
  RawSocket c = s.Raw();
  CHECK(c.WaitClosed());
  CHECK(s.server.refused_connections() == 1);
  s.fake.UnblockRssp();
  REQUIRE(a.ReadFrame());
  REQUIRE(b.ReadFrame());
  RawSocket d = s.Raw();  // evicts the longest-idle of a and b
  CheckServes(d);
}

TEST_CASE("An idle connection is closed; a busy one is not", "[dc][server]") {
  DcServerOptions o = TestOptions();
  o.idle_timeout = std::chrono::milliseconds(300);
  Served s(o);
  RawSocket idle = s.Raw();
  RawSocket busy = s.Raw();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 8; ++i) {
    CheckServes(busy, i);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(idle.WaitClosed(3000));
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(300));
  CheckServes(busy, 100);
  // The client notices its pooled connection was closed and opens another.
  auto dc = s.Client(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  CHECK(dc->Health().ok());
}

TEST_CASE("Stop closes connected clients; a client recovers when the server returns",
          "[dc][server]") {
  FakeDataComponent fake;
  uint16_t port = 0;
  std::unique_ptr<RemoteDataComponent> dc;
  RawSocket raw;
  {
    DcServer server(&fake, TestOptions());
    REQUIRE(server.Start().ok());
    port = server.port();
    RemoteOptions ro;
    ro.port = port;
    ro.connect_timeout_ms = 1000;
    ro.recv_timeout_ms = 2000;
    auto r = RemoteDataComponent::Connect(ro);
    REQUIRE(r.ok());
    dc = std::move(r).value();
    const RecordOp op = Put("k", "v", 1);
    REQUIRE(dc->Apply({&op, 1}, 0, 0).ok());
    raw = RawSocket::Connect(port);
    REQUIRE(raw.valid());
    server.Stop();
    CHECK(server.connections() == 0);
    CHECK(raw.WaitClosed());
  }
  // Server down: typed errors, no exception, no hang.
  for (int i = 0; i < 3; ++i) {
    auto g = dc->Get(Slice("k"));
    INFO(g.status().ToString());
    CHECK(g.status().IsUnavailable());
  }
  // Back on the same port: the same client object recovers.
  DcServerOptions o = TestOptions();
  o.port = port;
  DcServer again(&fake, o);
  Status st = again.Start();
  INFO(st.ToString());
  REQUIRE(st.ok());
  auto g = dc->Get(Slice("k"));
  INFO(g.status().ToString());
  REQUIRE(g.ok());
  CHECK(g->value == "v");
}

TEST_CASE("Stop waits for a DC call in progress; its client sees Unavailable", "[dc][server]") {
  FakeDataComponent fake;
  DcServer server(&fake, TestOptions());
  REQUIRE(server.Start().ok());
  RemoteOptions ro;
  ro.port = server.port();
  ro.recv_timeout_ms = 5000;
  auto dc = RemoteDataComponent::Connect(ro);
  REQUIRE(dc.ok());
  REQUIRE((*dc)->SetEsl(10, 0).ok());
  fake.BlockRssp();
  Status rssp_status;
  std::thread rssp([&] { rssp_status = (*dc)->ProposeRssp(5, 0); });
  fake.WaitForBlockedRssp(1);
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    server.Stop();
    stopped.store(true);
  });
  rssp.join();  // its connection was closed under it
  INFO(rssp_status.ToString());
  CHECK(rssp_status.IsUnavailable());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(!stopped.load());  // still waiting for the blocked DC call
  fake.UnblockRssp();
  stopper.join();
  CHECK(stopped.load());
}

TEST_CASE("Start reports a port in use as Busy", "[dc][server]") {
  Served s;
  DcServerOptions o = TestOptions();
  o.port = s.server.port();
  FakeDataComponent other;
  DcServer second(&other, o);
  Status st = second.Start();
  INFO(st.ToString());
  CHECK(st.IsBusy());
  DcServerOptions bad = TestOptions();
  bad.io_threads = 0;
  DcServer third(&other, bad);
  CHECK(third.Start().IsInvalidArgument());
}

}  // namespace
}  // namespace deuteron::dc
