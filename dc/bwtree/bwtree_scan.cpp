// BwTree: leaf snapshots for scans, and the Iterator (bwtree.h).
#include "dc/bwtree/internal/bwtree_impl.h"

namespace deuteron::bwtree {

Status BwTree::ReadLeaf(Slice key, bool before, Leaf* leaf) {
  auto guard = llama_->Enter();
  DeadPages dead;
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    Path path;
    RETURN_IF_ERROR(Descend(key, before, 0, &path));
    PageId pid = path.pid;
    const PageNode* head = path.head;
    for (int hop = 0; hop < kMaxHops; ++hop) {
      LeafImage image;
      Status s = GatherLeaf(head, Reader(), &image);
      if (s.IsNotFound()) {
        if (!llama_->IsPrivate(pid)) RETURN_IF_ERROR(dead.Met(pid, "a leaf read"));
        break;
      }
      RETURN_IF_ERROR(s);
      if (image.removed) {
        RETURN_IF_ERROR(CompleteMerge(pid));
        if (pid == path.pid && path.routed) {
          RETURN_IF_ERROR(RepairRoute(path.parent_level, path.route_low, pid));
        }
        break;
      }
      const BaseHeader& h = image.header;
      const bool beyond = !h.high_infinite && (before ? key > h.high_key : key >= h.high_key);
      if (beyond) {
        Result<const PageNode*> next = llama_->Read(h.right_sibling);
        if (!next.ok() || *next == nullptr) {
          if (!next.ok() && !next.status().IsNotFound()) return next.status();
          if (!llama_->IsPrivate(h.right_sibling)) {
            RETURN_IF_ERROR(dead.Met(h.right_sibling, "a leaf read"));
          }
          break;
        }
        pid = h.right_sibling;
        head = *next;
        continue;
      }
      const bool below = before ? (key <= h.low_key && !h.low_key.empty()) : key < h.low_key;
      if (below) {  // a stale route: start over
        RETURN_IF_ERROR(dead.Met(pid, "a leaf read"));
        break;
      }
      ASSIGN_OR_RETURN(std::vector<LeafRecord> records, VisibleRecords(image));
      leaf->items.clear();
      leaf->items.reserve(records.size());
      for (const LeafRecord& r : records) {
        leaf->items.push_back(Iterator::Item{r.key.ToString(), r.value.ToString(), r.lsn});
      }
      leaf->low = h.low_key.ToString();
      leaf->high_infinite = h.high_infinite;
      leaf->high = h.high_infinite ? std::string() : h.high_key.ToString();
      return Status::OK();
    }
    counters_->restarts.Add();
  }
  return Status::Busy("bw-tree: leaf read did not settle");
}

Result<std::unique_ptr<Iterator>> BwTree::Scan(const ScanOptions& options) {
  if (options.lower) RETURN_IF_ERROR(CheckKey(options_.limits, *options.lower));
  if (options.upper) RETURN_IF_ERROR(CheckKey(options_.limits, *options.upper));
  std::unique_ptr<Iterator> it(new Iterator(this, options));
  it->Load(/*first=*/true);
  return it;
}

Iterator::Iterator(BwTree* tree, ScanOptions options) : tree_(tree), options_(std::move(options)) {}

bool Iterator::InRange(Slice key) const {
  if (options_.lower) {
    const int c = key.compare(*options_.lower);
    if (c < 0 || (c == 0 && !options_.lower_inclusive)) return false;
  }
  if (options_.upper) {
    const int c = key.compare(*options_.upper);
    if (c > 0 || (c == 0 && !options_.upper_inclusive)) return false;
  }
  return true;
}

void Iterator::Next() {
  if (!Valid()) return;
  ++pos_;
  if (pos_ >= items_.size()) Load(/*first=*/false);
}

void Iterator::Load(bool first) {
  items_.clear();
  pos_ = 0;
  // Leaves are crossed in a loop: a run of empty or out-of-range leaves costs
  // one descent each, never recursion.
  for (;;) {
    if (done_) return;
    std::string from;
    if (!options_.reverse) {
      if (first) {
        from = options_.lower.value_or(std::string());
      } else {
        if (high_infinite_) {
          done_ = true;
          return;
        }
        from = high_;
      }
      // Past the upper bound: nothing more.
      if (!first && options_.upper && Slice(from) > Slice(*options_.upper)) {
        done_ = true;
        return;
      }
    } else {
      if (first) {
        // Just above the upper bound: the leaf holding the largest key below
        // it (or at it, when inclusive) is found by a "before" descent.
        from = options_.upper ? *options_.upper : KeyAboveAll(tree_->options_.limits);
        if (options_.upper && options_.upper_inclusive) from.push_back('\0');
      } else {
        if (low_.empty()) {
          done_ = true;
          return;
        }
        from = low_;
      }
      if (!first && options_.lower && Slice(from) <= Slice(*options_.lower)) {
        done_ = true;
        return;
      }
    }
    const bool was_first = first;
    first = false;
    if (options_.reverse && from.empty()) {  // nothing lies below the empty key
      done_ = true;
      return;
    }
    BwTree::Leaf leaf;
    Status s = tree_->ReadLeaf(from, options_.reverse, &leaf);
    if (!s.ok()) {
      status_ = s;
      done_ = true;
      return;
    }
    low_ = std::move(leaf.low);
    high_ = std::move(leaf.high);
    high_infinite_ = leaf.high_infinite;
    for (Iterator::Item& item : leaf.items) {
      if (!InRange(item.key)) continue;
      // A leaf found after concurrent merges may also cover keys already
      // returned: keep only those past the previous leaf's boundary.
      if (!was_first && (options_.reverse ? Slice(item.key) >= Slice(from)
                                          : Slice(item.key) < Slice(from))) {
        continue;
      }
      items_.push_back(std::move(item));
    }
    if (options_.reverse) std::reverse(items_.begin(), items_.end());
    if (!items_.empty()) return;
  }
}

}  // namespace deuteron::bwtree
