// llama_bench: the LLAMA cache layer over the log-structured store on the real
// disk (Env::Posix()), with the disk's own sequential synced write bandwidth
// measured in the same run as the baseline. Figures: flush bandwidth (and its
// fraction of the disk's), flush CAS failure rate under contention, cleaning
// overhead, write and space amplification, reads per page load, and memory
// held against a budget. What each figure means: bench/README.md.
//
// Every workload opens its own store in a fresh subdirectory of the scratch
// directory and removes it afterwards, so disk use stays bounded.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "common/crc32c.h"
#include "common/env.h"
#include "common/random.h"
#include "dc/llama/llama.h"

namespace deuteron::bench {
namespace {

using llama::FlushOutcome;
using llama::FlushResult;
using llama::Llama;
using llama::LlamaOptions;
using llama::NodeKind;
using llama::PageId;
using llama::PageNode;

constexpr char kBench[] = "llama_bench";
constexpr uint64_t kNoBound = ~0ull;

// ---------------------------------------------------------------------------
// Driving Llama (as tests/dc/llama/llama_test.cpp does)

LlamaOptions BaseOptions() {
  LlamaOptions o;
  o.mapping.max_pages = 1 << 22;
  o.checkpoint_on_close = false;  // every store is thrown away after its run
  return o;
}

std::unique_ptr<Llama> OpenLlama(const std::string& dir, const LlamaOptions& o) {
  return CheckOk(Llama::Open(Env::Posix(), dir, o), "opening LLAMA in " + dir);
}

void CloseAndRemove(std::unique_ptr<Llama> l, const std::string& dir) {
  CheckOk(l->Close(), "closing LLAMA in " + dir);
  l.reset();
  RemoveTree(dir);
}

// A data node of `bytes` filled with a byte derived from `salt`. Allocated
// before the caller enters its guard: NewNode may run the evictor.
PageNode* NewFilledNode(Llama* l, NodeKind kind, size_t bytes, uint64_t tag, uint64_t salt) {
  PageNode* n = l->NewNode(kind, bytes, tag);
  std::memset(n->payload(), static_cast<int>('a' + salt % 26), bytes);
  return n;
}

size_t DataNodes(const PageNode* head) {
  size_t n = 0;
  for (; head != nullptr; head = head->next) n += head->is_data() ? 1 : 0;
  return n;
}

size_t DataBytes(const PageNode* head) {
  size_t n = 0;
  for (; head != nullptr; head = head->next) n += head->is_data() ? head->size : 0;
  return n;
}

// A new page holding a base of `bytes`, committed (and so flushed, tag 0) by a
// system transaction.
PageId CreatePage(Llama* l, size_t bytes) {
  auto txn = l->TBegin();
  const PageId pid = CheckOk(l->TAllocate(txn.get()), "TAllocate");
  PageNode* base = NewFilledNode(l, NodeKind::kBase, bytes, 0, pid);
  auto g = l->Enter();
  if (!CheckOk(l->TUpdateD(txn.get(), pid, nullptr, base), "TUpdateD")) {
    CheckOk(Status::Internal("TUpdateD on a new private page failed"), "creating a page");
  }
  if (!CheckOk(l->TCommit(txn.get(), 0, nullptr, nullptr, 0, 0), "TCommit")) {
    CheckOk(Status::Internal("TCommit without a final update failed"), "creating a page");
  }
  return pid;
}

// Prepends a delta of `bytes` (Update-D, retried until its CAS succeeds).
// Sets *data_nodes, if given, to the number of data nodes the page had before
// (a walk of the chain, so only callers that need it ask).
void AddDelta(Llama* l, PageId pid, size_t bytes, uint64_t tag, size_t* data_nodes = nullptr) {
  PageNode* d = NewFilledNode(l, NodeKind::kDelta, bytes, tag, tag);
  auto g = l->Enter();
  for (;;) {
    const PageNode* head = CheckOk(l->Read(pid), "Read");
    if (data_nodes != nullptr) *data_nodes = DataNodes(head);
    if (l->UpdateD(pid, head, d)) return;
  }
}

// Replaces the page's state by a new base of `bytes` (Update-R). False when
// another thread changed the page first.
bool Consolidate(Llama* l, PageId pid, size_t bytes, uint64_t tag) {
  PageNode* base = NewFilledNode(l, NodeKind::kBase, bytes, tag, pid + tag);
  auto g = l->Enter();
  const PageNode* head = CheckOk(l->Read(pid), "Read");
  if (l->UpdateR(pid, head, base)) return true;
  l->DiscardChain(base);
  return false;
}

// Flushes the page, retrying while the flush's CAS loses a race (each such
// failure is also counted in Llama::Stats::flush_failures).
FlushResult FlushPage(Llama* l, PageId pid, uint64_t bound) {
  auto g = l->Enter();
  for (;;) {
    FlushResult r = CheckOk(l->Flush(pid, bound, 0), "Flush");
    if (r.outcome != FlushOutcome::kRaced) return r;
  }
}

// Sets the LSS counters of a run (after - before) on a result line.
void SetLssCounters(const Llama::Stats& before, const Llama::Stats& after, ResultLine* line) {
  line->Set("written_bytes", after.lss.written_bytes - before.lss.written_bytes)
      .Set("record_bytes", after.lss.record_bytes - before.lss.record_bytes)
      .Set("page_change_bytes", after.page_change_bytes - before.page_change_bytes)
      .Set("flushes", after.flushes - before.flushes)
      .Set("flush_failures", after.flush_failures - before.flush_failures)
      .Set("buffers_written", after.lss.buffers_written - before.lss.buffers_written)
      .Set("syncs", after.lss.syncs - before.lss.syncs)
      .Set("reserve_waits", after.lss.reserve_waits - before.lss.reserve_waits)
      .Set("padding_bytes", after.lss.padding_bytes - before.lss.padding_bytes);
}

// ---------------------------------------------------------------------------
// 1. Disk baseline: 4 MiB WriteAt + Sync, growing a new file, then over it.
// The disk's speed swings within seconds (bench/README.md), so besides the
// initial repetitions a growing pass of the same volume runs right before
// every flush configuration: the `disk` line reports the best of all passes
// and each flush line also gives the ratio to its own paired pass.

constexpr size_t kDiskBlock = 4 << 20;
constexpr int kDiskReps = 2;

struct WritePass {
  double seconds = 0;
  double mb_per_s = 0;
  uint64_t writes = 0;
  Histogram::Snapshot latency;
};

WritePass TimedWrites(File* file, uint64_t bytes, const std::string& block) {
  Histogram h;
  WritePass p;
  Stopwatch sw;
  for (uint64_t off = 0; off < bytes; off += block.size()) {
    const uint64_t t0 = NowNanos();
    CheckOk(file->WriteAt(off, block), "disk baseline: write");
    CheckOk(file->Sync(), "disk baseline: sync");
    h.Record(NowNanos() - t0);
    p.writes++;
  }
  p.seconds = sw.Seconds();
  p.mb_per_s = Ratio(static_cast<double>(bytes) / kMiB, p.seconds);
  p.latency = h.GetSnapshot();
  return p;
}

// Every disk pass of the run, by kind.
class DiskBaseline {
 public:
  DiskBaseline(const BenchArgs& args, uint64_t bytes)
      : path_(JoinPath(args.dir, "disk-baseline.dat")), bytes_(bytes), block_(kDiskBlock, '\0') {
    Random64 rnd(42);
    rnd.Fill(block_.data(), block_.size());
  }

