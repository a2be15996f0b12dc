#include "common/logging.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <chrono>
#include <ctime>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <type_traits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

namespace deuteron {
namespace {

// Restores the process-wide level and sink when a test ends.
class LogGuard {
 public:
  LogGuard() : level_(GetLogLevel()) {}
  ~LogGuard() {
    SetLogSink({});
    SetLogLevel(level_);
  }

 private:
  LogLevel level_;
};

// Captures delivered lines. The sink is called under the log mutex, so the
// vector needs no lock of its own while threads are logging.
struct Captured {
  std::vector<std::pair<LogLevel, std::string>> lines;
  void Install() {
    SetLogSink([this](LogLevel level, std::string_view line) {
      lines.emplace_back(level, std::string(line));
    });
  }
};

// One log line, split into its fields. (Parsed by hand: GCC 12's std::regex
// trips -Wmaybe-uninitialized under the sanitizer presets.)
struct ParsedLine {
  int year, month, day, hour, minute, second, micros;
  char letter;
  long tid;
  std::string file;
  int line;
  std::string msg;
};

// Parses "YYYY-MM-DDTHH:MM:SS.ffffffZ L TID FILE:LINE] MSG"; nullopt if the
// line deviates from that format in any way.
std::optional<ParsedLine> ParseLine(std::string_view s) {
  size_t pos = 0;
  auto digits = [&](size_t n, auto* out) {  // exactly n digits (n == 0: one or more)
    size_t start = pos;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9' && (n == 0 || pos - start < n)) ++pos;
    if (pos == start || (n != 0 && pos - start != n)) return false;
    *out = static_cast<std::remove_pointer_t<decltype(out)>>(
        std::stol(std::string(s.substr(start, pos - start))));
    return true;
  };
  auto lit = [&](char c) {
    if (pos >= s.size() || s[pos] != c) return false;
    ++pos;
    return true;
  };
  ParsedLine p{};
  if (!(digits(4, &p.year) && lit('-') && digits(2, &p.month) && lit('-') && digits(2, &p.day) &&
        lit('T') && digits(2, &p.hour) && lit(':') && digits(2, &p.minute) && lit(':') &&
        digits(2, &p.second) && lit('.') && digits(6, &p.micros) && lit('Z') && lit(' '))) {
    return std::nullopt;
  }
  if (pos >= s.size() || std::string_view("DIWE").find(s[pos]) == std::string_view::npos) {
    return std::nullopt;
  }
  p.letter = s[pos++];
  if (!(lit(' ') && digits(0, &p.tid) && lit(' '))) return std::nullopt;
  const size_t colon = s.find(':', pos);
  if (colon == std::string_view::npos || colon == pos) return std::nullopt;
  p.file = std::string(s.substr(pos, colon - pos));
  if (p.file.find(' ') != std::string::npos || p.file.find('/') != std::string::npos) {
    return std::nullopt;
  }
  pos = colon + 1;
  if (!(digits(0, &p.line) && lit(']') && lit(' '))) return std::nullopt;
  p.msg = std::string(s.substr(pos));
  if (p.msg.find('\n') != std::string::npos) return std::nullopt;
  return p;
}

TEST_CASE("LogLevel names parse both ways", "[common][logging]") {
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError,
                     LogLevel::kOff}) {
    CHECK(ParseLogLevel(LogLevelName(l)) == l);
  }
  CHECK(ParseLogLevel("WARN") == LogLevel::kWarn);
  CHECK(ParseLogLevel("Debug") == LogLevel::kDebug);
  CHECK_FALSE(ParseLogLevel("warning").has_value());
  CHECK_FALSE(ParseLogLevel("").has_value());
}

