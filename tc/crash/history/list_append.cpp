// ListAppendWorkload: Elle's list-append transactions over a ListStore.
#include "tc/crash/history/list_append.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <utility>

namespace deuteron::crash {

namespace {

class ClientListTxn final : public ListTxn {
 public:
  explicit ClientListTxn(std::unique_ptr<client::Transaction> txn) : txn_(std::move(txn)) {}
  Result<std::string> Get(std::string_view key) override { return txn_->Get(key); }
  Status Put(std::string_view key, std::string_view value) override { return txn_->Put(key, value); }
  Status Commit() override { return txn_->Commit(); }

 private:
  std::unique_ptr<client::Transaction> txn_;
};

// Reads `key` as a list: absent is the empty list.
Result<std::vector<uint64_t>> ReadList(ListTxn& txn, std::string_view key) {
  Result<std::string> value = txn.Get(key);
  if (!value.ok()) {
    if (value.status().IsNotFound()) return std::vector<uint64_t>{};
    return value.status();
  }
  Result<std::vector<uint64_t>> list = ParseList(*value);
  if (!list.ok()) {
    return Status::Corruption("list " + std::string(key) + " holds \"" + value->substr(0, 64) +
                              "\": " + std::string(list.status().message()));
  }
  return list;
}

}  // namespace

Result<std::unique_ptr<ListTxn>> ClientListStore::Begin() {
  ASSIGN_OR_RETURN(std::unique_ptr<client::Transaction> txn, client_.Begin());
  return std::unique_ptr<ListTxn>(new ClientListTxn(std::move(txn)));
}

std::string EncodeList(const std::vector<uint64_t>& list) {
  std::string out;
  for (size_t i = 0; i < list.size(); ++i) {
    if (i > 0) out.push_back(',');
    out += std::to_string(list[i]);
  }
  return out;
}

Result<std::vector<uint64_t>> ParseList(std::string_view text) {
  std::vector<uint64_t> list;
  if (text.empty()) return list;
  size_t pos = 0;
  for (;;) {
    uint64_t n = 0;
    const char* begin = text.data() + pos;
    const char* end = text.data() + text.size();
    auto [p, ec] = std::from_chars(begin, end, n);
    if (ec != std::errc() || p == begin) return Status::InvalidArgument("not a comma-separated list of numbers");
    list.push_back(n);
    pos = static_cast<size_t>(p - text.data());
    if (pos == text.size()) return list;
    if (text[pos] != ',') return Status::InvalidArgument("not a comma-separated list of numbers");
    ++pos;
  }
}

bool CommitInDoubt(const Status& s) {
  switch (s.code()) {
    case Code::kOk:
    case Code::kDeadlock:
    case Code::kAborted:
    case Code::kTransactionFinished:
    case Code::kInvalidArgument:
    case Code::kTooLarge:
    case Code::kBusy:
    case Code::kUnknownTransaction:
    case Code::kUnauthenticated:
      return false;
    default:
      return true;
  }
}

ListAppendWorkload::ListAppendWorkload(ListAppendOptions opts, History* history)
    : opts_(std::move(opts)), history_(history), next_key_(opts_.keys) {
  assert(history_ != nullptr && opts_.keys > 0 && opts_.max_ops > 0);
  for (uint32_t i = 0; i < opts_.keys; ++i) active_.push_back(i);
  appends_.assign(opts_.keys, 0);
}

std::string ListAppendWorkload::KeyName(uint64_t index) const {
  return opts_.key_prefix + std::to_string(index);
}

uint64_t ListAppendWorkload::keys_used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_key_;
}