  // Grows a new file by bytes_; when `overwrite`, then writes it over once.
  // Returns the growing pass's bandwidth.
  double Run(bool overwrite) {
    Env* env = Env::Posix();
    if (env->FileExists(path_)) CheckOk(env->DeleteFile(path_), "disk baseline: delete");
    auto file = CheckOk(env->OpenFile(path_, OpenMode::kCreateNew), "disk baseline: create");
    WritePass grow = TimedWrites(file.get(), bytes_, block_);
    Progress("disk: {:.0f} MiB/s writing {} MiB as 4 MiB pwrite + fdatasync, growing a new file",
             grow.mb_per_s, bytes_ >> 20);
    grow_.push_back(grow);
    if (overwrite) {
      WritePass over = TimedWrites(file.get(), bytes_, block_);
      Progress("disk: {:.0f} MiB/s overwriting it", over.mb_per_s);
      overwrite_.push_back(over);
    }
    CheckOk(file->Close(), "disk baseline: close");
    CheckOk(env->DeleteFile(path_), "disk baseline: delete");
    return grow.mb_per_s;
  }

  // The best growing pass so far (0 if none).
  double best_grow() const { return Best(grow_).mb_per_s; }

  void Print() const {
    PrintLine("disk", grow_);
    PrintLine("disk-overwrite", overwrite_);
  }

 private:
  static WritePass Best(const std::vector<WritePass>& passes) {
    WritePass best;
    for (const WritePass& p : passes) {
      if (p.mb_per_s > best.mb_per_s) best = p;
    }
    return best;
  }

  void PrintLine(const char* system, const std::vector<WritePass>& passes) const {
    if (passes.empty()) return;
    std::vector<double> rates;
    for (const WritePass& p : passes) rates.push_back(p.mb_per_s);
    std::sort(rates.begin(), rates.end());
    const WritePass best = Best(passes);
    ResultLine(kBench, "seq-write-sync", system, 1, best.writes, best.seconds)
        .Set("mb_per_s", best.mb_per_s)
        .Set("mb_per_s_median", rates[rates.size() / 2])
        .Set("mb_per_s_worst", rates.front())
        .Set("passes", uint64_t{passes.size()})
        .Set("bytes", bytes_)
        .Set("block_bytes", uint64_t{kDiskBlock})
        .SetLatenciesNs(best.latency)
        .Print();
  }

