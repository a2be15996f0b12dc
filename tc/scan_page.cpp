#include "tc/scan_page.h"

#include <cassert>
#include <utility>

namespace deuteron::tc {

Result<ScanPageResult> ScanPage(Transaction& txn, const ScanOptions& options, size_t page_size) {
  assert(page_size >= 1);
  ScanOptions o = options;
  o.limit = page_size + 1;  // one more than the page: tells whether more follow
  Result<std::vector<KeyValue>> items = txn.ScanAll(o);
  if (!items.ok()) return std::move(items).status();
  ScanPageResult page;
  page.items = std::move(items).value();
  if (page.items.size() > page_size) {
    page.items.resize(page_size);
    page.more = true;
    page.resume_key = page.items.back().key;
  }
  return page;
}

ScanOptions NextPageOptions(ScanOptions options, const std::string& resume_key) {
  if (options.reverse) {
    options.upper = resume_key;
    options.upper_inclusive = false;
  } else {
    options.lower = resume_key;
    options.lower_inclusive = false;
  }
  return options;
}

}  // namespace deuteron::tc
