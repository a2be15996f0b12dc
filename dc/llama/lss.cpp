// LogStructuredStore: the flush-buffer ring, the I/O path, Hi-Stable,
// recovery of the log's end and segment-file management. The numbered
// invariants (I1..I6) are those of dc/llama/lss.h.
//
// State word of a flush buffer (I1):
//   bits  0..31  offset: record bytes reserved
//   bits 32..47  active: reservations not yet committed or voided, plus one
//                while the sealer holds its pin (below)
//   bit  48      sealed
//   bits 49..63  generation (15 bits, wrapping: a thread would have to stall
//                between two loads of the word while one slot is written
//                32768 times for a stale CAS to succeed)
// An idle buffer (its last I/O done, free for the ring to reuse) is sealed
// with offset 0 and active 0. A buffer that was sealed in use always has
// offset > 0: Reserve never seals an empty buffer (it pads it with a void
// record instead when a reservation cannot fit) and MakeStable seals only a
// buffer holding bytes. So "sealed, offset 0" means idle.
//
// Life of one incarnation (one generation) of a ring slot:
//   idle(g) --opened by the sealer of the previous buffer--> open(g)
//   open(g) --Reserve CAS: offset += n, active += 1--------> open(g)
//   open(g) --seal CAS: sealed, active += 1 (the pin)------> sealed(g)
//   the sealer records stable_at_seal, then drops its pin;
//   whichever RMW takes active to 0 on a sealed buffer issues the I/O (I3);
//   I/O done (or skipped after a failure) --> idle(g + 1), under mu_.
// The pin makes the sealer's writes to the slot (stable_at_seal) happen
// before the I/O reads them, whoever issues it.
//
// Only one slot is open at a time, and only the open slot can be sealed, so
// seals are serialized: the sealer of slot k waits for slot k + 1 to be idle,
// opens it (base, capacity, index, then current_, then the state word), and
// only then can anyone seal it.
//
// I/O: the issuer (or an I/O thread) fills the buffer header, writes the
// buffer padded to 4096 bytes with one WriteAt and syncs the segment file;
// WriteAts to one file run concurrently, a Sync excludes them (the Env's
// rule), and a Sync covers every write completed before it began, so
// concurrent buffers share syncs. Completion, under mu_, records the buffer's
// end by sequence and moves Hi-Stable over the contiguous prefix (I5), then
// makes the slot idle. After an error (I6) later buffers are not written, but
// their slots still become idle so that no thread waits forever.
//
// Segment files are created on first write, in segment order, with a synced
// header and a synced directory entry, or renamed from the recycle pool
// ("<16 hex>.free"). Recovery cuts a torn tail by truncating the file at the
// first invalid buffer (deleting it when that is its first buffer) and
// deleting every later segment file.
//
// Memory orders (everything not named here is seq_cst):
//   - state words: CAS and fetch_sub are acq_rel, loads acquire. A Commit's
//     release publishes its record bytes; every change of the word between
//     open and idle is an RMW, so the RMW that takes active to 0 continues
//     the release sequences of every Commit and acquires all their bytes for
//     the I/O. The reset to idle (release, after the I/O read the memory) and
//     the open store (release) order the I/O's reads before the next
//     incarnation's writes.
//   - current_: release by the opener after it wrote the slot's base,
//     capacity and index; acquire by readers.
//   - stats counters: relaxed, they order nothing.
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
namespace {

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

uint32_t MaskedCrc(const char* data, size_t n) { return crc32c::Mask(crc32c::Value(data, n)); }

std::string Where(uint64_t segment, uint64_t offset) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "segment %" PRIu64 " offset %" PRIu64, segment, offset);
  return buf;
}

std::string WhereAddress(LssAddress a, uint64_t segment_size) {
  return Where(SegmentOf(a, segment_size), OffsetInSegment(a, segment_size));
}

bool ParseFreeFileName(const std::string& name) {
  // "<16 hex>.free": a segment file parked in the recycle pool.
  uint64_t unused;
  return name.size() == 21 && name.compare(16, 5, ".free") == 0 &&
         ParseSegmentFileName(name.substr(0, 16) + ".seg", &unused);
}

