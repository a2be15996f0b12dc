// Status and Result<T>: how every expected failure in Deuteron is reported.
//
// A Status is either OK or carries a Code and a message. Codes map one-to-one
// to the protocol's error enum (protocol/deuteron.thrift, ErrorCode), so a
// failure keeps its type across the TC/DC hop and on to clients.
//
// Both types are [[nodiscard]]. In builds with DEUTERON_STATUS_CHECKED (the
// debug and asan presets) a Status or Result that is destroyed without having
// been inspected aborts the process with its message: call ok(), code(), or
// one of the Is*() predicates, or say so explicitly with PermitUncheckedError().
//
// Thread safety: a Status is a value; distinct objects may be used from
// different threads, one object needs external synchronization.
#pragma once

#include <cassert>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace deuteron {

// The error codes. Values are stable: they are written in the protocol and
// must never be renumbered; add new codes at the end (before kMaxCode).
enum class Code : uint8_t {
  kOk = 0,
  kNotFound = 1,          // key, file or object does not exist
  kInvalidArgument = 2,   // malformed request or option
  kTooLarge = 3,          // key, value, batch or frame over its limit
  kCorruption = 4,        // checksum mismatch or malformed stored data
  kIOError = 5,           // the OS failed an I/O call
  kNoSpace = 6,           // disk full (ENOSPC, EDQUOT)
  kBusy = 7,              // resource held by someone else (directory lock)
  kAborted = 8,           // transaction aborted (by the client or the system)
  kDeadlock = 9,          // transaction chosen as a deadlock victim
  kTimedOut = 10,         // lock wait or call exceeded its deadline
  kUnavailable = 11,      // component restarting or not ready; retry later
  kNotSupported = 12,     // unsupported operation or newer on-disk format
  kStoreMismatch = 13,    // the data directory belongs to another store
  kUnknownTransaction = 14,
  kTransactionFinished = 15,  // call on a committed or aborted transaction
  kShuttingDown = 16,
  kInternal = 17,         // an invariant failed; a bug, reported not crashed
  kAlreadyExists = 18,    // an insert found the key present
  kStaleIncarnation = 19, // a call from a TC incarnation a later restart-to fenced off
  kUnauthenticated = 20,  // a server that requires a shared secret got none or a wrong one
  kMaxCode = 21,
};

// Stable name of a code ("NotFound"), for messages and stats.
std::string_view CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() noexcept = default;
  Status(Code code, std::string_view msg);
  ~Status() { AssertChecked(); }

  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&& other) noexcept;
  Status& operator=(Status&& other) noexcept;

  static Status OK() { return Status(); }
  static Status NotFound(std::string_view msg) { return {Code::kNotFound, msg}; }
  static Status InvalidArgument(std::string_view msg) { return {Code::kInvalidArgument, msg}; }
  static Status TooLarge(std::string_view msg) { return {Code::kTooLarge, msg}; }
  static Status Corruption(std::string_view msg) { return {Code::kCorruption, msg}; }
  static Status IOError(std::string_view msg) { return {Code::kIOError, msg}; }
  static Status NoSpace(std::string_view msg) { return {Code::kNoSpace, msg}; }
  static Status Busy(std::string_view msg) { return {Code::kBusy, msg}; }
  static Status Aborted(std::string_view msg) { return {Code::kAborted, msg}; }
  static Status Deadlock(std::string_view msg) { return {Code::kDeadlock, msg}; }
  static Status TimedOut(std::string_view msg) { return {Code::kTimedOut, msg}; }
  static Status Unavailable(std::string_view msg) { return {Code::kUnavailable, msg}; }
  static Status NotSupported(std::string_view msg) { return {Code::kNotSupported, msg}; }
  static Status StoreMismatch(std::string_view msg) { return {Code::kStoreMismatch, msg}; }
  static Status UnknownTransaction(std::string_view msg) { return {Code::kUnknownTransaction, msg}; }
  static Status TransactionFinished(std::string_view msg) { return {Code::kTransactionFinished, msg}; }
  static Status ShuttingDown(std::string_view msg) { return {Code::kShuttingDown, msg}; }
  static Status Internal(std::string_view msg) { return {Code::kInternal, msg}; }
  static Status AlreadyExists(std::string_view msg) { return {Code::kAlreadyExists, msg}; }
  static Status StaleIncarnation(std::string_view msg) { return {Code::kStaleIncarnation, msg}; }
  static Status Unauthenticated(std::string_view msg) { return {Code::kUnauthenticated, msg}; }

  // An I/O failure from errno `err` while doing `context` (a path, an
  // operation). ENOSPC and EDQUOT become kNoSpace, everything else kIOError.
  static Status FromErrno(int err, std::string_view context);

  bool ok() const { MarkChecked(); return code_ == Code::kOk; }
  Code code() const { MarkChecked(); return code_; }
  bool IsNotFound() const { return code() == Code::kNotFound; }
  bool IsCorruption() const { return code() == Code::kCorruption; }
  bool IsIOError() const { return code() == Code::kIOError; }
  bool IsNoSpace() const { return code() == Code::kNoSpace; }
  bool IsBusy() const { return code() == Code::kBusy; }
  bool IsInvalidArgument() const { return code() == Code::kInvalidArgument; }
  bool IsUnavailable() const { return code() == Code::kUnavailable; }
  bool IsAlreadyExists() const { return code() == Code::kAlreadyExists; }
  bool IsStaleIncarnation() const { return code() == Code::kStaleIncarnation; }

  // The message alone (empty for OK).
  std::string_view message() const;
  // "OK" or "<CodeName>: <message>".
  std::string ToString() const;

  // A new Status with the same code and "<context>: <message>".
  Status WithContext(std::string_view context) const;

  // Explicitly ignore this status (greppable).
  void PermitUncheckedError() const { MarkChecked(); }

  friend bool operator==(const Status& a, const Status& b) {
    return a.code() == b.code() && a.message() == b.message();
  }

 private:
  template <typename T>
  friend class Result;
