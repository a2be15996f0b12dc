// ForwardingDc: a DataComponent that passes every call to another one, for
// tests that put a wrapper between a TC and its DC and override only the
// calls they count, hold or fail (the pattern of an EnvWrapper).
//
// It forwards the methods every binding must have. The fenced reads and
// RestartToStore keep DataComponent's defaults (the unfenced read, and
// RestartTo without a store id), which call the overridable methods here:
// a subclass that overrides Get or RestartTo sees those calls too.
//
// Thread safety: as the DataComponent it forwards to.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "protocol/data_component.h"

namespace deuteron::test {

class ForwardingDc : public DataComponent {
 public:
  explicit ForwardingDc(DataComponent* dc) : dc_(dc) {}

  Result<ApplyResult> Apply(std::span<const RecordOp> ops, uint64_t esl, uint64_t incarnation) override {
    return dc_->Apply(ops, esl, incarnation);
  }
  Result<ReadResult> Get(Slice key) override { return dc_->Get(key); }
  Result<std::vector<ReadResult>> MultiGet(std::span<const Slice> keys) override { return dc_->MultiGet(keys); }
  Result<ScanResult> Scan(const ScanRequest& request) override { return dc_->Scan(request); }
  Status SetEsl(uint64_t esl, uint64_t incarnation) override { return dc_->SetEsl(esl, incarnation); }
  Status ProposeRssp(uint64_t rssp, uint64_t incarnation) override { return dc_->ProposeRssp(rssp, incarnation); }
  Result<DcReady> RestartTo(uint64_t stable_end) override { return dc_->RestartTo(stable_end); }
  Result<DcStats> GetStats() override { return dc_->GetStats(); }
  Result<DcHealth> Health() override { return dc_->Health(); }

 protected:
  DataComponent* dc() const { return dc_; }

 private:
  DataComponent* const dc_;
};

}  // namespace deuteron::test
