#include "protocol/errors.h"

namespace deuteron::protocol {

// The enums are kept numerically identical; this is checked for every code by
// tests/protocol/errors_test.cpp, so the conversion is a range-checked cast.
ErrorCode::type ToErrorCode(Code code) {
  const auto v = static_cast<int>(code);
  if (v < 0 || v >= static_cast<int>(Code::kMaxCode)) return ErrorCode::INTERNAL;
  return static_cast<ErrorCode::type>(v);
}

Code FromErrorCode(ErrorCode::type code) {
  const auto v = static_cast<int>(code);
  if (v < 0 || v >= static_cast<int>(Code::kMaxCode)) return Code::kInternal;
  return static_cast<Code>(v);
}

DeuteronError ToDeuteronError(const Status& s) {
  DeuteronError e;
  e.__set_code(ToErrorCode(s.code()));
  e.__set_message(std::string(s.message()));
  return e;
}

Status FromDeuteronError(const DeuteronError& e) {
  const Code code = FromErrorCode(e.code);
  if (code == Code::kOk) return Status::Internal("peer sent an error with code OK: " + e.message);
  return Status(code, e.message);
}

}  // namespace deuteron::protocol
