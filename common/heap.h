// The process allocator: which one the program was linked with, and how many
// bytes it has handed out. Deuteron's programs link jemalloc unless built
// under a sanitizer (CMakeLists.txt, DEUTERON_JEMALLOC); this is the one place
// that knows the difference, for benchmarks and diagnostics that report
// memory.
//
// Thread safety: both functions may be called from any thread.
#pragma once

#include <cstdint>
#include <string_view>

namespace deuteron {

// "jemalloc", "glibc", or "sanitizer" (ASan's or TSan's own allocator).
std::string_view HeapAllocatorName();

// Bytes the program holds allocated now, all threads together: jemalloc's
// stats.allocated (refreshed on each call; blocks parked in a thread's cache
// count as allocated), glibc's mallinfo2 in-use bytes (mmapped chunks
// included), or the sanitizer's allocated bytes. A difference of two
// readings is what happened in between, to within the allocator's caches.
uint64_t HeapBytesInUse();

}  // namespace deuteron