Status ValidateOptions(const LssOptions& o) {
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

uint64_t NewStoreId(Env* env) {
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

}  // namespace

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
  LssAddress HiStable() const { return hi_stable_.load(); }
  LssAddress Tail() const;
  size_t MaxReservation() const { return buffer_size_ - kBufferHeaderSize; }
  Result<RecordHeader> ReadRecord(LssAddress address, std::string* payload) const;
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
  // directory synced. REQUIRES: seg_mu_ held.
  Result<std::shared_ptr<Segment>> CreateSegmentLocked(uint64_t n);
  std::shared_ptr<Segment> FindSegment(uint64_t n) const;
  static Status SyncSegment(Segment* seg, uint64_t ticket, std::atomic<uint64_t>* syncs);

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

  // Completion path: Hi-Stable, the failure, and every wait.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Status failure_;                      // GUARDED_BY(mu_)
  std::atomic<bool> failed_{false};     // set under mu_ together with failure_
  std::atomic<LssAddress> hi_stable_{kNullAddress};
  uint64_t next_stable_sequence_ = 1;   // GUARDED_BY(mu_)
  std::map<uint64_t, LssAddress> done_out_of_order_;  // GUARDED_BY(mu_): sequence -> end

  // Segment files.
  mutable std::mutex seg_mu_;  // lock order: seg_mu_ before a Segment's io_mu
  std::map<uint64_t, std::shared_ptr<Segment>> segments_;  // GUARDED_BY(seg_mu_)
  std::vector<std::string> recycle_pool_;                  // GUARDED_BY(seg_mu_): paths
  uint64_t next_to_create_ = 0;  // GUARDED_BY(seg_mu_): no segment file at or above it exists

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

// ------------------------------------------------------------------ setup

Status LogStructuredStore::Impl::Init() {
  const uint64_t total = buffer_size_ * count_;
  memory_.reset(static_cast<char*>(std::aligned_alloc(kBufferAlign, total)));
  if (memory_ == nullptr) return Status::InvalidArgument("LSS: cannot allocate flush buffers");
  std::memset(memory_.get(), 0, total);
  ring_ = std::make_unique<FlushBuffer[]>(count_);
  for (uint32_t i = 0; i < count_; ++i) ring_[i].mem = memory_.get() + i * buffer_size_;

  // Existing segment files, and files parked for recycling.
  ASSIGN_OR_RETURN(std::vector<std::string> names, env_->GetChildren(lss_dir_));
  bool deleted = false;
  for (const std::string& name : names) {
    uint64_t n;
    if (ParseSegmentFileName(name, &n)) {
      auto seg = std::make_shared<Segment>();
      ASSIGN_OR_RETURN(std::unique_ptr<File> f, env_->OpenFile(SegmentPath(n), OpenMode::kReadWrite));
      seg->file = std::move(f);
      // A header that decodes but names another store means files were mixed
      // up; a header that does not decode is a torn creation (Recover cuts it).
      char hdr[kSegmentHeaderSize];
      ASSIGN_OR_RETURN(size_t got, seg->file->ReadAt(0, hdr, sizeof(hdr)));
      if (got == sizeof(hdr)) {
        Result<SegmentHeader> h = DecodeSegmentHeader(Slice(hdr, sizeof(hdr)));
        if (h.ok() && h->store_id != identity_.store_id) {
          return Status::StoreMismatch("LSS segment file " + SegmentPath(n) +
                                       " belongs to another store");
        }
        if (h.ok() && h->segment_size != segment_size_) {
          return Status::Corruption("LSS segment file " + SegmentPath(n) +
                                    " has another segment size than IDENTITY");
        }
      }
      segments_[n] = std::move(seg);
    } else if (ParseFreeFileName(name)) {
      const std::string path = JoinPath(lss_dir_, name);
      if (recycle_pool_.size() < static_cast<size_t>(options_.recycle_pool)) {
        recycle_pool_.push_back(path);
      } else {
        RETURN_IF_ERROR(env_->DeleteFile(path));
        deleted = true;
      }
    }
  }
  if (deleted) RETURN_IF_ERROR(env_->SyncDir(lss_dir_));

  for (int i = 0; i < options_.io_threads; ++i) {
    io_threads_.emplace_back([this] { IoThreadMain(); });
  }
  return Status::OK();
}

LogStructuredStore::Impl::~Impl() {
  {
    std::lock_guard<std::mutex> l(io_mu_);
    io_stop_ = true;
  }
  io_cv_.notify_all();
  for (std::thread& t : io_threads_) t.join();
  failure_.PermitUncheckedError();
}

void LogStructuredStore::Impl::IoThreadMain() {
  for (;;) {
    uint32_t slot;
    {
      std::unique_lock<std::mutex> l(io_mu_);
      io_cv_.wait(l, [this] { return io_stop_ || !io_queue_.empty(); });
      if (io_queue_.empty()) return;  // stopping, and drained
      slot = io_queue_.front();
      io_queue_.pop_front();
    }
    DoIo(slot);
  }
}

// ------------------------------------------------------------------ writing

Result<Reservation> LogStructuredStore::Impl::Reserve(size_t bytes) {
  if (!recovered_.load()) return Status::InvalidArgument("LSS: Reserve before Recover");
  if (bytes > MaxReservation()) {
    return Status::TooLarge("LSS reservation of " + std::to_string(bytes) +
                            " bytes exceeds the maximum of " + std::to_string(MaxReservation()));
  }
  if (bytes < kRecordHeaderSize || bytes % kRecordAlign != 0) {
    return Status::InvalidArgument("LSS reservation size " + std::to_string(bytes) +
                                   " is not a record size (>= 48, multiple of 8)");
  }
  bool waited = false;
  for (;;) {
    if (failed_.load()) return FailureStatus();
    const uint64_t k = current_.load(std::memory_order_acquire);
    const uint32_t slot = static_cast<uint32_t>(k % count_);
    FlushBuffer& b = ring_[slot];
    uint64_t s = b.state.load(std::memory_order_acquire);
    if (IsSealed(s) || ActiveOf(s) == kActiveMax) {
      // The ring is moving to the next slot (its sealer may be waiting for
      // that slot's I/O), or this read is stale.
      if (ActiveOf(s) == kActiveMax) {
        std::this_thread::yield();
        continue;
      }
      if (!waited) {
        waited = true;
        reserve_waits_.fetch_add(1, std::memory_order_relaxed);
      }
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] {
        return failed_.load() || current_.load() != k || b.state.load() != s;
      });
      continue;
    }
    // An unsealed slot is the open one; the CAS below validates base and
    // capacity against the generation (I2).
    const LssAddress base = b.base.load();
    const uint64_t capacity = b.capacity.load();
    const uint64_t offset = OffsetOf(s);
    if (offset + bytes <= capacity) {
      if (b.state.compare_exchange_weak(s, s + bytes + kActiveOne, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
        reservations_.fetch_add(1, std::memory_order_relaxed);
        Reservation r;
        r.address = base + kBufferHeaderSize + offset;
        r.dst = b.mem + kBufferHeaderSize + offset;
        r.size = bytes;
        r.buffer = slot;
        r.generation = GenerationOf(s);
        return r;
      }
      continue;
    }
    if (offset == 0) {
      // Empty but too small: the buffer is cut short by the segment's end.
      // Fill it with a void record so that it is written and the next buffer
      // starts in the next segment, where the reservation fits.
      const uint64_t pad = capacity;
      if (b.state.compare_exchange_weak(s, s + pad + kActiveOne, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
        WriteVoid(b.mem + kBufferHeaderSize, pad);
        padding_bytes_.fetch_add(pad, std::memory_order_relaxed);
        ReleaseActive(slot, GenerationOf(s));
      }
      continue;
    }
    const uint64_t sealed = (s | kSealedBit) + kActiveOne;  // with the sealer's pin
    if (b.state.compare_exchange_weak(s, sealed, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      AfterSeal(slot, sealed, /*from_reserve=*/true);
    }
  }
}

void LogStructuredStore::Impl::WriteVoid(char* dst, size_t size) {
  RecordHeader h;
  h.type = RecordType::kVoid;
  h.length = static_cast<uint32_t>(size - kRecordHeaderSize);
  std::memset(dst + kRecordHeaderSize, 0, h.length);
  EncodeRecord(h, Slice(dst + kRecordHeaderSize, h.length), dst);
}

void LogStructuredStore::Impl::Commit(const Reservation& r) {
  record_bytes_.fetch_add(r.size, std::memory_order_relaxed);
  ReleaseActive(r.buffer, r.generation);
}

void LogStructuredStore::Impl::Void(const Reservation& r) {
  WriteVoid(r.dst, r.size);
  voids_.fetch_add(1, std::memory_order_relaxed);
  void_bytes_.fetch_add(r.size, std::memory_order_relaxed);
  ReleaseActive(r.buffer, r.generation);
}

void LogStructuredStore::Impl::ReleaseActive(uint32_t slot, uint32_t generation) {
  assert(slot < count_);
  // An RMW like the CAS of I1, which can never fail: the active count is ours.
  const uint64_t old = ring_[slot].state.fetch_sub(kActiveOne, std::memory_order_acq_rel);
  assert(GenerationOf(old) == (generation & kGenerationMask) && ActiveOf(old) > 0);
  (void)generation;
  if (IsSealed(old) && ActiveOf(old) == 1) IssueIo(slot);  // I3
}

void LogStructuredStore::Impl::AfterSeal(uint32_t slot, uint64_t s_sealed, bool from_reserve) {
  FlushBuffer& b = ring_[slot];
  const LssAddress base = b.base.load();
  const uint64_t used = OffsetOf(s_sealed);
  const uint64_t index = b.index;
  b.stable_at_seal = hi_stable_.load();
  const LssAddress next_base = NextBufferBase(base, used, segment_size_);
  ReleaseActive(slot, GenerationOf(s_sealed));  // the pin; may write the buffer inline

  // Open the next slot once its previous incarnation's I/O is done.
  const uint32_t next_slot = static_cast<uint32_t>((index + 1) % count_);
  FlushBuffer& nb = ring_[next_slot];
  uint64_t ns = nb.state.load(std::memory_order_acquire);
  if (!IsIdle(ns)) {
    if (from_reserve) reserve_waits_.fetch_add(1, std::memory_order_relaxed);
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return IsIdle(nb.state.load(std::memory_order_acquire)); });
    ns = nb.state.load(std::memory_order_acquire);
  }
  nb.base.store(next_base);
  nb.capacity.store(BufferCapacity(next_base, buffer_size_, segment_size_));
  nb.index = index + 1;
  current_.store(index + 1, std::memory_order_release);
  nb.state.store(OpenState(GenerationOf(ns)), std::memory_order_release);
  std::lock_guard<std::mutex> l(mu_);
  cv_.notify_all();
}

