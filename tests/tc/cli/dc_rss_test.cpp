// The memory budget bounds a real `deuteron dc` process (issue 33; dc/dc.md,
// "The memory budget"): a server started with --memory-budget B is loaded
// over the DC protocol the way a TC loads it (LSN-tagged batches of 1 KiB
// values under random keys, the ESL following, an RSSP proposal every B)
// with ten times B, and its peak resident memory (VmHWM in
// /proc/<pid>/status) stays within 1.1 B plus the documented allowance and
// the program's own floor (binary and libraries). Only where the program's allocator is jemalloc
// (the test binary is built with the program's preset: a sanitizer's
// allocator keeps its own quarantine and shadow).
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/heap.h"
#include "common/random.h"
#include "protocol/remote_dc.h"
#include "tests/tc/cli/dc_child.h"

namespace deuteron {
namespace {

void RunServerMemory(uint64_t budget) {
  if (HeapAllocatorName() != "jemalloc") {
    WARN("skipped: the allocator is " << HeapAllocatorName() << ", not jemalloc");
    return;
  }
  constexpr uint64_t kValue = 1024;
  // dc/dc.md, "The memory budget": thread stacks, the LSS's reads, the
  // allocator's and LLAMA's per-thread caches, CLOCK bits, connection buffers.
  constexpr uint64_t kAllowance = 8 << 20;
  // What the process holds before it opens the store: the binary, its
  // libraries, the allocator's start (about 10 MiB, dc/dc.md).
  constexpr uint64_t kProcessFloor = 12 << 20;
  const uint64_t load = 10 * budget;
  const std::string dir = TempDir();
  test::Child child({"dc", "--dir", dir, "--listen", "127.0.0.1:0", "--memory-budget",
                     std::to_string(budget), "--checkpoint-ms", "0"});
  const uint16_t port = StartDc(&child);
  const uint64_t serving = child.process().RssBytes();
  REQUIRE(serving > 0);

  protocol::RemoteOptions ro;
  ro.port = port;
  ro.max_connections = 1;
  Result<std::unique_ptr<protocol::RemoteDataComponent>> remote =
      protocol::RemoteDataComponent::Connect(ro);
  INFO(remote.status().ToString());
  REQUIRE(remote.ok());
  DataComponent* dc = remote->get();
  Result<DcHealth> health = dc->Health();
  REQUIRE(health.ok());

  const auto start = std::chrono::steady_clock::now();
  Random64 rnd(33);
  const std::string value(kValue, 'v');
  uint64_t lsn = 0, since_rssp = 0, max_rss = 0, max_cache = 0;
  for (uint64_t loaded = 0; loaded < load;) {
    std::vector<RecordOp> ops;
    for (int i = 0; i < 64; ++i) {
      char key[32];
      std::snprintf(key, sizeof(key), "k%016llx", static_cast<unsigned long long>(rnd.Next()));
      ops.push_back(RecordOp{RecordOpKind::kUpsert, key, value, ++lsn});
      loaded += ops.back().key.size() + value.size();
      since_rssp += ops.back().key.size() + value.size();
    }
    Result<ApplyResult> r = dc->Apply(ops, lsn, health->incarnation);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    REQUIRE(r->applied == ops.size());  // every record is in the DC
    if (since_rssp >= budget) {
      Status s = dc->ProposeRssp(lsn, health->incarnation);
      INFO(s.ToString());
      REQUIRE(s.ok());
      since_rssp = 0;
      max_rss = std::max(max_rss, child.process().RssBytes());
      Result<DcStats> stats = dc->GetStats();
      REQUIRE(stats.ok());
      max_cache = std::max(max_cache, stats->memory_bytes);
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const uint64_t peak = child.process().PeakRssBytes();
  REQUIRE(peak > 0);
  // The whole process, not its growth: the flush-buffer ring, touched at
  // open, is part of B, and what the program holds before it opens the
  // store (binary, libraries, the allocator's start) is the floor.
  const uint64_t bound = budget + budget / 10 + kAllowance + kProcessFloor;
  std::printf(
      "deuteron dc --memory-budget %.0f MiB: loaded %.0f MiB in %.1f s; resident once serving "
      "%.1f MiB, most at an RSSP %.1f MiB (cache count %.1f MiB), peak (VmHWM) %.1f MiB "
      "(bound %.1f MiB = 1.1 B + %.0f MiB allowance + %.0f MiB floor)\n",
      budget / 1048576.0, load / 1048576.0, seconds, serving / 1048576.0, max_rss / 1048576.0,
      max_cache / 1048576.0,
      peak / 1048576.0, bound / 1048576.0, kAllowance / 1048576.0, kProcessFloor / 1048576.0);
  std::fflush(stdout);
  CHECK(peak <= bound);
  CHECK(child.Stop(SIGTERM) == 0);
  std::filesystem::remove_all(dir);
}

}  // namespace

// The server: a 32 MiB budget (the flush-buffer ring alone is 16 MiB,
// so no smaller budget fits `deuteron dc`'s defaults), 320 MiB loaded.
TEST_CASE("deuteron dc loaded with ten times its memory budget stays within it",
          "[tc][cli][memory]") {
  RunServerMemory(32 << 20);
}

}  // namespace deuteron
