#include "tc/crash/bank_load.h"

#include <charconv>
#include <chrono>
#include <cstdio>

#include "common/random.h"

namespace deuteron::crash {

namespace {

constexpr std::string_view kPrefix = "bank/";

bool ParseBalance(std::string_view s, int64_t* out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

}  // namespace

std::string AccountKey(uint32_t i) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "bank/%05u", i);
  return buf;
}

Status LoadAccounts(client::Client& client, const BankOptions& o) {
  const std::string balance = std::to_string(o.initial_balance);
  return client.Run([&](client::Transaction& t) -> Status {
    for (uint32_t i = 0; i < o.accounts; ++i) {
      if (Status s = t.Put(AccountKey(i), balance); !s.ok()) return s;
    }
    return Status::OK();
  });
}

Result<StoreContents> ReadStore(client::Client& client, const BankOptions& o,
                                const std::vector<std::string>& other_prefixes) {
  StoreContents c;
  Status s = client.Run([&](client::Transaction& t) -> Status {
    c = StoreContents();
    client::ScanIterator it = t.Scan(client::ScanOptions());
    uint32_t next = 0;
    for (; it.Valid(); it.Next()) {
      ++c.keys;
      const std::string& key = it.key();
      bool other = false;
      for (const std::string& p : other_prefixes) other = other || key.compare(0, p.size(), p) == 0;
      if (other) continue;
      if (key.compare(0, kPrefix.size(), kPrefix) != 0) {
        c.problems.push_back("a key no workload wrote: \"" + key + "\"");
        continue;
      }
      int64_t b = 0;
      if (!ParseBalance(it.value(), &b)) {
        c.problems.push_back(key + " holds \"" + it.value() + "\", not a balance");
        b = 0;
      } else if (b < 0) {
        c.problems.push_back(key + " holds a negative balance " + std::to_string(b));
      }
      while (next < o.accounts && AccountKey(next) < key) {
        c.problems.push_back("account " + AccountKey(next) + " is missing");
        c.balances.push_back(0);
        ++next;
      }
      if (next < o.accounts && AccountKey(next) == key) {
        c.balances.push_back(b);
        ++next;
      } else {
        c.problems.push_back("a key no workload wrote: \"" + key + "\"");
      }
    }
    for (; next < o.accounts; ++next) {
      c.problems.push_back("account " + AccountKey(next) + " is missing");
      c.balances.push_back(0);
    }
    return it.status();
  });
  if (!s.ok()) return s;
  return c;
}

TransferLoad::TransferLoad(client::Client* client, cli::BankOracle* oracle, BankOptions o,
                           uint64_t seed)
    : client_(client), oracle_(oracle), o_(o), seed_(seed) {}

TransferLoad::~TransferLoad() { Stop(); }

void TransferLoad::Start() {
  stop_.store(false);
  for (uint32_t i = 0; i < o_.threads; ++i) threads_.emplace_back([this, i] { Run(i); });
}

void TransferLoad::Stop() {
  stop_.store(true);
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

// A transfer whose commit returned OK is acknowledged; one whose commit
// returned anything else is in doubt (the reply may have been cut off).
// Failures before the commit leave nothing to record.
void TransferLoad::Run(uint32_t thread) {
  Random64 rng(seed_ * 1000003 + thread);
  while (!stop_.load(std::memory_order_relaxed)) {
    cli::Transfer t;
    t.from = static_cast<uint32_t>(rng.Uniform(o_.accounts));
    t.to = static_cast<uint32_t>(rng.Uniform(o_.accounts - 1));
    if (t.to >= t.from) ++t.to;
    t.amount = static_cast<int64_t>(rng.Uniform(100)) + 1;
    auto failed = [&] {
      failures_.fetch_add(1, std::memory_order_relaxed);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    };
    Result<std::unique_ptr<client::Transaction>> begun = client_->Begin();
    if (!begun.ok()) {
      failed();
      continue;
    }
    client::Transaction& txn = **begun;
    Result<std::string> from = txn.Get(AccountKey(t.from));
    if (!from.ok()) {
      txn.Abort();
      failed();
      continue;
    }
    Result<std::string> to = txn.Get(AccountKey(t.to));
    int64_t a = 0, b = 0;
    if (!to.ok() || !ParseBalance(*from, &a) || !ParseBalance(*to, &b)) {
      txn.Abort();
      failed();
      continue;
    }
    if (a < t.amount) {
      txn.Abort();
      continue;
    }
    Status put = txn.Put(AccountKey(t.from), std::to_string(a - t.amount));
    if (put.ok()) put = txn.Put(AccountKey(t.to), std::to_string(b + t.amount));
    if (!put.ok()) {
      txn.Abort();
      failed();
      continue;
    }
    if (o_.think_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(rng.Uniform(o_.think_ms + 1)));
    if (txn.Commit().ok()) {
      oracle_->Acknowledged(t);
      acknowledged_.fetch_add(1, std::memory_order_relaxed);
    } else {
      oracle_->InDoubt(t);
      in_doubt_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

}  // namespace deuteron::crash
