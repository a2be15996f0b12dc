// The embedded connection: a tc::Database in a directory, its transactions
// called directly.
#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "common/slice.h"
#include "tc/client/backend.h"
#include "tc/database.h"
#include "tc/scan_page.h"

namespace deuteron::client::detail {
namespace {

Slice ToSlice(std::string_view s) { return Slice(s.data(), s.size()); }

class EmbeddedTxn final : public TxnBackend {
 public:
  EmbeddedTxn(std::unique_ptr<tc::Transaction> txn, size_t page) : txn_(std::move(txn)), page_(page) {}
  ~EmbeddedTxn() override { txn_->Abort(); }

  uint64_t id() const override { return txn_->id(); }
  Result<std::string> Get(std::string_view key) override { return txn_->Get(ToSlice(key)); }
  Status Put(std::string_view key, std::string_view value) override {
    return txn_->Put(ToSlice(key), ToSlice(value));
  }
  Status Delete(std::string_view key) override { return txn_->Delete(ToSlice(key)); }

  Result<Page> ScanPage(const ScanOptions& o) override {
    tc::ScanOptions t;
    t.lower = o.lower;
    t.lower_inclusive = o.lower_inclusive;
    t.upper = o.upper;
    t.upper_inclusive = o.upper_inclusive;
    t.reverse = o.reverse;
    ASSIGN_OR_RETURN(tc::ScanPageResult r, tc::ScanPage(*txn_, t, page_));
    Page page;
    page.items.reserve(r.items.size());
    for (tc::KeyValue& kv : r.items) page.items.emplace_back(std::move(kv.key), std::move(kv.value));
    page.more = r.more;
    page.resume_key = std::move(r.resume_key);
    return page;
  }

  Status Commit() override { return txn_->Commit(); }
  void Abort() override { txn_->Abort(); }
  bool active() const override { return txn_->active(); }

 private:
  std::unique_ptr<tc::Transaction> txn_;
  const size_t page_;
};

class EmbeddedClient final : public ClientBackend {
 public:
  EmbeddedClient(std::unique_ptr<tc::Database> db, size_t page) : db_(std::move(db)), page_(page) {}

  Result<std::unique_ptr<TxnBackend>> Begin() override {
    if (closed_) return Status::ShuttingDown("the client is closed");
    return std::unique_ptr<TxnBackend>(new EmbeddedTxn(db_->Begin(), page_));
  }

  Status Close() override {
    if (closed_.exchange(true)) return Status::OK();
    return db_->Close();
  }

 private:
  std::unique_ptr<tc::Database> db_;
  const size_t page_;
  std::atomic<bool> closed_{false};
};

}  // namespace

Result<std::unique_ptr<ClientBackend>> OpenEmbeddedBackend(const std::string& dir,
                                                           const EmbeddedOptions& options) {
  tc::DatabaseOptions o;
  o.txn.lock_timeout = options.lock_timeout;
  o.dc.llama.memory_budget = options.memory_budget;
  ASSIGN_OR_RETURN(std::unique_ptr<tc::Database> db, tc::Database::Open(dir, o));
  return std::unique_ptr<ClientBackend>(new EmbeddedClient(std::move(db), options.scan_page));
}

}  // namespace deuteron::client::detail
