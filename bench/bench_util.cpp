#include "bench/bench_util.h"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <system_error>
#include <thread>

#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/json.h"

namespace deuteron::bench {
namespace {

std::mutex& StderrMutex() {
  static std::mutex mu;
  return mu;
}

// The scratch directory a ScratchDir created, so that a fatal exit (which
// skips destructors) still removes it. Set and cleared by the main thread.
std::string& OwnedScratch() {
  static std::string path;
  return path;
}

const Stopwatch& ProgramClock() {
  static const Stopwatch clock;
  return clock;
}

constexpr char kRoundsHelp[] =
    "  --rounds N       repeat each measurement N times (1-100, default 1) and\n"
    "                   report the median of the ratios\n";
constexpr char kRecordsHelp[] =
    "  --records N      records per workload (1-100000000; default: the program's)\n";

constexpr char kSetHelp[] =
    "  --set NAME=VALUE set a tuning option (repeatable; see Options below)\n";

void PrintUsage(std::FILE* out, const ProgramInfo& info) {
  std::string threads;
  for (int t : info.default_threads) {
    if (!threads.empty()) threads.push_back(',');
    threads.append(std::to_string(t));
  }
  fmt::print(out,
             "usage: {} [--quick] [--dir PATH] [--threads LIST] [--only LIST]{}{}{} [--help]\n\n"
             "{}\n\n"
             "  --quick          small volumes: the whole program runs in under a minute\n"
             "  --dir PATH       scratch directory (default: a fresh directory under /tmp,\n"
             "                   removed at exit)\n"
             "  --threads LIST   comma-separated thread counts (default {});\n"
             "  --clients LIST   the same\n"
             "  --only LIST      comma-separated workload groups to run (default: all)\n"
             "{}{}{}"
             "  --help           this text\n\n"
             "Results: one JSON object per line on stdout; progress on stderr.\n",
             info.name, info.takes_rounds ? " [--rounds N]" : "",
             info.takes_records ? " [--records N]" : "",
             info.settings.empty() ? "" : " [--set NAME=VALUE]", info.description, threads,
             info.takes_rounds ? kRoundsHelp : "", info.takes_records ? kRecordsHelp : "",
             info.settings.empty() ? "" : kSetHelp);
  if (!info.settings.empty()) {
    fmt::print(out, "\nOptions (--set):\n");
    for (const Setting& o : info.settings) {
      fmt::print(out, "  {:<26} {} ({}-{}, default {})\n", o.name, o.help, o.min, o.max, o.value);
    }
  }
  if (!info.flags.empty()) {
    fmt::print(out, "\nProgram flags:\n");
    for (const Flag& f : info.flags) {
      fmt::print(out, "  --{:<16} {} (default {})\n", f.name + " V", f.help, f.value);
    }
  }
  if (!info.groups.empty()) {
    fmt::print(out, "\nWorkload groups:\n");
    for (const auto& [name, what] : info.groups) fmt::print(out, "  {:<18} {}\n", name, what);
  }
}

[[noreturn]] void UsageError(const ProgramInfo& info, std::string_view message) {
  fmt::print(stderr, "{}: {}\n\n", info.name, message);
  PrintUsage(stderr, info);
  std::exit(2);
}

// Whether `text` is a decimal number in [min, max] (no sign, nothing after).
bool ParseNumber(const std::string& text, uint64_t min, uint64_t max, uint64_t* out) {
  if (text.empty() || text[0] < '0' || text[0] > '9') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(text.c_str(), &end, 10);
  if (*end != '\0' || errno != 0 || n < min || n > max) return false;
  *out = n;
  return true;
}

// A count in [1, max], or a usage error naming `what`.
int ParseCount(const ProgramInfo& info, const std::string& text, long max, std::string_view what) {
  uint64_t n = 0;
  if (!ParseNumber(text, 1, static_cast<uint64_t>(max), &n)) {
    UsageError(info, fmt::format("bad {} '{}' (1-{})", what, text, max));
  }
  return static_cast<int>(n);
}

std::vector<std::string> SplitCommas(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string_view::npos) comma = s.size();
    if (comma > start) out.emplace_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

std::string JsonDouble(double v) {
  if (!std::isfinite(v)) return "0";  // JSON has no NaN or infinities
  // Enough digits for rates and ratios; integers print without a fraction.
  return fmt::format("{:.6g}", v);
}

}  // namespace

bool BenchArgs::Wants(std::string_view group) const {
  return only.empty() || only.count(std::string(group)) != 0;
}

uint64_t BenchArgs::SettingValue(std::string_view name) const {
  for (const Setting& o : settings) {
    if (o.name == name) return o.value;
  }
  assert(false && "setting not declared by the program");
  return 0;
}

const std::string& BenchArgs::FlagValue(std::string_view name) const {
  for (const Flag& f : flags) {
    if (f.name == name) return f.value;
  }
  assert(false && "flag not declared by the program");
  static const std::string kNone;
  return kNone;
}

void UsageExit(const ProgramInfo& info, std::string_view message) { UsageError(info, message); }

std::vector<std::string> SplitList(std::string_view s) { return SplitCommas(s); }

int BenchArgs::MaxThreads() const {
  int m = 1;
  for (int t : threads) m = std::max(m, t);
  return m;
}

ScratchDir::~ScratchDir() {
  if (!owned_ || path_.empty()) return;
  OwnedScratch().clear();
  RemoveTree(path_);
}

Status ScratchDir::Init(const std::string& requested) {
  if (!requested.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(requested, ec);
    if (ec) return Status::IOError("creating " + requested + ": " + ec.message());
    path_ = requested;
    owned_ = false;
    return Status::OK();
  }
  std::string templ = "/tmp/deuteron-bench-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) return Status::FromErrno(errno, "mkdtemp " + templ);
  path_ = templ;
  owned_ = true;
  OwnedScratch() = path_;
  return Status::OK();
}

// --set NAME=VALUE: a declared setting, a decimal value in its range.
void ApplySetting(const ProgramInfo& info, std::string_view text, std::vector<Setting>* settings) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    UsageError(info, fmt::format("--set needs NAME=VALUE, not '{}'", text));
  }
  const std::string_view name = text.substr(0, eq);
  const std::string value(text.substr(eq + 1));
  for (Setting& o : *settings) {
    if (o.name != name) continue;
    if (!ParseNumber(value, o.min, o.max, &o.value)) {
      UsageError(info, fmt::format("bad value '{}' for {} ({}-{})", value, name, o.min, o.max));
    }
    return;
  }
  UsageError(info, fmt::format("unknown option '{}' for --set (see --help)", name));
}

