#include "tc/cli/bank_oracle.h"

#include <cassert>
#include <map>
#include <utility>

namespace deuteron::cli {

BankOracle::BankOracle(size_t accounts, int64_t initial_balance)
    : expected_(accounts, initial_balance), total_(static_cast<int64_t>(accounts) * initial_balance) {}

namespace {
int64_t Sum(const std::vector<int64_t>& v) {
  int64_t sum = 0;
  for (int64_t b : v) sum += b;
  return sum;
}
}  // namespace

BankOracle::BankOracle(std::vector<int64_t> balances)
    : expected_(std::move(balances)), total_(Sum(expected_)) {}

void BankOracle::Acknowledged(const Transfer& t) {
  assert(t.from < expected_.size() && t.to < expected_.size());
  std::lock_guard<std::mutex> lock(mu_);
  expected_[t.from] -= t.amount;
  expected_[t.to] += t.amount;
  ++acknowledged_;
}

void BankOracle::InDoubt(const Transfer& t) {
  assert(t.from < expected_.size() && t.to < expected_.size());
  std::lock_guard<std::mutex> lock(mu_);
  in_doubt_.push_back(t);
}

size_t BankOracle::acknowledged() const {
  std::lock_guard<std::mutex> lock(mu_);
  return acknowledged_;
}

size_t BankOracle::in_doubt() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_doubt_.size();
}

BankVerdict BankOracle::Verify(const std::vector<int64_t>& balances) const {
  std::lock_guard<std::mutex> lock(mu_);
  BankVerdict v;
  if (balances.size() != expected_.size()) {
    v.detail = "read " + std::to_string(balances.size()) + " accounts, expected " +
               std::to_string(expected_.size());
    return v;
  }
  int64_t sum = 0;
  for (int64_t b : balances) sum += b;
  if (sum != total_) {
    v.detail = "total balance " + std::to_string(sum) + ", expected " + std::to_string(total_);
    return v;
  }
  if (in_doubt_.size() > kMaxInDoubt) {
    v.detail = std::to_string(in_doubt_.size()) + " transfers in doubt, more than the " +
               std::to_string(kMaxInDoubt) + " this check can resolve";
    return v;
  }
  // Accounts no in-doubt transfer touches must match exactly.
  std::map<uint32_t, int64_t> touched;  // account -> found minus expected
  for (const Transfer& t : in_doubt_) {
    touched[t.from] = 0;
    touched[t.to] = 0;
  }
  for (size_t i = 0; i < balances.size(); ++i) {
    const int64_t diff = balances[i] - expected_[i];
    if (touched.count(static_cast<uint32_t>(i)) != 0) {
      touched[static_cast<uint32_t>(i)] = diff;
    } else if (diff != 0) {
      v.detail = "account " + std::to_string(i) + " holds " + std::to_string(balances[i]) +
                 ", expected " + std::to_string(expected_[i]) +
                 (diff < 0 ? " (an acknowledged transfer is missing)" : " (a transfer nobody made)");
      return v;
    }
  }
  // The rest must be the sum of some subset of the in-doubt transfers.
  const size_t n = in_doubt_.size();
  for (uint64_t mask = 0; mask < (uint64_t{1} << n); ++mask) {
    std::map<uint32_t, int64_t> delta;
    for (size_t j = 0; j < n; ++j) {
      if ((mask >> j & 1) == 0) continue;
      delta[in_doubt_[j].from] -= in_doubt_[j].amount;
      delta[in_doubt_[j].to] += in_doubt_[j].amount;
    }
    bool match = true;
    for (const auto& [account, diff] : touched) {
      const auto it = delta.find(account);
      if ((it == delta.end() ? 0 : it->second) != diff) {
        match = false;
        break;
      }
    }
    if (match) {
      v.ok = true;
      v.in_doubt_committed = static_cast<size_t>(__builtin_popcountll(mask));
      v.detail = "every acknowledged transfer is there, each in-doubt one wholly or not at all, "
                 "and the total is unchanged";
      return v;
    }
  }
  v.detail = "the accounts the in-doubt transfers touched match no set of them (a transfer "
             "half applied, or an acknowledged one missing)";
  return v;
}

}  // namespace deuteron::cli
