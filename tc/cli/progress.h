// Progress: a progress report for long work (recovery replay, check, the
// demo) on stderr. When stderr is a terminal it keeps one live line,
// redrawn at most ten times a second: what, how much of how much, the rate
// and an estimate of the time left. Otherwise (a log file, a pipe, a test)
// it prints a plain line every `interval` (and one at the end), so logs stay
// readable and short.
//
//   Progress p("check: log", total_bytes, Progress::kBytes);
//   for (...) p.Update(done);
//   p.Finish();
//
// The live line is redrawn every 100 ms (DEUTERON_PROGRESS_MS overrides it:
// tests on a pty set it low). While a live line is up, log lines (common/logging.h, from any thread) go
// through it: the line is erased, the log line written, the line redrawn,
// so that a log line never runs into the live line (before issue 31's pty
// tests, a server's log lines during its recovery replay did). Other
// writes to the terminal meanwhile (printf) must wait for Finish.
//
// Thread safety: a Progress is used by one thread at a time; at most one
// live line is up at a time (it replaces the log sink, and restores the
// default one at Finish).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace deuteron::cli {

class Progress {
 public:
  enum Unit { kBytes, kItems };

  // total 0: unknown (no percentage, no estimate). `out` null: stderr.
  // `interval`: how often a plain (not a terminal) line is printed.
  Progress(std::string what, uint64_t total, Unit unit, FILE* out = nullptr,
           std::chrono::milliseconds interval = std::chrono::seconds(2));
  ~Progress();  // Finish()
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `done` so far (of total). Cheap when nothing is due to be printed.
  void Update(uint64_t done);
  // Adds to the total (work found as it goes).
  void AddTotal(uint64_t more) { total_ += more; }
  void SetTotal(uint64_t total) { total_ = total; }
  // Prints the final line ("... done in 1.2 s"). Idempotent.
  void Finish();

  // The line as it would be printed now (for tests).
  std::string Line(bool final) const;

 private:
  void Print(bool final);

  const std::string what_;
  uint64_t total_;
  const Unit unit_;
  FILE* const out_;
  const bool live_;  // out_ is a terminal
  const std::chrono::milliseconds interval_;
  const std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_print_;
  uint64_t done_ = 0;
  bool finished_ = false;
  bool printed_ = false;
};

}  // namespace deuteron::cli
