#include "bench/txn_bench_modes.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include <fmt/core.h>

#include "common/env.h"
#include "protocol/remote_dc.h"
#include "tc/cli/server_process.h"
#include "tc/client/client.h"

namespace deuteron::bench {
namespace {

constexpr double kSplitTarget = 0.5;  // split/embedded, deuteronomy_zipf, 16 clients
constexpr int kSplitTargetThreads = 16;
constexpr const char* kSplitTargetWorkload = "deuteronomy_zipf";
constexpr auto kStartTimeout = std::chrono::seconds(60);

// ------------------------------------------------------------------ split

// A TC here, its log under dir/log; its DC a `deuteron dc` process serving
// dir/dc on loopback.
class SplitSystem final : public ModeSystem {
 public:
  SplitSystem(const std::string& deuteron, const std::string& dir, const wal::LogOptions& log,
              const tc::TxnOptions& txn, size_t dc_connections) {
    CheckOk(Env::Posix()->CreateDirs(dir), "create the split directory");
    server_ = CheckOk(cli::ServerProcess::StartServing(deuteron,
                                           {"dc", "--dir", dir + "/dc", "--listen", "127.0.0.1:0"},
                                           kStartTimeout),
                      "start deuteron dc");
    Progress("split: {}", server_->first_line());
    log_ = CheckOk(wal::Log::Open(Env::Posix(), dir + "/log", log), "open the split TC's log");
    protocol::RemoteOptions ro;
    ro.port = server_->port();
    ro.max_connections = dc_connections;
    dc_ = CheckOk(protocol::RemoteDataComponent::Connect(ro), "connect to deuteron dc");
    tm_ = CheckOk(tc::TxnManager::Open(dc_.get(), log_.get(), txn), "open the split TC");
  }
  ~SplitSystem() override {
    CheckOk(tm_->Close(), "close the split TC");
    tm_.reset();
    CheckOk(log_->Close(), "close the split TC's log");
    dc_.reset();
    const uint64_t peak = server_->PeakRssBytes();
    const int rc = server_->Stop(SIGTERM);
    Progress("split: deuteron dc exited with {}, peak resident {:.1f} MiB", rc,
             static_cast<double>(peak) / kMiB);
  }
  const char* name() const override { return "split"; }
  std::unique_ptr<BenchTxn> Begin() override { return std::make_unique<TcTxn>(tm_->Begin()); }
  Status Checkpoint() override { return tm_->Checkpoint(); }
  void Report(const std::string& what) override {
    const tc::TxnStats s = tm_->stats();
    Progress("{}: {} commits, {} read-only, {} aborts, {} applies, {} esl sends, {} checkpoints, "
             "{} DC connections",
             what, s.commits, s.read_only_commits, s.aborts, s.applies, s.esl_sends,
             s.checkpoints, dc_->open_connections());
  }

 private:
  std::unique_ptr<cli::ServerProcess> server_;
  std::unique_ptr<wal::Log> log_;
  std::unique_ptr<protocol::RemoteDataComponent> dc_;
  std::unique_ptr<tc::TxnManager> tm_;
};

// ------------------------------------------------------------------ remote

class RemoteTxn final : public BenchTxn {
 public:
  explicit RemoteTxn(Result<std::unique_ptr<client::Transaction>> t) {
    if (t.ok()) {
      t_ = std::move(t).value();
    } else {
      begin_ = t.status();
    }
  }
  Status Get(const std::string& key) override {
    if (t_ == nullptr) return begin_;
    Result<std::string> r = t_->Get(key);
    if (r.ok() || r.status().IsNotFound()) return Status::OK();
    return r.status();
  }
  Status Put(const std::string& key, const std::string& value) override {
    return t_ == nullptr ? begin_ : t_->Put(key, value);
  }
  Status Commit() override { return t_ == nullptr ? begin_ : t_->Commit(); }

