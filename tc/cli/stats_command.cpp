#include "tc/cli/stats_command.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <thrift/TApplicationException.h>
#include <thrift/TOutput.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSocket.h>
#include <thrift/transport/TTransportException.h>

#include "TransactionService.h"
#include "protocol/convert.h"
#include "protocol/errors.h"
#include "protocol/remote_dc.h"

namespace deuteron::cli {
namespace {

namespace proto = ::deuteron::protocol;
using apache::thrift::TApplicationException;
using apache::thrift::protocol::TBinaryProtocol;
using apache::thrift::transport::TFramedTransport;
using apache::thrift::transport::TSocket;
using apache::thrift::transport::TTransportException;
using Clock = std::chrono::steady_clock;

struct StatsArgs {
  HostPort connect{"127.0.0.1", 7400};
  bool json = false;
  bool watch = false;
  std::chrono::milliseconds interval{1000};
  uint64_t count = 0;  // --watch snapshots (0: until interrupted)
  std::string secret_file;
};

// One reading of a server: a TC's (with the DC's inside when it answered)
// or a DC's alone.
struct Snapshot {
  Clock::time_point at;
  bool tc = false;
  proto::TcStats tc_stats;
  std::optional<DcStats> dc;
  std::string dc_error;
};

// A connection to a server of either kind: the TC service first; a server
// that does not know tcStats is taken for a DC.
class StatsClient {
 public:
  StatsClient(HostPort where, std::string secret) : where_(std::move(where)), secret_(std::move(secret)) {}

  Result<Snapshot> Read() {
    Snapshot s;
    if (!dc_) {
      Status tc = ReadTc(&s);
      if (tc.ok() || tc.code() != Code::kNotSupported) {
        if (!tc.ok()) return tc;
        s.at = Clock::now();
        return s;
      }
      // Not a TC: a DC server answers `stats`.
      proto::RemoteOptions ro;
      ro.host = where_.host;
      ro.port = where_.port;
      ro.secret = secret_;
      ro.max_connections = 1;
      Result<std::unique_ptr<proto::RemoteDataComponent>> dc = proto::RemoteDataComponent::Connect(ro);
      if (!dc.ok()) return dc.status();
      dc_ = std::move(dc).value();
    }
    Result<DcStats> d = dc_->GetStats();
    if (!d.ok()) return d.status();
    s.dc = *d;
    s.at = Clock::now();
    return s;
  }

 private:
  Status ReadTc(Snapshot* s) {
    try {
      if (!client_) {
        auto socket = std::make_shared<TSocket>(where_.host, where_.port);
        socket->setConnTimeout(2000);
        socket->setRecvTimeout(10000);
        socket->setSendTimeout(10000);
        transport_ = std::make_shared<TFramedTransport>(socket);
        transport_->open();
        client_ = std::make_unique<proto::TransactionServiceClient>(std::make_shared<TBinaryProtocol>(transport_));
        if (!secret_.empty()) client_->authenticate(secret_);
      }
      client_->tcStats(s->tc_stats);
    } catch (const proto::DeuteronError& e) {
      client_.reset();
      return proto::FromDeuteronError(e);
    } catch (const TApplicationException& e) {
      client_.reset();
      return proto::FromApplicationException(e, "tcStats");
    } catch (const TTransportException& e) {
      client_.reset();
      return proto::FromTransportException(e, "tcStats");
    }
    s->tc = true;
    if (s->tc_stats.__isset.dc) s->dc = proto::FromWire(s->tc_stats.dc);
    if (s->tc_stats.__isset.dc_error) s->dc_error = s->tc_stats.dc_error;
    return Status::OK();
  }

