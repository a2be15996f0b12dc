#include "protocol/errors.h"

#include <catch2/catch.hpp>

namespace deuteron::protocol {
namespace {

TEST_CASE("Every Status code maps one-to-one to a protocol ErrorCode", "[protocol][errors]") {
  // The generated enum's name table holds exactly the codes we know.
  CHECK(_ErrorCode_VALUES_TO_NAMES.size() == static_cast<size_t>(Code::kMaxCode));
  for (int i = 0; i < static_cast<int>(Code::kMaxCode); ++i) {
    const auto code = static_cast<Code>(i);
    const ErrorCode::type wire = ToErrorCode(code);
    CHECK(_ErrorCode_VALUES_TO_NAMES.count(static_cast<int>(wire)) == 1);
    CHECK(static_cast<int>(wire) == i);
    CHECK(FromErrorCode(wire) == code);
  }
}

TEST_CASE("Errors survive the round trip through DeuteronError", "[protocol][errors]") {
  Status s = Status::TooLarge("key of 9000 bytes over the 4096 limit");
  DeuteronError e = ToDeuteronError(s);
  CHECK(e.code == ErrorCode::TOO_LARGE);
  Status back = FromDeuteronError(e);
  CHECK(back == s);
}

TEST_CASE("Unknown wire codes become Internal", "[protocol][errors]") {
  CHECK(FromErrorCode(static_cast<ErrorCode::type>(999)) == Code::kInternal);
  DeuteronError e;
  e.__set_code(ErrorCode::OK);
  e.__set_message("confused peer");
  CHECK(FromDeuteronError(e).code() == Code::kInternal);
}

}  // namespace
}  // namespace deuteron::protocol
