#include "dc/bwtree/page_ops.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <limits>
#include <optional>

#include "common/prefetch.h"

namespace deuteron::bwtree {

using llama::NodeKind;
using llama::PageNode;

namespace {

Slice PayloadOf(const PageNode* n) { return Slice(n->payload(), n->size); }

// Gathering a chain newest first: `cut` is the lowest separator of a split
// or merge met so far (older keys at or above it left the page), and the
// page's high key and right sibling come from the newest split, or from the
// base when no split delta set them (*range_set).
bool BelowCut(const std::optional<Slice>& cut, Slice key) { return !cut || key < *cut; }
void LowerCut(std::optional<Slice>* cut, Slice s) {
  if (BelowCut(*cut, s)) *cut = s;
}
void RangeFromSplit(const DeltaView& split, bool* range_set, BaseHeader* header) {
  if (*range_set) return;
  *range_set = true;
  header->high_infinite = false;
  header->high_key = split.key;
  header->right_sibling = split.pid;
}
void RangeFromBase(const BaseHeader& base, bool* range_set, BaseHeader* header) {
  if (*range_set) return;
  *range_set = true;
  header->high_infinite = base.high_infinite;
  header->high_key = base.high_key;
  header->right_sibling = base.right_sibling;
}

// Split, merge and remove-node deltas, the same in leaf and inner chains: a
// split or merge at or below the key sends the search to the other page; a
// removed node is left. True when `d` decided the search (written to `out`,
// a LookupResult or ChildLookup).
template <typename R>
bool StructureRedirect(const DeltaView& d, Slice key, R* out, bool before = false) {
  if (d.type == DeltaType::kRemoveNode) {
    out->outcome = LookupOutcome::kRemoved;
    return true;
  }
  if (before ? key <= d.key : key < d.key) return false;
  out->outcome = LookupOutcome::kRedirect;
  out->redirect_kind = d.type == DeltaType::kSplit ? RedirectKind::kSplit : RedirectKind::kMerge;
  out->redirect = d.pid;
  out->redirect_key = d.key;
  return true;
}

// The base's B-link redirect: the key is at or above the high key (above it,
// `before`).
template <typename R>
bool SiblingRedirect(const BaseView& base, Slice key, R* out, bool before = false) {
  const BaseHeader& h = base.header();
  if (h.high_infinite || h.right_sibling == 0) return false;
  if (before ? key <= h.high_key : key < h.high_key) return false;
  out->outcome = LookupOutcome::kRedirect;
  out->redirect_kind = RedirectKind::kSibling;
  out->redirect = h.right_sibling;
  out->redirect_key = h.high_key;
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

Result<LookupResult> Lookup(const PageNode* head, Slice key, const Limits& limits,
                            bool through_remove, const BaseView* given) {
  RETURN_IF_ERROR(CheckKey(limits, key));
  LookupResult result;
  bool first_data = true;
  // The search-shortcut range [lo, hi] for the key's lower bound in the base.
  size_t lo = 0;
  size_t hi = std::numeric_limits<size_t>::max();
  for (const PageNode* n = head; n != nullptr; n = n->next) {
    if (n->kind == NodeKind::kDelta) {
      ASSIGN_OR_RETURN(DeltaView d, DeltaView::Parse(PayloadOf(n)));
      const bool top = first_data;
      first_data = false;
      if (top && through_remove && d.type == DeltaType::kRemoveNode) continue;
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
      BaseView parsed;
      if (given == nullptr) {
        RETURN_IF_ERROR(parsed.Init(PayloadOf(n)));
      }
      const BaseView& base = given != nullptr ? *given : parsed;
      if (!base.is_leaf()) return Status::InvalidArgument("bw-tree: Lookup on an inner node");
      if (SiblingRedirect(base, key, &result)) return result;
      base.PrefetchEntryNear(key);
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

Result<LookupResult> RouteOf(const PageNode* head, Slice key, bool through_remove,
                             const BaseView* given) {
  LookupResult out;
  if (const PageNode* plain = PlainBase(head); plain != nullptr) {
    // Only record deltas above the base: its range alone routes the key.
    BaseView parsed;
    if (given == nullptr) {
      RETURN_IF_ERROR(parsed.Init(PayloadOf(plain)));
    }
    SiblingRedirect(given != nullptr ? *given : parsed, key, &out);
    return out;
  }
  bool first_data = true;
  for (const PageNode* n = head; n != nullptr; n = n->next) {
    if (n->kind == NodeKind::kDelta) {
      ASSIGN_OR_RETURN(DeltaView d, DeltaView::Parse(PayloadOf(n)));
      const bool top = first_data;
      first_data = false;
      if (IsRecordDelta(d.type) || d.type == DeltaType::kIndexEntry ||
          d.type == DeltaType::kIndexTermDelete) {
        continue;
      }
      if (top && through_remove && d.type == DeltaType::kRemoveNode) continue;
      if (StructureRedirect(d, key, &out)) return out;
    } else if (n->kind == NodeKind::kBase) {
      BaseView parsed;
      if (given == nullptr) {
        RETURN_IF_ERROR(parsed.Init(PayloadOf(n)));
      }
      SiblingRedirect(given != nullptr ? *given : parsed, key, &out);
      return out;
    }
  }
  return out;
}

Result<ChildLookup> FindChild(const PageNode* head, Slice key, bool before,
                              const BaseView* given, bool want_next, bool through_remove) {
  ChildLookup result;
  // Whether the range [low, next) (infinite next: no end) routes the key.
  auto holds = [&](Slice low, bool next_infinite, Slice next) {
    if (before) return low < key && (next_infinite || key <= next);
    return low <= key && (next_infinite || key < next);
  };
  // The smallest separator above the key among the newer index deltas
  // passed: it ends the range of whatever older entry routes the key.
  bool have_cap = false;
  Slice cap;
  auto clip = [&](ChildLookup* r) {
    if (have_cap && (r->next_infinite || cap < r->next)) {
      r->next_infinite = false;
      r->next = cap;
    }
  };
  bool first_data = true;
  for (const PageNode* n = head; n != nullptr; n = n->next) {
    if (n->kind == NodeKind::kDelta) {
      ASSIGN_OR_RETURN(DeltaView d, DeltaView::Parse(PayloadOf(n)));
      const bool top = first_data;
      first_data = false;
      if (top && through_remove && d.type == DeltaType::kRemoveNode) continue;
      switch (d.type) {
        case DeltaType::kIndexEntry:
        case DeltaType::kIndexTermDelete:
          if (holds(d.key, d.next_infinite, d.next)) {
            result.outcome = LookupOutcome::kFound;
            result.child = d.pid;
            result.low = d.key;
            result.next = d.next;
            result.next_infinite = d.next_infinite;
            clip(&result);
            return result;
          }
          if ((before ? key <= d.key : key < d.key) && (!have_cap || d.key < cap)) {
            have_cap = true;
            cap = d.key;
          }
          break;
        case DeltaType::kSplit:
        case DeltaType::kMerge:
        case DeltaType::kRemoveNode:
          if (StructureRedirect(d, key, &result, before)) return result;
          break;
        default:
          return Status::Corruption("bw-tree: record delta in an inner chain");
      }
    } else if (n->kind == NodeKind::kBase) {
      BaseView parsed;
      if (given == nullptr) {
        RETURN_IF_ERROR(parsed.Init(PayloadOf(n)));
      }
      const BaseView& base = given != nullptr ? *given : parsed;
      RETURN_IF_ERROR(RouteInBase(base, key, before, want_next, &result));
      if (result.outcome == LookupOutcome::kFound && want_next) clip(&result);
      return result;
    }
  }
  return result;
}

Status RouteInBase(const BaseView& base, Slice key, bool before, bool want_next,
                   ChildLookup* out) {
  if (base.is_leaf()) return Status::InvalidArgument("bw-tree: FindChild on a leaf");
  if (SiblingRedirect(base, key, out, before)) return Status::OK();
  size_t i = 0;
  InnerEntry e;
  base.PrefetchEntryNear(key);
  RETURN_IF_ERROR(base.RouteEntry(key, before, &i, &e));
  if (i == base.count()) return Status::OK();  // below every separator
  out->outcome = LookupOutcome::kFound;
  out->child = e.child;
  out->low = e.separator;
  if (!want_next) return Status::OK();
  if (i + 1 < base.count()) {
    ASSIGN_OR_RETURN(out->next, base.KeyAt(i + 1));
    out->next_infinite = false;
  } else {
    out->next_infinite = base.header().high_infinite;
    out->next = base.header().high_key;
  }
  return Status::OK();
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

// One pass of GatherLeaf over a chain (the page's own, or a merged
// sibling's below its remove-node delta). `cut` hides older keys >= *cut.
struct Gatherer {
  const PageReader& read;
  LeafImage* out;
  bool range_set = false;  // a newer split/merge already fixed the high key

  Status Chain(const PageNode* head, bool own, std::optional<Slice> cut) {
    bool first_data = true;
    for (const PageNode* n = head; n != nullptr; n = n->next) {
      if (n->kind == NodeKind::kDelta) {
        ASSIGN_OR_RETURN(DeltaView d, DeltaView::Parse(PayloadOf(n)));
        const bool top = first_data;
        first_data = false;
        if (IsRecordDelta(d.type)) {
          if (BelowCut(cut, d.key)) {
            out->deltas.push_back(LeafImage::Delta{d, n->tag});
          } else {
            ++out->dropped;
          }
          continue;
        }
        switch (d.type) {
          case DeltaType::kRemoveNode:
            if (!top) return Status::Corruption("bw-tree: remove-node delta below the top");
            if (own) out->removed = true;
            break;
          case DeltaType::kSplit:
            RangeFromSplit(d, &range_set, &out->header);
            LowerCut(&cut, d.key);
            break;
          case DeltaType::kMerge: {
            if (!read) return Status::NotSupported("bw-tree: gathering a merge without a reader");
            ASSIGN_OR_RETURN(const PageNode* sibling, read(d.pid));
            if (sibling == nullptr) return Status::Corruption("bw-tree: merged sibling has no state");
            out->merged.push_back(d.pid);
            RETURN_IF_ERROR(Chain(sibling, /*own=*/false, cut));
            LowerCut(&cut, d.key);
            break;
          }
          default:
            return Status::Corruption("bw-tree: index delta in a leaf chain");
        }
      } else if (n->kind == NodeKind::kBase) {
        ASSIGN_OR_RETURN(BaseView base, BaseView::Parse(PayloadOf(n)));
        if (!base.is_leaf()) return Status::InvalidArgument("bw-tree: gathering an inner node");
        if (own) out->header.low_key = base.header().low_key;
        RangeFromBase(base.header(), &range_set, &out->header);
        out->base_tag = std::max(out->base_tag, n->tag);
        const size_t before = out->base.size();
        RETURN_IF_ERROR(base.AppendRecords(&out->base, cut ? &*cut : nullptr));
        out->dropped += base.count() - (out->base.size() - before);
        return Status::OK();
      }
      // Flush, relocation and partial-swap nodes carry no keys.
    }
    if (own && !range_set) {  // no base: an empty leaf covering everything
      out->header = BaseHeader();
    }
    return Status::OK();
  }
};

// Record deltas sorted by key, newest first within a key.
std::vector<const LeafImage::Delta*> SortedDeltas(const LeafImage& image,
                                                  std::vector<size_t>* order) {
  std::vector<const LeafImage::Delta*> sorted;
  sorted.reserve(image.deltas.size());
  for (const LeafImage::Delta& d : image.deltas) sorted.push_back(&d);
  auto less = [](const LeafImage::Delta* a, const LeafImage::Delta* b) {
    return a->d.key < b->d.key;
  };
  if (sorted.size() <= 32) {
    // A chain's few deltas: insertion sort (stable, and no temporary buffer
    // as std::stable_sort allocates).
    for (size_t i = 1; i < sorted.size(); ++i) {
      const LeafImage::Delta* d = sorted[i];
      size_t j = i;
      for (; j > 0 && less(d, sorted[j - 1]); --j) sorted[j] = sorted[j - 1];
      sorted[j] = d;
    }
  } else {
    std::stable_sort(sorted.begin(), sorted.end(), less);
  }
  if (order != nullptr) {
    order->clear();
    order->reserve(sorted.size());
    for (const LeafImage::Delta* d : sorted) order->push_back(static_cast<size_t>(d - image.deltas.data()));
  }
  return sorted;
}

LeafRecord RecordOf(const DeltaView& d) {
  LeafRecord r;
  r.key = d.key;
  r.lsn = d.lsn;
  r.tombstone = d.type == DeltaType::kDelete;
  if (!r.tombstone) r.value = d.value;
  return r;
}

// Merges the base records with one record per key (sorted, newer ones win),
// calling emit(record) in key order.
template <typename Emit>
void MergeRuns(const std::vector<LeafRecord>& base, const std::vector<LeafRecord>& newer,
               Emit emit) {
  size_t bi = 0, ni = 0;
  while (bi < base.size() || ni < newer.size()) {
    if (ni < newer.size() && (bi == base.size() || !(base[bi].key < newer[ni].key))) {
      if (bi < base.size() && base[bi].key == newer[ni].key) ++bi;  // replaced
      emit(newer[ni++]);
    } else {
      emit(base[bi++]);
    }
  }
}

}  // namespace

Status GatherLeaf(const PageNode* head, const PageReader& read, LeafImage* out) {
  *out = LeafImage();
  Gatherer g{read, out};
  RETURN_IF_ERROR(g.Chain(head, /*own=*/true, std::nullopt));
  // Merged siblings' records were gathered before this page's older ones;
  // the runs are disjoint, so sorting restores key order.
  if (!out->merged.empty()) {
    std::sort(out->base.begin(), out->base.end(),
              [](const LeafRecord& a, const LeafRecord& b) { return a.key < b.key; });
  }
  return Status::OK();
}

Result<std::vector<LeafRecord>> VisibleRecords(const LeafImage& image) {
  std::vector<const LeafImage::Delta*> sorted = SortedDeltas(image, nullptr);
  std::vector<LeafRecord> newest;
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (i > 0 && sorted[i]->d.key == sorted[i - 1]->d.key) continue;
    newest.push_back(RecordOf(sorted[i]->d));
  }
  std::vector<LeafRecord> out;
  out.reserve(image.base.size() + newest.size());
  MergeRuns(image.base, newest, [&](const LeafRecord& r) {
    if (!r.tombstone) out.push_back(r);
  });
  return out;
}

namespace {

// One pass of GatherInner over a chain (the page's own, or a merged
// sibling's below its remove-node delta): its routing as a sorted entry
// list, with `cut` hiding older separators >= *cut (a newer split or merge).
struct InnerGatherer {
  const PageReader& read;
  InnerImage* out;
  bool range_set = false;  // a newer split/merge already fixed the high key
  std::vector<uint8_t> merged_levels;  // the merged siblings' base levels

  Status Chain(const PageNode* head, bool own, std::optional<Slice> cut,
               std::vector<InnerEntry>* entries) {
    // The chain's changes, newest first: index deltas, and merged siblings'
    // entries with the count of index deltas newer than their merge delta
    // (each applied at its place in time, oldest first, below).
    std::vector<DeltaView> index;
    std::vector<std::pair<size_t, std::vector<InnerEntry>>> merges;
    const PageNode* base_node = nullptr;
    bool first_data = true;
    for (const PageNode* n = head; n != nullptr; n = n->next) {
      if (n->kind == NodeKind::kBase) {
        base_node = n;
        break;
      }
      if (n->kind != NodeKind::kDelta) continue;
      ASSIGN_OR_RETURN(DeltaView d, DeltaView::Parse(PayloadOf(n)));
      const bool top = first_data;
      first_data = false;
      switch (d.type) {
        case DeltaType::kIndexEntry:
        case DeltaType::kIndexTermDelete:
          if (BelowCut(cut, d.key)) index.push_back(d);
          break;
        case DeltaType::kSplit:
          RangeFromSplit(d, &range_set, &out->header);
          LowerCut(&cut, d.key);
          break;
        case DeltaType::kRemoveNode:
          if (!top) return Status::Corruption("bw-tree: remove-node delta below the top");
          if (own) out->removed = true;
          break;
        case DeltaType::kMerge: {
          if (!read) return Status::NotSupported("bw-tree: gathering a merge without a reader");
          ASSIGN_OR_RETURN(const PageNode* sibling, read(d.pid));
          if (sibling == nullptr) return Status::Corruption("bw-tree: merged sibling has no state");
          out->merged.push_back(d.pid);
          std::vector<InnerEntry> theirs;
          RETURN_IF_ERROR(Chain(sibling, /*own=*/false, cut, &theirs));
          merges.emplace_back(index.size(), std::move(theirs));
          LowerCut(&cut, d.key);
          break;
        }
        default:
          return Status::Corruption("bw-tree: record delta in an inner chain");
      }
    }
    if (base_node == nullptr) return Status::Corruption("bw-tree: inner page without a base");
    ASSIGN_OR_RETURN(BaseView base, BaseView::Parse(PayloadOf(base_node)));
    if (base.is_leaf()) return Status::InvalidArgument("bw-tree: GatherInner on a leaf");
    const BaseHeader& h = base.header();
    if (own) {
      out->header.type = NodeType::kInner;
      out->header.level = h.level;
      out->header.low_key = h.low_key;
    } else {
      merged_levels.push_back(h.level);
    }
    RangeFromBase(h, &range_set, &out->header);
    entries->reserve(base.count() + index.size());
    for (size_t i = 0; i < base.count(); ++i) {
      ASSIGN_OR_RETURN(InnerEntry e, base.EntryAt(i));
      if (cut && !(e.separator < *cut)) break;
      entries->push_back(e);
    }
    // Oldest first: each index delta sets the child of the range at its
    // separator (a new entry for a posted split, a new child for a deleted
    // term); a merged sibling's entries (all at or above its merge delta's
    // separator, so above every entry older than it) join in their turn.
    auto apply = [&](const DeltaView& d) {
      auto pos = std::lower_bound(entries->begin(), entries->end(), d.key,
                                  [](const InnerEntry& e, Slice k) { return e.separator < k; });
      if (pos != entries->end() && pos->separator == d.key) {
        pos->child = d.pid;
      } else {
        entries->insert(pos, InnerEntry{d.key, d.pid});
      }
    };
    size_t next_merge = merges.size();  // merges are newest first too
    for (size_t i = index.size(); i-- > 0;) {
      // Merges newer than index[i+1..] and older than index[i]: those whose
      // recorded count of newer index deltas is i + 1.
      while (next_merge > 0 && merges[next_merge - 1].first == i + 1) {
        --next_merge;
        AppendMerged(std::move(merges[next_merge].second), entries);
      }
      apply(index[i]);
    }
    while (next_merge > 0) {
      --next_merge;
      AppendMerged(std::move(merges[next_merge].second), entries);
    }
    return Status::OK();
  }

  static void AppendMerged(std::vector<InnerEntry> theirs, std::vector<InnerEntry>* entries) {
    for (InnerEntry& e : theirs) {
      auto pos = std::lower_bound(entries->begin(), entries->end(), e.separator,
                                  [](const InnerEntry& x, Slice k) { return x.separator < k; });
      if (pos != entries->end() && pos->separator == e.separator) {
        pos->child = e.child;
      } else {
        entries->insert(pos, e);
      }
    }
  }
};

}  // namespace

Status GatherInner(const PageNode* head, InnerImage* out) {
  return GatherInner(head, PageReader(), out);
}

Status GatherInner(const PageNode* head, const PageReader& read, InnerImage* out) {
  *out = InnerImage();
  InnerGatherer g{read, out};
  std::vector<InnerEntry> entries;
  RETURN_IF_ERROR(g.Chain(head, /*own=*/true, std::nullopt, &entries));
  for (uint8_t level : g.merged_levels) {
    if (level != out->header.level) return Status::Corruption("bw-tree: merged sibling at another level");
  }
  out->entries.reserve(entries.size());
  for (const InnerEntry& e : entries) {
    if (!out->entries.empty() && out->entries.back().child == e.child) continue;
    out->entries.push_back(e);
  }
  return Status::OK();
}

namespace {

// The usual inner chain (see ConsolidateInnerChain) consolidated by copying
// its base's entries as bytes: the new base node, with its entry count in
// *entries; null for any other chain.
Result<PageNode*> CopyInner(llama::Llama* llama, const PageNode* head, size_t* entries) {
  const PageNode* delta_node = nullptr;
  const PageNode* base_node = nullptr;
  for (const PageNode* n = head; n != nullptr; n = n->next) {
    if (n->kind == NodeKind::kBase) {
      base_node = n;
      break;
    }
    if (n->kind != NodeKind::kDelta) continue;
    if (delta_node != nullptr) return nullptr;
    delta_node = n;
  }
  if (delta_node == nullptr || base_node == nullptr) return nullptr;
  ASSIGN_OR_RETURN(DeltaView d, DeltaView::Parse(PayloadOf(delta_node)));
  if (d.type != DeltaType::kIndexEntry && d.type != DeltaType::kIndexTermDelete) return nullptr;
  BaseView base;
  RETURN_IF_ERROR(base.Init(PayloadOf(base_node)));
  if (base.is_leaf() || base.AboveHigh(d.key)) return nullptr;
  ASSIGN_OR_RETURN(BasePosition pos, base.Find(d.key));
  // The entry that changes (or goes in before `at`) keeps its place only if
  // neither neighbour routes to its child: otherwise gathering folds them.
  const size_t at = pos.index;
  if (!pos.exact && at == 0) return nullptr;    // below the first separator
  const size_t next = pos.exact ? at + 1 : at;  // the first entry after it
  if (at > 0) {
    ASSIGN_OR_RETURN(InnerEntry e, base.EntryAt(at - 1));
    if (e.child == d.pid) return nullptr;
  }
  if (next < base.count()) {
    ASSIGN_OR_RETURN(InnerEntry e, base.EntryAt(next));
    if (e.child == d.pid) return nullptr;
  }
  BaseBuilder builder(base.header());
  RETURN_IF_ERROR(builder.AddRun(base, 0, at));
  builder.AddEntry(InnerEntry{d.key, d.pid});
  RETURN_IF_ERROR(builder.AddRun(base, next, base.count()));
  PageNode* node = llama->NewNode(NodeKind::kBase, builder.size(), 0);
  builder.Finish(node->payload());
  *entries = builder.count();
  return node;
}

}  // namespace

Result<PageNode*> ConsolidateInnerChain(llama::Llama* llama, const PageNode* head,
                                        size_t* entries, bool* copied, const PageReader& read) {
  ASSIGN_OR_RETURN(PageNode* copy, CopyInner(llama, head, entries));
  if (copied != nullptr) *copied = copy != nullptr;
  if (copy != nullptr) return copy;
  InnerImage image;
  RETURN_IF_ERROR(GatherInner(head, read, &image));
  const size_t size = InnerBaseSize(image.header, image.entries);
  PageNode* node = llama->NewNode(NodeKind::kBase, size, 0);
  EncodeInnerBase(image.header, image.entries, node->payload());
  *entries = image.entries.size();
  return node;
}

namespace {

// The per-key rule of every leaf consolidation: over the deltas sorted by
// key, newest first within a key, the deltas above `lsn_bound` are kept (as
// indexes into image.deltas), the first one at or below it is handed to
// fold() and counted, and everything older is dropped as invisible.
template <typename Fold>
Status FoldSortedDeltas(const std::vector<const LeafImage::Delta*>& sorted,
                        const std::vector<size_t>& order, uint64_t lsn_bound,
                        std::vector<size_t>* kept, ConsolidatedPage* out, Fold fold) {
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j < sorted.size() && sorted[j]->d.key == sorted[i]->d.key) ++j;
    bool done = false;
    for (size_t k = i; k < j; ++k) {
      const DeltaView& d = sorted[k]->d;
      if (done) {
        ++out->dropped;
      } else if (d.lsn > lsn_bound) {
        kept->push_back(order[k]);
      } else {
        RETURN_IF_ERROR(fold(d));
        out->base_tag = std::max(out->base_tag, d.lsn);
        ++out->folded;
        done = true;
      }
    }
    i = j;
  }
  return Status::OK();
}

// The kept deltas, newest first, re-encoded with hints against the new base.
Status AddKeptDeltas(const LeafImage& image, std::vector<size_t> kept, Slice new_bytes,
                     ConsolidatedPage* out) {
  std::sort(kept.begin(), kept.end());
  ASSIGN_OR_RETURN(BaseView new_base, BaseView::Parse(new_bytes));
  out->deltas.reserve(kept.size());
  for (size_t k : kept) {
    DeltaView d = image.deltas[k].d;
    ASSIGN_OR_RETURN(BasePosition pos, new_base.Find(d.key));
    d.hint = ToHint(pos.index);
    out->deltas.push_back(ConsolidatedPage::Delta{EncodeDelta(d), image.deltas[k].tag});
  }
  return Status::OK();
}

}  // namespace

Result<ConsolidatedPage> Consolidate(const LeafImage& image, uint64_t lsn_bound,
                                     uint64_t purge_bound) {
  ConsolidatedPage out;
  out.base_tag = image.base_tag;
  out.dropped = image.dropped;

  // Per key, sorted: kept deltas from the newest down to the first foldable
  // one, which is folded; everything older is invisible and dropped.
  std::vector<size_t> order;
  std::vector<const LeafImage::Delta*> sorted = SortedDeltas(image, &order);
  std::vector<LeafRecord> folded;         // sorted by key, one per key
  std::vector<size_t> kept;               // indexes into image.deltas
  RETURN_IF_ERROR(FoldSortedDeltas(sorted, order, lsn_bound, &kept, &out, [&](const DeltaView& d) {
    folded.push_back(RecordOf(d));
    return Status::OK();
  }));

  // One linear merge of the base records with the folded deltas.
  std::vector<LeafRecord> records;
  records.reserve(image.base.size() + folded.size());
  MergeRuns(image.base, folded, [&](const LeafRecord& r) {
    if (r.tombstone && r.lsn < purge_bound) {
      ++out.purged;
      return;
    }
    records.push_back(r);
  });
  BaseHeader header = image.header;
  header.type = NodeType::kLeaf;
  header.level = 0;
  out.base = EncodeLeafBase(header, records);

  RETURN_IF_ERROR(AddKeptDeltas(image, std::move(kept), out.base, &out));
  return out;
}

namespace {

// Consolidate(head, ...) for the common chain: record and split deltas over
// one leaf base (no merge or remove-node delta). The base is not decoded:
// the runs of its entries that no folded delta replaces are copied as bytes
// (BaseBuilder), each folded record placed by a search of the base.
// False in *simple when the chain is not of that form (nothing is done).
// With `from`: only keys >= *from are kept, and *from is the new low key.
// With `sink`, the base is written into the sink(size, base tag) bytes
// instead of out.base.
using BaseSink = std::function<char*(size_t size, uint64_t tag)>;
Result<ConsolidatedPage> ConsolidateSimple(const PageNode* head, uint64_t lsn_bound,
                                           uint64_t purge_bound, const Slice* from,
                                           bool* simple, const BaseSink& sink = nullptr) {
  *simple = false;
  // The base is read whole (AddRun passes over every entry, Finish copies
  // them): ask for its lines now, so that their misses overlap the walk of
  // the deltas above it instead of following it. base_hint is exact where
  // set (page_node.h); past 8 KiB the hardware's stream prefetch suffices.
  if (const PageNode* b = head->base_hint; b != nullptr) {
    constexpr size_t kMaxLines = 128;
    const size_t lines = (sizeof(PageNode) + b->size + kCacheLineBytes - 1) / kCacheLineBytes;
    PrefetchLines(b, static_cast<int>(std::min(lines, kMaxLines)));
  }
  LeafImage image;  // header and deltas only; base records stay in the base
  image.deltas.reserve(16);
  std::optional<Slice> cut;  // the lowest split separator: keys >= it are gone
  bool range_set = false;
  const PageNode* base_node = nullptr;
  for (const PageNode* n = head; n != nullptr; n = n->next) {
    if (n->kind == NodeKind::kBase) {
      base_node = n;
      break;
    }
    if (n->kind != NodeKind::kDelta) continue;
    ASSIGN_OR_RETURN(DeltaView d, DeltaView::Parse(PayloadOf(n)));
    if (IsRecordDelta(d.type)) {
      if (from != nullptr && d.key < *from) continue;  // not in the part kept
      if (BelowCut(cut, d.key)) {
        image.deltas.push_back(LeafImage::Delta{d, n->tag});
      } else {
        ++image.dropped;
      }
    } else if (d.type == DeltaType::kSplit) {
      RangeFromSplit(d, &range_set, &image.header);
      LowerCut(&cut, d.key);
    } else {
      return ConsolidatedPage();  // merge, remove-node (or corrupt): not simple
    }
  }
  if (base_node == nullptr) return ConsolidatedPage();
  ASSIGN_OR_RETURN(BaseView base, BaseView::Parse(PayloadOf(base_node)));
  if (!base.is_leaf()) return ConsolidatedPage();
  *simple = true;
  image.header.low_key = from != nullptr ? *from : base.header().low_key;
  RangeFromBase(base.header(), &range_set, &image.header);
  image.header.type = NodeType::kLeaf;
  image.header.level = 0;

  ConsolidatedPage out;
  out.base_tag = base_node->tag;
  // The base's entries below the cut.
  size_t base_end = base.count();
  if (cut) {
    ASSIGN_OR_RETURN(BasePosition at, base.Find(*cut));
    base_end = at.index;
  }
  size_t base_begin = 0;
  if (from != nullptr) {
    ASSIGN_OR_RETURN(BasePosition at, base.Find(*from));
    base_begin = std::min(at.index, base_end);
  }
  out.dropped = image.dropped + (base.count() - base_end);

  // Per key (FoldSortedDeltas): each folded record is placed among the base
  // runs copied as bytes.
  std::vector<size_t> order;
  std::vector<const LeafImage::Delta*> sorted = SortedDeltas(image, &order);
  BaseBuilder builder(image.header);
  std::vector<size_t> kept;
  size_t next_base = base_begin;  // base entries before it are placed
  RETURN_IF_ERROR(FoldSortedDeltas(sorted, order, lsn_bound, &kept, &out, [&](const DeltaView& d) {
    // The base entries below the key go first; an entry for the key is
    // replaced. The search starts past the entries already placed; a
    // delta's hint, when there is one, names the place (checked).
    size_t lo = next_base, hi = base_end;
    if (d.hint != kNoHint && d.hint >= next_base && d.hint <= base_end) lo = hi = d.hint;
    ASSIGN_OR_RETURN(BasePosition pos, base.Find(d.key, lo, hi));
    const size_t at = std::min(std::max(pos.index, next_base), base_end);
    RETURN_IF_ERROR(builder.AddRun(base, next_base, at, purge_bound, &out.purged));
    next_base = at;
    if (pos.exact && at == pos.index && at < base_end) ++next_base;
    const LeafRecord r = RecordOf(d);
    if (r.tombstone && r.lsn < purge_bound) {
      ++out.purged;
    } else {
      builder.AddRecord(r);
    }
    return Status::OK();
  }));
  RETURN_IF_ERROR(builder.AddRun(base, next_base, base_end, purge_bound, &out.purged));
  Slice new_bytes;
  if (sink) {
    char* dst = sink(builder.size(), out.base_tag);
    builder.Finish(dst);
    new_bytes = Slice(dst, builder.size());
  } else {
    out.base = builder.Finish();
    new_bytes = out.base;
  }

  RETURN_IF_ERROR(AddKeptDeltas(image, std::move(kept), new_bytes, &out));
  return out;
}

}  // namespace

Result<ConsolidatedPage> Consolidate(const PageNode* head, uint64_t lsn_bound,
                                     uint64_t purge_bound) {
  bool simple = false;
  ASSIGN_OR_RETURN(ConsolidatedPage fast,
                   ConsolidateSimple(head, lsn_bound, purge_bound, nullptr, &simple));
  if (simple) return fast;
  LeafImage image;
  RETURN_IF_ERROR(GatherLeaf(head, PageReader(), &image));
  if (image.removed) return Status::NotSupported("bw-tree: consolidating a removed page");
  return Consolidate(image, lsn_bound, purge_bound);
}

Result<ConsolidatedPage> ConsolidateFrom(const PageNode* head, Slice low, uint64_t lsn_bound,
                                         uint64_t purge_bound) {
  bool simple = false;
  ASSIGN_OR_RETURN(ConsolidatedPage page,
                   ConsolidateSimple(head, lsn_bound, purge_bound, &low, &simple));
  if (!simple) return Status::NotSupported("bw-tree: not a plain leaf chain");
  return page;
}

Result<PageNode*> ConsolidateChain(llama::Llama* llama, const PageNode* head, uint64_t lsn_bound,
                                   uint64_t purge_bound, ConsolidatedPage* stats) {
  PageNode* base = nullptr;
  bool simple = false;
  Result<ConsolidatedPage> page = ConsolidateSimple(
      head, lsn_bound, purge_bound, nullptr, &simple, [&](size_t size, uint64_t tag) {
        base = llama->NewNode(NodeKind::kBase, size, tag);
        return base->payload();
      });
  if (!page.ok() || !simple) {
    if (base != nullptr) llama->DiscardNode(base);
    if (!page.ok()) return page.status();
    // Not a plain chain: the general path, through a payload copy.
    ASSIGN_OR_RETURN(ConsolidatedPage general, Consolidate(head, lsn_bound, purge_bound));
    *stats = std::move(general);
    return BuildChain(llama, *stats);
  }
  *stats = std::move(*page);
  base->user_flags = KeptFlags(stats->deltas.size());
  PageNode* chain = base;
  size_t below = 0;
  for (auto it = stats->deltas.rbegin(); it != stats->deltas.rend(); ++it) {
    PageNode* d = llama->NewNode(NodeKind::kDelta, it->payload.size(), it->tag);
    std::memcpy(d->payload(), it->payload.data(), it->payload.size());
    d->user_flags = PlainFlags(++below);  // record deltas over the base (UpdateR sets base_hint)
    d->next = chain;
    chain = d;
  }
  return chain;
}

PageNode* BuildChain(llama::Llama* llama, const ConsolidatedPage& page) {
  PageNode* chain = llama->NewNode(NodeKind::kBase, page.base.size(), page.base_tag);
  std::memcpy(chain->payload(), page.base.data(), page.base.size());
  chain->user_flags = KeptFlags(page.deltas.size());
  size_t below = 0;
  for (auto it = page.deltas.rbegin(); it != page.deltas.rend(); ++it) {
    PageNode* d = llama->NewNode(NodeKind::kDelta, it->payload.size(), it->tag);
    std::memcpy(d->payload(), it->payload.data(), it->payload.size());
    d->user_flags = PlainFlags(++below);  // record deltas over the base (UpdateR sets base_hint)
    d->next = chain;
    chain = d;
  }
  return chain;
}

}  // namespace deuteron::bwtree
