// The servers under test for `deuteron crashtest` (tc/crash/crash.md): a
// `deuteron dc` and a `deuteron tc` child process on loopback (the split
// deployment), each with its data directory and its log file under one run
// directory. The DC keeps its first port across restarts (the TC's --dc
// address for it, unless the TC is pointed elsewhere, e.g. at an RPC
// proxy); the TC takes a fresh port at every start.
//
// Environment variables for one start (the fault hooks' DEUTERON_KILL_POINT,
// DEUTERON_FAULT_ENV, DEUTERON_BREAK) are passed through /usr/bin/env, so the
// child's pid is still the server's.
//
// Thread safety: used by one thread (tc/cli/server_process.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "tc/cli/server_process.h"

namespace deuteron::crash {

struct ClusterOptions {
  std::string program;  // the deuteron executable
  std::string dir;      // the run directory: dc/, tc/, dc.log, tc.log
  std::chrono::milliseconds start_timeout{60000};
  std::chrono::milliseconds stop_timeout{30000};
  // Short, so that crashes find checkpoints and RSSPs at every stage.
  std::chrono::milliseconds tc_checkpoint_interval{300};
  std::chrono::milliseconds dc_checkpoint_interval{1000};
  // "NAME=VALUE" entries added to every server's environment (e.g. a
  // DEUTERON_BREAK for the whole run).
  std::vector<std::string> env;
};

class Cluster {
 public:
  explicit Cluster(ClusterOptions o);

  // Starts the server (its directory created on first start), with `env`
  // ("NAME=VALUE" entries) added to its environment, and waits for its
  // "serving" line. Unavailable (with its log's tail) when it exits first.
  Status StartDc(const std::vector<std::string>& env = {});
  Status StartTc(const std::vector<std::string>& env = {});

  // SIGKILL (a no-op when not running).
  void KillDc();
  void KillTc();
  // SIGTERM and wait: OK only when the server exited with status 0.
  Status StopDc();
  Status StopTc();

  // Waits for a line starting with `prefix` in the server's log (written
  // since its start), e.g. "deuteron: kill point". Unavailable when the
  // server exited without one; afterwards the server counts as stopped.
  Result<std::string> WaitDcLine(const std::string& prefix, std::chrono::milliseconds timeout);
  Result<std::string> WaitTcLine(const std::string& prefix, std::chrono::milliseconds timeout);
  // Sends `sig` to the server (a no-op when not running).
  void SignalDc(int sig);
  void SignalTc(int sig);
  // Forgets a server known to be dead (reaps it).
  void ReapDc() { KillDc(); }
  void ReapTc() { KillTc(); }

  bool dc_running() const { return dc_ != nullptr; }
  bool tc_running() const { return tc_ != nullptr; }
  pid_t dc_pid() const { return dc_ == nullptr ? -1 : dc_->pid(); }
  pid_t tc_pid() const { return tc_ == nullptr ? -1 : tc_->pid(); }
  uint16_t dc_port() const { return dc_port_; }
  uint16_t tc_port() const { return tc_port_; }
  std::string tc_address() const;

  // Where the TC finds its DC (default: the DC's own port); takes effect at
  // the TC's next start.
  void set_tc_dc_port(uint16_t port) { tc_dc_port_ = port; }

  std::string dc_dir() const { return dir_ + "/dc"; }
  std::string tc_dir() const { return dir_ + "/tc"; }
  std::string dc_log() const { return dir_ + "/dc.log"; }
  std::string tc_log() const { return dir_ + "/tc.log"; }

 private:
  Result<std::unique_ptr<cli::ServerProcess>> Spawn(const std::vector<std::string>& env,
                                                    const std::vector<std::string>& args,
                                                    const std::string& log);

  const ClusterOptions o_;
  const std::string dir_;
  std::unique_ptr<cli::ServerProcess> dc_, tc_;
  uint16_t dc_port_ = 0, tc_port_ = 0, tc_dc_port_ = 0;
};

}  // namespace deuteron::crash
