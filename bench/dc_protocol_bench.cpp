// dc_protocol_bench: what the TC/DC hop costs. The same record operations go
// to a data component through the in-process binding (dc::Dc called
// directly) and through the remote binding (RemoteDataComponent, Thrift
// framed binary over loopback TCP to a DcServer in this process, serving a
// second Dc), with batch sizes 1, 16 and 256, and each remote line carries
// the remote/in-process ratio of the same (phase, batch, threads) measured in
// the same run. Target: remote at batch 256 reaches at least 50% of the
// in-process throughput.
//
// Per (batch, threads): a fresh Dc on a fresh directory per binding, then an
// `apply` phase (each thread sends its share of n upserts of random 8-byte
// keys with 16-byte values, LSN = record number + 1, in batches; the ESL
// follows the LSNs, piggy-backed on each apply) and a `get` phase (each
// thread reads n/threads random keys: Get for batch 1, MultiGet of `batch`
// keys otherwise, checking each value and LSN). A wrong read or an error
// exits 1 after the result lines. The server and the client share the
// machine's cores, as an embedded TC and a local DC would.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "common/coding.h"
#include "common/env.h"
#include "common/random.h"
#include "dc/dc.h"
#include "dc/dc_server.h"
#include "protocol/data_component.h"
#include "protocol/remote_dc.h"

namespace deuteron::bench {
namespace {

constexpr char kBench[] = "dc_protocol_bench";
constexpr size_t kKeySize = 8;
constexpr size_t kValueSize = 16;
constexpr double kTarget = 0.5;  // remote / in-process at batch 256
constexpr size_t kBatchSizes[] = {1, 16, 256};

struct DataSet {
  explicit DataSet(size_t n) : n(n), keys(n * kKeySize), values(n * kValueSize) {
    uint64_t state = 0xdc0de;
    for (size_t i = 0; i < n; ++i) {
      uint64_t k = Random64::SplitMix64(&state);
      for (int b = 7; b >= 0; --b, k >>= 8) keys[i * kKeySize + b] = static_cast<char>(k & 0xff);
      EncodeFixed64(&values[i * kValueSize], i);
      EncodeFixed64(&values[i * kValueSize + 8], ~i);
    }
  }
  Slice key(size_t i) const { return Slice(&keys[i * kKeySize], kKeySize); }
  Slice value(size_t i) const { return Slice(&values[i * kValueSize], kValueSize); }
  size_t n;
  std::vector<char> keys;
  std::vector<char> values;
};

// A DataComponent under test with whatever keeps it alive.
struct Binding {
  std::unique_ptr<dc::Dc> dc;
  std::unique_ptr<dc::DcServer> server;
  std::unique_ptr<protocol::RemoteDataComponent> remote;
  DataComponent* target = nullptr;

