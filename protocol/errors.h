// Conversion between deuteron::Status and the protocol's typed errors.
//
// This is the one place where Status codes become Thrift ErrorCodes and back;
// Thrift types never reach the dc/ or tc/ core. Thread-safe (pure functions).
#pragma once

#include "common/status.h"
#include "deuteron_types.h"

namespace deuteron::protocol {

ErrorCode::type ToErrorCode(Code code);
// Codes this build does not know (a newer peer) become kInternal.
Code FromErrorCode(ErrorCode::type code);

// REQUIRES: !s.ok().
DeuteronError ToDeuteronError(const Status& s);
Status FromDeuteronError(const DeuteronError& e);

}  // namespace deuteron::protocol
