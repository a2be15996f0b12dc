// ScanPage: one page of a transaction's scan, with the key to resume after.
// The TC service's `scan` and the embedded client's scan iterator both page
// through this one adapter, so that when Transaction::Scan becomes an
// iterator (issue 29) only scan_page.cpp changes.
//
// Paging: a page holds at most `page_size` items of the range in scan order;
// when `more`, the next page is the same options with the bound moved past
// `resume_key`, exclusive (NextPageOptions). Each page takes the
// transaction's S range lock on the whole remaining range, so pages of one
// transaction see one serializable state.
//
// Thread safety: as Transaction (one thread at a time per transaction).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"
#include "tc/txn_manager.h"

namespace deuteron::tc {

struct ScanPageResult {
  std::vector<KeyValue> items;
  bool more = false;
  std::string resume_key;  // the last item's key when more
};

// options.limit is ignored (the caller counts); REQUIRES: page_size >= 1.
// Errors as Transaction::Scan.
Result<ScanPageResult> ScanPage(Transaction& txn, const ScanOptions& options, size_t page_size);

// `options` narrowed to what follows `resume_key` in scan order.
ScanOptions NextPageOptions(ScanOptions options, const std::string& resume_key);

}  // namespace deuteron::tc