void LogStructuredStore::Impl::IssueIo(uint32_t slot) {
  // The issuing thread (a flusher, or the sealer) fills in the header and
  // checksums the records, so the I/O thread only writes and syncs: the
  // checksum of one buffer overlaps the previous buffer's I/O.
  PrepareBuffer(ring_[slot]);
  if (io_threads_.empty()) {
    DoIo(slot);
    return;
  }
  {
    std::lock_guard<std::mutex> l(io_mu_);
    io_queue_.push_back(slot);
  }
  io_cv_.notify_one();
}

void LogStructuredStore::Impl::DoIo(uint32_t slot) {
  FlushBuffer& b = ring_[slot];
  const uint64_t s = b.state.load(std::memory_order_acquire);  // sealed, frozen
  assert(IsSealed(s) && ActiveOf(s) == 0 && OffsetOf(s) > 0);
  const LssAddress base = b.base.load();
  const uint64_t used = OffsetOf(s);
  const uint64_t sequence = sequence_origin_ + b.index;
  Status status;
  if (!failed_.load()) status = WriteBuffer(b, base, used);
  Complete(slot, GenerationOf(s), sequence, NextBufferBase(base, used, segment_size_),
           std::move(status));
}

void LogStructuredStore::Impl::PrepareBuffer(FlushBuffer& b) {
  const uint64_t s = b.state.load(std::memory_order_acquire);  // sealed, frozen
  const uint64_t used = OffsetOf(s);
  BufferHeader h;
  h.base = b.base.load();
  h.used = used;
  h.sequence = sequence_origin_ + b.index;
  h.stable_at_seal = b.stable_at_seal;
  h.records_crc = MaskedCrc(b.mem + kBufferHeaderSize, used);
  EncodeBufferHeader(h, b.mem);
  const uint64_t len = RoundUp(kBufferHeaderSize + used, kBufferAlign);
  std::memset(b.mem + kBufferHeaderSize + used, 0, len - kBufferHeaderSize - used);
}

