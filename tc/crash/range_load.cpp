#include "tc/crash/range_load.h"

#include <cassert>
#include <chrono>
#include <set>
#include <thread>
#include <utility>

namespace deuteron::crash {

RangeWorkload::RangeWorkload(RangeOptions o) : o_(std::move(o)) {
  assert(o_.groups >= 1 && o_.groups <= 10 && o_.cap >= 1);
}

std::string RangeWorkload::GroupPrefix(uint32_t g) const { return o_.prefix + std::to_string(g) + "/"; }

client::ScanOptions RangeWorkload::GroupRange(uint32_t g) const {
  client::ScanOptions s;
  s.lower = GroupPrefix(g);
  // Every key with the prefix: up to the prefix with its '/' raised to '0'.
  s.upper = o_.prefix + std::to_string(g) + "0";
  return s;
}

Status RangeWorkload::RunOne(client::Client& client, Random64& rng) {
  const auto g = static_cast<uint32_t>(rng.Uniform(o_.groups));
  const uint64_t think = rng.Uniform(o_.think_ms + 1);
  Result<std::unique_ptr<client::Transaction>> t = client.Begin();
  if (!t.ok()) return t.status();
  std::vector<std::string> keys;
  std::string inserted_key;
  {
    client::ScanIterator it = (*t)->Scan(GroupRange(g));
    for (; it.Valid(); it.Next()) keys.push_back(it.key());
    if (!it.status().ok()) return it.status();
  }
  if (keys.size() < o_.cap) {
    if (think != 0) std::this_thread::sleep_for(std::chrono::milliseconds(think));
    inserted_key = GroupPrefix(g) + std::to_string(next_key_.fetch_add(1, std::memory_order_relaxed));
    if (Status s = (*t)->Put(inserted_key, "1"); !s.ok()) return s;
  } else {
    for (const std::string& k : keys) {
      if (Status s = (*t)->Delete(k); !s.ok()) return s;
    }
  }
  const bool inserted = keys.size() < o_.cap;
  Status commit = (*t)->Commit();
  {
    // What the commit did (or may have done: its reply may have been cut
    // off), for CheckAll's comparison with the recovered groups.
    std::lock_guard<std::mutex> l(mu_);
    if (inserted) {
      (commit.ok() ? inserted_acked_ : inserted_maybe_).insert(inserted_key);
    } else {
      for (const std::string& k : keys) (commit.ok() ? deleted_acked_ : deleted_maybe_).insert(k);
    }
  }
  if (!commit.ok()) return commit;
  committed_.fetch_add(1, std::memory_order_relaxed);
  if (keys.size() > o_.cap) {
    std::string list;
    for (const std::string& k : keys) list += (list.empty() ? "" : ", ") + k;
    std::lock_guard<std::mutex> l(mu_);
    if (phantom_scans_++ == 0) {
      first_phantom_ = "a committed transaction's scan of " + GroupPrefix(g) + " saw " +
                       std::to_string(keys.size()) + " keys (" + list + ")";
    }
  }
  return Status::OK();
}

Status RangeWorkload::CheckAll(client::Client& client) {
  std::vector<std::vector<std::string>> groups;
  Status s = client.Run([&](client::Transaction& t) -> Status {
    groups.assign(o_.groups, {});
    for (uint32_t g = 0; g < o_.groups; ++g) {
      client::ScanIterator it = t.Scan(GroupRange(g));
      for (; it.Valid(); it.Next()) groups[g].push_back(it.key());
      if (!it.status().ok()) return it.status();
    }
    return Status::OK();
  });
  if (!s.ok()) return s;
  CompareWithCommitted(groups);
  std::vector<std::string> over;
  for (uint32_t g = 0; g < o_.groups; ++g) {
    if (groups[g].size() <= o_.cap) continue;
    std::string list;
    for (const std::string& k : groups[g]) {
      list += (list.empty() ? "" : ", ") + k;
      over.push_back(k);
    }
    std::lock_guard<std::mutex> l(mu_);
    violations_.push_back("range workload: " + GroupPrefix(g) + " holds " + std::to_string(groups[g].size()) +
                          " keys (" + list + "), more than the " + std::to_string(o_.cap) +
                          " every transaction allows: a phantom, or an acknowledged delete lost");
  }
  if (over.empty()) return Status::OK();
  Status repair = client.Run([&](client::Transaction& t) -> Status {
    for (const std::string& k : over) {
      if (Status d = t.Delete(k); !d.ok()) return d;
    }
    return Status::OK();
  });
  std::lock_guard<std::mutex> l(mu_);
  for (const std::string& k : over) {
    base_.erase(k);
    // A failed repair may still have deleted them: allowed, not required.
    if (!repair.ok()) inserted_maybe_.insert(k);
  }
  return repair;
}

void RangeWorkload::CompareWithCommitted(const std::vector<std::vector<std::string>>& groups) {
  std::lock_guard<std::mutex> l(mu_);
  std::set<std::string> present;
  for (const std::vector<std::string>& keys : groups) present.insert(keys.begin(), keys.end());
  auto has = [](const std::set<std::string>& set, const std::string& k) { return set.count(k) != 0; };
  for (const std::string& k : present) {
    if (has(deleted_acked_, k)) {
      violations_.push_back("range workload: " + k + " is present, but an acknowledged transaction deleted it");
    } else if (!has(base_, k) && !has(inserted_acked_, k) && !has(inserted_maybe_, k)) {
      violations_.push_back("range workload: " + k +
                            " is present, but no acknowledged or in-doubt transaction inserted it");
    }
  }
  // Every key the last check found or an acknowledged transaction inserted
  // stays, unless a transaction that committed (or may have) deleted it.
  for (const std::set<std::string>* from : {&base_, &inserted_acked_}) {
    for (const std::string& k : *from) {
      if (has(present, k) || has(deleted_acked_, k) || has(deleted_maybe_, k)) continue;
      violations_.push_back("range workload: " + k + " is missing: " +
                            (from == &base_ ? "the last check found it" : "an acknowledged transaction inserted it") +
                            " and no transaction that committed deleted it");
    }
  }
  // The next check starts from what the store holds now.
  base_ = std::move(present);
  inserted_acked_.clear();
  inserted_maybe_.clear();
  deleted_acked_.clear();
  deleted_maybe_.clear();
}

std::vector<std::string> RangeWorkload::TakeViolations() {
  std::lock_guard<std::mutex> l(mu_);
  if (phantom_scans_ != 0) {
    // One line for all the scans since the last call: the first, and how many.
    violations_.insert(violations_.begin(),
                       "range workload: " + std::to_string(phantom_scans_) + " committed transaction" +
                           (phantom_scans_ == 1 ? "" : "s") + " saw more than the " + std::to_string(o_.cap) +
                           " key" + (o_.cap == 1 ? "" : "s") +
                           " a group may hold (a phantom, or an acknowledged delete lost); the first: " +
                           first_phantom_);
    phantom_scans_ = 0;
  }
  return std::exchange(violations_, {});
}

}  // namespace deuteron::crash