  const std::string path_;
  const uint64_t bytes_;
  std::string block_;
  std::vector<WritePass> grow_, overwrite_;
};

// ---------------------------------------------------------------------------
// 2. Flush bandwidth: every thread adds a delta to one of its own pages and
// flushes it (a C-delta); every kFlushDeltasPerBase-th change of a page is a
// consolidation instead, so the page is written whole.

constexpr size_t kFlushDeltaBytes = 4 << 10;
constexpr size_t kFlushBaseBytes = 32 << 10;
constexpr int kFlushDeltasPerBase = 8;
constexpr int kFlushPagesPerThread = 64;

struct FlushConfig {
  int io_threads;
  int buffer_count;
};

struct FlushRun {
  FlushConfig config{};
  int threads = 0;
  double paired_disk_mb_per_s = 0;  // the growing disk pass run just before
  double seconds = 0;
  double mb_per_s = 0;
  double cpu_util = 0;
  Llama::Stats before, after;
  Histogram::Snapshot latency;
};

FlushRun RunFlush(const BenchArgs& args, int threads, FlushConfig config, uint64_t volume) {
  const std::string dir = JoinPath(
      args.dir, fmt::format("flush-t{}-io{}-b{}", threads, config.io_threads, config.buffer_count));
  LlamaOptions o = BaseOptions();
  o.lss.io_threads = config.io_threads;
  o.lss.buffer_count = config.buffer_count;
  auto l = OpenLlama(dir, o);
  std::vector<std::vector<PageId>> pages(static_cast<size_t>(threads));
  for (auto& own : pages) {
    for (int i = 0; i < kFlushPagesPerThread; ++i) own.push_back(CreatePage(l.get(), kFlushBaseBytes));
  }
  CheckOk(l->MakeStable(l->Tail()), "MakeStable");

  FlushRun run;
  run.config = config;
  run.threads = threads;
  run.before = l->GetStats();
  LatencySet latency(threads);
  std::atomic<uint64_t> flushed{0};
  std::atomic<bool> stop{false};
  const double cpu0 = ProcessCpuSeconds();
  Stopwatch sw;
  RunThreads(threads, [&](int t) {
    const auto& own = pages[static_cast<size_t>(t)];
    std::vector<int> changes(own.size(), 0);
    Histogram* h = latency.ForThread(t);
    // relaxed (stop, flushed): a stop flag and a byte count; they publish nothing.
    for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      const size_t k = i % own.size();
      const PageId pid = own[k];
      if (++changes[k] % kFlushDeltasPerBase == 0) {
        if (!Consolidate(l.get(), pid, kFlushBaseBytes, 1)) {
          CheckOk(Status::Internal("Update-R on a page no other thread uses failed"), "flush");
        }
      } else {
        AddDelta(l.get(), pid, kFlushDeltaBytes, 1);
      }
      const uint64_t t0 = NowNanos();
      const FlushResult r = FlushPage(l.get(), pid, kNoBound);
      h->Record(NowNanos() - t0);
      if (r.outcome != FlushOutcome::kFlushed) {
        CheckOk(Status::Internal("a changed page was not flushed"), "flush");
      }
      if (flushed.fetch_add(r.bytes, std::memory_order_relaxed) + r.bytes >= volume) {
        stop.store(true, std::memory_order_relaxed);
      }
    }
  });
  CheckOk(l->MakeStable(l->Tail()), "MakeStable");
  run.seconds = sw.Seconds();
  run.cpu_util = Ratio(ProcessCpuSeconds() - cpu0, run.seconds);
  run.after = l->GetStats();
  run.latency = latency.Merged();
  run.mb_per_s = Ratio(
      static_cast<double>(run.after.lss.written_bytes - run.before.lss.written_bytes) / kMiB,
      run.seconds);
  CloseAndRemove(std::move(l), dir);
  return run;
}

void PrintFlush(const FlushRun& run, const char* workload, double disk_mb_per_s) {
  ResultLine line(kBench, workload, "llama", run.threads,
                  run.after.flushes - run.before.flushes, run.seconds);
  line.Set("mb_per_s", run.mb_per_s)
      .Set("fraction_of_disk", Ratio(run.mb_per_s, disk_mb_per_s))
      .Set("disk_mb_per_s", disk_mb_per_s)
      .Set("paired_fraction_of_disk", Ratio(run.mb_per_s, run.paired_disk_mb_per_s))
      .Set("paired_disk_mb_per_s", run.paired_disk_mb_per_s)
      .Set("io_threads", run.config.io_threads)
      .Set("buffer_count", run.config.buffer_count)
      .Set("buffer_bytes", uint64_t{LlamaOptions{}.lss.buffer_size})
      .Set("segment_bytes", uint64_t{LlamaOptions{}.lss.segment_size})
      .Set("delta_bytes", uint64_t{kFlushDeltaBytes})
      .Set("base_bytes", uint64_t{kFlushBaseBytes})
      .Set("cpu_util", run.cpu_util);
  SetLssCounters(run.before, run.after, &line);
  line.SetLatenciesNs(run.latency).Print();
}

// Runs the sweep for every thread count, each configuration right after its
// paired disk pass; prints the disk lines, then the flush lines, whose
// fraction_of_disk is against the best disk pass of the whole run.
void RunDiskAndFlush(const BenchArgs& args, uint64_t volume) {
  DiskBaseline disk(args, volume);
  for (int rep = 0; rep < kDiskReps; ++rep) disk.Run(/*overwrite=*/true);
  if (!args.Wants("flush")) {
    disk.Print();
    return;
  }
  const FlushConfig configs[] = {{1, 4}, {2, 4}, {1, 8}, {2, 8}};
  std::vector<FlushRun> runs;
  for (int threads : args.threads) {
    for (const FlushConfig& c : configs) {
      const double paired = disk.Run(/*overwrite=*/false);
      Progress("flush: {} thread(s), io_threads {}, buffer_count {}, {} MiB", threads,
               c.io_threads, c.buffer_count, volume >> 20);
      FlushRun run = RunFlush(args, threads, c, volume);
      run.paired_disk_mb_per_s = paired;
      Progress("flush: {:.0f} MiB/s ({:.2f} of the paired disk pass), {} reserve waits, cpu {:.2f}",
               run.mb_per_s, Ratio(run.mb_per_s, paired),
               run.after.lss.reserve_waits - run.before.lss.reserve_waits, run.cpu_util);
      runs.push_back(std::move(run));
    }
  }
  disk.Print();
  const double best_disk = disk.best_grow();
  for (const FlushRun& run : runs) PrintFlush(run, "flush-sweep", best_disk);
  for (int threads : args.threads) {
    const FlushRun* best = nullptr;
    for (const FlushRun& run : runs) {
      if (run.threads == threads && (best == nullptr || run.mb_per_s > best->mb_per_s)) best = &run;
    }
    if (best != nullptr) PrintFlush(*best, "flush", best_disk);
  }
}

// ---------------------------------------------------------------------------
// 3. Flush contention: threads update and flush a few hot pages.

constexpr int kHotPages = 4;
constexpr size_t kHotDeltaBytes = 256;
constexpr size_t kHotBaseBytes = 4 << 10;
constexpr size_t kHotMaxDataNodes = 16;

void RunContention(const BenchArgs& args) {
  const int threads = std::max(2, args.MaxThreads());
  const auto duration = std::chrono::milliseconds(args.quick ? 2000 : 5000);
  const std::string dir = JoinPath(args.dir, "contention");
  auto l = OpenLlama(dir, BaseOptions());
  std::vector<PageId> hot;
  for (int i = 0; i < kHotPages; ++i) hot.push_back(CreatePage(l.get(), kHotBaseBytes));
  Progress("flush-contention: {} threads on {} hot pages for {} ms", threads, kHotPages,
           duration.count());
  const auto before = l->GetStats();
  LatencySet latency(threads);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ops{0}, next_tag{1};
  Stopwatch sw;
  std::thread timer([&] {
    std::this_thread::sleep_for(duration);
    stop.store(true, std::memory_order_relaxed);  // relaxed: a stop flag
  });
  RunThreads(threads, [&](int t) {
    Random64 rnd(1000 + static_cast<uint64_t>(t));
    Histogram* h = latency.ForThread(t);
    uint64_t mine = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const PageId pid = hot[rnd.Uniform(hot.size())];
      // relaxed: tags only need to be distinct.
      const uint64_t tag = next_tag.fetch_add(1, std::memory_order_relaxed);
      size_t data_nodes = 0;
      AddDelta(l.get(), pid, kHotDeltaBytes, tag, &data_nodes);
      if (data_nodes >= kHotMaxDataNodes) {
        Consolidate(l.get(), pid, kHotBaseBytes, tag);  // losing the race is fine
      }
      const uint64_t t0 = NowNanos();
      FlushPage(l.get(), pid, kNoBound);
      h->Record(NowNanos() - t0);
      ++mine;
    }
    ops.fetch_add(mine, std::memory_order_relaxed);  // relaxed: read after join
  });
  timer.join();
  CheckOk(l->MakeStable(l->Tail()), "MakeStable");
  const double seconds = sw.Seconds();
  const auto after = l->GetStats();
  const uint64_t flushes = after.flushes - before.flushes;
  const uint64_t failures = after.flush_failures - before.flush_failures;
  ResultLine line(kBench, "flush-contention", "llama", threads, ops.load(), seconds);
  line.Set("flush_failure_rate",
           Ratio(static_cast<double>(failures), static_cast<double>(flushes + failures)))
      .Set("hot_pages", kHotPages)
      .Set("delta_bytes", uint64_t{kHotDeltaBytes})
      .Set("update_d_failures", after.update_d_failures - before.update_d_failures)
      .Set("update_r_failures", after.update_r_failures - before.update_r_failures);
  SetLssCounters(before, after, &line);
  line.SetLatenciesNs(latency.Merged()).Print();
  Progress("flush-contention: {} flushes, {} CAS failures", flushes, failures);
  CloseAndRemove(std::move(l), dir);
}