namespace {

// The program flag `arg` names (--NAME), or null.
Flag* FindFlag(std::string_view arg, std::vector<Flag>* flags) {
  if (arg.size() < 3 || arg.substr(0, 2) != "--") return nullptr;
  for (Flag& f : *flags) {
    if (arg.substr(2) == f.name) return &f;
  }
  return nullptr;
}

}  // namespace

BenchArgs ParseArgs(int argc, char** argv, const ProgramInfo& info, ScratchDir* scratch) {
  ProgramSeconds();  // start the program clock
  BenchArgs args;
  args.threads = info.default_threads;
  args.settings = info.settings;
  args.flags = info.flags;
  std::string dir;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) UsageError(info, fmt::format("{} needs a value", a));
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      PrintUsage(stdout, info);
      std::exit(0);
    } else if (a == "--quick") {
      args.quick = true;
    } else if (a == "--dir") {
      dir = value();
      if (dir.empty()) UsageError(info, "--dir needs a non-empty path");
    } else if (a == "--threads" || a == "--clients") {
      args.threads.clear();
      for (const std::string& t : SplitCommas(value())) {
        args.threads.push_back(ParseCount(info, t, 1024, "thread count"));
      }
      if (args.threads.empty()) UsageError(info, fmt::format("{} needs at least one count", a));
    } else if (a == "--rounds" && info.takes_rounds) {
      args.rounds = ParseCount(info, std::string(value()), 100, "round count");
    } else if (a == "--records" && info.takes_records) {
      args.records = static_cast<size_t>(
          ParseCount(info, std::string(value()), 100'000'000, "record count"));
    } else if (a == "--set" && !info.settings.empty()) {
      ApplySetting(info, value(), &args.settings);
    } else if (a == "--only") {
      for (const std::string& g : SplitCommas(value())) {
        bool known = false;
        for (const auto& [name, what] : info.groups) known |= (name == g);
        if (!known) UsageError(info, fmt::format("unknown workload group '{}'", g));
        args.only.insert(g);
      }
    } else if (Flag* f = FindFlag(a, &args.flags); f != nullptr) {
      f->value = std::string(value());
    } else {
      UsageError(info, fmt::format("unknown argument '{}'", a));
    }
  }
  CheckOk(scratch->Init(dir), "scratch directory");
  args.dir = scratch->path();
  return args;
}

