// Deuteron wire protocol: the TC and DC services and their shared types.
//
// Rules (see ../shared/STYLE.md, section 4): explicit field ids that are never
// reused, no `required` fields, errors carried as a typed ErrorCode that
// mirrors deuteron::Code (common/status.h) value for value.

namespace cpp deuteron.protocol

// One-to-one with deuteron::Code. Never renumber; add at the end.
enum ErrorCode {
  OK = 0,
  NOT_FOUND = 1,
  INVALID_ARGUMENT = 2,
  TOO_LARGE = 3,
  CORRUPTION = 4,
  IO_ERROR = 5,
  NO_SPACE = 6,
  BUSY = 7,
  ABORTED = 8,
  DEADLOCK = 9,
  TIMED_OUT = 10,
  UNAVAILABLE = 11,
  NOT_SUPPORTED = 12,
  STORE_MISMATCH = 13,
  UNKNOWN_TRANSACTION = 14,
  TRANSACTION_FINISHED = 15,
  SHUTTING_DOWN = 16,
  INTERNAL = 17,
  ALREADY_EXISTS = 18,
}

// Every service call that can fail throws this; `code` says why.
exception DeuteronError {
  1: ErrorCode code,
  2: string message,
}
