#include "tc/scan_iterator.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <memory>

#include "common/fault_hooks.h"
#include "tc/txn_manager.h"

namespace deuteron::tc {

namespace {

using WriteSet = std::map<std::string, std::optional<std::string>, std::less<>>;

bool InScanRange(const ScanOptions& o, std::string_view key) {
  if (o.lower) {
    if (o.lower_inclusive ? key < *o.lower : key <= *o.lower) return false;
  }
  if (o.upper) {
    if (o.upper_inclusive ? key > *o.upper : key >= *o.upper) return false;
  }
  return true;
}

// The write-set entry in the range that comes first after `cursor` in scan
// order (from the start of the range without a cursor); null when none.
const WriteSet::value_type* NextWrite(const WriteSet& writes, const ScanOptions& o,
                                      const std::optional<std::string>& cursor) {
  WriteSet::const_iterator it;
  if (!o.reverse) {
    if (cursor) {
      it = writes.upper_bound(*cursor);
    } else if (o.lower) {
      it = o.lower_inclusive ? writes.lower_bound(*o.lower) : writes.upper_bound(*o.lower);
    } else {
      it = writes.begin();
    }
    if (it == writes.end()) return nullptr;
  } else {
    // The last entry before the cursor (or the upper bound).
    if (cursor) {
      it = writes.lower_bound(*cursor);
    } else if (o.upper) {
      it = o.upper_inclusive ? writes.upper_bound(*o.upper) : writes.lower_bound(*o.upper);
    } else {
      it = writes.end();
    }
    if (it == writes.begin()) return nullptr;
    --it;
  }
  return InScanRange(o, it->first) ? &*it : nullptr;
}

}  // namespace

// ------------------------------------------------------------ Transaction

Result<std::unique_ptr<ScanIterator>> Transaction::Scan(const ScanOptions& o) {
  if (Status s = CheckActive(); !s.ok()) return s;
  const bool empty = o.lower && o.upper && *o.lower > *o.upper;
  if (!empty) {
    // The lock covers the whole requested range, whatever the limit: [lo,
    // hi), an inclusive upper bound u becomes u + '\0', its immediate
    // successor.
    KeyRange range{o.lower, o.upper};
    if (o.upper && o.upper_inclusive) range.hi->push_back('\0');
    // DEUTERON_BREAK=scan_lock_early (contract 6 broken on purpose): no
    // range lock is held, as if released the moment it was granted.
    if (!fault::BrokenOnPurpose(fault::Break::kScanLockEarly)) {
      if (Status s = tm_->locks_.LockRange(id_, range); !s.ok()) return Fail(std::move(s));
    }
    // After the lock, as Get: a failed TC serves no reads.
    if (Status s = tm_->CheckHealthy(); !s.ok()) return s;
    // Whatever the range shows may come from an early-released commit.
    NoteRead(0);
  }
  std::unique_ptr<ScanIterator> it(new ScanIterator(this, o, empty));
  it->Advance();
  if (!it->status_.ok()) return it->status_;
  return it;
}

Result<std::vector<KeyValue>> Transaction::ScanAll(const ScanOptions& o) {
  Result<std::unique_ptr<ScanIterator>> r = Scan(o);
  if (!r.ok()) return r.status();
  ScanIterator& it = **r;
  std::vector<KeyValue> out;
  for (; it.Valid(); it.Next()) out.push_back({it.key(), it.value()});
  if (Status s = it.status(); !s.ok()) return s;
  return out;
}

// ------------------------------------------------------------ ScanIterator

ScanIterator::ScanIterator(Transaction* txn, const ScanOptions& options, bool empty)
    : txn_(txn), options_(options) {
  ++txn_->open_scans_;
  if (empty) {
    done_ = true;
    dc_more_ = false;
  }
}

ScanIterator::~ScanIterator() {
  --txn_->open_scans_;
  status_.PermitUncheckedError();
}

bool ScanIterator::Valid() const { return valid_ && txn_->active(); }

void ScanIterator::Next() {
  // Positioned, possibly before the transaction finished: Advance then ends
  // the iteration with TransactionFinished.
  assert(valid_ && "Next on an iterator past its end");
  Advance();
}

const std::string& ScanIterator::key() const {
  assert(Valid());
  return key_;
}

const std::string& ScanIterator::value() const {
  assert(Valid());
  return value_;
}

Status ScanIterator::status() const {
  if (!txn_->active()) {
    return Status::TransactionFinished("scan of transaction " + std::to_string(txn_->id()) +
                                       ": the transaction is finished");
  }
  return status_;
}

Status ScanIterator::FillPage() {
  if (page_pos_ < page_.size() || !dc_more_) return Status::OK();
  TxnManager* tm = txn_->tm_;
  if (Status s = tm->CheckHealthy(); !s.ok()) return s;
  ScanRequest req{options_.lower, options_.lower_inclusive, options_.upper,
                  options_.upper_inclusive, options_.reverse, tm->options_.scan_page};
  if (resume_) {
    if (options_.reverse) {
      req.upper = resume_;
      req.upper_inclusive = false;
    } else {
      req.lower = resume_;
      req.lower_inclusive = false;
    }
  }
  if (options_.limit != 0) {
    // `remaining` more items need at most remaining + (deletes in the write
    // set) DC items: each delete hides at most one.
    const size_t want = options_.limit - emitted_ + txn_->writes_.size();
    req.limit = static_cast<uint32_t>(std::min<size_t>(req.limit, std::max<size_t>(want, 1)));
  }
  Result<ScanResult> r = tm->DcScan(req);
  if (!r.ok()) return r.status();
  page_ = std::move(r->items);
  page_pos_ = 0;
  dc_more_ = r->more && !page_.empty();
  if (!page_.empty()) resume_ = page_.back().key;
  return Status::OK();
}

void ScanIterator::Advance() {
  valid_ = false;
  if (done_) return;
  if (!txn_->active()) {
    done_ = true;
    return;  // status() reports TransactionFinished
  }
  if (options_.limit != 0 && emitted_ >= options_.limit) {
    done_ = true;
    return;
  }
  for (;;) {
    if (Status s = FillPage(); !s.ok()) {
      done_ = true;
      status_ = std::move(s);
      return;
    }
    ScanItem* dc = page_pos_ < page_.size() ? &page_[page_pos_] : nullptr;
    // Every DC item left in the page lies past the cursor: the cursor only
    // moves to items taken from the page or to writes before its front.
    const WriteSet::value_type* w = NextWrite(txn_->writes_, options_, cursor_);
    if (dc == nullptr && w == nullptr) {
      done_ = true;
      return;
    }
    if (w != nullptr && (dc == nullptr || !Before(dc->key, w->first))) {
      // The own write comes first, or replaces the DC item of its key.
      if (dc != nullptr && dc->key == w->first) ++page_pos_;
      cursor_ = w->first;
      if (!w->second) continue;  // deleted by this transaction: hidden
      key_ = w->first;
      value_ = *w->second;
    } else {
      key_ = std::move(dc->key);
      value_ = std::move(dc->value);
      ++page_pos_;
      cursor_ = key_;
    }
    valid_ = true;
    ++emitted_;
    return;
  }
}

}  // namespace deuteron::tc
