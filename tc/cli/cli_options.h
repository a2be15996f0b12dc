// What every `deuteron` subcommand shares on top of CLI11: the registration
// pattern (main.cpp), option helpers for sizes with units ("512MiB"),
// durations with units ("10m", "250ms"), HOST:PORT addresses and secrets,
// the common help layout, and the one place parse errors become a one-line
// reason and exit status 2.
//
// Sizes: a whole number with an optional unit: B; KiB MiB GiB TiB (and K M G
// T, and KB MB GB TB, all powers of 1024, as every size in this project is).
// Durations: a whole number with an optional unit: us ms s m h d; a bare
// number is in the option's own unit (named in its help: seconds for
// --idle-timeout, milliseconds for --lock-timeout).
//
// Thread safety: used by main() alone, before any thread starts.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "common/status.h"

namespace deuteron::cli {

// What a parsed subcommand runs: set by the subcommand's callback (CLI11
// calls it when that subcommand was given and parsed), called by main()
// after parsing. Returns the process exit status (0 ok, 1 runtime error,
// 2 bad usage found after parsing).
class Runner {
 public:
  void Set(std::function<int()> run) { run_ = std::move(run); }
  bool set() const { return static_cast<bool>(run_); }
  int Run() const { return run_(); }

 private:
  std::function<int()> run_;
};

// The application with the common help layout and --version; subcommands
// made with app.add_subcommand inherit the layout.
void ConfigureApp(CLI::App& app, const std::string& version);

// Parses argv and runs the chosen subcommand. --help and --version exit 0;
// a parse or validation error prints "deuteron <command>: <reason>" and
// "run 'deuteron <command> --help' for the options" on stderr and returns 2.
int ParseAndRun(CLI::App& app, const Runner& runner, int argc, char** argv);

// Parses "512MiB" and friends (above). InvalidArgument with the reason.
Result<uint64_t> ParseSize(const std::string& text);
// Parses "10m" and friends; a bare number counts `bare_unit`s.
Result<std::chrono::microseconds> ParseDuration(const std::string& text,
                                                std::chrono::microseconds bare_unit);
// "512 MiB", "1.5 GiB", "300 B": for people.
std::string FormatSize(uint64_t bytes);

struct HostPort {
  std::string host;
  uint16_t port = 0;
  std::string ToString() const { return host + ":" + std::to_string(port); }
};
// "HOST:PORT" (the last colon splits; "[::1]:7400" drops the brackets).
// InvalidArgument unless the host is nonempty and the port 0-65535.
Result<HostPort> ParseHostPort(const std::string& text);

// Option helpers: each adds `name` (CLI11 names, "--a,--b" for aliases) to
// `cmd`, storing into *target (which holds the default, shown in --help).
CLI::Option* AddSizeOption(CLI::App* cmd, const std::string& name, uint64_t* target,
                           const std::string& help);
CLI::Option* AddDurationOption(CLI::App* cmd, const std::string& name,
                               std::chrono::milliseconds* target,
                               std::chrono::milliseconds bare_unit, const std::string& help);
CLI::Option* AddAddressOption(CLI::App* cmd, const std::string& name, HostPort* target,
                              const std::string& help);

// Reads a shared secret from `path` (trailing newlines dropped), or, with
// an empty path, $DEUTERON_SECRET (empty when unset). InvalidArgument for
// an unreadable or empty file.
Result<std::string> LoadSecret(const std::string& path);

// A range check that leaves the option's type name alone in --help (say
// the range in the option's help text).
CLI::Validator Within(uint64_t lo, uint64_t hi);

// What a server command may open. A directory that holds another kind of
// store (a `dc` store for serve or tc, a serve or tc store for dc), or that is
// not empty and holds no store at all, is refused (InvalidArgument, saying
// what it holds) rather than having a store made inside it. A directory that
// does not exist, or is empty, is fine (the server creates the store).
enum class StoreKind { kServe, kTc, kDc };
Status CheckStoreDir(const std::string& dir, StoreKind want);

// For checks across options after parsing, inside a subcommand's callback:
// throws the CLI11 error that ParseAndRun reports as bad usage.
[[noreturn]] void UsageError(const std::string& reason);

}  // namespace deuteron::cli
