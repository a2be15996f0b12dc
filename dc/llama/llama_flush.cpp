// Llama: flushing a page's state to the LSS (llama.h, "Flush"; llama.md,
// "Flushed-ness under the WAL rule" and "Incremental flushing"), and the
// Update-R that keeps a consolidated page's flushed state incremental.
#include <algorithm>
#include <cassert>
#include <cstring>
#include <vector>

#include "common/coding.h"
#include "common/fault_hooks.h"
#include "dc/llama/internal/llama_impl.h"
#include "dc/llama/llama.h"

namespace deuteron::llama {

namespace {

// Encodes `nodes` (chain order) as that payload at dst.
void EncodePagePayloadTo(const std::vector<const PageNode*>& nodes, char* dst) {
  for (const PageNode* n : nodes) {
    dst = EncodeVarint32(dst, n->size);
    dst = EncodeVarint64(dst, n->seq);
    dst = EncodeVarint64(dst, n->tag);
    *dst++ = static_cast<char>(n->kind);
    std::memcpy(dst, n->payload(), n->size);
    dst += n->size;
  }
}

}  // namespace

// Declared, with what they do, in internal/llama_impl.h.
size_t PagePayloadSize(const std::vector<const PageNode*>& nodes) {
  size_t bytes = 0;
  for (const PageNode* n : nodes) {
    bytes += static_cast<size_t>(VarintLength(n->size) + VarintLength(n->seq) +
                                 VarintLength(n->tag)) + 1 + n->size;
  }
  return bytes;
}

size_t WritePageRecord(char* dst, PageId pid, const std::vector<const PageNode*>& nodes,
                       size_t payload, LssAddress prev, uint64_t annotation, uint64_t bound) {
  RecordHeader h;
  h.type = prev == kNullAddress ? RecordType::kBase : RecordType::kDelta;
  h.length = static_cast<uint32_t>(payload);
  h.count = static_cast<uint32_t>(nodes.size());
  h.pid = pid;
  h.prev = prev;
  h.annotation = annotation;
  h.bound = bound;
  EncodePagePayloadTo(nodes, dst + kRecordHeaderSize);
  EncodeRecord(h, Slice(dst + kRecordHeaderSize, payload), dst);
  return RecordSpan(payload);
}

Result<FlushResult> Llama::Flush(PageId pid, uint64_t max_tag, uint64_t annotation) {
  ASSIGN_OR_RETURN(const PageNode* head, ReadState(pid, /*hide_private=*/false));
  if (head == nullptr) return FlushResult{};
  {
    // A page private to an open system transaction is its commit's to write.
    // Checked after the read: a page that becomes private later was freed and
    // reallocated meanwhile, so the CAS below over `head` fails anyway.
    std::lock_guard<std::mutex> att(att_mu_);
    if (private_pages_.count(pid) != 0) return FlushResult{};
  }
  ChainInfo info;
  AnalyzeChain(head, &info);
  if (fault::BrokenOnPurpose(fault::Break::kEslCheck)) {
    // Contract 1 broken on purpose (DEUTERON_BREAK=esl_check): records above
    // the ESL the caller passed are flushed too.
    max_tag = UINT64_MAX - 1;
  }
  const uint64_t bound = EffectiveBound(info.has_flush, info.bound, max_tag);
  std::vector<const PageNode*> selected;
  for (const PageNode* n : info.unflushed) {
    if (n->tag <= bound) selected.push_back(n);
  }
  bool whole = info.base == nullptr || !info.base_flushed;
  // An unflushed base above the bound is blocked even with nothing else to
  // write: it may hold records at or below the bound (folded from deltas),
  // which are then not in the LSS. Reporting it clean would let a caller
  // take them for durable.
  if (info.base != nullptr && whole && info.base->tag > bound) {
    return FlushResult{FlushOutcome::kBlocked};
  }
  if (selected.empty()) return FlushResult{};
  // Deltas need a durable base beneath them.
  if (info.base == nullptr) return FlushResult{FlushOutcome::kBlocked};
  assert(whole || info.lss_head != kNullAddress);
  // A C-delta that would make the page's LSS chain too long (llama.md,
  // "Incremental flushing"): write the page whole instead, every data node
  // under the bound (the flushed ones are in memory too: Read brought the
  // page in whole), so that a read of it costs one LSS read again. Too big
  // for one record: a C-delta after all.
  bool rewrite = false;
  if (!whole && options_.max_lss_chain > 0 &&
      !CDeltaFits(info, info.base->size, RecordSpan(PagePayloadSize(selected)))) {
    std::vector<const PageNode*> all;
    for (const PageNode* n = head; n != nullptr; n = n->next) {
      if (n->is_data() && n->tag <= bound) all.push_back(n);
    }
    if (RecordSpan(PagePayloadSize(all)) <= lss_->MaxReservation()) {
      selected = std::move(all);
      whole = rewrite = true;
    }
  }

  const size_t payload = PagePayloadSize(selected);
  const size_t span = RecordSpan(payload);
  // The live bytes: a kBase replaces the page's LSS state, a C-delta adds
  // to it. Found before the reservation (a walk may wait for stability).
  uint64_t old_bytes = 0;
  if (info.lss_head != kNullAddress) {
    ASSIGN_OR_RETURN(old_bytes, StateBytesOf(pid, info.lss_head));
  }
  const uint64_t new_bytes = whole ? span : old_bytes + span;
  DEUTERON_KILL_POINT(kDcFlushBeforeWrite);
  ASSIGN_OR_RETURN(Reservation r, lss_->Reserve(span));
  FlushNode* f = NewFlushNode(NodeKind::kFlush);
  f->seq = head->seq + 1;
  f->tag = bound;
  if (whole) {  // a new kBase: the chain starts again here
    f->address = r.address;
    f->end = r.address + span;
    f->base = r.address;
    f->depth = 1;
    f->chain_bytes = 0;
    f->annotation = annotation;
  } else {
    SetLssStateChained(f, info, r.address, span, annotation);
  }
  f->next = const_cast<PageNode*>(head);
  f->base_hint = BaseHintBelow(head);
  uint64_t expected = MappingTable::FromPointer(head);
  if (!mapping_->Cas(pid, expected, MappingTable::FromPointer(f))) {
    lss_->Void(r);
    FreeNode(f);
    flush_failures_.fetch_add(1, std::memory_order_relaxed);
    return FlushResult{FlushOutcome::kRaced};
  }
  state_bytes_->Note(pid, r.address, new_bytes);
  state_bytes_->Add(static_cast<int64_t>(new_bytes) - static_cast<int64_t>(old_bytes));
  // The CAS made this flush the page's newest; now copy (LLAMA 3.2.3 step 4).
  WritePageRecord(r.dst, pid, selected, payload, whole ? kNullAddress : info.lss_head,
                  annotation, bound);
  NoteAnnotation(annotation);
  lss_->Commit(r);
  DEUTERON_KILL_POINT(kDcFlushAfterWrite);

  size_t change = 0;
  for (const PageNode* n : selected) change += n->size;
  flushes_.fetch_add(1, std::memory_order_relaxed);
  flush_bytes_.fetch_add(span, std::memory_order_relaxed);
  if (whole) whole_flush_bytes_.fetch_add(span, std::memory_order_relaxed);
  if (rewrite) chain_rewrites_.fetch_add(1, std::memory_order_relaxed);
  change_bytes_.fetch_add(change, std::memory_order_relaxed);
  MaybeClean(r.address);
  return FlushResult{FlushOutcome::kFlushed, r.address, r.address + span, span};
}

bool Llama::CDeltaFits(const ChainInfo& info, size_t base_bytes, size_t span) const {
  // A small page costs little to write whole, but not less than a record's
  // header and its buffer's share: its C-deltas may reach kMinChainBytes.
  constexpr size_t kMinChainBytes = 4096;
  return info.lss_depth > 0 && info.lss_depth < options_.max_lss_chain &&
         uint64_t{info.lss_chain_bytes} + span <= std::max(base_bytes, kMinChainBytes);
}

bool Llama::UpdateRFlush(PageId pid, const PageNode* expected, PageNode* state, uint64_t max_tag,
                         uint64_t annotation) {
  if (expected == nullptr || options_.max_lss_chain == 0) return UpdateR(pid, expected, state);
  ChainInfo info;
  AnalyzeChain(expected, &info);
  // A page never flushed stays in memory until its first flush writes it
  // (a store used in memory writes nothing); a partly swapped one is not
  // replaced here (Read brings pages in whole).
  if (info.lss_head == kNullAddress || info.partial_swap) return UpdateR(pid, expected, state);
  const uint64_t bound = EffectiveBound(info.has_flush, info.bound, max_tag);
  // The new base must be flushable under the bound, and every delta above
  // it above the bound (unflushed under the new flush node).
  PageNode* base = state;
  for (; base->kind != NodeKind::kBase; base = base->next) {
    if (base->tag <= bound) return UpdateR(pid, expected, state);
  }
  if (base->tag > bound) return UpdateR(pid, expected, state);
  // What the new base folded and the LSS lacks: the replaced chain's
  // unflushed data nodes under the bound, written as they are (their old
  // seqs) as a C-delta over its LSS state, while the chain has room (else
  // the next flush writes the new base whole, once, however many
  // consolidations come before it).
  std::vector<const PageNode*> selected;
  for (const PageNode* n : info.unflushed) {
    if (n->tag <= bound) selected.push_back(n);
  }
  const size_t payload = PagePayloadSize(selected);
  const size_t span = RecordSpan(payload);
  if (info.base == nullptr || !info.base_flushed || !CDeltaFits(info, base->size, span)) {
    return UpdateR(pid, expected, state);
  }
  // The live bytes: the C-delta adds to the page's LSS state.
  uint64_t old_bytes = 0;
  if (!selected.empty()) {
    Result<uint64_t> b = StateBytesOf(pid, info.lss_head);
    if (!b.ok()) return UpdateR(pid, expected, state);  // the next flush reports it
    old_bytes = *b;
  }
  Reservation r;
  if (!selected.empty()) {
    // No room (a record too big, or the LSS failed, which the next flush
    // reports): the new base is written whole later, as after UpdateR.
    Result<Reservation> rr = lss_->Reserve(span);
    if (!rr.ok()) return UpdateR(pid, expected, state);
    r = *rr;
  }
  const uint64_t exp = MappingTable::FromPointer(expected);
  PrepareReplacement(expected, state);
  FlushNode* f = NewFlushNode(NodeKind::kFlush);
  f->seq = state->seq + 1;
  f->tag = bound;
  if (selected.empty()) {
    // Nothing folded that the LSS lacks: the state there already holds what
    // the new base holds.
    SetLssStateAsFound(f, info);
  } else {
    SetLssStateChained(f, info, r.address, span, annotation);
  }
  f->next = state;
  f->base_hint = base;
  const bool fault = update_r_fault_for_test_ && update_r_fault_for_test_(pid);
  uint64_t e = exp;
  if (fault || !mapping_->Cas(pid, e, MappingTable::FromPointer(f))) {
    if (!selected.empty()) lss_->Void(r);
    FreeNode(f);
    update_r_failures_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  // Published: copy the record (the replaced chain is retired through the
  // epoch, and the caller's guard keeps it readable until then).
  if (!selected.empty()) {
    state_bytes_->Note(pid, r.address, old_bytes + span);
    state_bytes_->Add(static_cast<int64_t>(span));
    WritePageRecord(r.dst, pid, selected, payload, info.lss_head, annotation, bound);
    NoteAnnotation(annotation);
    lss_->Commit(r);
    size_t change = 0;
    for (const PageNode* n : selected) change += n->size;
    flushes_.fetch_add(1, std::memory_order_relaxed);
    flush_bytes_.fetch_add(span, std::memory_order_relaxed);
    change_bytes_.fetch_add(change, std::memory_order_relaxed);
  }
  incremental_replacements_.fetch_add(1, std::memory_order_relaxed);
  RetireChain(expected);
  if (!selected.empty()) MaybeClean(r.address);
  return true;
}

}  // namespace deuteron::llama