Status LogStructuredStore::Impl::WriteBuffer(FlushBuffer& b, LssAddress base, uint64_t used) {
  const uint64_t len = RoundUp(kBufferHeaderSize + used, kBufferAlign);

  const std::string where = "LSS write of the buffer at " + WhereA(base);
  Result<std::shared_ptr<Segment>> seg = SegmentForWrite(SegmentOf(base, segment_size_));
  if (!seg.ok()) return seg.status().WithContext(where);
  uint64_t ticket;
  {
    std::shared_lock<std::shared_mutex> l((*seg)->io_mu);
    Status s = (*seg)->file->WriteAt(OffsetInSegment(base, segment_size_), Slice(b.mem, len));
    if (!s.ok()) return s.WithContext(where);
    ticket = (*seg)->writes.fetch_add(1) + 1;
  }
  Status s = SyncSegment(seg->get(), ticket, &syncs_);
  if (!s.ok()) return s.WithContext(where);
  written_bytes_.fetch_add(len, std::memory_order_relaxed);
  buffers_written_.fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

Status LogStructuredStore::Impl::SyncSegment(Segment* seg, uint64_t ticket,
                                             std::atomic<uint64_t>* syncs) {
  std::unique_lock<std::shared_mutex> l(seg->io_mu);
  if (seg->synced >= ticket) return Status::OK();  // a Sync that began after our write
  const uint64_t covered = seg->writes.load();     // no write is in progress now
  RETURN_IF_ERROR(seg->file->Sync());
  seg->synced = covered;
  syncs->fetch_add(1, std::memory_order_relaxed);
  return Status::OK();
}

void LogStructuredStore::Impl::Complete(uint32_t slot, uint32_t generation, uint64_t sequence,
                                        LssAddress end, Status status) {
  std::lock_guard<std::mutex> l(mu_);
  if (!status.ok()) {
    if (!failed_.load()) {
      failure_ = std::move(status);
      failed_.store(true);
    }
  } else if (!failed_.load()) {
    // I5: Hi-Stable moves over a contiguous prefix of sequences only.
    done_out_of_order_[sequence] = end;
    while (!done_out_of_order_.empty() &&
           done_out_of_order_.begin()->first == next_stable_sequence_) {
      hi_stable_.store(done_out_of_order_.begin()->second);
      done_out_of_order_.erase(done_out_of_order_.begin());
      ++next_stable_sequence_;
    }
  }
  ring_[slot].state.store(IdleState(generation + 1), std::memory_order_release);
  cv_.notify_all();
}

Status LogStructuredStore::Impl::MakeStable(LssAddress address) {
  if (!recovered_.load()) return Status::InvalidArgument("LSS: MakeStable before Recover");
  for (;;) {
    if (failed_.load()) return FailureStatus();
    if (hi_stable_.load() >= address) return Status::OK();
    const uint64_t k = current_.load(std::memory_order_acquire);
    const uint32_t slot = static_cast<uint32_t>(k % count_);
    FlushBuffer& b = ring_[slot];
    uint64_t s = b.state.load(std::memory_order_acquire);
    if (IsSealed(s)) {
      // The ring is moving on; wait for the next slot to open or for
      // Hi-Stable to pass the address.
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] {
        return failed_.load() || current_.load() != k || b.state.load() != s ||
               hi_stable_.load() >= address;
      });
      continue;
    }
    const LssAddress base = b.base.load();
    if (b.state.load(std::memory_order_acquire) != s) continue;  // base may be stale
    if (OffsetOf(s) > 0 && base + kBufferHeaderSize < address) {
      // The open buffer holds bytes below the address: seal it.
      const uint64_t sealed = (s | kSealedBit) + kActiveOne;
      if (b.state.compare_exchange_strong(s, sealed, std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
        AfterSeal(slot, sealed, /*from_reserve=*/false);
      }
      continue;
    }
    // No record byte below the address lies in the open buffer: everything
    // below min(address, base) is in buffers already sealed.
    const LssAddress target = std::min(address, base);
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return failed_.load() || hi_stable_.load() >= target; });
    if (failed_.load()) return failure_;
    return Status::OK();
  }
}

LssAddress LogStructuredStore::Impl::Tail() const {
  if (!recovered_.load()) return kNullAddress;
  for (;;) {
    const uint64_t k = current_.load(std::memory_order_acquire);
    const FlushBuffer& b = ring_[k % count_];
    const uint64_t s = b.state.load(std::memory_order_acquire);
    const LssAddress base = b.base.load();
    if (b.state.load(std::memory_order_acquire) != s) continue;
    if (!IsSealed(s) || IsIdle(s)) return base + kBufferHeaderSize + OffsetOf(s);
    return NextBufferBase(base, OffsetOf(s), segment_size_) + kBufferHeaderSize;
  }
}

// ------------------------------------------------------------------ segments

std::shared_ptr<LogStructuredStore::Impl::Segment> LogStructuredStore::Impl::FindSegment(
    uint64_t n) const {
  std::lock_guard<std::mutex> l(seg_mu_);
  auto it = segments_.find(n);
  return it == segments_.end() ? nullptr : it->second;
}