  const HostPort where_;
  const std::string secret_;
  std::shared_ptr<TFramedTransport> transport_;
  std::unique_ptr<proto::TransactionServiceClient> client_;
  std::unique_ptr<proto::RemoteDataComponent> dc_;
};

std::string Micros(int64_t us) {
  char buf[32];
  if (us < 1000) {
    std::snprintf(buf, sizeof(buf), "%lld us", static_cast<long long>(us));
  } else if (us < 1'000'000) {
    std::snprintf(buf, sizeof(buf), "%.2f ms", static_cast<double>(us) / 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f s", static_cast<double>(us) / 1e6);
  }
  return buf;
}

std::string Num(double v, const char* fmt = "%.1f") {
  char buf[32];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// Commits per second between two readings (or over the uptime without one).
double CommitRate(const Snapshot& now, const Snapshot* before) {
  const auto& t = now.tc_stats;
  if (before != nullptr && before->tc) {
    const double secs = std::chrono::duration<double>(now.at - before->at).count();
    if (secs > 0) return static_cast<double>(t.commits - before->tc_stats.commits) / secs;
  }
  return t.uptime_ms > 0 ? static_cast<double>(t.commits) * 1000.0 / static_cast<double>(t.uptime_ms) : 0;
}

// On-disk LSS bytes over the live bytes, what the pages' current states
// need of the LSS (dc/llama/llama.md, "Live bytes"); 0 when the DC does not
// report them (an older server, or a store that wrote nothing).
double SpaceAmplification(const DcStats& d) {
  return d.live_bytes == 0 ? 0 : static_cast<double>(d.lss_disk_bytes) / static_cast<double>(d.live_bytes);
}

std::string Text(const HostPort& where, const Snapshot& s, const Snapshot* before) {
  std::string out;
  auto line = [&out](const char* area, const std::string& what) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "  %-10s ", area);
    out += buf + what + "\n";
  };
  if (s.tc) {
    const auto& t = s.tc_stats;
    out += "deuteron stats: TC at " + where.ToString() + ", up " + Num(static_cast<double>(t.uptime_ms) / 1000, "%.0f") +
           " s, " + std::to_string(t.connections) + " connections, " + std::to_string(t.open_transactions) +
           " transactions open\n";
    line("commits", std::to_string(t.commits) + " (" + Num(CommitRate(s, before)) + "/s" +
                        (before != nullptr ? " over the last " + Num(std::chrono::duration<double>(s.at - before->at).count()) + " s"
                                           : " since start") +
                        "), read-only " + std::to_string(t.read_only_commits));
    line("aborts", std::to_string(t.aborts) + ": deadlock " + std::to_string(t.aborts_deadlock) + ", lock timeout " +
                       std::to_string(t.aborts_lock_timeout) + ", by the client " + std::to_string(t.aborts_by_client) +
                       ", disconnect " + std::to_string(t.aborts_disconnect) + ", other " +
                       std::to_string(t.aborts_other));
    line("latency", "commit p50 " + Micros(t.commit_p50_us) + ", p90 " + Micros(t.commit_p90_us) + ", p99 " +
                        Micros(t.commit_p99_us) + ", max " + Micros(t.commit_max_us) + " (" +
                        std::to_string(t.commit_count) + " timed)");
    line("memory", Num(static_cast<double>(t.memory_used) / 1048576, "%.1f") + " MiB held of a budget of " +
                       (t.memory_budget == 0 ? std::string("none")
                                             : Num(static_cast<double>(t.memory_budget) / 1048576, "%.1f") + " MiB") +
                       ", at most " + Num(static_cast<double>(t.memory_peak) / 1048576, "%.1f") + " MiB; " +
                       std::to_string(t.memory_refusals) + " calls refused");
    line("log", "ESL " + std::to_string(t.esl) + ", RSSP " + std::to_string(t.rssp) + ", lag " +
                    FormatSize(static_cast<uint64_t>(t.esl > t.rssp ? t.esl - t.rssp : 0)) + "; held " +
                    FormatSize(static_cast<uint64_t>(t.log_held_bytes)) + ", written " +
                    FormatSize(static_cast<uint64_t>(t.log_bytes_written)) + ", " + std::to_string(t.checkpoints) +
                    " checkpoints");
    line("recovery", std::to_string(t.replayed_ops) + " operations replayed at the last recovery, " +
                         std::to_string(t.dc_recoveries) + " DC recoveries");
  } else {
    out += "deuteron stats: DC at " + where.ToString() + "\n";
  }
  if (s.dc) {
    const DcStats& d = *s.dc;
    line("dc", "ESL " + std::to_string(d.esl) + ", RSSP " + std::to_string(d.rssp) + ", max durable LSN " +
                   std::to_string(d.max_durable_lsn) + "; " + std::to_string(d.applies) + " applies (" +
                   std::to_string(d.ops_applied) + " operations), " + std::to_string(d.gets) + " gets, " +
                   std::to_string(d.scans) + " scans");
    line("memory", FormatSize(d.memory_bytes) +
                       (d.memory_budget == 0
                            ? std::string(" in use, no budget")
                            : " of " + FormatSize(d.memory_budget) + " budget (" +
                                  Num(100.0 * static_cast<double>(d.memory_bytes) / static_cast<double>(d.memory_budget),
                                      "%.0f") +
                                  "%)") +
                       ", page nodes " + FormatSize(d.node_bytes));
    line("pages", std::to_string(d.pages) + " pages, tree height " + std::to_string(d.tree_height) + ", " +
                      std::to_string(d.page_loads) + " loads, " + std::to_string(d.swap_outs) + " swapped out");
    line("flush", std::to_string(d.flushes) + " flushes (" + FormatSize(d.flush_bytes) + "), " +
                      std::to_string(d.checkpoints) + " checkpoints");
    line("cleaning", std::to_string(d.segments_cleaned) + " segments cleaned, " + std::to_string(d.pages_relocated) +
                         " pages relocated (" + FormatSize(d.bytes_relocated) + ")");
    line("lss", FormatSize(d.lss_disk_bytes) + " on disk in " + std::to_string(d.lss_segments) + " segments, " +
                    FormatSize(d.lss_bytes_written) + " written, " + FormatSize(d.live_bytes) +
                    " live; space amplification " +
                    (d.live_bytes == 0 ? std::string("n/a") : Num(SpaceAmplification(d), "%.2f")) +
                    " (on disk / live)");
  } else if (!s.dc_error.empty()) {
    line("dc", "did not answer: " + s.dc_error);
  }
  return out;
}

std::string Json(const HostPort& where, const Snapshot& s, const Snapshot* before) {
  std::string out = "{\"server\":\"" + where.ToString() + "\",\"kind\":\"" + (s.tc ? "tc" : "dc") + "\"";
  auto field = [&out](const char* name, int64_t v) { out += ",\"" + std::string(name) + "\":" + std::to_string(v); };
  if (s.tc) {
    const auto& t = s.tc_stats;
    out += ",\"commits_per_s\":" + Num(CommitRate(s, before), "%.3f");
    field("commits", t.commits);
    field("read_only_commits", t.read_only_commits);
    field("aborts", t.aborts);
    field("aborts_deadlock", t.aborts_deadlock);
    field("aborts_lock_timeout", t.aborts_lock_timeout);
    field("aborts_by_client", t.aborts_by_client);
    field("aborts_disconnect", t.aborts_disconnect);
    field("aborts_other", t.aborts_other);
    field("commit_count", t.commit_count);
    field("commit_p50_us", t.commit_p50_us);
    field("commit_p90_us", t.commit_p90_us);
    field("commit_p99_us", t.commit_p99_us);
    field("commit_max_us", t.commit_max_us);
    field("esl", t.esl);
    field("rssp", t.rssp);
    field("esl_rssp_lag", t.esl > t.rssp ? t.esl - t.rssp : 0);
    field("log_tail", t.log_tail);
    field("log_held_bytes", t.log_held_bytes);
    field("log_bytes_written", t.log_bytes_written);
    field("checkpoints", t.checkpoints);
    field("replayed_ops", t.replayed_ops);
    field("dc_recoveries", t.dc_recoveries);
    field("open_transactions", t.open_transactions);
    field("connections", t.connections);
    field("uptime_ms", t.uptime_ms);
    field("memory_budget", t.memory_budget);
    field("memory_used", t.memory_used);
    field("memory_peak", t.memory_peak);
    field("memory_refusals", t.memory_refusals);
  }
  if (s.dc) {
    const DcStats& d = *s.dc;
    out += ",\"dc\":{";
    std::string inner;
    auto f = [&inner](const char* name, uint64_t v) {
      inner += std::string(inner.empty() ? "" : ",") + "\"" + name + "\":" + std::to_string(v);
    };
    f("applies", d.applies);
    f("ops_applied", d.ops_applied);
    f("ops_skipped", d.ops_skipped);
    f("gets", d.gets);
    f("scans", d.scans);
    f("esl", d.esl);
    f("rssp", d.rssp);
    f("max_durable_lsn", d.max_durable_lsn);
    f("pages", d.pages);
    f("tree_height", d.tree_height);
    f("memory_bytes", d.memory_bytes);
    f("memory_budget", d.memory_budget);
    f("node_bytes", d.node_bytes);
    f("flushes", d.flushes);
    f("flush_bytes", d.flush_bytes);
    f("checkpoints", d.checkpoints);
    f("segments_cleaned", d.segments_cleaned);
    f("pages_relocated", d.pages_relocated);
    f("bytes_relocated", d.bytes_relocated);
    f("page_loads", d.page_loads);
    f("swap_outs", d.swap_outs);
    f("lss_bytes_written", d.lss_bytes_written);
    f("lss_disk_bytes", d.lss_disk_bytes);
    f("lss_segments", d.lss_segments);
    f("live_bytes", d.live_bytes);
    out += inner + ",\"space_amplification\":" + Num(SpaceAmplification(d), "%.3f") + "}";
  } else if (!s.dc_error.empty()) {
    std::string e;
    for (char c : s.dc_error) {
      if (c == '"' || c == '\\') e += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) e += c;
    }
    out += ",\"dc_error\":\"" + e + "\"";
  }
  return out + "}\n";
}

int RunStats(const StatsArgs& a) {
  // Thrift's own lines ("TSocket::open() error ...") would double ours.
  apache::thrift::GlobalOutput.setOutputFunction([](const char*) {});
  Result<std::string> secret = LoadSecret(a.secret_file);
  if (!secret.ok()) {
    std::fprintf(stderr, "deuteron stats: %s\n", std::string(secret.status().message()).c_str());
    return 1;
  }
  StatsClient client(a.connect, *secret);
  Result<Snapshot> first = client.Read();
  if (!first.ok()) {
    std::fprintf(stderr, "deuteron stats: %s: %s\n", a.connect.ToString().c_str(), first.status().ToString().c_str());
    return 1;
  }
  std::optional<Snapshot> before;
  Snapshot now = *first;
  const bool tty = isatty(1) == 1;
  for (uint64_t n = 1;; ++n) {
    if (!a.watch && !a.json && now.tc && !before) {
      // One text snapshot: a second reading an interval later gives the rate.
      std::this_thread::sleep_for(a.interval);
      Result<Snapshot> next = client.Read();
      if (next.ok()) {
        before = now;
        now = *next;
      }
    }
    const Snapshot* prev = before ? &*before : nullptr;
    if (a.json) {
      std::fputs(Json(a.connect, now, prev).c_str(), stdout);
    } else {
      if (a.watch && tty) std::fputs("\033[H\033[2J", stdout);
      std::fputs(Text(a.connect, now, prev).c_str(), stdout);
    }
    std::fflush(stdout);
    if (!a.watch || (a.count != 0 && n >= a.count)) return 0;
    std::this_thread::sleep_for(a.interval);
    Result<Snapshot> next = client.Read();
    if (!next.ok()) {
      std::fprintf(stderr, "deuteron stats: %s: %s\n", a.connect.ToString().c_str(), next.status().ToString().c_str());
      return 1;
    }
    before = now;
    now = *next;
  }
}

}  // namespace

