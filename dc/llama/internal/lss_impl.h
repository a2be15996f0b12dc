// Internal to dc/llama/lss*.cpp: the LSS's state-word layout, its helpers
// and LogStructuredStore::Impl, shared by the files that implement it (the
// design and invariants: the comment at the top of lss.cpp, and lss.h). Not
// part of the LSS's interface.
#pragma once

#include "dc/llama/lss.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <thread>
#include <utility>
#include <vector>
#include "common/coding.h"
#include "common/crc32c.h"
#include "common/random.h"

namespace deuteron::llama {
namespace lss_internal {

constexpr uint64_t kOffsetMask = (uint64_t{1} << 32) - 1;
constexpr int kActiveShift = 32;
constexpr uint64_t kActiveOne = uint64_t{1} << kActiveShift;
constexpr uint64_t kActiveMax = 0xffff;
constexpr uint64_t kSealedBit = uint64_t{1} << 48;
constexpr int kGenerationShift = 49;
constexpr uint64_t kGenerationMask = 0x7fff;
constexpr uint64_t kMaxBufferSize = uint64_t{1} << 30;
constexpr int kMaxBufferCount = 1024;
constexpr int kMaxIoThreads = 64;
constexpr size_t kScanChunk = 1 << 20;  // look-ahead reads

constexpr uint64_t OffsetOf(uint64_t s) { return s & kOffsetMask; }
constexpr uint64_t ActiveOf(uint64_t s) { return (s >> kActiveShift) & kActiveMax; }
constexpr bool IsSealed(uint64_t s) { return (s & kSealedBit) != 0; }
constexpr uint32_t GenerationOf(uint64_t s) {
  return static_cast<uint32_t>((s >> kGenerationShift) & kGenerationMask);
}
constexpr bool IsIdle(uint64_t s) { return IsSealed(s) && OffsetOf(s) == 0 && ActiveOf(s) == 0; }
constexpr uint64_t IdleState(uint32_t generation) {
  return kSealedBit | ((generation & kGenerationMask) << kGenerationShift);
}
constexpr uint64_t OpenState(uint32_t generation) {
  return (generation & kGenerationMask) << kGenerationShift;
}
static_assert(kActiveShift + 16 == 48 && kGenerationShift + 15 == 64, "state word layout");

constexpr uint64_t RoundUp(uint64_t x, uint64_t align) { return (x + align - 1) & ~(align - 1); }

inline uint32_t MaskedCrc(const char* data, size_t n) { return crc32c::Mask(crc32c::Value(data, n)); }

inline std::string Where(uint64_t segment, uint64_t offset) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "segment %" PRIu64 " offset %" PRIu64, segment, offset);
  return buf;
}

inline std::string WhereAddress(LssAddress a, uint64_t segment_size) {
  return Where(SegmentOf(a, segment_size), OffsetInSegment(a, segment_size));
}

inline bool ParseFreeFileName(const std::string& name) {
  // "<16 hex>.free": a segment file parked in the recycle pool.
  uint64_t unused;
  return name.size() == 21 && name.compare(16, 5, ".free") == 0 &&
         ParseSegmentFileName(name.substr(0, 16) + ".seg", &unused);
}

inline Status ValidateOptions(const LssOptions& o) {
  const uint64_t s = o.segment_size;
  if (s < 2 * kMinBufferSpan || (s & (s - 1)) != 0 || s > (uint64_t{1} << 40)) {
    return Status::InvalidArgument("LSS segment_size must be a power of two in [128 KiB, 1 TiB]");
  }
  if (o.buffer_size % kBufferAlign != 0 || o.buffer_size < 2 * kBufferAlign ||
      o.buffer_size > s / 2 || o.buffer_size > kMaxBufferSize) {
    return Status::InvalidArgument(
        "LSS buffer_size must be a multiple of 4096 in [8 KiB, min(segment_size / 2, 1 GiB)]");
  }
  if (o.buffer_count < 2 || o.buffer_count > kMaxBufferCount) {
    return Status::InvalidArgument("LSS buffer_count must be in [2, 1024]");
  }
  if (o.io_threads < 0 || o.io_threads > kMaxIoThreads) {
    return Status::InvalidArgument("LSS io_threads must be in [0, 64]");
  }
  if (o.recycle_pool < 0) return Status::InvalidArgument("LSS recycle_pool must be >= 0");
  return Status::OK();
}

inline uint64_t NewStoreId(Env* env) {
  std::random_device rd;
  uint64_t seed = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ env->NowMicros();
  seed ^= static_cast<uint64_t>(
      std::chrono::system_clock::now().time_since_epoch().count());
  uint64_t id = Random64::SplitMix64(&seed);
  return id == 0 ? 1 : id;
}

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

}  // namespace lss_internal