// ---------------------------------------------------------------------------
// 4 and 5. Cleaning overhead, write and space amplification, reads per page
// load: random updates over a fixed page set, each flushed; one in
// kCleanBaseEvery is a consolidation, so older records become garbage.

constexpr int kCleanPages = 1024;  // about 12 MiB of live page states
constexpr size_t kCleanBaseBytes = 8 << 10;
constexpr size_t kCleanDeltaBytes = 1 << 10;
constexpr uint64_t kCleanBaseEvery = 8;
constexpr uint64_t kCleanSegmentBytes = 8 << 20;
constexpr uint64_t kCleanBufferBytes = 1 << 20;
constexpr size_t kCleanTrigger = 6;  // segments held before a flush cleans
constexpr size_t kCleanTarget = 4;   // segments left after cleaning

// One run of the update workload with cleaning off or on.
struct CleanRound {
  uint64_t ops = 0;
  double seconds = 0;
  Llama::Stats before, after;     // around the timed updates
  uint64_t state_bytes = 0;       // the pages' current states, after the updates
  Histogram::Snapshot latency;    // of one update (change + flush)
  Llama::Stats swapped, loaded;   // around reading every page back
  double reload_seconds = 0;
  uint64_t pages = 0;
  Histogram::Snapshot reload_latency;
};