void AddStatsCommand(CLI::App& app, Runner& runner) {
  auto a = std::make_shared<StatsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "stats",
      "Shows a snapshot of a running server's figures. Of a TC (serve, tc): commits/s and aborts by\n"
      "cause, commit latency percentiles, the ESL and RSSP and the lag between them, the log's\n"
      "size, and the DC's figures; of a DC (dc): memory in use against its budget, pages, flushes,\n"
      "cleaning, the LSS's size and space amplification.");
  AddAddressOption(cmd, "--connect", &a->connect, "the server (a TC, or a DC: found out by asking)")->required();
  cmd->add_flag("--json", a->json, "one JSON object per snapshot, for machines");
  cmd->add_flag("--watch", a->watch, "refresh every --interval until interrupted");
  AddDurationOption(cmd, "--interval", &a->interval, std::chrono::seconds(1),
                    "between snapshots; commits/s is over it (bare number: seconds)");
  cmd->add_option("--count", a->count, "with --watch: stop after N snapshots (0: never)")->type_name("N");
  cmd->add_option("--secret-file", a->secret_file, "the server's shared secret; else $DEUTERON_SECRET")
      ->type_name("PATH");
  cmd->callback([a, &runner] {
    if (a->interval.count() <= 0) UsageError("--interval must be positive");
    if (a->connect.port == 0) UsageError("--connect needs a port other than 0");
    runner.Set([a] { return RunStats(*a); });
  });
}

}  // namespace deuteron::cli
