#include "common/heap.h"

#include <malloc.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <vector>

namespace deuteron {
namespace {

constexpr size_t kBlock = 64 << 10;
constexpr size_t kBlocks = 1024;  // 64 MiB in all
constexpr uint64_t kTotal = uint64_t{kBlock} * kBlocks;
// What the allocator's thread caches and the test framework's own blocks can
// move the figures by meanwhile (a few hundred KiB seen).
constexpr uint64_t kSlack = 4 << 20;

std::vector<std::unique_ptr<char[]>> AllocateTouched() {
  std::vector<std::unique_ptr<char[]>> blocks;
  for (size_t i = 0; i < kBlocks; ++i) {
    blocks.emplace_back(new char[kBlock]);
    std::memset(blocks.back().get(), static_cast<int>(i), kBlock);
  }
  return blocks;
}

uint64_t GlibcInUse() {
  const struct mallinfo2 mi = mallinfo2();
  return static_cast<uint64_t>(mi.uordblks) + static_cast<uint64_t>(mi.hblkhd);
}

TEST_CASE("HeapBytesInUse follows what the program allocates and frees", "[heap]") {
  const uint64_t before = HeapBytesInUse();
  auto blocks = AllocateTouched();
  const uint64_t held = HeapBytesInUse();
  CHECK(held + kSlack >= before + kTotal);
  CHECK(held <= before + kTotal + kTotal / 4);
  blocks.clear();
  const uint64_t after = HeapBytesInUse();
  CHECK(after + kTotal <= held + kSlack);
}

TEST_CASE("HeapAllocatorName names the allocator that serves operator new", "[heap]") {
  // glibc's own statistics see only what glibc's malloc handed out.
  const uint64_t glibc_before = GlibcInUse();
  auto blocks = AllocateTouched();
  const uint64_t glibc_grew = GlibcInUse() - glibc_before;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  CHECK(HeapAllocatorName() == "sanitizer");
  CHECK(glibc_grew < kTotal / 16);
#elif defined(DEUTERON_JEMALLOC)
  CHECK(HeapAllocatorName() == "jemalloc");
  CHECK(glibc_grew < kTotal / 16);
#else
  CHECK(HeapAllocatorName() == "glibc");
  CHECK(glibc_grew >= kTotal);
#endif
}

}  // namespace
}  // namespace deuteron

namespace deuteron {
namespace {

TEST_CASE("PurgeHeap gives back the freed pages the allocator keeps", "[heap]") {
  if (HeapAllocatorName() != "jemalloc") {
    CHECK(ConfigureHeapRetention(HeapRetention{}).code() == Code::kNotSupported);
    CHECK(HeapBytesRetained() == 0);
    CHECK(HeapBytesResident() == 0);
    return;
  }
  // Keep freed pages indefinitely, so that they wait for the purge.
  HeapRetention keep;
  keep.background_thread = false;
  keep.dirty_decay_ms = -1;
  keep.muzzy_decay_ms = -1;
  REQUIRE(ConfigureHeapRetention(keep).ok());
  PurgeHeap();
  const uint64_t retained_before = HeapBytesRetained();
  auto blocks = AllocateTouched();
  const uint64_t resident_held = HeapBytesResident();
  CHECK(resident_held >= kTotal);
  blocks.clear();
  const uint64_t retained = HeapBytesRetained();
  CHECK(retained + kSlack >= retained_before + kTotal);
  PurgeHeap();
  CHECK(HeapBytesRetained() + kTotal <= retained + kSlack);
  CHECK(HeapBytesResident() + kTotal <= resident_held + kSlack);
  REQUIRE(ConfigureHeapRetention(HeapRetention{}).ok());
}

}  // namespace
}  // namespace deuteron
