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
// buffer padded to 4096 bytes with one WriteAt and, with sync_on_write, syncs
// the segment file; WriteAts to one file run concurrently, a Sync excludes
// them (the Env's rule), and a Sync covers every write completed before it
// began, so concurrent buffers share syncs. Completion, under mu_, records
// the buffer's end by sequence and moves Hi-Written (and with sync_on_write
// Hi-Stable) over the contiguous prefix (I5), then makes the slot idle.
// Without sync_on_write, MakeStable waits for Hi-Written to pass its address,
// then (one caller at a time, sync_mu_) reads Hi-Written, syncs every segment
// file with writes not yet synced and moves Hi-Stable to what it read; a
// failed sync fails the store (I6). After an error later buffers are not
// written, but their slots still become idle so that no thread waits forever.
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

#include "common/fault_hooks.h"
#include "dc/llama/internal/lss_impl.h"
#include "dc/llama/op_phases.h"

namespace deuteron::llama {

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
      ScopedPhase phase(OpPhase::kRingWait);
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
    ScopedPhase phase(OpPhase::kRingWait);
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
  DEUTERON_KILL_POINT(kDcLssBufferSealed);
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
    DEUTERON_KILL_POINT(kDcLssBufferBeforeWrite);
    Status s = (*seg)->file->WriteAt(OffsetInSegment(base, segment_size_), Slice(b.mem, len));
    if (!s.ok()) return s.WithContext(where);
    ticket = (*seg)->writes.fetch_add(1) + 1;
  }
  DEUTERON_KILL_POINT(kDcLssBufferAfterWrite);
  if (options_.sync_on_write) {
    Status s = SyncSegment(seg->get(), ticket, &syncs_);
    if (!s.ok()) return s.WithContext(where);
    DEUTERON_KILL_POINT(kDcLssAfterSync);
  }
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
    // I5: Hi-Written (and with sync_on_write Hi-Stable) moves over a
    // contiguous prefix of sequences only.
    done_out_of_order_[sequence] = end;
    while (!done_out_of_order_.empty() &&
           done_out_of_order_.begin()->first == next_stable_sequence_) {
      hi_written_.store(done_out_of_order_.begin()->second);
      if (options_.sync_on_write) hi_stable_.store(done_out_of_order_.begin()->second);
      done_out_of_order_.erase(done_out_of_order_.begin());
      ++next_stable_sequence_;
    }
  }
  ring_[slot].state.store(IdleState(generation + 1), std::memory_order_release);
  cv_.notify_all();
}

Status LogStructuredStore::Impl::MakeStable(LssAddress address) {
  ScopedPhase phase(OpPhase::kMakeStable);
  if (!recovered_.load()) return Status::InvalidArgument("LSS: MakeStable before Recover");
  if (hi_stable_.load() >= address && !failed_.load()) return Status::OK();
  RETURN_IF_ERROR(MakeWritten(address));
  if (options_.sync_on_write) return Status::OK();  // written is synced
  return SyncWritten(address);
}

Status LogStructuredStore::Impl::SyncWritten(LssAddress address) {
  std::lock_guard<std::mutex> serial(sync_mu_);
  if (failed_.load()) return FailureStatus();
  if (hi_stable_.load() >= address) return Status::OK();  // a sync that began after ours
  // Every buffer below `written` completed its write before this read, so
  // the syncs below (each covering the writes completed before it began)
  // make it durable.
  const LssAddress written = hi_written_.load();
  if (written <= hi_stable_.load()) return Status::OK();
  std::vector<std::shared_ptr<Segment>> segs;
  {
    std::lock_guard<std::mutex> l(seg_mu_);
    for (const auto& [n, seg] : segments_) segs.push_back(seg);
  }
  Status status;
  for (const std::shared_ptr<Segment>& seg : segs) {
    status = SyncSegment(seg.get(), seg->writes.load(), &syncs_);
    if (!status.ok()) break;
  }
  if (status.ok()) DEUTERON_KILL_POINT(kDcLssAfterSync);
  std::lock_guard<std::mutex> l(mu_);
  if (!status.ok()) {
    // What was written may not be on disk: the store is failed (I6).
    if (!failed_.load()) {
      failure_ = status.WithContext("LSS sync");
      failed_.store(true);
    }
    cv_.notify_all();
    return failure_;
  }
  if (written > hi_stable_.load()) hi_stable_.store(written);
  cv_.notify_all();
  return Status::OK();
}