Result<std::shared_ptr<LogStructuredStore::Impl::Segment>>
LogStructuredStore::Impl::SegmentForWrite(uint64_t n) {
  std::lock_guard<std::mutex> l(seg_mu_);
  if (auto it = segments_.find(n); it != segments_.end()) return it->second;
  // Segment files are created in order, even when buffers complete out of
  // order, so that a segment file never exists without the ones before it:
  // the lowest file is always where the log (or its unreleased part) begins.
  assert(n >= next_to_create_);
  for (uint64_t m = next_to_create_; m < n; ++m) {
    if (segments_.count(m) == 0) RETURN_IF_ERROR(CreateSegmentLocked(m).status());
  }
  ASSIGN_OR_RETURN(std::shared_ptr<Segment> seg, CreateSegmentLocked(n));
  next_to_create_ = std::max(next_to_create_, n + 1);
  return seg;
}

Result<std::shared_ptr<LogStructuredStore::Impl::Segment>>
LogStructuredStore::Impl::CreateSegmentLocked(uint64_t n) {
  const std::string path = SegmentPath(n);
  auto seg = std::make_shared<Segment>();
  if (!recycle_pool_.empty()) {
    // Writing over an existing file is faster than growing one (LIMITS.md).
    // Its old buffers carry their old addresses, so none is valid here.
    RETURN_IF_ERROR(env_->RenameFile(recycle_pool_.back(), path));
    recycle_pool_.pop_back();
    ASSIGN_OR_RETURN(std::unique_ptr<File> f, env_->OpenFile(path, OpenMode::kReadWrite));
    seg->file = std::move(f);
    segments_recycled_.fetch_add(1, std::memory_order_relaxed);
  } else {
    ASSIGN_OR_RETURN(std::unique_ptr<File> f, env_->OpenFile(path, OpenMode::kCreateNew));
    seg->file = std::move(f);
  }
  SegmentHeader h;
  h.store_id = identity_.store_id;
  h.segment_number = n;
  h.segment_size = segment_size_;
  std::string area = EncodeSegmentHeader(h);
  area.resize(kSegmentHeaderArea, '\0');
  RETURN_IF_ERROR(seg->file->WriteAt(0, area));
  RETURN_IF_ERROR(seg->file->Sync());
  syncs_.fetch_add(1, std::memory_order_relaxed);
  RETURN_IF_ERROR(env_->SyncDir(lss_dir_));
  segments_[n] = seg;
  return seg;
}

Result<RecordHeader> LogStructuredStore::Impl::ReadRecord(LssAddress address,
                                                          std::string* payload) const {
  const uint64_t n = SegmentOf(address, segment_size_);
  const uint64_t offset = OffsetInSegment(address, segment_size_);
  const std::string where = Where(n, offset);
  std::shared_ptr<Segment> seg = FindSegment(n);
  if (seg == nullptr) {
    return Status::NotFound(where + ": LSS segment released or never written");
  }
  char hdr[kRecordHeaderSize];
  Status s = seg->file->ReadExactAt(offset, hdr, sizeof(hdr));
  if (!s.ok()) return s.WithContext(where);
  const uint32_t length = DecodeFixed32(hdr + 8);
  if (offset + kRecordHeaderSize + length > segment_size_) {
    return Status::Corruption(where + ": record: payload of " + std::to_string(length) +
                              " bytes runs past the segment");
  }
  payload->resize(kRecordHeaderSize + length);
  std::memcpy(payload->data(), hdr, sizeof(hdr));
  s = seg->file->ReadExactAt(offset + kRecordHeaderSize, payload->data() + kRecordHeaderSize,
                             length);
  if (!s.ok()) return s.WithContext(where);
  Slice p;
  Result<RecordHeader> h = DecodeRecord(Slice(*payload), &p);
  if (!h.ok()) return h.status().WithContext(where);
  payload->erase(0, kRecordHeaderSize);
  return h;
}

Status LogStructuredStore::Impl::ReleaseSegmentsBelow(LssAddress frontier) {
  if (!recovered_.load()) return Status::InvalidArgument("LSS: release before Recover");
  // Never the segment being written, nor one a buffer not yet stable is in.
  const uint64_t limit =
      std::min(TailSegment(), SegmentOf(hi_stable_.load(), segment_size_));
  std::lock_guard<std::mutex> l(seg_mu_);
  bool changed = false;
  while (!segments_.empty()) {
    auto it = segments_.begin();
    const uint64_t n = it->first;
    if (n >= limit || (n + 1) * segment_size_ > frontier) break;
    if (recycle_pool_.size() < static_cast<size_t>(options_.recycle_pool)) {
      const std::string to = FreePath(n);
      RETURN_IF_ERROR(env_->RenameFile(SegmentPath(n), to));
      recycle_pool_.push_back(to);
    } else {
      RETURN_IF_ERROR(env_->DeleteFile(SegmentPath(n)));
    }
    // Readers holding the Segment keep the open file (and its data) until done.
    segments_.erase(it);
    segments_released_.fetch_add(1, std::memory_order_relaxed);
    changed = true;
  }
  if (changed) RETURN_IF_ERROR(env_->SyncDir(lss_dir_));
  return Status::OK();
}

uint64_t LogStructuredStore::Impl::TailSegment() const {
  if (!recovered_.load()) return 0;
  const uint64_t k = current_.load(std::memory_order_acquire);
  return SegmentOf(ring_[k % count_].base.load(), segment_size_);
}

uint64_t LogStructuredStore::Impl::LowestSegment() const {
  {
    std::lock_guard<std::mutex> l(seg_mu_);
    if (!segments_.empty()) return segments_.begin()->first;
  }
  return TailSegment();
}

