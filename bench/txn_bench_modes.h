// txn_bench's deployments beyond `embedded` (issue 30; bench/README.md,
// "txn_bench", "split and remote"):
//  - `split`: the benchmark's clients drive a TC (tc::TxnManager, its log in
//    the scratch directory) in this process, whose DC is a `deuteron dc`
//    server process on loopback reached through RemoteDataComponent: the
//    TC/DC hop alone;
//  - `remote`: the clients reach a `deuteron serve` process (TC and DC in
//    one server) on loopback through the client library (tc/client).
// The benchmark starts each server itself in a fresh directory under its
// scratch directory (the `deuteron` program next to txn_bench, or --deuteron
// PATH) and stops it at the end. Ratio lines `split/embedded` (target 0.5 on
// the Deuteronomy mix, Zipfian, at 16 clients) and `remote/embedded`.
//
// Thread safety: as TxnSystem (bench/txn_system.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "bench/bench_util.h"
#include "bench/txn_system.h"
#include "tc/txn_manager.h"
#include "tc/wal/log.h"

namespace deuteron::bench {

// A deployment run in its own server process(es).
class ModeSystem : public TxnSystem {
 public:
  // Makes the preload durable and cheap to recover (split: a TC checkpoint;
  // remote: nothing, the server checkpoints by itself).
  virtual Status Checkpoint() = 0;
};

// The settings of the modes (--set NAME=VALUE), appended to txn_bench's.
std::vector<Setting> ModeSettings();

// Starts the modes that `args` wants (--only split, remote; both by
// default), each in a directory under `scratch`; the TC of `split` gets
// `log` and `txn`. Exits the program (CheckOk) when a server cannot start.
std::vector<std::unique_ptr<ModeSystem>> StartModes(const BenchArgs& args,
                                                    const std::string& scratch,
                                                    const wal::LogOptions& log,
                                                    const tc::TxnOptions& txn);

// The ratio lines `<mode>/embedded`: a mode's commits/s over embedded's in
// the same round, workload and thread count; `target` and `meets_target` on
// split/embedded at deuteronomy_zipf with 16 clients.
class ModeRatios {
 public:
  explicit ModeRatios(const char* bench) : bench_(bench) {}
  // Prints one round's line and keeps the ratio for PrintMedians.
  void Add(const std::string& mode, const std::string& workload, int threads, int round,
           uint64_t ops, double seconds, double mode_ops_per_s, double embedded_ops_per_s);
  // One `statistic: "median"` line per (mode, workload, threads) over the
  // rounds, with ratio_min and ratio_max.
  void PrintMedians() const;

 private:
  struct Series {
    std::vector<double> ratios;
    uint64_t ops = 0;
    double seconds = 0;
  };
  void Print(const std::string& mode, const std::string& workload, int threads, int round,
             uint64_t ops, double seconds, double ratio, const Series* rounds) const;

  const char* const bench_;
  std::map<std::tuple<std::string, std::string, int>, Series> series_;  // mode, workload, threads
};

}  // namespace deuteron::bench
