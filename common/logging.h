// Logging: leveled, fmt-formatted log lines for the whole process.
//
//   DLOG_INFO("flushed {} pages in {} us", pages, micros);
//
// A DLOG_* macro first checks the level (one relaxed atomic load); below the
// level nothing else happens: the fmt::format call, and so the evaluation of
// its arguments, is skipped. Formatting is checked at compile time (fmt 9).
//
// Each message becomes one line, without a trailing newline:
//   2026-11-21T12:00:00.123456Z I 12345 file.cpp:42] message
// (UTC time with microseconds, level letter D/I/W/E, OS thread id, base name
// of the source file, line number). The sink receives whole lines.
//
// Thread safety: every function may be called from any thread. Lines are
// handed to the sink one at a time under a process-wide mutex, so lines from
// different threads never interleave, even with a sink that is not itself
// thread-safe. The default sink writes each line plus '\n' to stderr with a
// single write(2).
//
// The initial level comes from the environment variable DEUTERON_LOG
// (debug|info|warn|error|off, any case), read on first use; unset or
// unrecognized means info.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string_view>

#include <fmt/format.h>

namespace deuteron {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

// "debug", "info", "warn", "error", "off" (lowercase), or "unknown".
std::string_view LogLevelName(LogLevel level);
// Inverse of LogLevelName, ignoring case; nullopt for anything else.
std::optional<LogLevel> ParseLogLevel(std::string_view name);

namespace internal {
// The current level as an int, or -1 before DEUTERON_LOG has been read.
// relaxed: a lone flag; it orders nothing else.
extern std::atomic<int> g_log_level;
int InitLogLevelFromEnv();
}  // namespace internal

void SetLogLevel(LogLevel level);

inline LogLevel GetLogLevel() {
  int v = internal::g_log_level.load(std::memory_order_relaxed);  // relaxed: see g_log_level
  if (v < 0) [[unlikely]] v = internal::InitLogLevelFromEnv();
  return static_cast<LogLevel>(v);
}

// Whether a message at `level` would be delivered now. kOff is never logged.
inline bool LogEnabled(LogLevel level) {
  return level != LogLevel::kOff && static_cast<int>(level) >= static_cast<int>(GetLogLevel());
}

// Receives each whole line (no trailing newline). Called with the log mutex
// held: REQUIRES: the sink does not log and does not call SetLogSink.
using LogSink = std::function<void(LogLevel, std::string_view line)>;

// Replaces the sink; an empty sink restores the default (stderr).
void SetLogSink(LogSink sink);

// Formats one line from `msg` and hands it to the sink, if `level` is
// enabled. `file` may be a path; only its base name is printed.
void LogMessage(LogLevel level, const char* file, int line, std::string_view msg);

}  // namespace deuteron

#define DLOG_AT_(level, ...)                                                         \
  do {                                                                               \
    if (::deuteron::LogEnabled(level)) {                                             \
      ::deuteron::LogMessage(level, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
    }                                                                                \
  } while (0)

#define DLOG_DEBUG(...) DLOG_AT_(::deuteron::LogLevel::kDebug, __VA_ARGS__)
#define DLOG_INFO(...) DLOG_AT_(::deuteron::LogLevel::kInfo, __VA_ARGS__)
#define DLOG_WARN(...) DLOG_AT_(::deuteron::LogLevel::kWarn, __VA_ARGS__)
#define DLOG_ERROR(...) DLOG_AT_(::deuteron::LogLevel::kError, __VA_ARGS__)
