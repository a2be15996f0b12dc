// The process allocator: which one the program was linked with, and how many
// bytes it has handed out. Deuteron's programs link jemalloc unless built
// under a sanitizer (CMakeLists.txt, DEUTERON_JEMALLOC); this is the one place
// that knows the difference, for benchmarks and diagnostics that report
// memory.
//
// Also the allocator's retention of freed memory (issue 33: a process's
// resident memory is what its memory budget has to bound, and jemalloc keeps
// freed pages for a while to reuse them).
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace deuteron {

// "jemalloc", "glibc", or "sanitizer" (ASan's or TSan's own allocator).
std::string_view HeapAllocatorName();

// Bytes the program holds allocated now, all threads together: jemalloc's
// stats.allocated (refreshed on each call; blocks parked in a thread's cache
// count as allocated), glibc's mallinfo2 in-use bytes (mmapped chunks
// included), or the sanitizer's allocated bytes. A difference of two
// readings is what happened in between, to within the allocator's caches.
uint64_t HeapBytesInUse();

// Bytes of physical memory the allocator holds (jemalloc's stats.resident:
// pages in use, dirty pages it keeps for reuse, its metadata); 0 where the
// allocator does not say (glibc, sanitizers).
uint64_t HeapBytesResident();

// Bytes of freed pages the allocator keeps mapped for reuse (jemalloc's
// dirty and muzzy pages, all arenas): what PurgeHeap gives back. 0 where the
// allocator does not say.
uint64_t HeapBytesRetained();

// How long the allocator keeps freed pages before giving them back to the OS.
struct HeapRetention {
  // Give pages back on jemalloc's background threads (one per CPU at most,
  // asleep when idle) rather than in the threads that free.
  bool background_thread = true;
  // Dirty (freed, still mapped) pages go back to the OS over this time; -1:
  // never. jemalloc's default is 10 s.
  int64_t dirty_decay_ms = 1000;
  // The second stage (MADV_FREE: still counted resident until the kernel
  // needs the memory). 0: skip it, dirty pages go straight back.
  int64_t muzzy_decay_ms = 0;
};

// Applies `retention` to every arena, present and future. NotSupported
// without jemalloc (nothing changes); Internal when jemalloc refuses a
// setting. Process-wide: the program's entry point calls it.
Status ConfigureHeapRetention(const HeapRetention& retention);

// Gives every free page the allocator holds back to the OS now (all arenas;
// a no-op without jemalloc).
void PurgeHeap();

// The allocator arena the calling thread allocates from (jemalloc's
// thread.arena); -1 where the allocator has none to name (glibc,
// sanitizers). Cached per thread after the first call.
int HeapThreadArena();

// Makes the calling thread allocate from `arena`, an index HeapThreadArena
// returned on some thread: a helper thread that allocates and frees what a
// foreground thread also does (LLAMA's cleaner) then shares its arena
// instead of keeping a second one's partly used slabs and dirty pages
// resident (issue 34). A no-op for -1 or without jemalloc.
void SetHeapThreadArena(int arena);

}  // namespace deuteron
