// FakeDataComponent: a std::map-backed DataComponent for protocol and server
// tests. It keeps the contracts a binding must carry faithfully: idempotence
// by LSN (tombstones included), the ESL never moving back, RSSP proposals
// checked against ESL + 1, restart-to dropping what lies above the stable
// end, the incarnation fence (RestartTo starts the next incarnation; Apply,
// SetEsl and ProposeRssp refuse any other), the documented error codes and
// limits. Nothing is durable: an
// acknowledged RSSP simply marks everything below it as durable.
//
// Test hooks: set_restarting() makes record and RSSP calls Unavailable and
// Health report kRestarting; InjectError() makes the next call (any method)
// fail with the given Status; BlockRssp()/UnblockRssp() hold ProposeRssp
// until released (a slow flush).
//
// Thread safety: every method is thread-safe (one mutex).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "protocol/data_component.h"

namespace deuteron::testing {

class FakeDataComponent final : public DataComponent {
 public:
  static constexpr size_t kMaxKey = 1024;
  static constexpr size_t kMaxValue = 256 * 1024;
  static constexpr size_t kMaxBatch = 1000;
  static constexpr uint32_t kMaxScan = 1000;

  Result<ApplyResult> Apply(std::span<const RecordOp> ops, uint64_t esl,
                            uint64_t incarnation) override {
    std::lock_guard<std::mutex> l(mu_);
    if (auto s = TakeInjected()) return *s;
    if (restarting_) return Status::Unavailable("restart-to in progress");
    RETURN_IF_ERROR(Fence(incarnation));
    if (ops.size() > kMaxBatch) return Status::TooLarge("batch over the maximum");
    ++stats_.applies;
    if (esl > esl_) esl_ = esl;
    ApplyResult r;
    for (const RecordOp& op : ops) {
      if (op.lsn == 0) return Status::InvalidArgument("LSN 0");
      if (op.kind != RecordOpKind::kUpsert && op.kind != RecordOpKind::kDelete) {
        return Status::InvalidArgument("unknown record op kind");
      }
      if (op.kind == RecordOpKind::kDelete && !op.value.empty()) {
        return Status::InvalidArgument("a value on a delete");
      }
      if (op.key.size() > kMaxKey) return Status::TooLarge("key over the limit");
      if (op.value.size() > kMaxValue) return Status::TooLarge("value over the limit");
      Entry& e = map_[op.key.ToString()];
      if (op.lsn <= e.lsn) {
        ++r.skipped;
        continue;
      }
      e.lsn = op.lsn;
      e.tombstone = op.kind == RecordOpKind::kDelete;
      e.value = e.tombstone ? std::string() : op.value.ToString();
      ++r.applied;
    }
    stats_.ops_applied += r.applied;
    stats_.ops_skipped += r.skipped;
    return r;
  }

  Result<ReadResult> Get(Slice key) override {
    std::lock_guard<std::mutex> l(mu_);
    if (auto s = TakeInjected()) return *s;
    if (key.size() > kMaxKey) return Status::TooLarge("key over the limit");
    ++stats_.gets;
    return ReadLocked(key);
  }

  Result<std::vector<ReadResult>> MultiGet(std::span<const Slice> keys) override {
    std::lock_guard<std::mutex> l(mu_);
    if (auto s = TakeInjected()) return *s;
    if (keys.size() > kMaxBatch) return Status::TooLarge("batch over the maximum");
    std::vector<ReadResult> out;
    for (const Slice& k : keys) {
      if (k.size() > kMaxKey) return Status::TooLarge("key over the limit");
      out.push_back(ReadLocked(k));
    }
    stats_.gets += keys.size();
    return out;
  }

  Result<ScanResult> Scan(const ScanRequest& req) override {
    std::lock_guard<std::mutex> l(mu_);
    if (auto s = TakeInjected()) return *s;
    ++stats_.scans;
    const uint32_t limit = req.limit == 0 || req.limit > kMaxScan ? kMaxScan : req.limit;
    auto in_range = [&](const std::string& k) {
      if (req.lower && (req.lower_inclusive ? k < *req.lower : k <= *req.lower)) return false;
      if (req.upper && (req.upper_inclusive ? k > *req.upper : k >= *req.upper)) return false;
      return true;
    };
    std::vector<const std::pair<const std::string, Entry>*> hits;
    for (const auto& kv : map_) {
      if (!kv.second.tombstone && in_range(kv.first)) hits.push_back(&kv);
    }
    if (req.reverse) std::reverse(hits.begin(), hits.end());
    ScanResult r;
    for (const auto* kv : hits) {
      if (r.items.size() == limit) {
        r.more = true;
        break;
      }
      r.items.push_back(ScanItem{kv->first, kv->second.value, kv->second.lsn});
    }
    stats_.scan_items += r.items.size();
    return r;
  }

