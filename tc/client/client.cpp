#include "tc/client/client.h"

#include <algorithm>
#include <charconv>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "tc/client/backend.h"

namespace deuteron::client {

// ------------------------------------------------------------ ScanIterator

struct ScanIterator::Impl {
  detail::TxnBackend* txn;  // the transaction outlives its iterators
  ScanOptions options;      // narrowed past each page fetched
  size_t returned = 0;      // items handed out (counts against options.limit)
  detail::Page page;
  size_t pos = 0;
  bool exhausted = false;   // no page after this one
  bool valid = false;
  Status status;

  void Fetch() {
    while (pos >= page.items.size()) {
      if (exhausted) {
        valid = false;
        return;
      }
      Result<detail::Page> next = txn->ScanPage(options);
      if (!next.ok()) {
        status = std::move(next).status();
        status.PermitUncheckedError();
        valid = false;
        exhausted = true;
        return;
      }
      page = std::move(next).value();
      pos = 0;
      if (page.more) {
        if (options.reverse) {
          options.upper = page.resume_key;
          options.upper_inclusive = false;
        } else {
          options.lower = page.resume_key;
          options.lower_inclusive = false;
        }
      } else {
        exhausted = true;
      }
    }
    valid = true;
  }

  void Settle() {
    if (options.limit != 0 && returned >= options.limit) {
      valid = false;
      return;
    }
    Fetch();
  }
};

ScanIterator::ScanIterator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ScanIterator::ScanIterator(ScanIterator&&) noexcept = default;
ScanIterator& ScanIterator::operator=(ScanIterator&&) noexcept = default;
ScanIterator::~ScanIterator() = default;

bool ScanIterator::Valid() const { return impl_->valid; }
const std::string& ScanIterator::key() const { return impl_->page.items[impl_->pos].first; }
const std::string& ScanIterator::value() const { return impl_->page.items[impl_->pos].second; }
const Status& ScanIterator::status() const { return impl_->status; }

void ScanIterator::Next() {
  if (!impl_->valid) return;
  ++impl_->pos;
  ++impl_->returned;
  impl_->Settle();
}

// ------------------------------------------------------------ Transaction

Transaction::Transaction(std::unique_ptr<detail::TxnBackend> backend) : backend_(std::move(backend)) {}
Transaction::~Transaction() { backend_->Abort(); }

uint64_t Transaction::id() const { return backend_->id(); }
Result<std::string> Transaction::Get(std::string_view key) { return backend_->Get(key); }
Status Transaction::Put(std::string_view key, std::string_view value) { return backend_->Put(key, value); }
Status Transaction::Delete(std::string_view key) { return backend_->Delete(key); }
Status Transaction::Commit() { return backend_->Commit(); }
void Transaction::Abort() { backend_->Abort(); }
bool Transaction::active() const { return backend_->active(); }

ScanIterator Transaction::Scan(ScanOptions options) {
  auto impl = std::make_unique<ScanIterator::Impl>();
  impl->status.PermitUncheckedError();  // the caller need not look at an OK end
  impl->txn = backend_.get();
  impl->options = std::move(options);
  impl->Settle();
  return ScanIterator(std::move(impl));
}

// ------------------------------------------------------------ Client

bool IsRetryable(const Status& s) {
  return s.code() == Code::kDeadlock || s.code() == Code::kTimedOut || s.code() == Code::kUnavailable;
}

Client::Client(std::unique_ptr<detail::ClientBackend> backend) : backend_(std::move(backend)) {}

Client::~Client() { Close().PermitUncheckedError(); }

Result<std::unique_ptr<Client>> Client::OpenEmbedded(const std::string& dir, EmbeddedOptions options) {
  if (options.scan_page == 0) return Status::InvalidArgument("EmbeddedOptions: scan_page is 0");
  ASSIGN_OR_RETURN(std::unique_ptr<detail::ClientBackend> backend,
                   detail::OpenEmbeddedBackend(dir, options));
  return std::unique_ptr<Client>(new Client(std::move(backend)));
}

Result<std::unique_ptr<Client>> Client::Connect(const std::string& address, RemoteOptions options) {
  const size_t colon = address.rfind(':');
  uint32_t port = 0;
  if (colon == std::string::npos || colon == 0) {
    return Status::InvalidArgument("Client::Connect: address must be host:port, got '" + address + "'");
  }
  const char* first = address.data() + colon + 1;
  const char* last = address.data() + address.size();
  const auto [end, ec] = std::from_chars(first, last, port);
  if (ec != std::errc() || end != last || port == 0 || port > 65535) {
    return Status::InvalidArgument("Client::Connect: bad port in '" + address + "'");
  }
  if (options.scan_page == 0) return Status::InvalidArgument("RemoteOptions: scan_page is 0");
  if (options.max_frame_size < 64) return Status::InvalidArgument("RemoteOptions: max_frame_size below 64");
  ASSIGN_OR_RETURN(std::unique_ptr<detail::ClientBackend> backend,
                   detail::ConnectRemoteBackend(address.substr(0, colon),
                                                static_cast<uint16_t>(port), options));
  return std::unique_ptr<Client>(new Client(std::move(backend)));
}

Result<std::unique_ptr<Transaction>> Client::Begin() {
  ASSIGN_OR_RETURN(std::unique_ptr<detail::TxnBackend> txn, backend_->Begin());
  return std::unique_ptr<Transaction>(new Transaction(std::move(txn)));
}

Status Client::Close() { return backend_->Close(); }

Status Client::Run(const std::function<Status(Transaction&)>& fn, RetryOptions retry) {
  thread_local std::minstd_rand rng(std::random_device{}());
  const int attempts = std::max(retry.max_attempts, 1);
  // The last retryable failure, returned once the attempts are spent.
  Status last;
  last.PermitUncheckedError();
  auto remember = [&last](Status s) {
    last = std::move(s);
    last.PermitUncheckedError();
  };
  for (int attempt = 1; attempt <= attempts; ++attempt) {
    if (attempt > 1) {
      const auto cap = std::min<int64_t>(retry.max_backoff.count(),
                                         retry.initial_backoff.count() << std::min(attempt - 2, 30));
      std::uniform_int_distribution<int64_t> jitter(0, std::max<int64_t>(cap, 0));
      std::this_thread::sleep_for(std::chrono::microseconds(jitter(rng)));
    }
    Result<std::unique_ptr<Transaction>> txn = Begin();
    if (!txn.ok()) {
      Status s = std::move(txn).status();
      if (!IsRetryable(s)) return s;
      remember(std::move(s));
      continue;
    }
    Status s = fn(**txn);
    if (!s.ok()) {
      (*txn)->Abort();
      if (IsRetryable(s)) {
        remember(std::move(s));
        continue;
      }
      return s;
    }
    s = (*txn)->Commit();
    // A commit that lost its connection may have committed: not retried.
    if (s.ok() || s.code() == Code::kUnavailable || !IsRetryable(s)) return s;
    remember(std::move(s));
  }
  return last;
}

}  // namespace deuteron::client
