// Where a slow operation spent its time: per-thread nanoseconds in the phases
// of LLAMA and the Bw-tree that can make one foreground operation wait (page
// loads, eviction, waits on the flush ring, MakeWritten and MakeStable,
// consolidation, cleaning, checkpoints). A diagnostic for benchmarks
// (dc_bench's slowest operations, issue 34): off by default, and then a
// ScopedPhase costs one relaxed load.
//
// Phases nest (an eviction pass waits on the ring and on MakeWritten), and each
// counts its own wall time, inclusive of the phases inside it.
//
// Thread-safety: Enable is safe from any thread; the counters are the calling
// thread's own (thread_local), read by the thread that owns them.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace deuteron::llama {

enum class OpPhase : uint8_t {
  kPageLoad,       // Llama::Materialize: reading a swapped page back from the LSS
  kEviction,       // Llama::EnforceBudget: an eviction pass
  kRingWait,       // LSS Reserve/seal waiting for a flush buffer to come back
  kMakeWritten,    // waiting for buffers to be written (the evictor)
  kMakeStable,     // waiting for a sync (RSSPs, checkpoints)
  kConsolidation,  // Bw-tree page consolidation
  kCleaning,       // Llama::CleanSegments
  kCheckpoint,     // Llama::Checkpoint
  kCount,
};

inline constexpr size_t kOpPhaseCount = static_cast<size_t>(OpPhase::kCount);

const char* OpPhaseName(OpPhase phase);

using OpPhaseTimes = std::array<uint64_t, kOpPhaseCount>;  // nanoseconds per phase

namespace internal {
extern std::atomic<bool> op_phase_timing;
OpPhaseTimes& ThreadOpPhaseTimes();
uint64_t OpPhaseNowNanos();
}  // namespace internal

// Turns the timing on or off for every thread.
void EnableOpPhaseTiming(bool on);
// The calling thread's totals since it started (zeros while timing is off).
inline const OpPhaseTimes& ThreadOpPhases() { return internal::ThreadOpPhaseTimes(); }
// "phase:us,..." for the phases where `after - before` is at least 1 us.
std::string OpPhaseDiff(const OpPhaseTimes& before, const OpPhaseTimes& after);

// Adds the scope's wall time to the calling thread's counter for `phase`.
class ScopedPhase {
 public:
  explicit ScopedPhase(OpPhase phase)
      : phase_(phase),
        start_(internal::op_phase_timing.load(std::memory_order_relaxed)
                   ? internal::OpPhaseNowNanos()
                   : 0) {}
  ~ScopedPhase() {
    if (start_ != 0) {
      internal::ThreadOpPhaseTimes()[static_cast<size_t>(phase_)] +=
          internal::OpPhaseNowNanos() - start_;
    }
  }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  OpPhase phase_;
  uint64_t start_;
};

}  // namespace deuteron::llama
