// PageNode: one node of a page's in-memory state in the LLAMA cache.
//
// A page state is a chain of nodes, newest first, reached from the page's
// mapping-table entry: data nodes (deltas, ending in at most one base) that
// carry the caller's bytes, and flush-state nodes that LLAMA adds (flush,
// relocation, partial swap). Nodes are immutable once a CAS has published
// them, and chains never share nodes: a replacement builds new nodes, so the
// whole old chain is retired as one unit through the epoch manager.
//
// Flushed-ness (see dc/llama/llama.md):
//  - Every node has a `seq`, its chain position: one above the node it was
//    prepended to. Seq strictly decreases along a chain.
//  - Data nodes carry the caller's `tag` (the DC's LSN; 0 for structure
//    deltas). A flush with bound B writes every unflushed data node with
//    tag <= B and prepends a flush node with that bound; bounds only grow up
//    a chain (a flush's bound is raised to the chain's current bound).
//  - Hence a data node is flushed iff it lies below the topmost flush node
//    (seq < flush.seq) and its tag <= flush.bound.
//
// Thread safety: immutable after publication; readers need an epoch guard.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dc/llama/lss_format.h"

namespace deuteron::llama {

enum class NodeKind : uint8_t {
  kBase = 1,         // data: the page's base (end of chain)
  kDelta = 2,        // data: a delta
  kFlush = 3,        // the page was flushed: its LSS state is at `address`
  kRelocation = 4,   // the cleaner moved the page's LSS state to `address`
  kPartialSwap = 5,  // end of chain: the flushed part of the page is in the LSS
};

// Flags on nodes.
constexpr uint8_t kNodeSwapped = 1;  // data: copy made by a partial swap-out
// Any kind: installed on a page private to an open system transaction (its
// TUpdateD nodes and its commit's flush nodes). Read hides a page whose head
// carries it; a successful commit replaces such a head by an unmarked copy
// before the transaction leaves the active transaction table.
constexpr uint8_t kNodePrivate = 2;

struct PageNode {
  NodeKind kind;
  uint8_t flags;
  // The access method's bits for its own data nodes: set before the node is
  // published and never changed after. LLAMA's own nodes, copies (swap-outs,
  // loads) and fresh NewNode()s have 0.
  uint16_t user_flags;
  uint32_t size;        // payload bytes (data nodes)
  uint64_t seq;         // chain position
  uint64_t tag;         // data nodes: caller's tag; flush/partial swap: the bound
  PageNode* next;       // older node; null at the end of the chain
  LssAddress prior;     // kBase from a replacement: the page's previous LSS state
  // The base node at the end of this node's chain, or null when not known (a
  // partial-swap copy above a swapped-out base). Set wherever LLAMA builds
  // or extends a chain (UpdateD, UpdateR, flush/relocation installs, loads;
  // see BaseHintBelow) before publication; exact where set, since chains
  // never share nodes and published nodes are never relinked. Readers use
  // it to prefetch the base, and the Bw-tree to read it without a walk.
  const PageNode* base_hint;

  bool is_data() const { return kind == NodeKind::kBase || kind == NodeKind::kDelta; }
  char* payload() { return reinterpret_cast<char*>(this + 1); }
  const char* payload() const { return reinterpret_cast<const char*>(this + 1); }
};
static_assert(sizeof(PageNode) == 48, "PageNode header layout");

// The base_hint for a node prepended to `n` (null: an empty page).
inline const PageNode* BaseHintBelow(const PageNode* n) {
  if (n == nullptr) return nullptr;
  return n->kind == NodeKind::kBase ? n : n->base_hint;
}

// kFlush, kRelocation and kPartialSwap nodes.
struct FlushNode : PageNode {
  LssAddress address;   // newest record of the page's LSS state
  LssAddress end;       // end of that record (stable once HiStable >= end)
  uint64_t annotation;  // the caller's annotation of the flush
  uint64_t seq_hi;      // kPartialSwap: seq of the topmost flush when swapped
  LssAddress base;      // the kBase record that ends the LSS chain from `address`
  // The LSS chain from `address` down to its kBase: its records, that one
  // included (a read of the page costs this many LSS reads; 0: unknown),
  // and the bytes of its C-deltas (records above the kBase). Bounded by
  // LlamaOptions::max_lss_chain and the base's size (llama.md, "Incremental
  // flushing").
  uint32_t depth;
  uint32_t chain_bytes;
};
// 96 bytes: the node-cache class a FlushNode was allocated at anyway.
static_assert(sizeof(FlushNode) == 96, "FlushNode layout");

inline const FlushNode* AsFlush(const PageNode* n) { return static_cast<const FlushNode*>(n); }

}  // namespace deuteron::llama