TEST_CASE("Initial log level comes from DEUTERON_LOG", "[common][logging]") {
  LogGuard guard;
  const char* old = std::getenv("DEUTERON_LOG");
  const std::string saved = old == nullptr ? "" : old;
  auto level_from_env = [](const char* value) {
    if (value == nullptr) {
      ::unsetenv("DEUTERON_LOG");
    } else {
      ::setenv("DEUTERON_LOG", value, 1);
    }
    internal::g_log_level.store(-1);  // as before first use
    return GetLogLevel();
  };
  CHECK(level_from_env("error") == LogLevel::kError);
  CHECK(level_from_env("debug") == LogLevel::kDebug);
  CHECK(level_from_env("OFF") == LogLevel::kOff);
  CHECK(level_from_env("bogus") == LogLevel::kInfo);
  CHECK(level_from_env(nullptr) == LogLevel::kInfo);
  if (old != nullptr) {
    ::setenv("DEUTERON_LOG", saved.c_str(), 1);
  } else {
    ::unsetenv("DEUTERON_LOG");
  }
}

TEST_CASE("Messages below the level are dropped unevaluated", "[common][logging]") {
  LogGuard guard;
  Captured cap;
  cap.Install();
  int evaluated = 0;
  auto side_effect = [&evaluated] { return ++evaluated; };

  SetLogLevel(LogLevel::kWarn);
  CHECK(GetLogLevel() == LogLevel::kWarn);
  DLOG_DEBUG("debug {}", side_effect());
  DLOG_INFO("info {}", side_effect());
  CHECK(evaluated == 0);
  CHECK(cap.lines.empty());
  DLOG_WARN("warn {}", side_effect());
  DLOG_ERROR("error {}", side_effect());
  CHECK(evaluated == 2);
  REQUIRE(cap.lines.size() == 2);
  CHECK(cap.lines[0].first == LogLevel::kWarn);
  CHECK(cap.lines[0].second.ends_with("] warn 1"));
  CHECK(cap.lines[1].first == LogLevel::kError);
  CHECK(cap.lines[1].second.ends_with("] error 2"));

  // LogMessage filters too, and kOff silences everything.
  LogMessage(LogLevel::kInfo, "x.cpp", 1, "dropped");
  CHECK(cap.lines.size() == 2);
  SetLogLevel(LogLevel::kOff);
  DLOG_ERROR("error {}", side_effect());
  LogMessage(LogLevel::kOff, "x.cpp", 1, "never");
  CHECK(evaluated == 2);
  CHECK(cap.lines.size() == 2);

  SetLogLevel(LogLevel::kDebug);
  DLOG_DEBUG("debug {}", side_effect());
  CHECK(evaluated == 3);
  REQUIRE(cap.lines.size() == 3);
  CHECK(cap.lines[2].first == LogLevel::kDebug);
}

TEST_CASE("Log lines have the documented format", "[common][logging]") {
  LogGuard guard;
  Captured cap;
  cap.Install();
  SetLogLevel(LogLevel::kDebug);
  // The logger's clock (system_clock); std::time() reads the kernel's coarse
  // clock, which can lag it by a tick and so sit a second behind just after a
  // second boundary.
  auto now_seconds = [] {
    return std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  };
  const std::time_t before = now_seconds();
  const int line = __LINE__ + 1;
  DLOG_INFO("hello {} {}", 42, std::string("world"));
  DLOG_DEBUG("d");
  DLOG_WARN("w");
  DLOG_ERROR("e");
  LogMessage(LogLevel::kInfo, "/a/b/c/deep.cpp", 7, "multi word: message");
  const std::time_t after = now_seconds();
  REQUIRE(cap.lines.size() == 5);

  const std::string& first = cap.lines[0].second;
  INFO(first);
  const std::optional<ParsedLine> p = ParseLine(first);
  REQUIRE(p.has_value());
  CHECK(p->letter == 'I');
  CHECK(p->tid == static_cast<long>(::gettid()));
  CHECK(p->file == "logging_test.cpp");
  CHECK(p->line == line);
  CHECK(p->msg == "hello 42 world");
  // The UTC timestamp is the time of the call (to the second).
  std::tm tm{};
  tm.tm_year = p->year - 1900;
  tm.tm_mon = p->month - 1;
  tm.tm_mday = p->day;
  tm.tm_hour = p->hour;
  tm.tm_min = p->minute;
  tm.tm_sec = p->second;
  const std::time_t stamped = ::timegm(&tm);
  CHECK(stamped >= before);
  CHECK(stamped <= after);

  const char letters[] = {'I', 'D', 'W', 'E', 'I'};
  for (size_t i = 0; i < cap.lines.size(); ++i) {
    INFO(cap.lines[i].second);
    REQUIRE(ParseLine(cap.lines[i].second).has_value());
    CHECK(ParseLine(cap.lines[i].second)->letter == letters[i]);
  }
  const ParsedLine last = *ParseLine(cap.lines[4].second);
  CHECK(last.file == "deep.cpp");
  CHECK(last.line == 7);
  CHECK(last.msg == "multi word: message");

  // The parser itself rejects malformed lines.
  CHECK_FALSE(ParseLine("2026-11-21T12:00:00.12345Z I 1 f.cpp:1] m").has_value());
  CHECK_FALSE(ParseLine("2026-11-21T12:00:00.123456Z X 1 f.cpp:1] m").has_value());
  CHECK_FALSE(ParseLine("2026-11-21T12:00:00.123456Z I 1 f.cpp:1]m").has_value());
  CHECK(ParseLine("2026-11-21T12:00:00.123456Z I 1 f.cpp:1] m").has_value());
}

