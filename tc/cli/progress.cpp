#include "tc/cli/progress.h"

#include <unistd.h>

#include <cstdlib>
#include <mutex>

#include "common/logging.h"
#include "tc/cli/cli_options.h"

namespace deuteron::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The live line up now, for the log sink that writes around it.
std::mutex live_mu;
FILE* live_out = nullptr;   // GUARDED_BY(live_mu): null when none is up
std::string live_text;      // GUARDED_BY(live_mu): what it shows

// Log lines while a live line is up: erased, the log line, redrawn.
void LogAroundLiveLine(LogLevel, std::string_view line) {
  std::lock_guard<std::mutex> lock(live_mu);
  if (live_out == nullptr) {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
    std::fflush(stderr);
    return;
  }
  std::fprintf(live_out, "\r\033[K%.*s\n%s", static_cast<int>(line.size()), line.data(),
               live_text.c_str());
  std::fflush(live_out);
}

std::string Amount(uint64_t n, Progress::Unit unit) {
  return unit == Progress::kBytes ? FormatSize(n) : std::to_string(n);
}

std::string Seconds(double s) {
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%.1f s", s);
  } else {
    std::snprintf(buf, sizeof(buf), "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  }
  return buf;
}

}  // namespace

// How often a live line is redrawn: 100 ms, or DEUTERON_PROGRESS_MS (tests
// that check the redraws on a pty set it low, so that quick work is still
// drawn live more than once).
static std::chrono::milliseconds LiveInterval() {
  const char* env = std::getenv("DEUTERON_PROGRESS_MS");
  if (env == nullptr || *env == '\0') return std::chrono::milliseconds(100);
  return std::chrono::milliseconds(std::strtoul(env, nullptr, 10));
}

Progress::Progress(std::string what, uint64_t total, Unit unit, FILE* out,
                   std::chrono::milliseconds interval)
    : what_(std::move(what)),
      total_(total),
      unit_(unit),
      out_(out == nullptr ? stderr : out),
      live_(isatty(fileno(out_)) == 1),
      interval_(interval),
      start_(Clock::now()),
      last_print_(start_) {}

Progress::~Progress() { Finish(); }

void Progress::Update(uint64_t done) {
  done_ = done;
  if (finished_) return;
  const Clock::time_point now = Clock::now();
  const auto due = live_ ? LiveInterval() : interval_;
  if (now - last_print_ < due) return;
  last_print_ = now;
  Print(false);
}

void Progress::Finish() {
  if (finished_) return;
  finished_ = true;
  // A plain report of quick work stays silent: only what took a while, or
  // was already reported, gets a final line.
  if (!live_ && !printed_) return;
  Print(true);
  if (live_) SetLogSink(nullptr);  // the default: stderr
}

std::string Progress::Line(bool final) const {
  const double secs = std::chrono::duration<double>(Clock::now() - start_).count();
  std::string line = what_ + ": " + Amount(done_, unit_);
  if (total_ != 0) {
    char pct[16];
    std::snprintf(pct, sizeof(pct), " (%.0f%%)", 100.0 * static_cast<double>(done_) / static_cast<double>(total_));
    line += " of " + Amount(total_, unit_) + pct;
  }
  if (final) return line + ", done in " + Seconds(secs);
  if (secs > 0) {
    const double rate = static_cast<double>(done_) / secs;
    line += ", " + Amount(static_cast<uint64_t>(rate), unit_) + (unit_ == kBytes ? "/s" : "/s");
    if (total_ > done_ && rate > 0) {
      line += ", about " + Seconds(static_cast<double>(total_ - done_) / rate) + " left";
    }
  }
  return line;
}

void Progress::Print(bool final) {
  const bool first = !printed_;
  printed_ = true;
  const std::string line = Line(final);
  if (live_) {
    {
      std::lock_guard<std::mutex> lock(live_mu);
      std::fprintf(out_, "\r\033[K%s%s", line.c_str(), final ? "\n" : "");
      std::fflush(out_);
      live_out = final ? nullptr : out_;
      live_text = final ? std::string() : "\r\033[K" + line;
    }
    if (first && !final) SetLogSink(&LogAroundLiveLine);
    return;
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

}  // namespace deuteron::cli
