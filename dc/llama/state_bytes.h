// StateBytes: the LSS bytes each page's durable state occupies, and their
// total, the cache's live bytes (llama.md, "Live bytes").
//
// A page's LSS state is the chain of records from its newest one (the
// address its flush node, mapping entry or replacement base names) down to
// its kBase; its bytes are the sum of their spans. The state at an address
// never changes, so (page, address) -> bytes is a fact: this table caches
// the newest fact noted for each page, and Lookup answers only for the
// address asked about (a stale or racing note is a miss, never a wrong
// answer; the caller then walks the chain in the LSS). The total is kept by
// the deltas its callers add as they change page states.
//
// Thread safety: every method may be called from any thread (relaxed
// atomics: Total is a statistic, exact once the cache is quiescent).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>

#include "dc/llama/lss_format.h"

namespace deuteron::llama {

class StateBytes {
 public:
  // Reserves one word per PID below `capacity` (backed by the OS on first
  // touch, like the mapping table). With no address space, nothing is
  // cached and every Lookup misses.
  explicit StateBytes(uint64_t capacity);
  ~StateBytes();
  StateBytes(const StateBytes&) = delete;
  StateBytes& operator=(const StateBytes&) = delete;

  // Records that page `pid`'s state at `head` (not null) occupies `bytes`.
  void Note(PageId pid, LssAddress head, uint64_t bytes);
  // The bytes noted for page `pid`'s state at `head`; nullopt when the
  // newest note for the page is about another address (or there is none).
  std::optional<uint64_t> Lookup(PageId pid, LssAddress head) const;

  void Add(int64_t delta) { total_.fetch_add(delta, std::memory_order_relaxed); }
  void Set(int64_t total) { total_.store(total, std::memory_order_relaxed); }
  int64_t Total() const { return total_.load(std::memory_order_relaxed); }

 private:
  // A word: the address's bits 3..34 (records are 8-byte aligned) over the
  // bytes (below 2^32: a state is at most a few flush buffers). 0: none.
  static uint64_t Pack(LssAddress head, uint64_t bytes);

  uint64_t capacity_ = 0;
  std::atomic<uint64_t>* words_ = nullptr;
  std::atomic<int64_t> total_{0};
};

}  // namespace deuteron::llama
