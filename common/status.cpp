#include "common/status.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace deuteron {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kNotFound: return "NotFound";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kTooLarge: return "TooLarge";
    case Code::kCorruption: return "Corruption";
    case Code::kIOError: return "IOError";
    case Code::kNoSpace: return "NoSpace";
    case Code::kBusy: return "Busy";
    case Code::kAborted: return "Aborted";
    case Code::kDeadlock: return "Deadlock";
    case Code::kTimedOut: return "TimedOut";
    case Code::kUnavailable: return "Unavailable";
    case Code::kNotSupported: return "NotSupported";
    case Code::kStoreMismatch: return "StoreMismatch";
    case Code::kUnknownTransaction: return "UnknownTransaction";
    case Code::kTransactionFinished: return "TransactionFinished";
    case Code::kShuttingDown: return "ShuttingDown";
    case Code::kInternal: return "Internal";
    case Code::kAlreadyExists: return "AlreadyExists";
    case Code::kStaleIncarnation: return "StaleIncarnation";
    case Code::kUnauthenticated: return "Unauthenticated";
    case Code::kMaxCode: break;
  }
  return "UnknownCode";
}

Status::Status(Code code, std::string_view msg) : code_(code) {
  if (code_ != Code::kOk) msg_ = std::make_unique<std::string>(msg);
}

Status::Status(const Status& other)
    : code_(other.code_),
      msg_(other.msg_ ? std::make_unique<std::string>(*other.msg_) : nullptr) {
  other.MarkChecked();
}

Status& Status::operator=(const Status& other) {
  if (this != &other) {
    other.MarkChecked();
    code_ = other.code_;
    msg_ = other.msg_ ? std::make_unique<std::string>(*other.msg_) : nullptr;
#ifdef DEUTERON_STATUS_CHECKED
    checked_ = false;
#endif
  }
  return *this;
}

Status::Status(Status&& other) noexcept : code_(other.code_), msg_(std::move(other.msg_)) {
  other.code_ = Code::kOk;
  other.MarkChecked();
}

Status& Status::operator=(Status&& other) noexcept {
  if (this != &other) {
    code_ = other.code_;
    msg_ = std::move(other.msg_);
    other.code_ = Code::kOk;
    other.MarkChecked();
#ifdef DEUTERON_STATUS_CHECKED
    checked_ = false;
#endif
  }
  return *this;
}

#ifdef DEUTERON_STATUS_CHECKED
void Status::AssertChecked() const {
  if (!checked_) {
    std::fprintf(stderr, "deuteron: Status destroyed unchecked: %s %s\n",
                 std::string(CodeName(code_)).c_str(), msg_ ? msg_->c_str() : "");
    std::abort();
  }
}
#endif

Status Status::FromErrno(int err, std::string_view context) {
  std::string msg(context);
  msg += ": ";
  msg += std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return Status(Code::kNoSpace, msg);
  return Status(Code::kIOError, msg);
}

std::string_view Status::message() const {
  MarkChecked();
  return msg_ ? std::string_view(*msg_) : std::string_view();
}

std::string Status::ToString() const {
  MarkChecked();
  if (code_ == Code::kOk) return "OK";
  std::string out(CodeName(code_));
  out += ": ";
  out += *msg_;
  return out;
}

Status Status::WithContext(std::string_view context) const {
  MarkChecked();
  if (code_ == Code::kOk) return Status();
  std::string msg(context);
  msg += ": ";
  msg += *msg_;
  return Status(code_, msg);
}

}  // namespace deuteron
