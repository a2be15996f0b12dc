#include "tc/crash/cluster.h"

#include <signal.h>

namespace deuteron::crash {

namespace {

std::string Loopback(uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

}  // namespace

Cluster::Cluster(ClusterOptions o) : o_(std::move(o)), dir_(o_.dir) {}

std::string Cluster::tc_address() const { return Loopback(tc_port_); }

Result<std::unique_ptr<cli::ServerProcess>> Cluster::Spawn(const std::vector<std::string>& env,
                                                           const std::vector<std::string>& args,
                                                           const std::string& log) {
  if (env.empty() && o_.env.empty()) return cli::ServerProcess::Start(o_.program, args, log);
  std::vector<std::string> all = o_.env;
  all.insert(all.end(), env.begin(), env.end());
  all.push_back(o_.program);
  all.insert(all.end(), args.begin(), args.end());
  return cli::ServerProcess::Start("/usr/bin/env", all, log);
}

Status Cluster::StartDc(const std::vector<std::string>& env) {
  if (dc_ != nullptr) return Status::InvalidArgument("the DC is running");
  Result<std::unique_ptr<cli::ServerProcess>> p =
      Spawn(env,
            {"dc", "--dir", dc_dir(), "--listen", Loopback(dc_port_), "--checkpoint-interval",
             std::to_string(o_.dc_checkpoint_interval.count()) + "ms", "--io-threads", "2"},
            dc_log());
  if (!p.ok()) return p.status();
  dc_ = std::move(p).value();
  Result<std::string> line = dc_->WaitForLine("deuteron dc: serving", o_.start_timeout);
  if (!line.ok()) {
    dc_.reset();
    return line.status();
  }
  const uint16_t port = cli::ServingPort(*line);
  if (port == 0) {
    dc_.reset();
    return Status::Internal("no port in: " + *line);
  }
  dc_port_ = port;
  return Status::OK();
}

Status Cluster::StartTc(const std::vector<std::string>& env) {
  if (tc_ != nullptr) return Status::InvalidArgument("the TC is running");
  const uint16_t dc = tc_dc_port_ != 0 ? tc_dc_port_ : dc_port_;
  Result<std::unique_ptr<cli::ServerProcess>> p =
      Spawn(env,
            {"tc", "--dir", tc_dir(), "--dc", Loopback(dc), "--listen", "127.0.0.1:0",
             "--checkpoint-interval", std::to_string(o_.tc_checkpoint_interval.count()) + "ms",
             "--lock-timeout", "2s"},
            tc_log());
  if (!p.ok()) return p.status();
  tc_ = std::move(p).value();
  Result<std::string> line = tc_->WaitForLine("deuteron tc: serving", o_.start_timeout);
  if (!line.ok()) {
    tc_.reset();
    return line.status();
  }
  tc_port_ = cli::ServingPort(*line);
  if (tc_port_ == 0) {
    tc_.reset();
    return Status::Internal("no port in: " + *line);
  }
  return Status::OK();
}

void Cluster::SignalDc(int sig) {
  if (dc_ != nullptr) ::kill(dc_->pid(), sig);
}
void Cluster::SignalTc(int sig) {
  if (tc_ != nullptr) ::kill(tc_->pid(), sig);
}

void Cluster::KillDc() { dc_.reset(); }
void Cluster::KillTc() { tc_.reset(); }

namespace {

Status StopOne(std::unique_ptr<cli::ServerProcess>* p, const char* name,
               std::chrono::milliseconds timeout) {
  if (*p == nullptr) return Status::InvalidArgument(std::string(name) + " is not running");
  Result<int> exit = (*p)->Stop(timeout);
  p->reset();
  if (!exit.ok()) return exit.status();
  if (*exit != 0) {
    return Status::Internal(std::string(name) + " exited with status " + std::to_string(*exit) +
                            " after SIGTERM");
  }
  return Status::OK();
}

Result<std::string> WaitLine(std::unique_ptr<cli::ServerProcess>* p, const std::string& prefix,
                             std::chrono::milliseconds timeout) {
  if (*p == nullptr) return Status::Unavailable("the server is not running");
  Result<std::string> line = (*p)->WaitForLine(prefix, timeout);
  if (!line.ok() && line.status().code() == Code::kUnavailable &&
      line.status().message().find("exited") != std::string_view::npos) {
    p->reset();
  }
  return line;
}

}  // namespace

Status Cluster::StopDc() { return StopOne(&dc_, "deuteron dc", o_.stop_timeout); }
Status Cluster::StopTc() { return StopOne(&tc_, "deuteron tc", o_.stop_timeout); }

Result<std::string> Cluster::WaitDcLine(const std::string& prefix, std::chrono::milliseconds timeout) {
  return WaitLine(&dc_, prefix, timeout);
}
Result<std::string> Cluster::WaitTcLine(const std::string& prefix, std::chrono::milliseconds timeout) {
  return WaitLine(&tc_, prefix, timeout);
}

}  // namespace deuteron::crash