std::vector<ListAppendWorkload::Planned> ListAppendWorkload::Plan(Random64& rng) {
  const uint64_t n_ops = 1 + rng.Uniform(opts_.max_ops);
  std::vector<Planned> plan;
  std::lock_guard<std::mutex> lock(mu_);
  for (uint64_t i = 0; i < n_ops; ++i) {
    const bool append = rng.OneIn(2);
    // Skewed toward slot 0 (density ~ 1/sqrt(x)): the low slots are hot, so
    // transactions conflict and orders get tested, the rest still get
    // touched.
    const double u = rng.NextDouble();
    const uint32_t slot = std::min(static_cast<uint32_t>(u * u * opts_.keys), opts_.keys - 1);
    plan.push_back({append, active_[slot]});
    if (append && opts_.max_appends_per_key > 0 && ++appends_[slot] >= opts_.max_appends_per_key) {
      active_[slot] = next_key_++;
      appends_[slot] = 0;
    }
  }
  return plan;
}

Status ListAppendWorkload::RunOne(client::Client& client, uint64_t client_id, Random64& rng) {
  ClientListStore store(client);
  return RunOne(store, client_id, rng);
}

Status ListAppendWorkload::RunOne(ListStore& store, uint64_t client_id, Random64& rng) {
  HistoryTxn rec;
  rec.client = client_id;
  // Planned first, so the random choices do not depend on the store's answers.
  const std::vector<Planned> plan = Plan(rng);

  rec.start_us = history_->Now();
  Result<std::unique_ptr<ListTxn>> begun = store.Begin();
  if (!begun.ok()) return begun.status();  // nothing ran: nothing to record
  std::unique_ptr<ListTxn> txn = std::move(*begun);
  rec.id = history_->NextId();

  auto finish = [&](TxnOutcome outcome, Status s) {
    txn.reset();  // aborts when not committed
    rec.outcome = outcome;
    rec.end_us = history_->Now();
    history_->Add(std::move(rec));
    return s;
  };

  for (const Planned& p : plan) {
    const std::string key = KeyName(p.key);
    Result<std::vector<uint64_t>> list = ReadList(*txn, key);
    if (!list.ok()) return finish(TxnOutcome::kFail, list.status());
    if (!p.append) {
      rec.ops.push_back(HistoryOp::Read(key, std::move(*list)));
      continue;
    }
    const uint64_t value = history_->NextValue();
    list->push_back(value);
    // Recorded before the Put: a Put whose answer is lost may have happened.
    rec.ops.push_back(HistoryOp::Append(key, value));
    Status put = txn->Put(key, EncodeList(*list));
    if (!put.ok()) return finish(TxnOutcome::kFail, put);
  }
  Status commit = txn->Commit();
  if (commit.ok()) return finish(TxnOutcome::kOk, Status::OK());
  return finish(CommitInDoubt(commit) ? TxnOutcome::kInfo : TxnOutcome::kFail, commit);
}

Status ListAppendWorkload::ReadAll(client::Client& client) {
  ClientListStore store(client);
  return ReadAll(store);
}

Status ListAppendWorkload::ReadAll(ListStore& store) {
  constexpr int kAttempts = 20;
  Status last;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    HistoryTxn rec;
    rec.start_us = history_->Now();
    Result<std::unique_ptr<ListTxn>> begun = store.Begin();
    if (!begun.ok()) return begun.status();
    std::unique_ptr<ListTxn> txn = std::move(*begun);
    rec.id = history_->NextId();
    last = Status::OK();
    const uint64_t keys = keys_used();
    for (uint64_t k = 0; k < keys && last.ok(); ++k) {
      const std::string key = KeyName(k);
      Result<std::vector<uint64_t>> list = ReadList(*txn, key);
      if (!list.ok()) {
        last = list.status();
        break;
      }
      rec.ops.push_back(HistoryOp::Read(key, std::move(*list)));
    }
    if (last.ok()) last = txn->Commit();
    txn.reset();
    rec.end_us = history_->Now();
    // A read-only transaction changes nothing: an unknown outcome is a
    // failed one as far as the checker is concerned.
    rec.outcome = last.ok() ? TxnOutcome::kOk : TxnOutcome::kFail;
    history_->Add(std::move(rec));
    if (last.ok() || !client::IsRetryable(last)) return last;
  }
  return last;
}

}  // namespace deuteron::crash