CleanRound RunCleanRound(const BenchArgs& args, bool cleaning, int round) {
  const int threads = args.MaxThreads();
  const int pages_per_thread = kCleanPages / threads;
  const uint64_t ops_per_thread = (args.quick ? 60000 : 240000) / static_cast<uint64_t>(threads);
  const std::string name = cleaning ? "update-clean-on" : "update-clean-off";
  const std::string dir = JoinPath(args.dir, fmt::format("{}-{}", name, round));
  LlamaOptions o = BaseOptions();
  o.lss.segment_size = kCleanSegmentBytes;
  o.lss.buffer_size = kCleanBufferBytes;
  if (cleaning) {
    o.cleaning_trigger_segments = kCleanTrigger;
    o.cleaning_target_segments = kCleanTarget;
  }
  auto l = OpenLlama(dir, o);
  std::vector<std::vector<PageId>> pages(static_cast<size_t>(threads));
  std::vector<PageId> all;
  for (auto& own : pages) {
    for (int i = 0; i < pages_per_thread; ++i) {
      own.push_back(CreatePage(l.get(), kCleanBaseBytes));
      all.push_back(own.back());
    }
  }
  CheckOk(l->MakeStable(l->Tail()), "MakeStable");

  CleanRound r;
  r.pages = all.size();
  r.ops = ops_per_thread * static_cast<uint64_t>(threads);
  r.before = l->GetStats();
  LatencySet latency(threads);
  Stopwatch sw;
  RunThreads(threads, [&](int t) {
    const auto& own = pages[static_cast<size_t>(t)];
    Random64 rnd(2000 + static_cast<uint64_t>(t));
    Histogram* h = latency.ForThread(t);
    for (uint64_t i = 0; i < ops_per_thread; ++i) {
      const PageId pid = own[rnd.Uniform(own.size())];
      const uint64_t t0 = NowNanos();
      if (rnd.OneIn(kCleanBaseEvery)) {
        if (!Consolidate(l.get(), pid, kCleanBaseBytes, 1)) {
          CheckOk(Status::Internal("Update-R on a page no other thread changes failed"), name);
        }
      } else {
        AddDelta(l.get(), pid, kCleanDeltaBytes, 1);
      }
      FlushPage(l.get(), pid, kNoBound);
      h->Record(NowNanos() - t0);
    }
  });
  CheckOk(l->MakeStable(l->Tail()), "MakeStable");
  r.seconds = sw.Seconds();
  r.after = l->GetStats();
  r.latency = latency.Merged();

  // Space: every change was flushed, so each page's data nodes are its
  // flushed state.
  for (PageId pid : all) {
    auto g = l->Enter();
    r.state_bytes += DataBytes(CheckOk(l->Read(pid), "Read"));
  }
  // Reads per page load: everything out, then every page read back.
  {
    auto g = l->Enter();
    for (PageId pid : all) l->SwapOut(pid);
  }
  r.swapped = l->GetStats();
  Histogram reads;
  Stopwatch rsw;
  for (PageId pid : all) {
    const uint64_t t0 = NowNanos();
    auto g = l->Enter();
    (void)CheckOk(l->Read(pid), "Read");
    reads.Record(NowNanos() - t0);
  }
  r.reload_seconds = rsw.Seconds();
  r.loaded = l->GetStats();
  r.reload_latency = reads.GetSnapshot();
  Progress("{} (round {}): {:.0f} updates/s, {} segments cleaned, {} pages relocated", name,
           round + 1, Ratio(static_cast<double>(r.ops), r.seconds),
           r.after.segments_cleaned - r.before.segments_cleaned,
           r.after.pages_relocated - r.before.pages_relocated);
  CloseAndRemove(std::move(l), dir);
  return r;
}

// Sum over rounds of after - before of one counter.
template <typename F>
uint64_t SumDelta(const std::vector<CleanRound>& rounds, F field) {
  uint64_t sum = 0;
  for (const CleanRound& r : rounds) sum += field(r.after) - field(r.before);
  return sum;
}

