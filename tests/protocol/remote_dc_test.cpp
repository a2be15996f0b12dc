// RemoteDataComponent against scripted peers (tests/protocol/wire_util.h):
// every misbehaviour of the hop becomes a typed Status, never an exception
// or a crash. Round trips against a real server are in
// tests/dc/dc_server_test.cpp.
#include "protocol/remote_dc.h"

#include <catch2/catch.hpp>

#include "tests/protocol/wire_util.h"

namespace deuteron::protocol {
namespace {

using deuteron::testing::DecodeReply;
using deuteron::testing::EncodeMessage;
using deuteron::testing::Frame;
using deuteron::testing::RawServer;
using deuteron::testing::RawSocket;
using deuteron::testing::UnusedPort;
namespace thrift = apache::thrift;

RemoteOptions Options(uint16_t port) {
  RemoteOptions o;
  o.port = port;
  o.connect_timeout_ms = 1000;
  o.send_timeout_ms = 1000;
  o.recv_timeout_ms = 1000;
  o.max_connections = 2;
  return o;
}

// Answers every request frame on a connection with reply(request payload).
RawServer::Script Answer(std::function<std::string(const std::string&)> reply) {
  return [reply](RawSocket& s) {
    while (auto req = s.ReadFrame(2000)) {
      if (!s.WriteAll(reply(*req))) return;
    }
  };
}

// A well-formed health reply for any request, with DC state `state` (a raw
// i32: values the generated enum cannot hold are patched into the bytes).
std::string HealthReply(int32_t state) {
  DataComponentService_health_result r;
  DcHealth h;
  h.__set_state(DcState::SERVING);
  h.__set_esl(5);
  r.success = h;
  r.__isset.success = true;
  std::string msg = EncodeMessage("health", thrift::protocol::T_REPLY, 0, r);
  // success (field 0, a struct), then its field 1: i32 state.
  const std::string field = std::string("\x0c\x00\x00\x08\x00\x01", 6);
  const char v[4] = {static_cast<char>(state >> 24), static_cast<char>(state >> 16),
                     static_cast<char>(state >> 8), static_cast<char>(state)};
  // Runs on the peer's thread, so no REQUIRE here: a miss sends bytes the
  // client cannot decode, and the test fails on that.
  if (!deuteron::testing::ReplaceOnce(&msg, field + std::string("\x00\x00\x00\x01", 4),
                                      field + std::string(v, 4))) {
    return Frame("encoding changed: fix HealthReply");
  }
  return Frame(msg);
}

TEST_CASE("Connect checks its options", "[protocol][remote]") {
  RemoteOptions o = Options(0);
  CHECK(RemoteDataComponent::Connect(o).status().IsInvalidArgument());
  o.port = 1;
  o.max_connections = 0;
  CHECK(RemoteDataComponent::Connect(o).status().IsInvalidArgument());
  o.max_connections = 1;
  o.max_frame_size = 10;
  CHECK(RemoteDataComponent::Connect(o).status().IsInvalidArgument());
}

TEST_CASE("Connecting to a port nobody listens on is Unavailable", "[protocol][remote]") {
  auto r = RemoteDataComponent::Connect(Options(UnusedPort()));
  CHECK(r.status().IsUnavailable());
}

TEST_CASE("A peer that closes every connection gives Unavailable", "[protocol][remote]") {
  RawServer server([](RawSocket& s) { s.Close(); });
  auto dc = RemoteDataComponent::Connect(Options(server.port()));
  REQUIRE(dc.ok());
  for (int i = 0; i < 3; ++i) {
    auto h = (*dc)->Health();
    INFO(h.status().ToString());
    CHECK(h.status().IsUnavailable());
    CHECK((*dc)->SetEsl(1, 0).IsUnavailable());
  }
}

TEST_CASE("A peer that never answers gives TimedOut, then a fresh connection", "[protocol][remote]") {
  RawServer server([](RawSocket& s) { (void)s.ReadExact(1u << 20, 600); });
  RemoteOptions o = Options(server.port());
  o.recv_timeout_ms = 200;
  auto dc = RemoteDataComponent::Connect(o);
  REQUIRE(dc.ok());
  auto h = (*dc)->Health();
  INFO(h.status().ToString());
  CHECK(h.status().code() == Code::kTimedOut);
  // The timed-out connection (a reply may still come) was dropped.
  CHECK((*dc)->open_connections() == 0);
}

TEST_CASE("Replies the client cannot use are IOError", "[protocol][remote]") {
  std::string reply;
  SECTION("a frame over the client's limit") { reply = std::string("\x7f\xff\xff\xff", 4); }
  SECTION("garbage inside a frame") { reply = Frame("this is not thrift at all"); }
  SECTION("an empty frame") { reply = Frame(""); }
  RawServer server(Answer([&](const std::string&) { return reply; }));
  auto dc = RemoteDataComponent::Connect(Options(server.port()));
  REQUIRE(dc.ok());
  auto h = (*dc)->Health();
  INFO(h.status().ToString());
  CHECK(h.status().IsIOError());
}

TEST_CASE("Application exceptions from the peer are typed", "[protocol][remote]") {
  thrift::TApplicationException::TApplicationExceptionType type{};
  Code want{};
  SECTION("unknown method") {
    type = thrift::TApplicationException::UNKNOWN_METHOD;
    want = Code::kNotSupported;
  }
  SECTION("protocol error") {
    type = thrift::TApplicationException::PROTOCOL_ERROR;
    want = Code::kInvalidArgument;
  }
  SECTION("internal error") {
    type = thrift::TApplicationException::INTERNAL_ERROR;
    want = Code::kInternal;
  }
  RawServer server(Answer([&](const std::string&) {
    return Frame(EncodeMessage("health", thrift::protocol::T_EXCEPTION, 0,
                               thrift::TApplicationException(type, "no")));
  }));
  auto dc = RemoteDataComponent::Connect(Options(server.port()));
  REQUIRE(dc.ok());
  auto h = (*dc)->Health();
  INFO(h.status().ToString());
  CHECK(h.status().code() == want);
  // The stream stayed in step: the connection is kept.
  CHECK((*dc)->open_connections() == 1);
}

TEST_CASE("A DeuteronError reply keeps its code and message", "[protocol][remote]") {
  RawServer server(Answer([](const std::string&) {
    DataComponentService_proposeRssp_result r;
    DeuteronError e;
    e.__set_code(ErrorCode::INVALID_ARGUMENT);
    e.__set_message("RSSP 10 above ESL + 1 = 3");
    r.error = e;
    r.__isset.error = true;
    return Frame(EncodeMessage("proposeRssp", thrift::protocol::T_REPLY, 0, r));
  }));
  auto dc = RemoteDataComponent::Connect(Options(server.port()));
  REQUIRE(dc.ok());
  Status s = (*dc)->ProposeRssp(10, 0);
  CHECK(s == Status::InvalidArgument("RSSP 10 above ESL + 1 = 3"));
}

TEST_CASE("An unknown DC state in a reply is Internal", "[protocol][remote]") {
  RawServer server(Answer([](const std::string&) { return HealthReply(42); }));
  auto dc = RemoteDataComponent::Connect(Options(server.port()));
  REQUIRE(dc.ok());
  CHECK((*dc)->Health().status().code() == Code::kInternal);
}

TEST_CASE("A request over the frame limit is TooLarge and never sent", "[protocol][remote]") {
  std::atomic<int> frames{0};
  RawServer server(Answer([&](const std::string&) {
    frames.fetch_add(1);
    return HealthReply(DcState::SERVING);
  }));
  RemoteOptions o = Options(server.port());
  o.max_frame_size = 1024;
  auto dc = RemoteDataComponent::Connect(o);
  REQUIRE(dc.ok());
  const std::string value(2000, 'x');
  const ::deuteron::RecordOp op{::deuteron::RecordOpKind::kUpsert, Slice("k"), Slice(value), 1};
  auto r = (*dc)->Apply({&op, 1}, 0, 0);
  CHECK(r.status().code() == Code::kTooLarge);
  CHECK((*dc)->Get(Slice(value)).status().code() == Code::kTooLarge);
  CHECK(frames.load() == 0);
  // The connection is still good for a call that fits.
  auto h = (*dc)->Health();
  REQUIRE(h.ok());
  CHECK(h->state == ::deuteron::DcState::kServing);
  CHECK(h->esl == 5);
  CHECK(frames.load() == 1);
  CHECK((*dc)->open_connections() == 1);
}

TEST_CASE("An idle connection the peer closed is replaced before use", "[protocol][remote]") {
  // The first connection is closed after one answer; later ones serve on.
  std::atomic<int> conns{0};
  RawServer server([&](RawSocket& s) {
    const int n = conns.fetch_add(1);
    while (auto req = s.ReadFrame(2000)) {
      if (!s.WriteAll(HealthReply(DcState::SERVING))) return;
      if (n == 0) return;
    }
  });
  auto dc = RemoteDataComponent::Connect(Options(server.port()));
  REQUIRE(dc.ok());
  REQUIRE((*dc)->Health().ok());
  // Give the close time to arrive; then the next call must not see it.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto h = (*dc)->Health();
  INFO(h.status().ToString());
  CHECK(h.ok());
  CHECK(conns.load() == 2);
}

}  // namespace
}  // namespace deuteron::protocol
