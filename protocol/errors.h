// Conversion between deuteron::Status and the protocol's typed errors.
//
// This is the one place where Status codes become Thrift ErrorCodes and back;
// Thrift types never reach the dc/ or tc/ core. Thread-safe (pure functions).
#pragma once

#include "common/status.h"
#include "deuteron_types.h"

namespace apache::thrift {
class TApplicationException;
namespace transport {
class TTransportException;
}
}  // namespace apache::thrift

namespace deuteron::protocol {

ErrorCode::type ToErrorCode(Code code);
// Codes this build does not know (a newer peer) become kInternal.
Code FromErrorCode(ErrorCode::type code);

// REQUIRES: !s.ok().
DeuteronError ToDeuteronError(const Status& s);
Status FromDeuteronError(const DeuteronError& e);

// What a client reports when a call fails below the protocol's own errors:
// a transport failure (TimedOut; IOError for bad or corrupted data;
// Unavailable for a closed or lost connection, which a caller may retry) or
// a T_EXCEPTION reply (NotSupported for an unknown method, InvalidArgument
// for a request the server could not decode, Internal otherwise). `method`
// names the call in the message.
Status FromTransportException(const apache::thrift::transport::TTransportException& e,
                              const char* method);
Status FromApplicationException(const apache::thrift::TApplicationException& e,
                                const char* method);

}  // namespace deuteron::protocol