// Prints the figures of one mode over all its rounds: rates from the summed
// ops and seconds, amplification from summed bytes, space and reload from the
// last round.
void PrintClean(const std::vector<CleanRound>& rounds, bool cleaning, double off_ops_per_s,
                int threads) {
  uint64_t ops = 0;
  double seconds = 0;
  Histogram::Snapshot latency;
  for (const CleanRound& r : rounds) {
    ops += r.ops;
    seconds += r.seconds;
    latency.Merge(r.latency);
  }
  const CleanRound& last = rounds.back();
  const double ops_per_s = Ratio(static_cast<double>(ops), seconds);
  using S = Llama::Stats;
  const uint64_t written = SumDelta(rounds, [](const S& s) { return s.lss.written_bytes; });
  const uint64_t change = SumDelta(rounds, [](const S& s) { return s.page_change_bytes; });
  ResultLine line(kBench, cleaning ? "update-clean-on" : "update-clean-off", "llama", threads,
                  ops, seconds);
  if (cleaning) line.Set("cleaning_overhead", 1.0 - Ratio(ops_per_s, off_ops_per_s));
  line.Set("rounds", uint64_t{rounds.size()})
      .Set("write_amplification",
           Ratio(static_cast<double>(written), static_cast<double>(change)))
      .Set("space_amplification", Ratio(static_cast<double>(last.after.lss.live_bytes_on_disk),
                                        static_cast<double>(last.state_bytes)))
      .Set("live_bytes_on_disk", last.after.lss.live_bytes_on_disk)
      .Set("page_state_bytes", last.state_bytes)
      .Set("segments_live", last.after.lss.segments_live)
      .Set("segments_cleaned", SumDelta(rounds, [](const S& s) { return s.segments_cleaned; }))
      .Set("pages_relocated", SumDelta(rounds, [](const S& s) { return s.pages_relocated; }))
      .Set("bytes_relocated", SumDelta(rounds, [](const S& s) { return s.bytes_relocated; }))
      .Set("segments_recycled",
           SumDelta(rounds, [](const S& s) { return s.lss.segments_recycled; }))
      .Set("checkpoints", SumDelta(rounds, [](const S& s) { return s.checkpoints; }))
      .Set("cleaning_trigger_segments", uint64_t{cleaning ? kCleanTrigger : 0})
      .Set("cleaning_target_segments", uint64_t{cleaning ? kCleanTarget : 0})
      .Set("pages", last.pages)
      .Set("written_bytes", written)
      .Set("record_bytes", SumDelta(rounds, [](const S& s) { return s.lss.record_bytes; }))
      .Set("page_change_bytes", change)
      .Set("flushes", SumDelta(rounds, [](const S& s) { return s.flushes; }))
      .Set("buffers_written", SumDelta(rounds, [](const S& s) { return s.lss.buffers_written; }))
      .Set("syncs", SumDelta(rounds, [](const S& s) { return s.lss.syncs; }))
      .Set("reserve_waits", SumDelta(rounds, [](const S& s) { return s.lss.reserve_waits; }))
      .SetLatenciesNs(latency)
      .Print();

  const uint64_t loads = last.loaded.page_loads - last.swapped.page_loads;
  const uint64_t load_reads = last.loaded.page_load_reads - last.swapped.page_load_reads;
  ResultLine(kBench, cleaning ? "reload-after-clean-on" : "reload-after-clean-off", "llama", 1,
             last.pages, last.reload_seconds)
      .Set("reads_per_page_load", Ratio(static_cast<double>(load_reads), static_cast<double>(loads)))
      .Set("page_loads", loads)
      .Set("page_load_reads", load_reads)
      .Set("swap_outs", last.swapped.swap_outs - last.after.swap_outs)
      .SetLatenciesNs(last.reload_latency)
      .Print();
}

// Cleaning off and on, alternating, so that the disk's swings hit both alike.
void RunCleanFigures(const BenchArgs& args) {
  const int rounds = args.quick ? 2 : 3;
  Progress("clean: {} rounds each of cleaning off and on: {} threads, {} pages, {} updates, "
           "8 MiB segments, 1 MiB buffers", rounds, args.MaxThreads(), kCleanPages,
           args.quick ? 60000 : 240000);
  std::vector<CleanRound> off, on;
  for (int round = 0; round < rounds; ++round) {
    off.push_back(RunCleanRound(args, false, round));
    on.push_back(RunCleanRound(args, true, round));
  }
  PrintClean(off, false, 0, args.MaxThreads());
  uint64_t off_ops = 0;
  double off_seconds = 0;
  for (const CleanRound& r : off) {
    off_ops += r.ops;
    off_seconds += r.seconds;
  }
  PrintClean(on, true, Ratio(static_cast<double>(off_ops), off_seconds), args.MaxThreads());
}

// ---------------------------------------------------------------------------
// 6. Memory against a budget: sustained updates over a data set about four
// times the budget, memory sampled by a monitor thread.

constexpr size_t kBudgetPageBytes = 8 << 10;
constexpr size_t kBudgetDeltaBytes = 256;
constexpr size_t kBudgetMaxDataNodes = 8;
constexpr uint64_t kBudgetFlushEvery = 4;