void CheckOk(const Status& s, std::string_view what) {
  if (s.ok()) return;
  {
    std::lock_guard<std::mutex> lock(StderrMutex());
    fmt::print(stderr, "FATAL: {}: {}\n", what, s.ToString());
    std::fflush(stderr);
  }
  if (!OwnedScratch().empty()) RemoveTree(OwnedScratch());
  std::exit(1);
}

double ProgramSeconds() { return ProgramClock().Seconds(); }

void ProgressLine(std::string_view text) {
  const double t = ProgramSeconds();
  std::lock_guard<std::mutex> lock(StderrMutex());
  fmt::print(stderr, "[{:7.2f}s] {}\n", t, text);
  std::fflush(stderr);
}

double ProcessCpuSeconds() {
  struct rusage u;
  if (::getrusage(RUSAGE_SELF, &u) != 0) return 0;
  auto sec = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) * 1e-6;
  };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

uint64_t ProcessVoluntarySwitches() {
  struct rusage u;
  if (::getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return static_cast<uint64_t>(u.ru_nvcsw);
}

void RunThreads(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) threads.emplace_back(fn, i);
  for (auto& t : threads) t.join();
}

void RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) Progress("could not remove {}: {}", path, ec.message());
}

LatencySet::LatencySet(int threads) {
  for (int i = 0; i < threads; ++i) histograms_.push_back(std::make_unique<Histogram>());
}

Histogram::Snapshot LatencySet::Merged() const {
  Histogram::Snapshot merged;
  for (const auto& h : histograms_) merged.Merge(h->GetSnapshot());
  return merged;
}

ResultLine::ResultLine(std::string_view bench, std::string_view workload,
                       std::string_view system, int threads, uint64_t ops, double seconds) {
  SetString("bench", bench);
  SetString("workload", workload);
  SetString("system", system);
  Set("threads", int64_t{threads});
  Set("ops", ops);
  Set("seconds", seconds);
  Set("ops_per_s", Ratio(static_cast<double>(ops), seconds));
}

ResultLine& ResultLine::Set(std::string_view key, double value) {
  fields_.emplace_back(std::string(key), JsonDouble(value));
  return *this;
}

ResultLine& ResultLine::Set(std::string_view key, uint64_t value) {
  fields_.emplace_back(std::string(key), std::to_string(value));
  return *this;
}

ResultLine& ResultLine::Set(std::string_view key, int64_t value) {
  fields_.emplace_back(std::string(key), std::to_string(value));
  return *this;
}

ResultLine& ResultLine::SetString(std::string_view key, std::string_view value) {
  fields_.emplace_back(std::string(key), JsonString(value));
  return *this;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

ResultLine& ResultLine::SetBool(std::string_view key, bool value) {
  fields_.emplace_back(std::string(key), value ? "true" : "false");
  return *this;
}

ResultLine& ResultLine::SetLatenciesNs(const Histogram::Snapshot& ns) {
  if (ns.count == 0) return *this;
  auto us = [](uint64_t v) { return static_cast<double>(v) / 1000.0; };
  Set("p50_us", us(ns.Percentile(50)));
  Set("p99_us", us(ns.Percentile(99)));
  Set("p999_us", us(ns.Percentile(99.9)));
  Set("max_us", us(ns.max));
  Set("mean_us", ns.mean / 1000.0);
  return *this;
}

std::string ResultLine::ToJson() const {
  std::string out = "{";
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (i > 0) out += ',';
    out += JsonString(fields_[i].first);
    out += ':';
    out += fields_[i].second;
  }
  out += '}';
  return out;
}

void ResultLine::Print() const {
  const std::string line = ToJson() + "\n";
  std::lock_guard<std::mutex> lock(StderrMutex());  // one writer at a time, stdout too
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

Result<std::string> FindDeuteron(const std::string& explicit_path) {
  std::string path = explicit_path;
  if (path.empty()) {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) return Status::FromErrno(errno, "readlink /proc/self/exe");
    std::string dir(self, static_cast<size_t>(n));
    dir.resize(dir.rfind('/'));
    path = dir + "/deuteron";
  }
  if (access(path.c_str(), X_OK) != 0) {
    return Status::NotFound(fmt::format("no deuteron program at {} (build the `deuteron` target, "
                                        "or name it with --deuteron)",
                                        path));
  }
  return path;
}

}  // namespace deuteron::bench