  Status SetEsl(uint64_t esl, uint64_t incarnation) override {
    std::lock_guard<std::mutex> l(mu_);
    if (auto s = TakeInjected()) return *s;
    RETURN_IF_ERROR(Fence(incarnation));
    if (esl > esl_) esl_ = esl;
    return Status::OK();
  }

  Status ProposeRssp(uint64_t rssp, uint64_t incarnation) override {
    std::unique_lock<std::mutex> l(mu_);
    if (auto s = TakeInjected()) return *s;
    if (restarting_) return Status::Unavailable("restart-to in progress");
    RETURN_IF_ERROR(Fence(incarnation));
    if (rssp > esl_ + 1) return Status::InvalidArgument("RSSP above ESL + 1");
    ++rssp_waiting_;
    rssp_cv_.notify_all();
    rssp_cv_.wait(l, [this] { return !rssp_blocked_; });
    --rssp_waiting_;
    ++stats_.rssp_proposals;
    if (rssp > rssp_) rssp_ = rssp;
    if (rssp > 0 && rssp - 1 > max_durable_) max_durable_ = rssp - 1;
    return Status::OK();
  }

  Result<DcReady> RestartTo(uint64_t stable_end) override {
    std::lock_guard<std::mutex> l(mu_);
    if (auto s = TakeInjected()) return *s;
    for (auto it = map_.begin(); it != map_.end();) {
      it = it->second.lsn > stable_end ? map_.erase(it) : std::next(it);
    }
    esl_ = stable_end;
    ++stats_.restarts;
    ++incarnation_;
    return DcReady{rssp_, max_durable_, incarnation_};
  }

  Result<DcStats> GetStats() override {
    std::lock_guard<std::mutex> l(mu_);
    if (auto s = TakeInjected()) return *s;
    DcStats s = stats_;
    s.esl = esl_;
    s.rssp = rssp_;
    s.max_durable_lsn = max_durable_;
    s.pages = map_.size();
    s.tree_height = 1;
    return s;
  }

  Result<DcHealth> Health() override {
    std::lock_guard<std::mutex> l(mu_);
    if (auto s = TakeInjected()) return *s;
    DcHealth h;
    h.state = restarting_ ? DcState::kRestarting : DcState::kServing;
    h.esl = esl_;
    h.rssp = rssp_;
    h.max_durable_lsn = max_durable_;
    h.incarnation = incarnation_;
    return h;
  }

  // ---- Test hooks ----

  void set_restarting(bool on) {
    std::lock_guard<std::mutex> l(mu_);
    restarting_ = on;
  }

  // The next call (any method) returns `s`. REQUIRES: !s.ok().
  void InjectError(Status s) {
    std::lock_guard<std::mutex> l(mu_);
    injected_ = std::move(s);
  }

  void BlockRssp() {
    std::lock_guard<std::mutex> l(mu_);
    rssp_blocked_ = true;
  }
  void UnblockRssp() {
    {
      std::lock_guard<std::mutex> l(mu_);
      rssp_blocked_ = false;
    }
    rssp_cv_.notify_all();
  }
  // Waits until `n` ProposeRssp calls are held by BlockRssp.
  void WaitForBlockedRssp(int n) {
    std::unique_lock<std::mutex> l(mu_);
    rssp_cv_.wait(l, [&] { return rssp_waiting_ >= n; });
  }

  uint64_t esl() {
    std::lock_guard<std::mutex> l(mu_);
    return esl_;
  }

 private:
  struct Entry {
    std::string value;
    uint64_t lsn = 0;
    bool tombstone = false;
  };

  // As dc::Dc: only the current incarnation passes.
  Status Fence(uint64_t incarnation) const {
    if (incarnation < incarnation_) return Status::StaleIncarnation("superseded incarnation");
    if (incarnation > incarnation_) return Status::InvalidArgument("incarnation never started");
    return Status::OK();
  }

  std::optional<Status> TakeInjected() {
    if (!injected_) return std::nullopt;
    std::optional<Status> s = std::move(injected_);
    injected_.reset();
    return s;
  }

  ReadResult ReadLocked(Slice key) const {
    ReadResult r;
    auto it = map_.find(key.ToString());
    if (it == map_.end()) return r;
    r.lsn = it->second.lsn;
    r.found = !it->second.tombstone;
    if (r.found) r.value = it->second.value;
    return r;
  }

  std::mutex mu_;
  std::condition_variable rssp_cv_;
  std::map<std::string, Entry> map_;
  uint64_t esl_ = 0;
  uint64_t rssp_ = 0;
  uint64_t max_durable_ = 0;
  uint64_t incarnation_ = 0;
  bool restarting_ = false;
  bool rssp_blocked_ = false;
  int rssp_waiting_ = 0;
  std::optional<Status> injected_;
  DcStats stats_;
};

}  // namespace deuteron::testing