Status LogStructuredStore::Impl::SyncAllSegments() {
  std::vector<std::shared_ptr<Segment>> segs;
  {
    std::lock_guard<std::mutex> l(seg_mu_);
    for (const auto& [n, seg] : segments_) segs.push_back(seg);
  }
  for (const std::shared_ptr<Segment>& seg : segs) {
    std::unique_lock<std::shared_mutex> l(seg->io_mu);
    RETURN_IF_ERROR(seg->file->Sync());
    seg->synced = seg->writes.load();
    syncs_.fetch_add(1, std::memory_order_relaxed);
  }
  return Status::OK();
}

Status LogStructuredStore::Impl::MakeWritten(LssAddress address) {
  ScopedPhase phase(OpPhase::kMakeWritten);
  if (!recovered_.load()) return Status::InvalidArgument("LSS: MakeWritten before Recover");
  for (;;) {
    if (failed_.load()) return FailureStatus();
    if (hi_written_.load() >= address) return Status::OK();
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
               hi_written_.load() >= address;
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
    cv_.wait(l, [&] { return failed_.load() || hi_written_.load() >= target; });
    if (failed_.load()) return failure_;
    return Status::OK();
  }
}

bool LogStructuredStore::Impl::RingWouldWait(size_t bytes) const {
  if (!recovered_.load()) return false;
  const uint64_t k = current_.load(std::memory_order_acquire);
  const FlushBuffer& b = ring_[k % count_];
  const uint64_t s = b.state.load(std::memory_order_acquire);
  if (IsSealed(s)) return true;
  if (OffsetOf(s) + bytes <= b.capacity.load()) return false;
  return !IsIdle(ring_[(k + 1) % count_].state.load(std::memory_order_acquire));
}