LogStructuredStore::Stats LogStructuredStore::Impl::GetStats() const {
  Stats st;
  st.reservations = reservations_.load(std::memory_order_relaxed);
  st.voids = voids_.load(std::memory_order_relaxed);
  st.void_bytes = void_bytes_.load(std::memory_order_relaxed);
  st.padding_bytes = padding_bytes_.load(std::memory_order_relaxed);
  st.record_bytes = record_bytes_.load(std::memory_order_relaxed);
  st.written_bytes = written_bytes_.load(std::memory_order_relaxed);
  st.buffers_written = buffers_written_.load(std::memory_order_relaxed);
  st.syncs = syncs_.load(std::memory_order_relaxed);
  st.reserve_waits = reserve_waits_.load(std::memory_order_relaxed);
  st.segments_released = segments_released_.load(std::memory_order_relaxed);
  st.segments_recycled = segments_recycled_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> l(seg_mu_);
  st.segments_live = segments_.size();
  for (const auto& [n, seg] : segments_) {
    Result<uint64_t> size = seg->file->Size();
    if (size.ok()) st.live_bytes_on_disk += *size;
  }
  return st;
}

// ------------------------------------------------------------------ recovery

Status LogStructuredStore::Impl::Recover(LssAddress start, const RecordVisitor& visitor) {
  if (recovered_.load()) return Status::InvalidArgument("LSS: Recover called twice");
  LssAddress pos;
  if (start == kNullAddress) {
    std::lock_guard<std::mutex> l(seg_mu_);
    pos = FirstBufferBase(segments_.empty() ? 0 : segments_.begin()->first, segment_size_);
  } else {
    const uint64_t off = OffsetInSegment(start, segment_size_);
    if (start % kBufferAlign != 0 || off < kSegmentHeaderArea ||
        off + kMinBufferSpan > segment_size_) {
      return Status::InvalidArgument("LSS recovery start " + WhereA(start) +
                                     " is not a buffer position");
    }
    pos = start;
  }

  uint64_t last_sequence = 0;
  uint64_t checked_segment = UINT64_MAX;  // the segment whose header was verified
  std::string why;                        // why the buffer at pos is not valid
  std::string records;
  for (;;) {
    const uint64_t n = SegmentOf(pos, segment_size_);
    const uint64_t off = OffsetInSegment(pos, segment_size_);
    std::shared_ptr<Segment> seg = FindSegment(n);
    if (seg == nullptr) {
      why = "segment file missing";
      break;
    }
    if (checked_segment != n) {
      char hdr[kSegmentHeaderSize];
      ASSIGN_OR_RETURN(size_t got, seg->file->ReadAt(0, hdr, sizeof(hdr)));
      Result<SegmentHeader> h = got == sizeof(hdr) ? DecodeSegmentHeader(Slice(hdr, got))
                                                   : Result<SegmentHeader>(Status::Corruption(
                                                         "segment header: truncated"));
      if (!h.ok() || h->segment_number != n) {
        // A file whose creation (or recycling) the crash cut short holds
        // nothing: it only ever gets buffers after its header is synced.
        why = h.ok() ? "segment header names segment " + std::to_string(h->segment_number)
                     : std::string(h.status().message());
        if (off != kSegmentHeaderArea) {
          return Status::Corruption(Where(n, 0) + ": " + why);
        }
        break;
      }
      checked_segment = n;
    }
    BufferHeader h;
    ASSIGN_OR_RETURN(bool valid, ReadBuffer(seg.get(), pos, &h, &records, &why));
    if (!valid) break;
    RETURN_IF_ERROR(VisitBuffer(pos, records, visitor));
    last_sequence = h.sequence;
    pos = NextBufferBase(pos, h.used, segment_size_);
  }

  if (pos < options_.stable_floor) {
    // Reported stable and recorded so by the owner: damage, never a torn
    // tail (lss_format.md, "Recovery and the torn tail").
    return Status::Corruption(WhereA(pos) + ": buffer below the recorded stable point " +
                              WhereA(options_.stable_floor) + " is invalid: " + why);
  }
  RETURN_IF_ERROR(LookAhead(pos, why));
  RETURN_IF_ERROR(CutTail(pos));
  {
    std::lock_guard<std::mutex> l(seg_mu_);
    next_to_create_ = SegmentOf(pos, segment_size_);
    if (!segments_.empty()) {
      next_to_create_ = std::max(next_to_create_, segments_.rbegin()->first + 1);
    }
  }

  // Position the writer at pos: ring slot 0 opens there.
  sequence_origin_ = last_sequence + 1;
  {
    std::lock_guard<std::mutex> l(mu_);
    next_stable_sequence_ = sequence_origin_;
    hi_stable_.store(pos);
  }
  FlushBuffer& b = ring_[0];
  b.base.store(pos);
  b.capacity.store(BufferCapacity(pos, buffer_size_, segment_size_));
  b.index = 0;
  current_.store(0, std::memory_order_release);
  b.state.store(OpenState(GenerationOf(b.state.load())), std::memory_order_release);
  recovered_.store(true);
  return Status::OK();
}

