#include "common/heap.h"

#include <malloc.h>

#include <cstddef>

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

}  // namespace deuteron
