// Per-thread phase timing for slow operations (op_phases.h).
#include "dc/llama/op_phases.h"

#include <chrono>

namespace deuteron::llama {

namespace internal {
std::atomic<bool> op_phase_timing{false};

OpPhaseTimes& ThreadOpPhaseTimes() {
  thread_local OpPhaseTimes times{};
  return times;
}

uint64_t OpPhaseNowNanos() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}
}  // namespace internal

const char* OpPhaseName(OpPhase phase) {
  switch (phase) {
    case OpPhase::kPageLoad: return "page_load";
    case OpPhase::kEviction: return "eviction";
    case OpPhase::kRingWait: return "ring_wait";
    case OpPhase::kMakeWritten: return "make_written";
    case OpPhase::kMakeStable: return "make_stable";
    case OpPhase::kConsolidation: return "consolidation";
    case OpPhase::kCleaning: return "cleaning";
    case OpPhase::kCheckpoint: return "checkpoint";
    case OpPhase::kCount: break;
  }
  return "?";
}

void EnableOpPhaseTiming(bool on) { internal::op_phase_timing.store(on, std::memory_order_relaxed); }

std::string OpPhaseDiff(const OpPhaseTimes& before, const OpPhaseTimes& after) {
  std::string out;
  for (size_t i = 0; i < kOpPhaseCount; ++i) {
    const uint64_t us = (after[i] - before[i]) / 1000;
    if (us == 0) continue;
    if (!out.empty()) out += ',';
    out += OpPhaseName(static_cast<OpPhase>(i));
    out += ':';
    out += std::to_string(us);
  }
  return out;
}

}  // namespace deuteron::llama
