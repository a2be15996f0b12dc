// Internal to dc/llama/llama*.cpp: what the files that implement Llama share.
// Not part of LLAMA's interface.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <string>
#include <vector>

#include "dc/llama/llama.h"

namespace deuteron::llama {

// Bytes of nodes the cache holds, summed over per-thread shards so that
// allocation does not bounce one cache line between threads. Relaxed: the
// total is a statistic and a budget signal, never used to order memory.
class Llama::MemoryCounter {
 public:
  void Add(int64_t n) { shards_[ShardIndex()].bytes.fetch_add(n, std::memory_order_relaxed); }
  int64_t Total() const {
    int64_t t = 0;
    for (const auto& s : shards_) t += s.bytes.load(std::memory_order_relaxed);
    return t;
  }

 private:
  static constexpr size_t kShards = 16;
  struct alignas(64) Shard {
    std::atomic<int64_t> bytes{0};
  };
  static size_t ShardIndex() {
    thread_local const size_t index = std::hash<std::thread::id>()(std::this_thread::get_id()) % kShards;
    return index;
  }
  Shard shards_[kShards];
};

// What a walk down a chain finds (see page_node.h for the flushed-ness rule).
struct Llama::ChainInfo {
  bool has_flush = false;            // a kFlush or kPartialSwap node defines flushed-ness
  uint64_t bound = 0;                // its bound
  uint64_t flush_seq = 0;            // its seq (a partial swap's seq_hi)
  uint64_t annotation = 0;
  LssAddress lss_head = kNullAddress;  // newest LSS state: topmost flush/relocation, or base prior
  LssAddress lss_end = kNullAddress;
  LssAddress lss_base = kNullAddress;  // the kBase record ending that chain (0: unknown)
  uint32_t lss_depth = 0;              // records in that chain (0: unknown, or none)
  uint32_t lss_chain_bytes = 0;        // bytes of its C-deltas
  const PageNode* base = nullptr;
  bool base_flushed = false;
  bool partial_swap = false;
  std::vector<const PageNode*> unflushed;  // data nodes, chain order
};

// The depth and C-delta bytes of a page's LSS chain once a C-delta of
// `span` bytes goes over it (saturating).
inline uint32_t DeeperBy(uint32_t depth) { return depth == 0 ? 0 : depth + 1; }
inline uint32_t ChainBytesPlus(uint32_t bytes, size_t span) {
  return static_cast<uint32_t>(std::min<uint64_t>(uint64_t{bytes} + span, UINT32_MAX));
}

inline void Llama::SetLssStateAsFound(FlushNode* f, const ChainInfo& info) {
  f->address = info.lss_head;
  f->end = info.lss_end;
  f->base = info.lss_base;
  f->depth = info.lss_depth;
  f->chain_bytes = info.lss_chain_bytes;
  f->annotation = info.annotation;
}

inline void Llama::SetLssStateChained(FlushNode* f, const ChainInfo& info, LssAddress address,
                                      size_t span, uint64_t annotation) {
  f->address = address;
  f->end = address + span;
  f->base = info.lss_base;
  f->depth = DeeperBy(info.lss_depth);
  f->chain_bytes = ChainBytesPlus(info.lss_chain_bytes, span);
  f->annotation = annotation;
}

inline std::string PageName(PageId pid) { return "page " + std::to_string(pid); }

// Bytes of a page record's payload holding `nodes` (format: lss_format.md).
size_t PagePayloadSize(const std::vector<const PageNode*>& nodes);

// Writes a page record at dst: the pieces `nodes` (chain order, `payload`
// bytes encoded), a kBase when it starts the page's chain (prev 0), else a
// C-delta over `prev`. Returns the bytes written.
size_t WritePageRecord(char* dst, PageId pid, const std::vector<const PageNode*>& nodes,
                       size_t payload, LssAddress prev, uint64_t annotation, uint64_t bound);

// The flush bound actually used: never below the chain's current one, so
// bounds only grow up a chain (page_node.h).
inline uint64_t EffectiveBound(bool has_flush, uint64_t chain_bound, uint64_t max_tag) {
  return has_flush ? std::max(chain_bound, max_tag) : max_tag;
}

}  // namespace deuteron::llama
