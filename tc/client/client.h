// The Deuteron client library: one transaction API over two connections,
//  - a remote TC server (`deuteron serve` or `deuteron tc`) at host:port,
//    through the TransactionService protocol (protocol/protocol.md), or
//  - an embedded database in a directory (the TC and DC in this process, no
//    network; the directory's lock keeps other processes out).
// The same code runs over either: open a Client, Begin transactions (or let
// Run retry them), Get/Put/Delete/Scan, Commit.
//
// Transactions are serializable (strict two-phase locking in the TC): reads
// lock what they read, a scan its whole range, writes wait in the
// transaction until Commit. A lock conflict that would deadlock, or a lock
// wait past the TC's timeout, aborts the transaction with Deadlock or
// TimedOut: run it again (Run does). A Transaction destroyed before Commit
// aborts. Commit returning OK means durable. A remote Commit that fails
// with Unavailable (the connection broke) is in doubt: it may or may not
// have committed.
//
// Errors are deuteron::Status codes (common/status.h): NotFound (Get of an
// absent key), Deadlock, TimedOut, TransactionFinished (a call after Commit
// or Abort, or after a lock failure aborted it), TooLarge (a key or value
// over the TC's limits), InvalidArgument, Busy (too many transactions open
// on one remote connection), Unavailable (the server cannot be reached or
// the connection broke, or the TC is recovering its DC: try again later),
// ShuttingDown, Unauthenticated (a missing or wrong shared secret). A TC that
// has failed for good (its log failed, or it refused its DC as another
// store's) answers every call with its failure's code (IOError, Corruption,
// NoSpace, StoreMismatch, ...; the message starts "the TC has failed"): it
// serves nothing until an operator restarts it, and Run does not retry it.
//
// This header and common/status.h are the whole public surface: no Thrift,
// Asio or storage-engine types.
//
// Thread safety: a Client may be used from any threads at once (each
// transaction of a remote client has its own connection). A Transaction and
// its ScanIterators are driven by one thread at a time. Every Transaction
// must be destroyed before its Client.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace deuteron::client {

namespace detail {
class ClientBackend;
class TxnBackend;
}  // namespace detail

struct EmbeddedOptions {
  // How long a lock request waits before TimedOut.
  std::chrono::milliseconds lock_timeout{10000};
  // The DC's cache budget in bytes (0: unbounded).
  uint64_t memory_budget = 0;
  // Items per scan page.
  size_t scan_page = 1000;
};

struct RemoteOptions {
  int connect_timeout_ms = 2000;
  int send_timeout_ms = 10000;
  // Above the server's lock timeout: a call may wait for a lock.
  int recv_timeout_ms = 60000;
  uint32_t max_frame_size = 64u << 20;
  // Connections kept open between transactions.
  size_t max_idle_connections = 16;
  // Items per scan page asked of the server (it may cap it lower).
  uint32_t scan_page = 1000;
  // The server's shared secret (required by a server listening off
  // loopback); empty: none. Presented on every new connection; a refusal is
  // Unauthenticated.
  std::string secret;
};

// A key range (lower inclusive, upper exclusive by default; absent: open),
// its direction, and at most `limit` items (0: all).
struct ScanOptions {
  std::optional<std::string> lower;
  bool lower_inclusive = true;
  std::optional<std::string> upper;
  bool upper_inclusive = false;
  bool reverse = false;
  size_t limit = 0;
};

// Items of a range in scan order, fetched a page at a time (each page under
// the transaction's range lock). Usage:
//   for (ScanIterator it = txn.Scan(o); it.Valid(); it.Next()) use(it.key(), it.value());
//   if (!it.status().ok()) ...  // why it stopped early
// A lock failure while fetching a page aborts the transaction, as Get does.
// An iterator must not outlive its Transaction.
class ScanIterator {
 public:
  ScanIterator(ScanIterator&&) noexcept;
  ScanIterator& operator=(ScanIterator&&) noexcept;
  ~ScanIterator();

  bool Valid() const;
  // REQUIRES: Valid().
  const std::string& key() const;
  const std::string& value() const;
  void Next();
  // OK, or the error that ended the scan early.
  const Status& status() const;

 private:
  friend class Transaction;
  struct Impl;
  explicit ScanIterator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class Transaction {
 public:
  ~Transaction();  // aborts when not committed
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  // The TC's transaction id (unique in that TC while it runs).
  uint64_t id() const;
  // NotFound when absent (or deleted by this transaction).
  Result<std::string> Get(std::string_view key);
  Status Put(std::string_view key, std::string_view value);
  Status Delete(std::string_view key);
  ScanIterator Scan(ScanOptions options);
  // OK: committed and durable. Any failure finishes the transaction.
  Status Commit();
  // Releases its locks, drops its writes. Idempotent.
  void Abort();
  // False once committed, aborted, or aborted by a failure.
  bool active() const;

 private:
  friend class Client;
  explicit Transaction(std::unique_ptr<detail::TxnBackend> backend);
  std::unique_ptr<detail::TxnBackend> backend_;
};

// Run's retry policy: up to max_attempts tries, sleeping a random time in
// [0, min(max_backoff, initial_backoff * 2^(try-1))] between tries.
struct RetryOptions {
  int max_attempts = 20;
  std::chrono::microseconds initial_backoff{1000};
  std::chrono::microseconds max_backoff{200000};
};

class Client {
 public:
  // Opens (creating and recovering) the database in `dir`. Busy when another
  // process or Client holds it.
  static Result<std::unique_ptr<Client>> OpenEmbedded(const std::string& dir,
                                                      EmbeddedOptions options = {});
  // Connects to a TC server at "host:port" (one connection is opened now, so
  // an unreachable server is reported here as Unavailable).
  static Result<std::unique_ptr<Client>> Connect(const std::string& address,
                                                 RemoteOptions options = {});
  ~Client();  // Close()
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  Result<std::unique_ptr<Transaction>> Begin();

  // Runs fn in a new transaction and commits it, retrying the whole thing
  // with jittered backoff while it fails with Deadlock or TimedOut, or with
  // Unavailable before its commit was sent. Returns the last status: fn's
  // own error (after aborting), the commit's, or the retryable error once
  // the attempts are spent. fn may be called several times.
  Status Run(const std::function<Status(Transaction&)>& fn, RetryOptions retry = {});

  // Embedded: closes the database (checkpoint, clean close). Remote: closes
  // the idle connections. Idempotent. REQUIRES: no Transaction left.
  Status Close();

 private:
  explicit Client(std::unique_ptr<detail::ClientBackend> backend);
  std::unique_ptr<detail::ClientBackend> backend_;
};

// Whether Run retries `s` (Deadlock, TimedOut, Unavailable).
bool IsRetryable(const Status& s);

}  // namespace deuteron::client