// Samples Llama::MemoryUsage() and the epoch manager's pending garbage every
// millisecond while alive. With LLAMA_BENCH_TRACE set in the environment it
// also prints every sample to stderr (a time series for investigating peaks).
class MemoryMonitor {
 public:
  MemoryMonitor(Llama* l, uint64_t budget) : l_(l), budget_(budget) {
    thread_ = std::thread([this] {
      const bool trace = std::getenv("LLAMA_BENCH_TRACE") != nullptr;
      Stopwatch sw;
      // relaxed: a stop flag; the results are read after join.
      while (!stop_.load(std::memory_order_relaxed)) {
        const uint64_t m = l_->MemoryUsage();
        const uint64_t pending = l_->epochs()->PendingBytes();
        samples_.Record(m);
        max_pending_ = std::max(max_pending_, pending);
        if (m > max_) {
          max_ = m;
          pending_at_max_ = pending;
        }
        over_ += m > budget_ ? 1 : 0;
        if (trace) {
          const auto st = l_->GetStats();
          Progress("memory {:.3f}s {} pending {} eviction_passes {} swap_outs {} page_loads {}",
                   sw.Seconds(), m, pending, st.eviction_passes, st.swap_outs, st.page_loads);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  ~MemoryMonitor() { Stop(); }
  void Stop() {
    if (!thread_.joinable()) return;
    stop_.store(true, std::memory_order_relaxed);
    thread_.join();
  }
  // REQUIRES: Stop() was called.
  uint64_t max() const { return max_; }
  uint64_t pending_at_max() const { return pending_at_max_; }
  uint64_t max_pending() const { return max_pending_; }
  Histogram::Snapshot samples() const { return samples_.GetSnapshot(); }
  double fraction_over() const {
    return Ratio(static_cast<double>(over_), static_cast<double>(samples_.GetSnapshot().count));
  }

 private:
  Llama* const l_;
  const uint64_t budget_;
  std::atomic<bool> stop_{false};
  // Owned by the monitor thread until join.
  Histogram samples_;
  uint64_t max_ = 0, pending_at_max_ = 0, max_pending_ = 0, over_ = 0;
  std::thread thread_;
};

void RunBudget(const BenchArgs& args) {
  const int threads = args.MaxThreads();
  const uint64_t budget = args.quick ? (32ull << 20) : (128ull << 20);
  const uint64_t page_count = 4 * budget / kBudgetPageBytes;
  const auto duration = std::chrono::milliseconds(args.quick ? 5000 : 20000);
  const std::string dir = JoinPath(args.dir, "budget");
  LlamaOptions o = BaseOptions();
  o.memory_budget = budget;
  auto l = OpenLlama(dir, o);

  Progress("budget: creating {} pages of {} KiB ({} MiB) under a {} MiB budget", page_count,
           kBudgetPageBytes >> 10, page_count * kBudgetPageBytes >> 20, budget >> 20);
  std::vector<PageId> pages;
  pages.reserve(page_count);
  uint64_t create_max = 0;
  {
    MemoryMonitor monitor(l.get(), budget);
    for (uint64_t i = 0; i < page_count; ++i) pages.push_back(CreatePage(l.get(), kBudgetPageBytes));
    CheckOk(l->MakeStable(l->Tail()), "MakeStable");
    monitor.Stop();
    create_max = monitor.max();
  }
  Progress("budget: created; memory {} MiB (max {} MiB while creating); {} ms of updates",
           l->MemoryUsage() >> 20, create_max >> 20, duration.count());

  const auto before = l->GetStats();
  LatencySet latency(threads);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ops{0}, next_tag{1};
  MemoryMonitor monitor(l.get(), budget);
  Stopwatch sw;
  std::thread timer([&] {
    std::this_thread::sleep_for(duration);
    stop.store(true, std::memory_order_relaxed);  // relaxed: a stop flag
  });
  RunThreads(threads, [&](int t) {
    Random64 rnd(3000 + static_cast<uint64_t>(t));
    Histogram* h = latency.ForThread(t);
    uint64_t mine = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const PageId pid = pages[rnd.Uniform(pages.size())];
      // relaxed: tags only need to be distinct.
      const uint64_t tag = next_tag.fetch_add(1, std::memory_order_relaxed);
      const uint64_t t0 = NowNanos();
      size_t data_nodes = 0;
      AddDelta(l.get(), pid, kBudgetDeltaBytes, tag, &data_nodes);
      if (data_nodes >= kBudgetMaxDataNodes) {
        Consolidate(l.get(), pid, kBudgetPageBytes, tag);  // losing a race is fine
      }
      if (++mine % kBudgetFlushEvery == 0) FlushPage(l.get(), pid, kNoBound);
      h->Record(NowNanos() - t0);
    }
    ops.fetch_add(mine, std::memory_order_relaxed);  // relaxed: read after join
  });
  timer.join();
  const double seconds = sw.Seconds();
  monitor.Stop();
  const auto after = l->GetStats();
  const uint64_t loads = after.page_loads - before.page_loads;
  const Histogram::Snapshot memory = monitor.samples();
  ResultLine(kBench, "budget", "llama", threads, ops.load(), seconds)
      .Set("budget_bytes", budget)
      .Set("max_memory_bytes", monitor.max())
      .Set("max_over_budget", Ratio(static_cast<double>(monitor.max()), static_cast<double>(budget)) - 1.0)
      .Set("p99_memory_bytes", memory.Percentile(99))
      .Set("mean_memory_bytes", memory.mean)
      .Set("fraction_of_samples_over_budget", monitor.fraction_over())
      .Set("samples", memory.count)
      .Set("epoch_pending_bytes_at_max", monitor.pending_at_max())
      .Set("max_epoch_pending_bytes", monitor.max_pending())
      .Set("create_max_memory_bytes", create_max)
      .Set("data_set_bytes", page_count * kBudgetPageBytes)
      .Set("pages", page_count)
      .Set("delta_bytes", uint64_t{kBudgetDeltaBytes})
      .Set("eviction_passes", after.eviction_passes - before.eviction_passes)
      .Set("eviction_flushes", after.eviction_flushes - before.eviction_flushes)
      .Set("swap_outs", after.swap_outs - before.swap_outs)
      .Set("partial_swaps", after.partial_swaps - before.partial_swaps)
      .Set("page_loads", loads)
      .Set("reads_per_page_load",
           Ratio(static_cast<double>(after.page_load_reads - before.page_load_reads),
                 static_cast<double>(loads)))
      .Set("flushes", after.flushes - before.flushes)
      .Set("written_bytes", after.lss.written_bytes - before.lss.written_bytes)
      .SetLatenciesNs(latency.Merged())
      .Print();
  Progress("budget: max {:.1f} MiB of {} MiB ({:+.1f}%), {} page loads", monitor.max() / kMiB,
           budget >> 20, 100.0 * (static_cast<double>(monitor.max()) / static_cast<double>(budget) - 1.0),
           loads);
  CloseAndRemove(std::move(l), dir);
}

// CRC32C, which checksums every LSS page record and every sealed buffer: the
// portable and the hardware code over a 4 KiB buffer (a page record) and a
// 4 MiB one (a flush buffer), each run over the same total volume.
void RunChecksum(const BenchArgs& args) {
  const uint64_t volume = args.quick ? (256ull << 20) : (2048ull << 20);
  using Extend = uint32_t (*)(uint32_t, const char*, size_t);
  const std::pair<const char*, Extend> systems[] = {{"portable", &crc32c::ExtendPortable},
                                                    {"hardware", &crc32c::ExtendHardware}};
  volatile uint32_t sink = 0;  // keeps the loops from being optimized away
  for (const size_t len : {size_t{4} << 10, size_t{4} << 20}) {
    std::vector<char> buf(len);
    Random64 rnd(len);
    rnd.Fill(buf.data(), buf.size());
    const uint64_t reps = volume / len;
    for (const auto& [system, extend] : systems) {
      if (extend == &crc32c::ExtendHardware && !crc32c::HardwareAvailable()) continue;
      uint32_t crc = 0;
      Stopwatch sw;
      for (uint64_t r = 0; r < reps; ++r) crc = extend(crc, buf.data(), len);
      const double seconds = sw.Seconds();
      sink = crc;
      ResultLine(kBench, len < (1u << 20) ? "crc32c-4k" : "crc32c-4m", system, 1, reps, seconds)
          .Set("buffer_bytes", uint64_t{len})
          .Set("gb_per_s", Ratio(static_cast<double>(reps * len) / 1e9, seconds))
          .Print();
    }
  }
  (void)sink;
}

int Main(int argc, char** argv) {
  ProgramInfo info;
  info.name = kBench;
  info.description =
      "LLAMA over the log-structured store on the real disk (Env::Posix()): disk baseline,\n"
      "flush bandwidth, flush failures under contention, cleaning overhead, write/space\n"
      "amplification, reads per page load, memory against a budget. See bench/README.md.\n"
      "--threads sets the flush workload's thread counts; the other multi-threaded\n"
      "workloads use the largest (flush-contention at least 2).";
  info.default_threads = {1, 2};
  info.groups = {
      {"disk", "sequential synced write bandwidth, growing and overwriting a file"},
      {"flush", "flush bandwidth (io_threads x buffer_count sweep, each after a disk pass)"},
      {"contention", "flush CAS failure rate on a few hot pages"},
      {"clean", "cleaning on/off, write/space amplification, reads per page load"},
      {"budget", "memory held under a budget with a data set 4x the budget"},
      {"checksum", "CRC32C throughput, portable and hardware, on 4 KiB and 4 MiB buffers"},
  };
  ScratchDir scratch;
  const BenchArgs args = ParseArgs(argc, argv, info, &scratch);
  const uint64_t volume = args.quick ? (256ull << 20) : (1024ull << 20);
  Progress("llama_bench{}: scratch directory {}", args.quick ? " --quick" : "", args.dir);

  if (args.Wants("disk") || args.Wants("flush")) RunDiskAndFlush(args, volume);
  if (args.Wants("contention")) RunContention(args);
  if (args.Wants("clean")) RunCleanFigures(args);
  if (args.Wants("budget")) RunBudget(args);
  if (args.Wants("checksum")) RunChecksum(args);
  Progress("done");
  return 0;
}

}  // namespace
}  // namespace deuteron::bench

int main(int argc, char** argv) { return deuteron::bench::Main(argc, argv); }
