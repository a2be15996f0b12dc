#include "common/logging.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <map>
#include <regex>
#include <set>
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

const std::regex& LineRegex() {
  static const std::regex re(
      R"(^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.\d{6}Z ([DIWE]) (\d+) ([^ :]+):(\d+)\] (.*)$)");
  return re;
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
  const std::time_t before = std::time(nullptr);
  const int line = __LINE__ + 1;
  DLOG_INFO("hello {} {}", 42, std::string("world"));
  DLOG_DEBUG("d");
  DLOG_WARN("w");
  DLOG_ERROR("e");
  LogMessage(LogLevel::kInfo, "/a/b/c/deep.cpp", 7, "multi word: message");
  const std::time_t after = std::time(nullptr);
  REQUIRE(cap.lines.size() == 5);

  std::smatch m;
  const std::string& first = cap.lines[0].second;
  INFO(first);
  REQUIRE(std::regex_match(first, m, LineRegex()));
  CHECK(m[7] == "I");
  CHECK(std::stol(m[8]) == static_cast<long>(::gettid()));
  CHECK(m[9] == "logging_test.cpp");
  CHECK(std::stoi(m[10]) == line);
  CHECK(m[11] == "hello 42 world");
  // The UTC timestamp is the time of the call (to the second).
  std::tm tm{};
  tm.tm_year = std::stoi(m[1]) - 1900;
  tm.tm_mon = std::stoi(m[2]) - 1;
  tm.tm_mday = std::stoi(m[3]);
  tm.tm_hour = std::stoi(m[4]);
  tm.tm_min = std::stoi(m[5]);
  tm.tm_sec = std::stoi(m[6]);
  const std::time_t stamped = ::timegm(&tm);
  CHECK(stamped >= before);
  CHECK(stamped <= after);

  const char* letters[] = {"I", "D", "W", "E", "I"};
  for (size_t i = 0; i < cap.lines.size(); ++i) {
    INFO(cap.lines[i].second);
    REQUIRE(std::regex_match(cap.lines[i].second, m, LineRegex()));
    CHECK(m[7] == letters[i]);
  }
  CHECK(m[9] == "deep.cpp");
  CHECK(m[10] == "7");
  CHECK(m[11] == "multi word: message");
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
  const std::regex body(R"(thread (\d+) message (\d+) (x*))");
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    REQUIRE(nl != std::string::npos);  // the last line is terminated too
    const std::string line = text.substr(start, nl - start);
    start = nl + 1;
    ++lines;
    INFO(line);
    std::smatch m, b;
    REQUIRE(std::regex_match(line, m, LineRegex()));
    const std::string msg = m[11];
    REQUIRE(std::regex_match(msg, b, body));
    const int t = std::stoi(b[1]);
    const int i = std::stoi(b[2]);
    CHECK(b[3].length() == i % 50);
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
