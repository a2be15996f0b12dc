#include "protocol/errors.h"

#include <fmt/format.h>
#include <thrift/TApplicationException.h>
#include <thrift/transport/TTransportException.h>

#include <string>

namespace deuteron::protocol {

namespace thrift = ::apache::thrift;

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

Status FromTransportException(const thrift::transport::TTransportException& e, const char* method) {
  const std::string msg = fmt::format("{}: {}", method, e.what());
  switch (e.getType()) {
    case thrift::transport::TTransportException::TIMED_OUT:
      return Status::TimedOut(msg);
    case thrift::transport::TTransportException::BAD_ARGS:
    case thrift::transport::TTransportException::CORRUPTED_DATA:
    case thrift::transport::TTransportException::INTERNAL_ERROR:
      return Status::IOError(msg);
    default:  // NOT_OPEN, END_OF_FILE, CLIENT_DISCONNECT, INTERRUPTED, UNKNOWN
      return Status::Unavailable(msg);
  }
}

Status FromApplicationException(const thrift::TApplicationException& e, const char* method) {
  const std::string msg = fmt::format("{}: server rejected the call: {}", method, e.what());
  switch (e.getType()) {
    case thrift::TApplicationException::UNKNOWN_METHOD:
      return Status::NotSupported(msg);
    case thrift::TApplicationException::PROTOCOL_ERROR:
    case thrift::TApplicationException::INVALID_MESSAGE_TYPE:
    case thrift::TApplicationException::WRONG_METHOD_NAME:
      return Status::InvalidArgument(msg);
    default:
      return Status::Internal(msg);
  }
}

}  // namespace deuteron::protocol