Result<bool> LogStructuredStore::Impl::ReadBuffer(Segment* seg, LssAddress pos, BufferHeader* h,
                                                std::string* records, std::string* why) const {
  const uint64_t off = OffsetInSegment(pos, segment_size_);
  char hdr[kBufferHeaderSize];
  ASSIGN_OR_RETURN(size_t got, seg->file->ReadAt(off, hdr, sizeof(hdr)));
  if (got < sizeof(hdr)) {
    *why = "end of segment file";
    return false;
  }
  Result<BufferHeader> decoded = DecodeBufferHeader(Slice(hdr, sizeof(hdr)));
  if (!decoded.ok()) {
    *why = std::string(decoded.status().message());
    return false;
  }
  *h = *decoded;
  if (h->base != pos) {
    *why = "buffer header of another address (stale data)";
    return false;
  }
  // Bounded by the segment, not by buffer_size: the store may have been
  // written with larger buffers than this Open's options allow.
  if (h->used > segment_size_ - off - kBufferHeaderSize) {
    *why = "buffer length out of range";
    return false;
  }
  records->resize(h->used);
  ASSIGN_OR_RETURN(got, seg->file->ReadAt(off + kBufferHeaderSize, records->data(), h->used));
  if (got < h->used) {
    *why = "buffer cut short";
    return false;
  }
  if (MaskedCrc(records->data(), records->size()) != h->records_crc) {
    *why = "buffer records checksum mismatch";
    return false;
  }
  return true;
}

Status LogStructuredStore::Impl::ScanSegment(uint64_t segment, const RecordVisitor& visitor) const {
  std::shared_ptr<Segment> seg = FindSegment(segment);
  if (seg == nullptr) {
    return Status::NotFound(Where(segment, 0) + ": LSS segment released or never written");
  }
  const LssAddress stable = hi_stable_.load();
  LssAddress pos = FirstBufferBase(segment, segment_size_);
  std::string records;
  std::string why;
  while (SegmentOf(pos, segment_size_) == segment && pos < stable) {
    BufferHeader h;
    ASSIGN_OR_RETURN(bool valid, ReadBuffer(seg.get(), pos, &h, &records, &why));
    if (!valid) return Status::Corruption(WhereA(pos) + ": stable buffer invalid: " + why);
    RETURN_IF_ERROR(VisitBuffer(pos, records, visitor));
    pos = NextBufferBase(pos, h.used, segment_size_);
  }
  return Status::OK();
}

Status LogStructuredStore::Impl::VisitBuffer(LssAddress base, const std::string& records,
                                             const RecordVisitor& visitor) const {
  size_t off = 0;
  while (off < records.size()) {
    const LssAddress address = base + kBufferHeaderSize + off;
    Slice payload;
    Result<RecordHeader> h = DecodeRecord(Slice(records.data() + off, records.size() - off),
                                          &payload);
    // The buffer's checksum matched, so a bad record was written bad.
    if (!h.ok()) return h.status().WithContext(WhereA(address));
    const size_t span = RecordSpan(h->length);
    if (span > records.size() - off) {
      return Status::Corruption(WhereA(address) + ": record runs past its buffer");
    }
    switch (h->type) {
      case RecordType::kVoid:
        break;
      case RecordType::kTransaction:
        RETURN_IF_ERROR(VisitTransaction(address, payload, h->count, visitor));
        break;
      default:
        RETURN_IF_ERROR(visitor(address, *h, payload, false));
        break;
    }
    off += span;
  }
  return Status::OK();
}

Status LogStructuredStore::Impl::VisitTransaction(LssAddress address, Slice payload,
                                                  uint32_t count,
                                                  const RecordVisitor& visitor) const {
  struct Inner {
    LssAddress address;
    RecordHeader header;
    Slice payload;
  };
  std::vector<Inner> inner;
  size_t off = 0;
  for (uint32_t i = 0; i < count; ++i) {
    const LssAddress a = address + kRecordHeaderSize + off;
    Slice p;
    Result<RecordHeader> h = DecodeRecord(Slice(payload.data() + off, payload.size() - off), &p);
    if (!h.ok()) return h.status().WithContext(WhereA(a) + " (in a transaction)");
    if (h->type == RecordType::kVoid || h->type == RecordType::kTransaction ||
        RecordSpan(h->length) > payload.size() - off) {
      return Status::Corruption(WhereA(a) + ": bad record in a transaction");
    }
    inner.push_back({a, *h, p});
    off += RecordSpan(h->length);
  }
  if (off != payload.size()) {
    return Status::Corruption(WhereA(address) + ": transaction of " + std::to_string(count) +
                              " records does not fill its payload");
  }
  for (const Inner& r : inner) {
    RETURN_IF_ERROR(visitor(r.address, r.header, r.payload, true));
  }
  return Status::OK();
}

Status LogStructuredStore::Impl::LookAhead(LssAddress invalid, const std::string& why) const {
  // A valid buffer past the invalid one that was sealed when Hi-Stable was
  // already beyond it proves that the invalid buffer had been reported
  // stable: that is damage, not a torn tail.
  const uint64_t first = SegmentOf(invalid, segment_size_);
  std::vector<std::pair<uint64_t, std::shared_ptr<Segment>>> later;
  {
    std::lock_guard<std::mutex> l(seg_mu_);
    for (auto it = segments_.lower_bound(first); it != segments_.end(); ++it) {
      later.emplace_back(it->first, it->second);
    }
  }
  std::string chunk;
  for (const auto& [n, seg] : later) {
    ASSIGN_OR_RETURN(uint64_t size, seg->file->Size());
    uint64_t from = n == first ? OffsetInSegment(invalid, segment_size_) + kBufferAlign
                               : kSegmentHeaderArea;
    while (from + kBufferHeaderSize <= size) {
      const uint64_t len = std::min<uint64_t>(kScanChunk, size - from);
      chunk.resize(len);
      ASSIGN_OR_RETURN(size_t got, seg->file->ReadAt(from, chunk.data(), len));
      for (uint64_t q = 0; q + kBufferHeaderSize <= got; q += kBufferAlign) {
        Result<BufferHeader> h = DecodeBufferHeader(Slice(chunk.data() + q, kBufferHeaderSize));
        const LssAddress at = n * segment_size_ + from + q;
        if (h.ok() && h->base == at && h->stable_at_seal > invalid) {
          return Status::Corruption(WhereA(invalid) + ": invalid buffer (" + why +
                                    ") that had been reported stable: the buffer at " +
                                    WhereA(at) + " was sealed when Hi-Stable was " +
                                    WhereA(h->stable_at_seal));
        }
      }
      if (got < len) break;
      from += len;
    }
  }
  return Status::OK();
}

