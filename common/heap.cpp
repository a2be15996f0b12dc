#include "common/heap.h"

#include <errno.h>
#include <malloc.h>

#include <cstddef>
#include <string>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// The sanitizer's allocator serves malloc; glibc's statistics see nothing.
// Its figures come from the runtime's allocator interface (GCC 12 ships no
// header for it).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#define DEUTERON_SANITIZER_HEAP 1
#elif defined(DEUTERON_JEMALLOC)
// jemalloc's control interface (libjemalloc-dev's <jemalloc/jemalloc.h>
// declares the same; declared here to keep its macros out of the build).
extern "C" int mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen);
#endif

namespace deuteron {

std::string_view HeapAllocatorName() {
#if defined(DEUTERON_SANITIZER_HEAP)
  return "sanitizer";
#elif defined(DEUTERON_JEMALLOC)
  return "jemalloc";
#else
  return "glibc";
#endif
}

uint64_t HeapBytesInUse() {
#if defined(DEUTERON_SANITIZER_HEAP)
  return __sanitizer_get_current_allocated_bytes();
#elif defined(DEUTERON_JEMALLOC)
  // Statistics are a snapshot taken when "epoch" is written.
  uint64_t epoch = 1;
  size_t len = sizeof(epoch);
  if (mallctl("epoch", &epoch, &len, &epoch, sizeof(epoch)) != 0) return 0;
  size_t allocated = 0;
  len = sizeof(allocated);
  if (mallctl("stats.allocated", &allocated, &len, nullptr, 0) != 0) return 0;
  return allocated;
#else
  const struct mallinfo2 mi = mallinfo2();
  return static_cast<uint64_t>(mi.uordblks) + static_cast<uint64_t>(mi.hblkhd);
#endif
}

#if defined(DEUTERON_JEMALLOC) && !defined(DEUTERON_SANITIZER_HEAP)
namespace {

template <typename T>
bool ReadCtl(const char* name, T* value) {
  size_t len = sizeof(T);
  return mallctl(name, value, &len, nullptr, 0) == 0;
}

template <typename T>
int WriteCtl(const std::string& name, T value) {
  return mallctl(name.c_str(), nullptr, nullptr, &value, sizeof(T));
}

}  // namespace
#endif

uint64_t HeapBytesResident() {
#if defined(DEUTERON_JEMALLOC) && !defined(DEUTERON_SANITIZER_HEAP)
  uint64_t epoch = 1;
  size_t len = sizeof(epoch);
  if (mallctl("epoch", &epoch, &len, &epoch, sizeof(epoch)) != 0) return 0;
  size_t resident = 0;
  return ReadCtl("stats.resident", &resident) ? resident : 0;
#else
  return 0;
#endif
}

uint64_t HeapBytesRetained() {
#if defined(DEUTERON_JEMALLOC) && !defined(DEUTERON_SANITIZER_HEAP)
  uint64_t epoch = 1;
  size_t len = sizeof(epoch);
  if (mallctl("epoch", &epoch, &len, &epoch, sizeof(epoch)) != 0) return 0;
  size_t page = 0, dirty = 0, muzzy = 0;
  // MALLCTL_ARENAS_ALL (4096): the sum over every arena.
  if (!ReadCtl("arenas.page", &page) || !ReadCtl("stats.arenas.4096.pdirty", &dirty) ||
      !ReadCtl("stats.arenas.4096.pmuzzy", &muzzy)) {
    return 0;
  }
  return static_cast<uint64_t>(dirty + muzzy) * page;
#else
  return 0;
#endif
}

Status ConfigureHeapRetention(const HeapRetention& retention) {
#if defined(DEUTERON_JEMALLOC) && !defined(DEUTERON_SANITIZER_HEAP)
  using ssize = long;  // jemalloc's ssize_t
  auto fail = [](const std::string& name, int err) {
    return Status::Internal("jemalloc refused " + name + " (error " + std::to_string(err) + ")");
  };
  // Future arenas first, then every arena that exists.
  const ssize dirty = static_cast<ssize>(retention.dirty_decay_ms);
  const ssize muzzy = static_cast<ssize>(retention.muzzy_decay_ms);
  if (int e = WriteCtl("arenas.dirty_decay_ms", dirty); e != 0) {
    return fail("arenas.dirty_decay_ms", e);
  }
  if (int e = WriteCtl("arenas.muzzy_decay_ms", muzzy); e != 0) {
    return fail("arenas.muzzy_decay_ms", e);
  }
  unsigned narenas = 0;
  if (!ReadCtl("arenas.narenas", &narenas)) return Status::Internal("jemalloc: arenas.narenas");
  for (unsigned i = 0; i < narenas; ++i) {
    // An arena not created yet answers EFAULT: it takes the defaults above.
    const std::string prefix = "arena." + std::to_string(i);
    int e = WriteCtl(prefix + ".dirty_decay_ms", dirty);
    if (e == 0) e = WriteCtl(prefix + ".muzzy_decay_ms", muzzy);
    if (e != 0 && e != EFAULT) return fail(prefix + ".*_decay_ms", e);
  }
  if (int e = WriteCtl("background_thread", retention.background_thread); e != 0) {
    return fail("background_thread", e);
  }
  return Status::OK();
#else
  (void)retention;
  return Status::NotSupported("the allocator is not jemalloc");
#endif
}

void PurgeHeap() {
#if defined(DEUTERON_JEMALLOC) && !defined(DEUTERON_SANITIZER_HEAP)
  // MALLCTL_ARENAS_ALL (4096): every arena.
  mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);
#endif
}

#if defined(DEUTERON_JEMALLOC) && !defined(DEUTERON_SANITIZER_HEAP)
namespace {
thread_local int thread_arena = -2;  // -2: not asked yet
}  // namespace
#endif

int HeapThreadArena() {
#if defined(DEUTERON_JEMALLOC) && !defined(DEUTERON_SANITIZER_HEAP)
  if (thread_arena == -2) {
    unsigned arena = 0;
    thread_arena = ReadCtl("thread.arena", &arena) ? static_cast<int>(arena) : -1;
  }
  return thread_arena;
#else
  return -1;
#endif
}

void SetHeapThreadArena(int arena) {
#if defined(DEUTERON_JEMALLOC) && !defined(DEUTERON_SANITIZER_HEAP)
  if (arena < 0 || arena == thread_arena) return;
  unsigned a = static_cast<unsigned>(arena);
  if (mallctl("thread.arena", nullptr, nullptr, &a, sizeof(a)) == 0) thread_arena = arena;
#else
  (void)arena;
#endif
}

}  // namespace deuteron
