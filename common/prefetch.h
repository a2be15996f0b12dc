// Software prefetch of whole cache lines: a hint that asks for memory about
// to be read, so that its misses overlap other work (or each other) instead
// of following one another. A prefetch never faults, so a range may run past
// the object it starts in; the addresses are computed as integers, never as
// pointers outside that object.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

namespace deuteron {

inline constexpr int kCacheLineBytes = 64;

// Asks for `lines` cache lines from `lines_before` lines below `at` upward.
inline void PrefetchLines(const void* at, int lines, int lines_before = 0) {
  const uintptr_t from =
      reinterpret_cast<uintptr_t>(at) - static_cast<uintptr_t>(lines_before) * kCacheLineBytes;
  for (int i = 0; i < lines; ++i) {
    const uintptr_t line = from + static_cast<uintptr_t>(i) * kCacheLineBytes;
    __builtin_prefetch(reinterpret_cast<const void*>(line));
  }
}

}  // namespace deuteron
