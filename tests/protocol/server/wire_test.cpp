// The server layer's own wire pieces: method names read without decoding,
// constant-time token comparison, and the authenticate answers.
#include "protocol/server/wire.h"

#include <catch2/catch.hpp>

#include <string>

#include "DataComponentService.h"
#include "tests/protocol/wire_util.h"

namespace deuteron::server {
namespace {

namespace proto = ::deuteron::protocol;
using deuteron::testing::DecodeReply;
using deuteron::testing::EncodeCall;

TEST_CASE("PeekMethod reads a strict header's name and nothing else", "[server][wire]") {
  proto::DataComponentService_get_args args;
  args.key = "k";
  const std::string call = EncodeCall("get", 5, args);
  CHECK(PeekMethod(call) == std::string_view("get"));
  CHECK(!PeekMethod(call.substr(0, 7)));
  CHECK(!PeekMethod(std::string("\x80\x01\x00\x01\x7f\xff\xff\xff", 8)));  // name past the end
  CHECK(!PeekMethod(std::string(16, '\0')));                               // not strict
}

TEST_CASE("ConstantTimeEquals compares whole strings", "[server][wire]") {
  CHECK(ConstantTimeEquals("secret", "secret"));
  CHECK(!ConstantTimeEquals("secreT", "secret"));
  CHECK(!ConstantTimeEquals("secret", "secrets"));
  CHECK(!ConstantTimeEquals("secretsecret", "secret"));  // a repeat is not equal
  CHECK(!ConstantTimeEquals("", "secret"));
  CHECK(!ConstantTimeEquals("s", ""));
  CHECK(ConstantTimeEquals("", ""));
}

TEST_CASE("AuthenticateReply accepts the secret only", "[server][wire]") {
  proto::DataComponentService_authenticate_args args;
  args.token = "tok";
  const std::string call = EncodeCall("authenticate", 3, args);
  const std::string secret = "tok";
  const std::string other = "toq";
  bool ok = false;
  std::string reply = AuthenticateReply(call, &secret, &ok);
  CHECK(ok);
  auto r = DecodeReply<proto::DataComponentService_authenticate_result>(reply.substr(kFrameHeader));
  CHECK(r.seqid == 3);
  CHECK(!r.result.__isset.error);
  reply = AuthenticateReply(call, &other, &ok);
  CHECK(!ok);
  const auto w = DecodeReply<proto::DataComponentService_authenticate_result>(reply.substr(kFrameHeader));
  REQUIRE(w.result.__isset.error);
  CHECK(w.result.error.code == proto::ErrorCode::UNAUTHENTICATED);
  CHECK(GetBigEndian32(reply.data()) == reply.size() - kFrameHeader);
  // Garbage is a wrong token, never an exception.
  reply = AuthenticateReply(call.substr(0, call.size() - 3), &secret, &ok);
  CHECK(!ok);
}

}  // namespace
}  // namespace deuteron::server