// Logs kPerThread distinct messages from each of kThreads threads.
constexpr int kThreads = 4;
constexpr int kPerThread = 200;
void LogFromThreads() {
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < kPerThread; ++i) {
        DLOG_INFO("thread {} message {} {}", t, i, std::string(static_cast<size_t>(i % 50), 'x'));
      }
    });
  }
  for (auto& th : threads) th.join();
}

// Splits `text` into lines and checks that each is one whole, well-formed
// message and that every message arrived exactly once.
void CheckWholeLines(const std::string& text) {
  std::set<std::pair<int, int>> seen;
  size_t start = 0;
  int lines = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    REQUIRE(nl != std::string::npos);  // the last line is terminated too
    const std::string line = text.substr(start, nl - start);
    start = nl + 1;
    ++lines;
    INFO(line);
    const std::optional<ParsedLine> p = ParseLine(line);
    REQUIRE(p.has_value());
    int t = -1, i = -1, consumed = 0;
    REQUIRE(std::sscanf(p->msg.c_str(), "thread %d message %d %n", &t, &i, &consumed) == 2);
    REQUIRE(consumed > 0);
    const std::string xs = p->msg.substr(static_cast<size_t>(consumed));
    CHECK(xs == std::string(static_cast<size_t>(i % 50), 'x'));
    CHECK(seen.insert({t, i}).second);
  }
  CHECK(lines == kThreads * kPerThread);
  CHECK(seen.size() == static_cast<size_t>(kThreads * kPerThread));
}

TEST_CASE("Concurrent logging delivers whole lines to the sink", "[common][logging]") {
  LogGuard guard;
  SetLogLevel(LogLevel::kInfo);
  // A deliberately non-thread-safe sink that writes each line in two halves
  // with a yield between them: lines only come out whole if the logger
  // serializes sink calls.
  std::string out;
  SetLogSink([&out](LogLevel, std::string_view line) {
    const size_t half = line.size() / 2;
    out.append(line.substr(0, half));
    std::this_thread::yield();
    out.append(line.substr(half));
    out.push_back('\n');
  });
  LogFromThreads();
  SetLogSink({});
  CheckWholeLines(out);
}

TEST_CASE("The default sink writes whole lines to stderr", "[common][logging]") {
  LogGuard guard;
  SetLogLevel(LogLevel::kInfo);
  char path[] = "/tmp/deuteron_logging_test_XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::unlink(path);
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  REQUIRE(saved >= 0);
  REQUIRE(::dup2(fd, STDERR_FILENO) == STDERR_FILENO);
  LogFromThreads();
  REQUIRE(::dup2(saved, STDERR_FILENO) == STDERR_FILENO);
  ::close(saved);

  std::string text;
  char buf[8192];
  ssize_t n;
  REQUIRE(::lseek(fd, 0, SEEK_SET) == 0);
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  ::close(fd);
  CheckWholeLines(text);
}

}  // namespace
}  // namespace deuteron
