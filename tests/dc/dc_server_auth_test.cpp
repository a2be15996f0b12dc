// The shared secret (protocol/protocol.md, "Authentication"): required off
// loopback, presented with authenticate() as a connection's first call; a
// wrong or missing token gets UNAUTHENTICATED and the connection closes,
// while a client with the right token is served throughout.
#include <catch2/catch.hpp>

#include <string>

#include "tests/dc/dc_server_attack_util.h"

namespace deuteron::dc::attack {
namespace {

namespace proto = ::deuteron::protocol;
namespace thrift = ::apache::thrift;
using deuteron::testing::DecodeReply;
using deuteron::testing::EncodeCall;
using deuteron::testing::Frame;

constexpr char kSecret[] = "correct horse battery staple";

DcServerOptions SecretOptions() {
  DcServerOptions o = AttackOptions();
  o.shared_secret = kSecret;
  return o;
}

std::string AuthFrame(int32_t seqid, const std::string& token) {
  proto::DataComponentService_authenticate_args args;
  args.token = token;
  return Frame(EncodeCall("authenticate", seqid, args));
}

TEST_CASE("Listening off loopback without a secret is refused at Start", "[dc][server][auth]") {
  FakeDataComponent fake;
  DcServerOptions o = AttackOptions();
  o.host = "0.0.0.0";
  DcServer server(&fake, o);
  const Status s = server.Start();
  CHECK(s.IsInvalidArgument());
  CHECK(s.ToString().find("shared secret") != std::string::npos);

  o.shared_secret = kSecret;
  DcServer with_secret(&fake, o);
  CHECK(with_secret.Start().ok());
}

TEST_CASE("The right token is served; a wrong or missing one is refused", "[dc][server][auth]") {
  AttackServed s(SecretOptions());
  HealthyClient healthy(s.server.port(), 1000, kSecret);

  SECTION("the client library with the right secret") {
    auto dc = s.Client(kSecret);
    CHECK(dc->Health().ok());
  }
  SECTION("the client library with a wrong secret") {
    RemoteOptions o;
    o.port = s.server.port();
    o.secret = "wrong";
    auto r = RemoteDataComponent::Connect(o);
    CHECK(r.status().code() == Code::kUnauthenticated);
  }
  SECTION("the client library with no secret: its first call is refused") {
    RemoteOptions o;
    o.port = s.server.port();
    auto r = RemoteDataComponent::Connect(o);
    REQUIRE(r.ok());  // connecting sends nothing
    CHECK((*r)->Health().status().code() == Code::kUnauthenticated);
  }
  SECTION("raw: a call before authenticate gets UNAUTHENTICATED, then the close") {
    RawSocket raw = RawSocket::Connect(s.server.port());
    proto::DataComponentService_setEsl_args esl;
    esl.esl = 99;
    REQUIRE(raw.WriteAll(Frame(EncodeCall("setEsl", 7, esl))));
    auto payload = raw.ReadFrame();
    REQUIRE(payload);
    const auto r = DecodeReply<proto::DataComponentService_setEsl_result>(*payload);
    CHECK(r.seqid == 7);
    REQUIRE(r.result.__isset.error);
    CHECK(r.result.error.code == proto::ErrorCode::UNAUTHENTICATED);
    CHECK(raw.WaitClosed());
    CHECK(s.fake.esl() == 0);  // nothing ran
  }
  SECTION("raw: a wrong token, then a call, both on one write") {
    RawSocket raw = RawSocket::Connect(s.server.port());
    proto::DataComponentService_setEsl_args esl;
    esl.esl = 99;
    REQUIRE(raw.WriteAll(AuthFrame(1, "correct horse battery stapl") +
                         Frame(EncodeCall("setEsl", 2, esl))));
    auto payload = raw.ReadFrame();
    REQUIRE(payload);
    const auto r = DecodeReply<proto::DataComponentService_authenticate_result>(*payload);
    CHECK(r.seqid == 1);
    REQUIRE(r.result.__isset.error);
    CHECK(r.result.error.code == proto::ErrorCode::UNAUTHENTICATED);
    CHECK(raw.WaitClosed());
    CHECK(s.fake.esl() == 0);
  }
  SECTION("raw: the right token, then calls") {
    RawSocket raw = RawSocket::Connect(s.server.port());
    proto::DataComponentService_setEsl_args esl;
    esl.esl = 99;
    REQUIRE(raw.WriteAll(AuthFrame(1, kSecret) + Frame(EncodeCall("setEsl", 2, esl))));
    auto first = raw.ReadFrame();
    REQUIRE(first);
    const auto a = DecodeReply<proto::DataComponentService_authenticate_result>(*first);
    CHECK(a.type == thrift::protocol::T_REPLY);
    CHECK(!a.result.__isset.error);
    auto second = raw.ReadFrame();
    REQUIRE(second);
    const auto e = DecodeReply<proto::DataComponentService_setEsl_result>(*second);
    CHECK(!e.result.__isset.error);
    CHECK(s.fake.esl() == 99);
  }
  healthy.Stop();
  CHECK(healthy.errors() == 0);
  CHECK(healthy.written() > 0);
  healthy.CheckKeys();
  CHECK(s.server.stats().auth_failures <= 3);
}

TEST_CASE("Without a secret, authenticate is accepted and changes nothing", "[dc][server][auth]") {
  AttackServed s;
  auto dc = s.Client("anything");
  CHECK(dc->Health().ok());
}

}  // namespace
}  // namespace deuteron::dc::attack
