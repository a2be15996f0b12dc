// ListAppendWorkload: Elle's list-append workload over a Deuteron store.
// Each transaction reads and appends to a few lists; a list is stored as one
// value, its elements as comma-separated decimals ("3,17,42"; absent: the
// empty list). An append is a Get of the list and a Put of it one element
// longer, so under serializable isolation every read reveals a prefix of the
// key's one version order. Every transaction is recorded in a History
// (history.h) with its outcome: ok (Commit returned OK), fail (it certainly
// did not commit) or info (the commit was sent and its answer lost:
// Unavailable and the like), for CheckHistory (isolation_checker.h).
//
// The store is reached through ListStore, so a test can put a deliberately
// broken store under the workload; RunOne(client::Client&) is the real one.
//
// Thread safety: RunOne and ReadAll may be called from several threads at
// once (each with its own Random64); the History is shared.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/random.h"
#include "common/status.h"
#include "tc/client/client.h"
#include "tc/crash/history/history.h"

namespace deuteron::crash {

struct ListAppendOptions {
  uint32_t keys = 32;     // lists in use at once: "<key_prefix><n>"
  uint32_t max_ops = 4;   // micro-operations per transaction, 1..max_ops
  std::string key_prefix = "la/";
  // Appends planned on one list before it is retired and a fresh list takes
  // its place (as Elle does): lists stay short, so values stay far below
  // the TC's value limit and checking stays cheap. 0: never retire.
  uint32_t max_appends_per_key = 128;
};

// One transaction of the store under test: what the workload needs.
class ListTxn {
 public:
  virtual ~ListTxn() = default;  // aborts when not committed
  virtual Result<std::string> Get(std::string_view key) = 0;  // NotFound: absent
  virtual Status Put(std::string_view key, std::string_view value) = 0;
  virtual Status Commit() = 0;
};

class ListStore {
 public:
  virtual ~ListStore() = default;
  virtual Result<std::unique_ptr<ListTxn>> Begin() = 0;
};

// A ListStore over a client::Client (remote or embedded). The Client must
// outlive it.
class ClientListStore final : public ListStore {
 public:
  explicit ClientListStore(client::Client& client) : client_(client) {}
  Result<std::unique_ptr<ListTxn>> Begin() override;

 private:
  client::Client& client_;
};

// The stored form of a list and back. ParseList: InvalidArgument when `text`
// is not comma-separated decimals.
std::string EncodeList(const std::vector<uint64_t>& list);
Result<std::vector<uint64_t>> ParseList(std::string_view text);

// Whether a failed commit's status leaves the transaction in doubt (info):
// everything but the errors that say it certainly did not commit.
bool CommitInDoubt(const Status& commit_status);

class ListAppendWorkload {
 public:
  // REQUIRES: history outlives the workload; opts.keys > 0, opts.max_ops > 0.
  ListAppendWorkload(ListAppendOptions opts, History* history);

  // One transaction of 1..max_ops random reads and appends over the keys
  // (skewed toward the low keys, so transactions meet), recorded in the
  // history. Returns OK when it committed, otherwise why not (already
  // recorded as fail or info); Corruption when a stored list is malformed.
  Status RunOne(client::Client& client, uint64_t client_id, Random64& rng);
  Status RunOne(ListStore& store, uint64_t client_id, Random64& rng);

  // A read of every list used so far (retired ones too) in one transaction,
  // recorded as one transaction (retried on lock conflicts; each try
  // recorded). OK when it committed.
  Status ReadAll(client::Client& client);
  Status ReadAll(ListStore& store);

  const ListAppendOptions& options() const { return opts_; }
  std::string KeyName(uint64_t index) const;
  // Lists used so far: "<key_prefix>0" .. "<key_prefix><n-1>".
  uint64_t keys_used() const;

 private:
  struct Planned {
    bool append;
    uint64_t key;
  };
  // A transaction's micro-operations, drawn from rng; appends count toward
  // their list's retirement.
  std::vector<Planned> Plan(Random64& rng);

  const ListAppendOptions opts_;
  History* const history_;
  mutable std::mutex mu_;
  std::vector<uint64_t> active_;      // guarded by mu_: the list in each slot
  std::vector<uint32_t> appends_;     // guarded by mu_: appends planned, per slot
  uint64_t next_key_;                 // guarded by mu_: the next fresh list
};

}  // namespace deuteron::crash