bool LogStructuredStore::Impl::StartWrite(LssAddress address) {
  if (!recovered_.load() || failed_.load()) return false;
  if (hi_written_.load() >= address) return true;
  const uint64_t k = current_.load(std::memory_order_acquire);
  const uint32_t slot = static_cast<uint32_t>(k % count_);
  FlushBuffer& b = ring_[slot];
  uint64_t s = b.state.load(std::memory_order_acquire);
  if (IsSealed(s)) return true;  // the ring is moving on: its write is started
  const LssAddress base = b.base.load();
  if (b.state.load(std::memory_order_acquire) != s) return false;  // base may be stale
  if (OffsetOf(s) == 0 || base + kBufferHeaderSize >= address) return true;  // all sealed
  // Sealing waits for the next slot to be idle (AfterSeal): leave it to the
  // ring while that slot's write is still in flight.
  const FlushBuffer& nb = ring_[static_cast<uint32_t>((k + 1) % count_)];
  if (!IsIdle(nb.state.load(std::memory_order_acquire))) return false;
  const uint64_t sealed = (s | kSealedBit) + kActiveOne;
  if (!b.state.compare_exchange_strong(s, sealed, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
    return false;  // a reservation or a seal got in first; the caller looks again later
  }
  AfterSeal(slot, sealed, /*from_reserve=*/false);
  return true;
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
  if (std::shared_ptr<Segment> seg = FindSegment(n)) return seg;
  // Created outside seg_mu_: a new segment's header write and two syncs take
  // milliseconds, and every record read looks its segment up under seg_mu_
  // (issue 34: page loads of 22 ms behind a segment's creation, on a quiet
  // machine). create_mu_ keeps creations one at a time and in order.
  std::lock_guard<std::mutex> c(create_mu_);
  if (std::shared_ptr<Segment> seg = FindSegment(n)) return seg;
  // Segment files are created in order, even when buffers complete out of
  // order, so that a segment file never exists without the ones before it:
  // the lowest file is always where the log (or its unreleased part) begins.
  assert(n >= next_to_create_);
  std::shared_ptr<Segment> created;
  for (uint64_t m = next_to_create_; m <= n; ++m) {
    if (m < n && FindSegment(m) != nullptr) continue;
    ASSIGN_OR_RETURN(created, CreateSegment(m));
    std::lock_guard<std::mutex> l(seg_mu_);
    segments_[m] = created;
  }
  next_to_create_ = std::max(next_to_create_, n + 1);
  return created;
}

Result<std::shared_ptr<LogStructuredStore::Impl::Segment>>
LogStructuredStore::Impl::CreateSegment(uint64_t n) {
  const std::string path = SegmentPath(n);
  auto seg = std::make_shared<Segment>();
  std::string recycled;
  {
    std::lock_guard<std::mutex> l(seg_mu_);
    if (!recycle_pool_.empty()) {
      recycled = recycle_pool_.back();
      recycle_pool_.pop_back();
    }
  }
  if (!recycled.empty()) {
    // Writing over an existing file is faster than growing one (LIMITS.md).
    // Its old buffers carry their old addresses, so none is valid here.
    RETURN_IF_ERROR(env_->RenameFile(recycled, path));
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
  return seg;
}

Result<RecordHeader> LogStructuredStore::Impl::ReadRecord(LssAddress address,
                                                          std::string* payload) const {
  const uint64_t n = SegmentOf(address, segment_size_);
  const uint64_t offset = OffsetInSegment(address, segment_size_);
  // Named only on an error (a page load reads records by the thousand).
  auto where = [&] { return Where(n, offset); };
  std::shared_ptr<Segment> seg = FindSegment(n);
  if (seg == nullptr) {
    return Status::NotFound(where() + ": LSS segment released or never written");
  }
  // One read for the header and, for a record of up to kReadAhead bytes, its
  // payload; a second only for the rest of a bigger one.
  constexpr uint64_t kReadAhead = 4096;
  const uint64_t want = std::min<uint64_t>(kReadAhead, segment_size_ - offset);
  payload->resize(want);
  Result<size_t> got = seg->file->ReadAt(offset, payload->data(), want);
  if (!got.ok()) return got.status().WithContext(where());
  if (*got < kRecordHeaderSize) {
    // Cut short: let ReadExactAt name the error as for any short read.
    Status s = seg->file->ReadExactAt(offset, payload->data(), kRecordHeaderSize);
    if (!s.ok()) return s.WithContext(where());
    got = kRecordHeaderSize;
  }
  const uint32_t length = DecodeFixed32(payload->data() + 8);
  if (offset + kRecordHeaderSize + length > segment_size_) {
    return Status::Corruption(where() + ": record: payload of " + std::to_string(length) +
                              " bytes runs past the segment");
  }
  const size_t total = kRecordHeaderSize + length;
  if (total > *got) {
    payload->resize(total);
    Status s = seg->file->ReadExactAt(offset + *got, payload->data() + *got, total - *got);
    if (!s.ok()) return s.WithContext(where());
  } else {
    payload->resize(total);
  }
  Slice p;
  Result<RecordHeader> h = DecodeRecord(Slice(*payload), &p);
  if (!h.ok()) return h.status().WithContext(where());
  payload->erase(0, kRecordHeaderSize);
  return h;
}

Result<RecordHeader> LogStructuredStore::Impl::ReadRecordHeader(LssAddress address) const {
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
  Result<RecordHeader> h = DecodeRecordHeader(Slice(hdr, sizeof(hdr)));
  if (!h.ok()) return h.status().WithContext(where);
  if (offset + kRecordHeaderSize + h->length > segment_size_) {
    return Status::Corruption(where + ": record: payload of " + std::to_string(h->length) +
                              " bytes runs past the segment");
  }
  return h;
}

Status LogStructuredStore::Impl::ReleaseSegmentsBelow(LssAddress frontier) {
  if (!recovered_.load()) return Status::InvalidArgument("LSS: release before Recover");
  // Never the segment being written, nor one a buffer not yet stable is in.
  const uint64_t limit =
      std::min(TailSegment(), SegmentOf(hi_stable_.load(), segment_size_));
  bool changed = false;
  {
    std::lock_guard<std::mutex> l(seg_mu_);
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
  }
  // After seg_mu_ is let go: record reads look their segments up under it.
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
Status LogStructuredStore::MakeWritten(LssAddress address) { return impl_->MakeWritten(address); }
bool LogStructuredStore::StartWrite(LssAddress address) { return impl_->StartWrite(address); }
bool LogStructuredStore::RingWouldWait(size_t bytes) const { return impl_->RingWouldWait(bytes); }
LssAddress LogStructuredStore::HiStable() const { return impl_->HiStable(); }
LssAddress LogStructuredStore::HiWritten() const { return impl_->HiWritten(); }
LssAddress LogStructuredStore::Tail() const { return impl_->Tail(); }
size_t LogStructuredStore::MaxReservation() const { return impl_->MaxReservation(); }
Result<RecordHeader> LogStructuredStore::ReadRecord(LssAddress address,
                                                    std::string* payload) const {
  return impl_->ReadRecord(address, payload);
}
Result<RecordHeader> LogStructuredStore::ReadRecordHeader(LssAddress address) const {
  return impl_->ReadRecordHeader(address);
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