 private:
  std::unique_ptr<client::Transaction> t_;
  Status begin_;  // why Begin failed
};

// A `deuteron serve` process on loopback, through the client library.
class RemoteSystem final : public ModeSystem {
 public:
  RemoteSystem(const std::string& deuteron, const std::string& dir, const tc::TxnOptions& txn,
               size_t clients) {
    server_ = CheckOk(
        cli::ServerProcess::StartServing(deuteron,
                             {"serve", "--dir", dir, "--listen", "127.0.0.1:0", "--lock-timeout-ms",
                              std::to_string(txn.lock_timeout.count())},
                             kStartTimeout),
        "start deuteron serve");
    Progress("remote: {}", server_->first_line());
    client::RemoteOptions o;
    o.max_idle_connections = clients;  // one per client thread, kept between transactions
    client_ = CheckOk(client::Client::Connect(fmt::format("127.0.0.1:{}", server_->port()), o),
                      "connect to deuteron serve");
  }
  ~RemoteSystem() override {
    CheckOk(client_->Close(), "close the client");
    client_.reset();
    const uint64_t peak = server_->PeakRssBytes();
    const int rc = server_->Stop(SIGTERM);
    Progress("remote: deuteron serve exited with {}, peak resident {:.1f} MiB", rc,
             static_cast<double>(peak) / kMiB);
  }
  const char* name() const override { return "remote"; }
  std::unique_ptr<BenchTxn> Begin() override {
    return std::make_unique<RemoteTxn>(client_->Begin());
  }
  Status Checkpoint() override { return Status::OK(); }
  void Report(const std::string& what) override {
    Progress("{}: server resident {:.1f} MiB (peak {:.1f})", what,
             static_cast<double>(server_->RssBytes()) / kMiB,
             static_cast<double>(server_->PeakRssBytes()) / kMiB);
  }

 private:
  std::unique_ptr<cli::ServerProcess> server_;
  std::unique_ptr<client::Client> client_;
};

}  // namespace

std::vector<Setting> ModeSettings() {
  return {{"dc_connections",
           "split: connections of the TC's pool to deuteron dc (RemoteOptions::max_connections)",
           1, 1024, 8}};
}

std::vector<std::unique_ptr<ModeSystem>> StartModes(const BenchArgs& args,
                                                    const std::string& scratch,
                                                    const wal::LogOptions& log,
                                                    const tc::TxnOptions& txn) {
  std::vector<std::unique_ptr<ModeSystem>> modes;
  if (!args.Wants("split") && !args.Wants("remote")) return modes;
  const std::string deuteron = CheckOk(FindDeuteron(args.FlagValue("deuteron")),
                                       "find the deuteron program");
  if (args.Wants("split")) {
    modes.push_back(std::make_unique<SplitSystem>(
        deuteron, scratch + "/split", log, txn,
        static_cast<size_t>(args.SettingValue("dc_connections"))));
  }
  if (args.Wants("remote")) {
    modes.push_back(std::make_unique<RemoteSystem>(deuteron, scratch + "/remote", txn,
                                                   static_cast<size_t>(args.MaxThreads())));
  }
  return modes;
}

void ModeRatios::Add(const std::string& mode, const std::string& workload, int threads, int round,
                     uint64_t ops, double seconds, double mode_ops_per_s,
                     double embedded_ops_per_s) {
  const double ratio = Ratio(mode_ops_per_s, embedded_ops_per_s);
  Print(mode, workload, threads, round, ops, seconds, ratio, nullptr);
  Series& s = series_[{mode, workload, threads}];
  s.ratios.push_back(ratio);
  s.ops += ops;
  s.seconds += seconds;
}

void ModeRatios::PrintMedians() const {
  for (const auto& [k, s] : series_) {
    Print(std::get<0>(k), std::get<1>(k), std::get<2>(k), 0, s.ops, s.seconds, Median(s.ratios),
          &s);
  }
}

void ModeRatios::Print(const std::string& mode, const std::string& workload, int threads,
                       int round, uint64_t ops, double seconds, double ratio,
                       const Series* rounds) const {
  const std::string system = mode + "/embedded";
  ResultLine line(bench_, workload, system, threads, ops, seconds);
  if (rounds != nullptr) {
    std::vector<double> v = rounds->ratios;
    std::sort(v.begin(), v.end());
    line.SetString("statistic", "median")
        .Set("rounds", uint64_t{v.size()})
        .Set("ratio", ratio)
        .Set("ratio_min", v.front())
        .Set("ratio_max", v.back());
  } else {
    line.Set("round", round).Set("ratio", ratio);
  }
  const bool has_target =
      mode == "split" && threads == kSplitTargetThreads && workload == kSplitTargetWorkload;
  if (has_target) line.Set("target", kSplitTarget).SetBool("meets_target", ratio >= kSplitTarget);
  line.Print();
  Progress("{} {} threads={} {}: {:.2f}{}", system, workload, threads,
           rounds != nullptr ? "median" : fmt::format("round {}", round), ratio,
           has_target ? fmt::format(" (target {:.1f}: {})", kSplitTarget,
                                    ratio >= kSplitTarget ? "met" : "MISSED")
                      : "");
}

}  // namespace deuteron::bench