  ~Binding() {
    remote.reset();
    if (server != nullptr) server->Stop();
    server.reset();
    if (dc != nullptr) CheckOk(dc->Close(), "close dc");
  }
};

std::unique_ptr<Binding> OpenBinding(bool remote, const std::string& dir, int threads) {
  auto b = std::make_unique<Binding>();
  dc::DcOptions options;
  options.llama.checkpoint_on_close = false;
  b->dc = CheckOk(dc::Dc::Open(Env::Posix(), dir, options), "open dc");
  b->target = b->dc.get();
  if (!remote) return b;
  dc::DcServerOptions so;
  so.port = 0;  // ephemeral
  so.io_threads = threads;
  b->server = std::make_unique<dc::DcServer>(b->dc.get(), so);
  CheckOk(b->server->Start(), "start dc server");
  protocol::RemoteOptions ro;
  ro.host = "127.0.0.1";
  ro.port = b->server->port();
  ro.max_connections = threads;
  b->remote = CheckOk(protocol::RemoteDataComponent::Connect(ro), "connect");
  b->target = b->remote.get();
  return b;
}

struct Tally {
  uint64_t ops = 0, wrong = 0, errors = 0;
  std::string first_error;
};

struct Phase {
  uint64_t ops = 0;
  double seconds = 0;
  double cpu_seconds = 0;  // the whole process's (a remote run's server included)
  uint64_t wrong = 0, errors = 0;
  std::string first_error;
  Histogram::Snapshot latency;  // per call
};

// Runs body(t, tally, histogram) on each thread and sums the tallies.
template <typename Body>
Phase RunPhase(int threads, Body body) {
  std::vector<Tally> tallies(static_cast<size_t>(threads));
  LatencySet latencies(threads);
  const double cpu0 = ProcessCpuSeconds();
  Stopwatch sw;
  RunThreads(threads, [&](int t) {
    body(t, &tallies[static_cast<size_t>(t)], latencies.ForThread(t));
  });
  Phase p;
  p.seconds = sw.Seconds();
  p.cpu_seconds = ProcessCpuSeconds() - cpu0;
  for (const Tally& tally : tallies) {
    p.ops += tally.ops;
    p.wrong += tally.wrong;
    p.errors += tally.errors;
    if (p.first_error.empty()) p.first_error = tally.first_error;
  }
  p.latency = latencies.Merged();
  return p;
}

Phase ApplyPhase(DataComponent* target, const DataSet& data, size_t batch, int threads) {
  return RunPhase(threads, [&](int t, Tally* tally, Histogram* h) {
    const size_t lo = data.n * static_cast<size_t>(t) / static_cast<size_t>(threads);
    const size_t hi = data.n * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
    std::vector<RecordOp> ops;
    ops.reserve(batch);
    for (size_t i = lo; i < hi && tally->errors == 0; i += batch) {
      ops.clear();
      for (size_t j = i; j < std::min(hi, i + batch); ++j) {
        ops.push_back(RecordOp{RecordOpKind::kUpsert, data.key(j), data.value(j), j + 1});
      }
      const uint64_t t0 = NowNanos();
      // A fresh store no restart-to has run on: incarnation 0.
      Result<ApplyResult> r = target->Apply(ops, ops.back().lsn, /*incarnation=*/0);
      h->Record(NowNanos() - t0);
      if (!r.ok()) {
        ++tally->errors;
        tally->first_error = r.status().ToString();
        break;
      }
      tally->ops += ops.size();
    }
  });
}

bool Matches(const ReadResult& r, const DataSet& data, size_t i) {
  return r.found && Slice(r.value) == data.value(i) && r.lsn == i + 1;
}

Phase GetPhase(DataComponent* target, const DataSet& data, size_t batch, int threads) {
  return RunPhase(threads, [&](int t, Tally* tally, Histogram* h) {
    Random64 rnd(0x6e7u + static_cast<uint64_t>(t));
    const size_t count = data.n / static_cast<size_t>(threads);
    std::vector<size_t> which;
    std::vector<Slice> keys;
    for (size_t done = 0; done < count && tally->errors == 0; done += batch) {
      which.clear();
      keys.clear();
      for (size_t j = done; j < std::min(count, done + batch); ++j) {
        which.push_back(rnd.Uniform(data.n));
        keys.push_back(data.key(which.back()));
      }
      const uint64_t t0 = NowNanos();
      if (batch == 1) {
        Result<ReadResult> r = target->Get(keys[0]);
        h->Record(NowNanos() - t0);
        if (!r.ok()) {
          ++tally->errors;
          tally->first_error = r.status().ToString();
          break;
        }
        if (!Matches(*r, data, which[0])) ++tally->wrong;
      } else {
        Result<std::vector<ReadResult>> r = target->MultiGet(keys);
        h->Record(NowNanos() - t0);
        if (!r.ok() || r->size() != keys.size()) {
          ++tally->errors;
          tally->first_error = r.ok() ? "multiGet: wrong result count" : r.status().ToString();
          break;
        }
        for (size_t j = 0; j < keys.size(); ++j) {
          if (!Matches((*r)[j], data, which[j])) ++tally->wrong;
        }
      }
      tally->ops += keys.size();
    }
  });
}

int Run(int argc, char** argv) {
  ProgramInfo info;
  info.name = kBench;
  info.description =
      "Apply and get throughput of a data component through the in-process binding and\n"
      "through the remote binding (Thrift over loopback TCP), batch sizes 1, 16 and 256,\n"
      "with the remote/in-process ratio (target: >= 0.5 at batch 256).";
  info.default_threads = {1, 2};
  info.groups = {{"apply", "batched LSN-tagged upserts (Apply)"},
                 {"get", "point reads (Get at batch 1, MultiGet otherwise)"}};
  ScratchDir scratch;
  BenchArgs args = ParseArgs(argc, argv, info, &scratch);

  // Ops per (batch, threads) run: small batches are bounded by round trips,
  // so they get fewer ops; every binding does the same ops.
  auto ops_for = [&](size_t batch) -> size_t {
    const size_t full = batch == 1 ? 100'000 : batch == 16 ? 400'000 : 1'000'000;
    return args.quick ? full / 5 : full;
  };
  bool failed = false;
  int run_id = 0;
  for (size_t batch : kBatchSizes) {
    const DataSet data(ops_for(batch));
    for (int threads : args.threads) {
      double in_process[2] = {0, 0};  // apply, get ops/s
      for (int remote = 0; remote < 2; ++remote) {
        const std::string dir = scratch.path() + "/run" + std::to_string(run_id++);
        const char* system = remote ? "remote" : "in_process";
        Progress("batch {} threads {} {}: {} ops", batch, threads, system, data.n);
        std::unique_ptr<Binding> b = OpenBinding(remote != 0, dir, threads);
        for (int phase = 0; phase < 2; ++phase) {
          const char* name = phase == 0 ? "apply" : "get";
          if (phase == 1 && !args.Wants("get")) continue;
          // Gets need the data: the apply phase always runs.
          Phase p = phase == 0 ? ApplyPhase(b->target, data, batch, threads)
                               : GetPhase(b->target, data, batch, threads);
          const double ops_per_s = Ratio(static_cast<double>(p.ops), p.seconds);
          const std::string workload = std::string(name) + "_b" + std::to_string(batch);
          if (phase == 0 && !args.Wants("apply")) continue;
          ResultLine line(kBench, workload, system, threads, p.ops, p.seconds);
          line.SetString("phase", name).Set("batch", static_cast<uint64_t>(batch));
          line.SetLatenciesNs(p.latency);
          line.Set("cpu_util", Ratio(p.cpu_seconds, p.seconds));
          if (remote == 0) {
            in_process[phase] = ops_per_s;
          } else {
            const double ratio = Ratio(ops_per_s, in_process[phase]);
            line.Set("remote_over_in_process", ratio);
            if (batch == 256) line.Set("target", kTarget).Set("meets_target", ratio >= kTarget ? 1 : 0);
          }
          if (p.wrong != 0 || p.errors != 0) {
            line.Set("wrong", p.wrong).Set("errors", p.errors);
            failed = true;
            Progress("{} {} batch {}: {} wrong, {} errors ({})", system, name, batch, p.wrong,
                     p.errors, p.first_error);
          }
          line.Print();
        }
        b.reset();
        RemoveTree(dir);
      }
    }
  }
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace deuteron::bench

int main(int argc, char** argv) { return deuteron::bench::Run(argc, argv); }