// Impl and the files that implement it use these unqualified (this header is
// included by dc/llama/lss*.cpp only).
using namespace lss_internal;

class LogStructuredStore::Impl {
 public:
  Impl(Env* env, std::string dir, const LssOptions& options, const StoreIdentity& identity)
      : env_(env),
        dir_(std::move(dir)),
        lss_dir_(JoinPath(dir_, "lss")),
        options_(options),
        identity_(identity),
        segment_size_(options.segment_size),
        buffer_size_(options.buffer_size),
        count_(static_cast<uint32_t>(options.buffer_count)) {}

  ~Impl();

  Status Init();
  Status Recover(LssAddress start, const RecordVisitor& visitor);
  Result<Reservation> Reserve(size_t bytes);
  void Commit(const Reservation& r);
  void Void(const Reservation& r);
  Status MakeStable(LssAddress address);
  Status MakeWritten(LssAddress address);
  bool StartWrite(LssAddress address);
  bool RingWouldWait(size_t bytes) const;
  LssAddress HiStable() const { return hi_stable_.load(); }
  LssAddress HiWritten() const { return hi_written_.load(); }
  LssAddress Tail() const;
  size_t MaxReservation() const { return buffer_size_ - kBufferHeaderSize; }
  Result<RecordHeader> ReadRecord(LssAddress address, std::string* payload) const;
  Result<RecordHeader> ReadRecordHeader(LssAddress address) const;
  Status ScanSegment(uint64_t segment, const RecordVisitor& visitor) const;
  Status ReleaseSegmentsBelow(LssAddress frontier);
  uint64_t LowestSegment() const;
  uint64_t TailSegment() const;
  const StoreIdentity& identity() const { return identity_; }
  const LssOptions& options() const { return options_; }
  Stats GetStats() const;

 private:
  // One slot of the ring. Aligned so that state words do not share lines.
  struct alignas(64) FlushBuffer {
    // acq_rel RMWs / acquire loads: publishes record bytes to the I/O and
    // the slot's fields to reservers (see Memory orders above).
    std::atomic<uint64_t> state{IdleState(0)};
    // Set by the opener before the release store that opens the slot; read
    // after an acquire load of the state, and re-validated (I2).
    std::atomic<LssAddress> base{0};
    std::atomic<uint64_t> capacity{0};
    // Plain fields: written by the opener while the slot is idle (index) or by
    // the sealer while it holds its pin (stable_at_seal); read only by the
    // sealer and the I/O issuer of the same incarnation (see the header).
    uint64_t index = 0;  // value of current_ for this incarnation
    LssAddress stable_at_seal = 0;
    char* mem = nullptr;  // buffer_size_ bytes, 4096-aligned
  };

  // A segment file held by the store.
  struct Segment {
    std::shared_ptr<File> file;
    // The Env lets WriteAt run concurrently but not with Sync: writes hold it
    // shared, Sync exclusive.
    std::shared_mutex io_mu;
    std::atomic<uint64_t> writes{0};  // WriteAt calls completed
    uint64_t synced = 0;              // GUARDED_BY(io_mu, exclusive): writes covered by a Sync
  };

  std::string SegmentPath(uint64_t n) const { return JoinPath(lss_dir_, SegmentFileName(n)); }
  std::string FreePath(uint64_t n) const {
    std::string name = SegmentFileName(n);
    return JoinPath(lss_dir_, name.substr(0, 16) + ".free");
  }
  std::string WhereA(LssAddress a) const { return WhereAddress(a, segment_size_); }

  Status FailureStatus() const {
    std::lock_guard<std::mutex> l(mu_);
    return failure_;
  }

  // Seals handling: `s_sealed` is the pinned, sealed state the caller's CAS
  // installed on slot `slot`. Records stable_at_seal, drops the pin (maybe
  // issuing the I/O), then opens the next slot.
  void AfterSeal(uint32_t slot, uint64_t s_sealed, bool from_reserve);
  // Drops one active count of a slot; issues the I/O if that leaves it sealed
  // with none active.
  void ReleaseActive(uint32_t slot, uint32_t generation);
  void IssueIo(uint32_t slot);
  // Header, records checksum and zero padding of a sealed, idle-of-writers
  // buffer, ready for WriteBuffer.
  void PrepareBuffer(FlushBuffer& b);
  void DoIo(uint32_t slot);
  Status WriteBuffer(FlushBuffer& b, LssAddress base, uint64_t used);
  void Complete(uint32_t slot, uint32_t generation, uint64_t sequence, LssAddress end,
                Status status);
  void IoThreadMain();
  void WriteVoid(char* dst, size_t size);

