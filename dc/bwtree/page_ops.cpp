#include "dc/bwtree/page_ops.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <limits>

namespace deuteron::bwtree {

using llama::NodeKind;
using llama::PageNode;

namespace {

Slice PayloadOf(const PageNode* n) { return Slice(n->payload(), n->size); }

// Split, merge and remove-node deltas, the same in leaf and inner chains: a
// split or merge at or below the key sends the search to the other page; a
// removed node is left. True when `d` decided the search (written to `out`,
// a LookupResult or ChildLookup).
template <typename R>
bool StructureRedirect(const DeltaView& d, Slice key, R* out) {
  if (d.type == DeltaType::kRemoveNode) {
    out->outcome = LookupOutcome::kRemoved;
    return true;
  }
  if (key < d.key) return false;
  out->outcome = LookupOutcome::kRedirect;
  out->redirect_kind = d.type == DeltaType::kSplit ? RedirectKind::kSplit : RedirectKind::kMerge;
  out->redirect = d.pid;
  return true;
}

uint32_t ToHint(size_t index) {
  return index >= kNoHint ? kNoHint : static_cast<uint32_t>(index);
}

}  // namespace

Status CheckKey(const Limits& limits, Slice key) {
  if (key.size() > limits.max_key_size) {
    return Status::TooLarge("key of " + std::to_string(key.size()) + " bytes over the limit of " +
                            std::to_string(limits.max_key_size));
  }
  return Status::OK();
}

Status CheckRecord(const Limits& limits, Slice key, Slice value) {
  RETURN_IF_ERROR(CheckKey(limits, key));
  if (value.size() > limits.max_value_size) {
    return Status::TooLarge("value of " + std::to_string(value.size()) +
                            " bytes over the limit of " + std::to_string(limits.max_value_size));
  }
  return Status::OK();
}

Result<LookupResult> Lookup(const PageNode* head, Slice key, const Limits& limits) {
  RETURN_IF_ERROR(CheckKey(limits, key));
  LookupResult result;
  // The search-shortcut range [lo, hi] for the key's lower bound in the base.
  size_t lo = 0;
  size_t hi = std::numeric_limits<size_t>::max();
  for (const PageNode* n = head; n != nullptr; n = n->next) {
    if (n->kind == NodeKind::kDelta) {
      ASSIGN_OR_RETURN(DeltaView d, DeltaView::Parse(PayloadOf(n)));
      switch (d.type) {
        case DeltaType::kInsert:
        case DeltaType::kUpdate:
        case DeltaType::kUpsert:
        case DeltaType::kDelete: {
          const int c = key.compare(d.key);
          if (c == 0) {
            result.outcome =
                d.type == DeltaType::kDelete ? LookupOutcome::kDeleted : LookupOutcome::kFound;
            result.value = d.value;
            result.lsn = d.lsn;
            result.hint = d.hint;
            return result;
          }
          if (d.hint != kNoHint) {
            if (c > 0 && d.hint > lo) lo = d.hint;
            if (c < 0 && d.hint < hi) hi = d.hint;
          }
          break;
        }
        case DeltaType::kSplit:
        case DeltaType::kMerge:
        case DeltaType::kRemoveNode:
          if (StructureRedirect(d, key, &result)) return result;
          break;
        case DeltaType::kIndexEntry:
        case DeltaType::kIndexTermDelete:
          return Status::Corruption("bw-tree: index delta in a leaf chain");
      }
    } else if (n->kind == NodeKind::kBase) {
      ASSIGN_OR_RETURN(BaseView base, BaseView::Parse(PayloadOf(n)));
      if (!base.is_leaf()) return Status::InvalidArgument("bw-tree: Lookup on an inner node");
      if (base.AboveHigh(key) && base.header().right_sibling != 0) {
        result.outcome = LookupOutcome::kRedirect;
        result.redirect_kind = RedirectKind::kSibling;
        result.redirect = base.header().right_sibling;
        return result;
      }
      if (lo > hi) lo = hi;  // inconsistent hints; Find falls back to a full search
      ASSIGN_OR_RETURN(BasePosition pos, base.Find(key, lo, hi));
      result.hint = ToHint(pos.index);
      if (pos.exact) {
        ASSIGN_OR_RETURN(LeafRecord r, base.RecordAt(pos.index));
        result.outcome = r.tombstone ? LookupOutcome::kDeleted : LookupOutcome::kFound;
        result.value = r.value;
        result.lsn = r.lsn;
      }
      return result;
    }
    // Flush, relocation and partial-swap nodes carry no keys.
  }
  return result;  // no base: an empty page
}

Result<ChildLookup> FindChild(const PageNode* head, Slice key) {
  ChildLookup result;
  for (const PageNode* n = head; n != nullptr; n = n->next) {
    if (n->kind == NodeKind::kDelta) {
      ASSIGN_OR_RETURN(DeltaView d, DeltaView::Parse(PayloadOf(n)));
      switch (d.type) {
        case DeltaType::kIndexEntry:
        case DeltaType::kIndexTermDelete:
          if (key >= d.key && (d.next_infinite || key < d.next)) {
            result.outcome = LookupOutcome::kFound;
            result.child = d.pid;
            return result;
          }
          break;
        case DeltaType::kSplit:
        case DeltaType::kMerge:
        case DeltaType::kRemoveNode:
          if (StructureRedirect(d, key, &result)) return result;
          break;
        default:
          return Status::Corruption("bw-tree: record delta in an inner chain");
      }
    } else if (n->kind == NodeKind::kBase) {
      ASSIGN_OR_RETURN(BaseView base, BaseView::Parse(PayloadOf(n)));
      if (base.is_leaf()) return Status::InvalidArgument("bw-tree: FindChild on a leaf");
      if (base.AboveHigh(key) && base.header().right_sibling != 0) {
        result.outcome = LookupOutcome::kRedirect;
        result.redirect_kind = RedirectKind::kSibling;
        result.redirect = base.header().right_sibling;
        return result;
      }
      ASSIGN_OR_RETURN(BasePosition pos, base.Find(key));
      if (!pos.exact && pos.index == 0) return result;  // below every separator
      ASSIGN_OR_RETURN(InnerEntry e, base.EntryAt(pos.exact ? pos.index : pos.index - 1));
      result.outcome = LookupOutcome::kFound;
      result.child = e.child;
      return result;
    }
  }
  return result;
}

Result<uint64_t> LatestLsn(const PageNode* head, Slice key, PageId* redirect) {
  if (redirect != nullptr) *redirect = 0;
  Limits unlimited;
  unlimited.max_key_size = std::numeric_limits<size_t>::max();
  ASSIGN_OR_RETURN(LookupResult r, Lookup(head, key, unlimited));
  if (r.outcome == LookupOutcome::kRedirect && redirect != nullptr) *redirect = r.redirect;
  return r.lsn;
}

Result<std::string> MakeRecordDelta(const PageNode* head, DeltaType type, Slice key, Slice value,
                                    uint64_t lsn, const Limits& limits) {
  if (!IsRecordDelta(type)) return Status::InvalidArgument("bw-tree: not a record delta type");
  RETURN_IF_ERROR(CheckRecord(limits, key, type == DeltaType::kDelete ? Slice() : value));
  ASSIGN_OR_RETURN(LookupResult r, Lookup(head, key, limits));
  return EncodeRecordDelta(type, key, value, lsn, r.hint);
}

namespace {

struct RecordDelta {
  DeltaView d;
  uint64_t tag = 0;
  size_t order = 0;  // chain position, 0 = newest
};

}  // namespace

Result<ConsolidatedPage> Consolidate(const PageNode* head, uint64_t lsn_bound,
                                     uint64_t purge_bound) {
  std::vector<RecordDelta> deltas;
  bool has_split = false;
  Slice split_key;
  PageId split_sibling = 0;
  const PageNode* base_node = nullptr;
  for (const PageNode* n = head; n != nullptr; n = n->next) {
    if (n->kind == NodeKind::kBase) {
      base_node = n;
      break;
    }
    if (n->kind != NodeKind::kDelta) continue;
    ASSIGN_OR_RETURN(DeltaView d, DeltaView::Parse(PayloadOf(n)));
    if (IsRecordDelta(d.type)) {
      deltas.push_back(RecordDelta{d, n->tag, deltas.size()});
      continue;
    }
    switch (d.type) {
      case DeltaType::kSplit:
        // The smallest separator is the page's effective high key.
        if (!has_split || d.key < split_key) {
          has_split = true;
          split_key = d.key;
          split_sibling = d.pid;
        }
        break;
      case DeltaType::kRemoveNode:
      case DeltaType::kMerge:
        return Status::NotSupported("bw-tree: consolidating a page under a merge");
      default:
        return Status::Corruption("bw-tree: index delta in a leaf chain");
    }
  }

  // The old base (or an empty leaf covering everything).
  BaseHeader header;
  std::string empty_base;
  if (base_node == nullptr) empty_base = EncodeLeafBase(header, {});
  ASSIGN_OR_RETURN(BaseView base, BaseView::Parse(base_node != nullptr ? PayloadOf(base_node)
                                                                       : Slice(empty_base)));
  if (!base.is_leaf()) return Status::NotSupported("bw-tree: consolidating an inner node");
  header = base.header();
  if (has_split && (header.high_infinite || split_key < header.high_key)) {
    header.high_infinite = false;
    header.high_key = split_key;
    header.right_sibling = split_sibling;
  }
  auto moved = [&](Slice key) { return has_split && key >= split_key; };

  ConsolidatedPage out;
  out.base_tag = base_node != nullptr ? base_node->tag : 0;

  // Sort the deltas by key, newest first within a key, and pick per key: kept
  // deltas from the newest down to the first foldable one, which is folded;
  // everything older is invisible and dropped.
  std::stable_sort(deltas.begin(), deltas.end(),
                   [](const RecordDelta& a, const RecordDelta& b) { return a.d.key < b.d.key; });
  std::vector<const RecordDelta*> folded;    // sorted by key, one per key
  std::vector<const RecordDelta*> kept;      // any order; sorted by chain order below
  for (size_t i = 0; i < deltas.size();) {
    size_t j = i;
    while (j < deltas.size() && deltas[j].d.key == deltas[i].d.key) ++j;
    const bool away = moved(deltas[i].d.key);
    bool done = false;
    for (size_t k = i; k < j; ++k) {
      if (away || done) {
        ++out.dropped;
      } else if (deltas[k].d.lsn > lsn_bound) {
        kept.push_back(&deltas[k]);
      } else {
        folded.push_back(&deltas[k]);
        done = true;
      }
    }
    i = j;
  }

  // One linear merge of the base records with the folded deltas.
  std::vector<LeafRecord> records;
  records.reserve(base.count() + folded.size());
  auto emit = [&](const LeafRecord& r) {
    if (moved(r.key)) return;
    if (r.tombstone && r.lsn < purge_bound) {
      ++out.purged;
      return;
    }
    records.push_back(r);
  };
  size_t bi = 0;
  size_t fi = 0;
  while (bi < base.count() || fi < folded.size()) {
    LeafRecord from_base;
    bool have_base = false;
    if (bi < base.count()) {
      ASSIGN_OR_RETURN(from_base, base.RecordAt(bi));
      have_base = true;
    }
    if (fi < folded.size() && (!have_base || !(from_base.key < folded[fi]->d.key))) {
      const DeltaView& d = folded[fi]->d;
      if (have_base && from_base.key == d.key) ++bi;  // replaced by the delta
      LeafRecord r;
      r.key = d.key;
      r.lsn = d.lsn;
      r.tombstone = d.type == DeltaType::kDelete;
      if (!r.tombstone) r.value = d.value;
      emit(r);
      out.base_tag = std::max(out.base_tag, d.lsn);
      ++out.folded;
      ++fi;
    } else {
      emit(from_base);
      ++bi;
    }
  }
  out.base = EncodeLeafBase(header, records);

  // Kept deltas, newest first, with hints against the new base.
  std::sort(kept.begin(), kept.end(),
            [](const RecordDelta* a, const RecordDelta* b) { return a->order < b->order; });
  ASSIGN_OR_RETURN(BaseView new_base, BaseView::Parse(out.base));
  out.deltas.reserve(kept.size());
  for (const RecordDelta* k : kept) {
    DeltaView d = k->d;
    ASSIGN_OR_RETURN(BasePosition pos, new_base.Find(d.key));
    d.hint = ToHint(pos.index);
    out.deltas.push_back(ConsolidatedPage::Delta{EncodeDelta(d), k->tag});
  }
  return out;
}

PageNode* BuildChain(llama::Llama* llama, const ConsolidatedPage& page) {
  PageNode* chain = llama->NewNode(NodeKind::kBase, page.base.size(), page.base_tag);
  std::memcpy(chain->payload(), page.base.data(), page.base.size());
  for (auto it = page.deltas.rbegin(); it != page.deltas.rend(); ++it) {
    PageNode* d = llama->NewNode(NodeKind::kDelta, it->payload.size(), it->tag);
    std::memcpy(d->payload(), it->payload.data(), it->payload.size());
    d->next = chain;
    chain = d;
  }
  return chain;
}

}  // namespace deuteron::bwtree