#ifdef DEUTERON_STATUS_CHECKED
  void MarkChecked() const { checked_ = true; }
  void MustCheck() const { checked_ = false; }
  void AssertChecked() const;
  mutable bool checked_ = false;
#else
  void MarkChecked() const {}
  void MustCheck() const {}
  void AssertChecked() const {}
#endif
  Code code_ = Code::kOk;
  std::unique_ptr<std::string> msg_;  // null when OK
};

// Either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
  static_assert(!std::is_same_v<std::decay_t<T>, Status>, "Result<Status> is meaningless");

 public:
  // REQUIRES: !status.ok(); an OK status carries no value.
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit on purpose
    assert(!status_.ok() && "Result built from an OK Status without a value");
    status_.MustCheck();  // the assert above is not the caller's check
  }
  Result(const T& value) : value_(value) {}  // NOLINT
  Result(T&& value) : value_(std::move(value)) {}  // NOLINT
  template <typename U,
            typename = std::enable_if_t<std::is_constructible_v<T, U&&> &&
                                        !std::is_same_v<std::decay_t<U>, Status> &&
                                        !std::is_same_v<std::decay_t<U>, Result>>>
  Result(U&& value) : value_(std::forward<U>(value)) {}  // NOLINT

  bool ok() const { return status_.ok(); }
  const Status& status() const& { return status_; }
  Status status() && { return std::move(status_); }

  // REQUIRES: ok().
  T& value() & { AssertOk(); return *value_; }
  const T& value() const& { AssertOk(); return *value_; }
  T&& value() && { AssertOk(); return std::move(*value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  T value_or(T fallback) const& { return ok() ? *value_ : std::move(fallback); }

 private:
  void AssertOk() const {
    assert(status_.ok() && "Result::value() on an error");
    (void)status_.ok();
  }
  Status status_;
  std::optional<T> value_;
};

}  // namespace deuteron

#define DEUTERON_CONCAT_INNER_(a, b) a##b
#define DEUTERON_CONCAT_(a, b) DEUTERON_CONCAT_INNER_(a, b)

// Evaluates `expr` (a Status) and returns it from the enclosing function if it
// is not OK.
#define RETURN_IF_ERROR(expr)                         \
  do {                                                \
    ::deuteron::Status deuteron_status_ = (expr);     \
    if (!deuteron_status_.ok()) return deuteron_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, Foo())`: evaluates a Result<T>; on error returns
// its Status from the enclosing function, otherwise moves the value into lhs.
#define ASSIGN_OR_RETURN(lhs, expr) \
  DEUTERON_ASSIGN_OR_RETURN_IMPL_(DEUTERON_CONCAT_(deuteron_result_, __LINE__), lhs, expr)
#define DEUTERON_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return std::move(tmp).status();        \
  lhs = std::move(tmp).value()