Status LogStructuredStore::Impl::CutTail(LssAddress position) {
  const uint64_t first = SegmentOf(position, segment_size_);
  const uint64_t off = OffsetInSegment(position, segment_size_);
  std::lock_guard<std::mutex> l(seg_mu_);
  bool dir_changed = false;
  for (auto it = segments_.lower_bound(first); it != segments_.end();) {
    const uint64_t n = it->first;
    Segment* seg = it->second.get();
    if (n == first && off > kSegmentHeaderArea) {
      // Keep the segment's valid buffers; cut the rest of the file.
      ASSIGN_OR_RETURN(uint64_t size, seg->file->Size());
      if (size > off) {
        RETURN_IF_ERROR(seg->file->Truncate(off));
        RETURN_IF_ERROR(seg->file->Sync());
      }
      ++it;
      continue;
    }
    // Nothing valid in it: delete the whole file (a new one is made on use).
    RETURN_IF_ERROR(env_->DeleteFile(SegmentPath(n)));
    it = segments_.erase(it);
    dir_changed = true;
  }
  if (dir_changed) RETURN_IF_ERROR(env_->SyncDir(lss_dir_));
  return Status::OK();
}

// ------------------------------------------------------------------ facade

Result<std::unique_ptr<LogStructuredStore>> LogStructuredStore::Open(Env* env,
                                                                     const std::string& dir,
                                                                     const LssOptions& options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  RETURN_IF_ERROR(env->CreateDirs(dir));
  const std::string lss_dir = JoinPath(dir, "lss");
  const std::string id_path = JoinPath(dir, "IDENTITY");
  StoreIdentity id;
  if (env->FileExists(id_path)) {
    ASSIGN_OR_RETURN(std::string data, ReadFileToString(env, id_path));
    Result<StoreIdentity> decoded = DecodeIdentity(data);
    if (!decoded.ok()) return decoded.status().WithContext(id_path);
    id = *decoded;
    if (id.segment_size != options.segment_size) {
      return Status::InvalidArgument(id_path + ": the store's segment size is " +
                                     std::to_string(id.segment_size) + ", options say " +
                                     std::to_string(options.segment_size));
    }
    RETURN_IF_ERROR(env->CreateDir(lss_dir));
  } else {
    // Written to a temporary name and renamed, so that a crash never leaves a
    // torn IDENTITY behind.
    RETURN_IF_ERROR(env->CreateDir(lss_dir));
    id.store_id = NewStoreId(env);
    id.segment_size = options.segment_size;
    id.buffer_size = options.buffer_size;
    const std::string tmp = id_path + ".tmp";
    RETURN_IF_ERROR(WriteStringToFile(env, EncodeIdentity(id), tmp, /*sync=*/true));
    RETURN_IF_ERROR(env->RenameFile(tmp, id_path));
    RETURN_IF_ERROR(env->SyncDir(dir));
  }
  // buffer_size may differ from the IDENTITY's: buffer bases follow from the
  // buffers' own headers, never from the size limit.
  auto impl = std::make_unique<Impl>(env, dir, options, id);
  RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<LogStructuredStore>(new LogStructuredStore(std::move(impl)));
}

LogStructuredStore::LogStructuredStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LogStructuredStore::~LogStructuredStore() = default;

Status LogStructuredStore::Recover(LssAddress start, const RecordVisitor& visitor) {
  return impl_->Recover(start, visitor);
}
Result<Reservation> LogStructuredStore::Reserve(size_t bytes) { return impl_->Reserve(bytes); }
void LogStructuredStore::Commit(const Reservation& r) { impl_->Commit(r); }
void LogStructuredStore::Void(const Reservation& r) { impl_->Void(r); }
Status LogStructuredStore::MakeStable(LssAddress address) { return impl_->MakeStable(address); }
LssAddress LogStructuredStore::HiStable() const { return impl_->HiStable(); }
LssAddress LogStructuredStore::Tail() const { return impl_->Tail(); }
size_t LogStructuredStore::MaxReservation() const { return impl_->MaxReservation(); }
Result<RecordHeader> LogStructuredStore::ReadRecord(LssAddress address,
                                                    std::string* payload) const {
  return impl_->ReadRecord(address, payload);
}
Status LogStructuredStore::ScanSegment(uint64_t segment, const RecordVisitor& visitor) const {
  return impl_->ScanSegment(segment, visitor);
}
Status LogStructuredStore::ReleaseSegmentsBelow(LssAddress frontier) {
  return impl_->ReleaseSegmentsBelow(frontier);
}
uint64_t LogStructuredStore::LowestSegment() const { return impl_->LowestSegment(); }
uint64_t LogStructuredStore::TailSegment() const { return impl_->TailSegment(); }
const StoreIdentity& LogStructuredStore::identity() const { return impl_->identity(); }
const LssOptions& LogStructuredStore::options() const { return impl_->options(); }
LogStructuredStore::Stats LogStructuredStore::GetStats() const { return impl_->GetStats(); }

}  // namespace deuteron::llama
