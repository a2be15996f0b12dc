#include "common/logging.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>
#include <utility>

namespace deuteron {

namespace internal {
constinit std::atomic<int> g_log_level{-1};
}  // namespace internal

namespace {

// Writes `line` and a newline to stderr in one write(2) (retrying partial
// writes), so even other processes sharing stderr see whole lines.
void StderrSink(LogLevel /*level*/, std::string_view line) {
  std::string buf;
  buf.reserve(line.size() + 1);
  buf.append(line);
  buf.push_back('\n');
  const char* p = buf.data();
  size_t left = buf.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // nowhere left to report a failing stderr
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

struct LogState {
  std::mutex mu;
  LogSink sink;  // guarded by mu; empty means StderrSink
};

LogState& State() {
  // Leaked on purpose (the one raw new here): threads may still log while
  // static destructors run at exit, so the state must never be destroyed.
  static LogState* const state = new LogState();
  return *state;
}

char LevelLetter(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return 'D';
    case LogLevel::kInfo: return 'I';
    case LogLevel::kWarn: return 'W';
    case LogLevel::kError: return 'E';
    case LogLevel::kOff: break;
  }
  return '?';
}

long ThisThreadId() {
  thread_local const long tid = static_cast<long>(::gettid());
  return tid;
}

std::string_view BaseName(const char* file) {
  std::string_view path(file == nullptr ? "" : file);
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
    case LogLevel::kOff: return "off";
  }
  return "unknown";
}

std::optional<LogLevel> ParseLogLevel(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError,
                     LogLevel::kOff}) {
    if (lower == LogLevelName(l)) return l;
  }
  return std::nullopt;
}

namespace internal {

int InitLogLevelFromEnv() {
  LogLevel level = LogLevel::kInfo;
  if (const char* env = std::getenv("DEUTERON_LOG"); env != nullptr) {
    level = ParseLogLevel(env).value_or(LogLevel::kInfo);
  }
  // A SetLogLevel that got here first wins. relaxed: see g_log_level.
  int expected = -1;
  if (g_log_level.compare_exchange_strong(expected, static_cast<int>(level),
                                          std::memory_order_relaxed)) {
    return static_cast<int>(level);
  }
  return expected;
}

}  // namespace internal

void SetLogLevel(LogLevel level) {
  internal::g_log_level.store(static_cast<int>(level), std::memory_order_relaxed);  // relaxed: see g_log_level
}

void SetLogSink(LogSink sink) {
  LogState& state = State();
  {
    std::lock_guard<std::mutex> lock(state.mu);
    std::swap(state.sink, sink);
  }
  // The old sink is destroyed here, outside the lock.
}

void LogMessage(LogLevel level, const char* file, int line, std::string_view msg) {
  if (!LogEnabled(level)) return;

  const auto now = std::chrono::system_clock::now();
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(micros / 1000000);
  long frac = static_cast<long>(micros % 1000000);
  if (frac < 0) {  // before 1970: keep the fraction positive
    frac += 1000000;
    --secs;
  }
  std::tm tm{};
  ::gmtime_r(&secs, &tm);

  const std::string text = fmt::format(
      "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z {} {} {}:{}] {}", tm.tm_year + 1900,
      tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac, LevelLetter(level),
      ThisThreadId(), BaseName(file), line, msg);

  LogState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  if (state.sink) {
    state.sink(level, text);
  } else {
    StderrSink(level, text);
  }
}

}  // namespace deuteron