  // The segment file for writing buffers of segment n, creating it (and any
  // missing one before it) if needed.
  Result<std::shared_ptr<Segment>> SegmentForWrite(uint64_t n);
  // Creates (or recycles) segment n's file: header written and synced,
  // directory synced; not yet in segments_. REQUIRES: create_mu_ held, not
  // seg_mu_ (the syncs take milliseconds; every record read looks its
  // segment up under seg_mu_).
  Result<std::shared_ptr<Segment>> CreateSegment(uint64_t n);
  std::shared_ptr<Segment> FindSegment(uint64_t n) const;
  static Status SyncSegment(Segment* seg, uint64_t ticket, std::atomic<uint64_t>* syncs);
  // Without sync_on_write: syncs every segment file with unsynced writes and
  // moves Hi-Stable to the Hi-Written it read before (MakeStable's second
  // half). Fails the store on a sync error.
  Status SyncWritten(LssAddress address);
  // Every held segment file with unsynced writes synced (Recover, without
  // sync_on_write: what a crashed process wrote may be unsynced).
  Status SyncAllSegments();

  // Recovery pieces.
  // Reads the buffer at `pos` of `seg`: true if it is valid (*h and *records
  // filled), false with the reason in *why if not; an error only for I/O.
  Result<bool> ReadBuffer(Segment* seg, LssAddress pos, BufferHeader* h, std::string* records,
                          std::string* why) const;
  Status VisitBuffer(LssAddress base, const std::string& records,
                     const RecordVisitor& visitor) const;
  Status VisitTransaction(LssAddress address, Slice payload, uint32_t count,
                          const RecordVisitor& visitor) const;
  Status LookAhead(LssAddress invalid, const std::string& why) const;
  Status CutTail(LssAddress position);

  Env* const env_;
  const std::string dir_;
  const std::string lss_dir_;
  const LssOptions options_;
  const StoreIdentity identity_;
  const uint64_t segment_size_;
  const uint64_t buffer_size_;
  const uint32_t count_;

  std::unique_ptr<char, FreeDeleter> memory_;
  std::unique_ptr<FlushBuffer[]> ring_;
  // Ring index (unbounded) of the open slot (I4). Release by the opener,
  // acquire by readers: whoever sees the index sees the slot's base.
  std::atomic<uint64_t> current_{0};
  std::atomic<bool> recovered_{false};
  uint64_t sequence_origin_ = 1;       // sequence of ring index 0; set by Recover

  // Completion path: Hi-Written, Hi-Stable, the failure, and every wait.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Status failure_;                      // GUARDED_BY(mu_)
  std::atomic<bool> failed_{false};     // set under mu_ together with failure_
  std::atomic<LssAddress> hi_stable_{kNullAddress};   // stored under mu_
  std::atomic<LssAddress> hi_written_{kNullAddress};  // stored under mu_
  uint64_t next_stable_sequence_ = 1;   // GUARDED_BY(mu_): next sequence to be written
  std::mutex sync_mu_;                  // one SyncWritten at a time (before mu_)
  std::map<uint64_t, LssAddress> done_out_of_order_;  // GUARDED_BY(mu_): sequence -> end

  // Segment files.
  std::mutex create_mu_;       // one segment creation at a time (before seg_mu_)
  mutable std::mutex seg_mu_;  // lock order: seg_mu_ before a Segment's io_mu
  std::map<uint64_t, std::shared_ptr<Segment>> segments_;  // GUARDED_BY(seg_mu_)
  std::vector<std::string> recycle_pool_;                  // GUARDED_BY(seg_mu_): paths
  // No segment file at or above it exists. GUARDED_BY(create_mu_) (set by
  // recovery before any write).
  uint64_t next_to_create_ = 0;

  // I/O threads.
  std::mutex io_mu_;
  std::condition_variable io_cv_;
  std::deque<uint32_t> io_queue_;  // GUARDED_BY(io_mu_)
  bool io_stop_ = false;           // GUARDED_BY(io_mu_)
  std::vector<std::thread> io_threads_;

  // Statistics (relaxed: counters order nothing).
  std::atomic<uint64_t> reservations_{0};
  std::atomic<uint64_t> voids_{0};
  std::atomic<uint64_t> void_bytes_{0};
  std::atomic<uint64_t> padding_bytes_{0};
  std::atomic<uint64_t> record_bytes_{0};
  std::atomic<uint64_t> written_bytes_{0};
  std::atomic<uint64_t> buffers_written_{0};
  std::atomic<uint64_t> syncs_{0};
  std::atomic<uint64_t> reserve_waits_{0};
  std::atomic<uint64_t> segments_released_{0};
  std::atomic<uint64_t> segments_recycled_{0};
};

}  // namespace deuteron::llama
