// Helpers shared by the LLAMA cache-layer tests (llama_test, llama_stress_test,
// llama_crash_test). Catch assertions inside: call from the test's thread only.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "dc/llama/llama.h"

namespace deuteron::llama::test {

// A flush bound that takes everything.
inline constexpr uint64_t kAll = ~0ull;

// Small and deterministic: 1 MiB segments, 64 KiB buffers, I/O done by the
// thread that fills a buffer.
inline LlamaOptions SmallOptions() {
  LlamaOptions o;
  o.lss.segment_size = 1 << 20;
  o.lss.buffer_size = 64 << 10;
  o.lss.buffer_count = 4;
  o.lss.io_threads = 0;
  o.mapping.max_pages = 1 << 20;
  return o;
}

inline std::unique_ptr<Llama> OpenOrDie(Env* env, const LlamaOptions& o = SmallOptions()) {
  auto r = Llama::Open(env, "/db", o);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return std::move(r).value();
}

// A data node holding `payload`, not yet published.
inline PageNode* MakeNode(Llama* l, NodeKind kind, std::string_view payload, uint64_t tag) {
  PageNode* n = l->NewNode(kind, payload.size(), tag);
  std::memcpy(n->payload(), payload.data(), payload.size());
  return n;
}

// A new page holding a base with `payload` and `tag`, committed by a system
// transaction (and so flushed) under `bound`.
inline PageId CreatePage(Llama* l, std::string_view payload, uint64_t tag = 0,
                         uint64_t bound = 0) {
  auto g = l->Enter();
  auto txn = l->TBegin();
  auto pid = l->TAllocate(txn.get());
  REQUIRE(pid.ok());
  auto updated = l->TUpdateD(txn.get(), *pid, nullptr, MakeNode(l, NodeKind::kBase, payload, tag));
  REQUIRE(updated.ok());
  REQUIRE(*updated);
  auto committed = l->TCommit(txn.get(), 0, nullptr, nullptr, bound, 0);
  INFO(committed.status().ToString());
  REQUIRE(committed.ok());
  REQUIRE(*committed);
  return *pid;
}

// Prepends a delta holding `payload` and `tag` to page `pid` by Update-D.
// REQUIRES: a guard; no other thread changes the page.
inline void PostDelta(Llama* l, PageId pid, std::string_view payload, uint64_t tag = 0) {
  auto head = l->Read(pid);
  INFO(head.status().ToString());
  REQUIRE(head.ok());
  REQUIRE(l->UpdateD(pid, *head, MakeNode(l, NodeKind::kDelta, payload, tag)));
}

// Data nodes of a chain, newest first, as "payload@tag".
inline std::vector<std::string> Contents(const PageNode* head) {
  std::vector<std::string> out;
  for (const PageNode* n = head; n != nullptr; n = n->next) {
    if (!n->is_data()) continue;
    out.push_back(std::string(n->payload(), n->size) + "@" + std::to_string(n->tag));
  }
  return out;
}

// A page's contents, read under a guard of its own.
inline std::vector<std::string> ReadContents(Llama* l, PageId pid) {
  auto g = l->Enter();
  auto r = l->Read(pid);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return Contents(*r);
}

// Usable from any thread (no Catch assertions): false if a read failed.
inline bool TryAddDelta(Llama* l, PageId pid, std::string_view text, uint64_t tag) {
  auto g = l->Enter();
  PageNode* d = MakeNode(l, NodeKind::kDelta, text, tag);
  for (;;) {
    auto head = l->Read(pid);
    if (!head.ok()) {
      l->DiscardNode(d);
      return false;
    }
    if (l->UpdateD(pid, *head, d)) return true;
  }
}

inline void AddDelta(Llama* l, PageId pid, std::string_view text, uint64_t tag) {
  REQUIRE(TryAddDelta(l, pid, text, tag));
}

inline FlushOutcome FlushPage(Llama* l, PageId pid, uint64_t bound) {
  auto g = l->Enter();
  for (;;) {
    auto r = l->Flush(pid, bound, 7);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    if (r->outcome != FlushOutcome::kRaced) return r->outcome;
  }
}

// Update-R: a new base "base+a" (tag 300) under a copied delta "hot" (tag 900)
// that stays above the bound, as the DC consolidates.
inline void Consolidate(Llama* l, PageId pid) {
  auto g = l->Enter();
  auto head = l->Read(pid);
  REQUIRE(head.ok());
  PageNode* top = MakeNode(l, NodeKind::kDelta, "hot", 900);
  top->next = MakeNode(l, NodeKind::kBase, "base+a", 300);
  REQUIRE(l->UpdateR(pid, *head, top));
}

}  // namespace deuteron::llama::test
