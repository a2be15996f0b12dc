// LogStructuredStore: LLAMA's storage layer. Appends page records to a ring
// of flush buffers, writes sealed buffers to segment files through the Env,
// reports stability as a contiguous prefix, reads records back, and recovers
// the end of the log after a crash. Format: dc/llama/lss_format.md.
//
// The flush protocol (LLAMA section 3.2.3) is split between the cache layer
// and this class: the cache Reserve()s space, installs its flush delta by CAS,
// then either copies the record into the reservation and Commit()s it, or
// Void()s it when the CAS failed. A sealed buffer is written once every
// reservation in it is committed or voided.
//
// Flush-buffer ring invariants (LLAMA section 4.2):
//  1. Each buffer's state is one 64-bit word: record bytes reserved (offset),
//     active writers (reserved, not yet committed or voided), a sealed bit, and
//     a generation that changes every time the buffer is reused. Reservation,
//     sealing and the active count change only by atomic read-modify-write on
//     that word (CAS; Commit and Void use fetch_sub, a CAS that cannot fail).
//     An idle buffer is sealed with offset 0: a buffer is never sealed empty.
//  2. A reservation succeeds only on an unsealed buffer of the expected
//     generation, so a thread that read a stale buffer never writes into a
//     later incarnation of it.
//  3. The thread that makes a buffer sealed with zero active writers starts its
//     I/O; no thread is dedicated to filling buffers.
//  4. The buffer after a sealed one starts at NextBufferBase(base, used): the
//     sealer computes it and publishes it with the ring's current index
//     (release), so a thread that sees the new index sees its base.
//  5. Hi-Written is the end of the longest prefix of buffers, in seal order,
//     whose writes have all completed (readable from the segment files);
//     buffers that complete out of order do not move it until the gap closes.
//     Hi-Stable (<= Hi-Written) is the end of that prefix as far as it is
//     also synced: with sync_on_write every buffer's write is followed by a
//     sync and the two are equal; without, MakeStable syncs what is written.
//  6. After an I/O error the store is failed: reservations, MakeStable and
//     later writes return that error and Hi-Stable stops; reopen to recover.
//
// Thread safety: Reserve, Commit, Void, MakeStable, MakeWritten, StartWrite, HiStable,
// HiWritten, Tail, ReadRecord,
// Read and GetStats are thread-safe. Recover must be called exactly once, after
// Open and before any write, by one thread. ReleaseSegmentsBelow is
// thread-safe. A thread that holds a reservation must Commit or Void it before
// it calls Reserve or MakeStable again: the ring may need that reservation's
// buffer written before it can go on (a deadlock otherwise).
// The implementation's notes (state word layout, memory orders) open lss.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/env.h"
#include "common/status.h"
#include "dc/llama/lss_format.h"

namespace deuteron::llama {

struct LssOptions {
  uint64_t segment_size = 64ull << 20;  // power of two, >= 2 * kMinBufferSpan
  uint64_t buffer_size = 4ull << 20;    // flush buffer size, <= segment_size / 2
  int buffer_count = 4;                 // buffers in the ring, >= 2
  // Threads that write sealed buffers. 0: the thread that makes a buffer
  // idle writes and syncs it itself (deterministic, for tests).
  int io_threads = 1;
  // Recycled segment files kept for reuse (renamed instead of created; writing
  // over an existing file is faster than growing one, see LIMITS.md).
  int recycle_pool = 2;
  // An address the owner once saw as HiStable() and recorded durably (the
  // DC: with each acknowledged RSSP, in dc.meta). Every buffer below it was
  // reported stable, so Recover reports a missing or invalid one as
  // Corruption instead of cutting it as a torn tail. 0: none recorded
  // (only the look-ahead below tells damage from a torn tail).
  LssAddress stable_floor = kNullAddress;
  // true: every buffer's write is followed by an fdatasync of its segment
  // file (Hi-Stable follows each write). false: buffers are written without
  // a sync, and only MakeStable syncs (one fdatasync per segment file with
  // unsynced writes, covering everything written so far), for an owner
  // whose durability needs are explicit (the DC: RSSP, checkpoint, close;
  // dc/dc.md, "When the LSS syncs"). Reads need a record written, not
  // synced (HiWritten).
  bool sync_on_write = true;
};

// Space in a flush buffer, owned by one caller until Commit or Void.
struct Reservation {
  LssAddress address = kNullAddress;  // of the first reserved byte
  char* dst = nullptr;                // where the record bytes go
  size_t size = 0;                    // bytes reserved (multiple of kRecordAlign)
  uint32_t buffer = 0;                // ring index (internal)
  uint32_t generation = 0;            // buffer incarnation (internal)
};

// Called by Recover for every valid record in log order. Records of a
// transaction are delivered one by one (in_transaction = true) after the
// whole transaction record has been verified.
using RecordVisitor = std::function<Status(LssAddress address, const RecordHeader& header,
                                           Slice payload, bool in_transaction)>;

class LogStructuredStore {
 public:
  // Opens the LSS in `dir` (creating dir, IDENTITY and dir/lss when absent).
  // StoreMismatch / NotSupported / Corruption for a foreign, newer or damaged
  // IDENTITY; InvalidArgument for bad options or options that disagree with
  // the IDENTITY's segment size.
  static Result<std::unique_ptr<LogStructuredStore>> Open(Env* env, const std::string& dir,
                                                          const LssOptions& options);
  ~LogStructuredStore();  // waits for in-flight I/O; does not seal the current buffer

  // Scans from `start` (kNullAddress: the first buffer of the lowest segment;
  // otherwise a buffer position, e.g. a value HiStable() returned, which is
  // what a checkpoint's RSP must be: InvalidArgument for an address that
  // cannot be a buffer's base),
  // calls `visitor` for each record, cuts off a torn tail (zeroing it on disk
  // and deleting segment files beyond it, synced), and positions the writer
  // after the last valid buffer. Corruption naming the segment and offset when
  // an invalid buffer is followed by one that was sealed after it was stable,
  // or lies below options.stable_floor.
  // The torn tail is cut by truncating its segment file at the first invalid
  // buffer (deleting the file when that is its first buffer) and deleting all
  // later segment files. StoreMismatch for a segment of another store.
  // Writing resumes at the first invalid position, which is also Hi-Stable.
  Status Recover(LssAddress start, const RecordVisitor& visitor);

  // REQUIRES: Recover has run; bytes is a multiple of kRecordAlign and at least
  // kRecordHeaderSize (InvalidArgument otherwise).
  // TooLarge when bytes exceeds MaxReservation() (buffer_size - 64). May wait
  // for a buffer's I/O when every buffer of the ring is sealed. The store's
  // I/O error once it has failed. A reservation that does not fit in an empty
  // buffer cut short by the end of a segment fills that buffer with a void
  // record (Stats::padding_bytes) and goes to the next segment.
  Result<Reservation> Reserve(size_t bytes);
  // The caller has written all reserved bytes (EncodeRecord) at r.dst: whole
  // records that tile the reservation exactly.
  void Commit(const Reservation& r);
  // Writes a kVoid record over the reservation (the flush's CAS failed).
  void Void(const Reservation& r);

  // Mk-Stable: returns once every byte below `address` is durable, sealing the
  // current buffer if it holds record bytes below it (an empty buffer is never
  // written; an address past Tail() makes everything reserved so far stable).
  // The store's I/O error if any.
  Status MakeStable(LssAddress address);
  // Hi-Stable: every byte below the returned address is durable. It is always
  // the base of the first buffer not yet stable.
  LssAddress HiStable() const;
  // As MakeStable, but returns once every byte below `address` is written to
  // its segment file (readable by ReadRecord), synced or not. The same as
  // MakeStable with sync_on_write.
  Status MakeWritten(LssAddress address);
  // Starts the write of the open buffer if it holds bytes below `address`
  // and the ring's next buffer is free to take over (so it never waits: not
  // for the write, nor for a full ring). False when the bytes below
  // `address` will be written only once the ring moves on by itself (or a
  // MakeWritten); true when they are written or on their way.
  bool StartWrite(LssAddress address);
  // Whether a reservation of `bytes` now could wait for the ring: the open
  // buffer is sealed (the ring is moving on), or too full for `bytes` while
  // the next buffer's write is still in flight. A hint (it may change at once).
  bool RingWouldWait(size_t bytes) const;
  // Hi-Written: every byte below the returned address is written (>= HiStable).
  LssAddress HiWritten() const;
  // Where the next reservation would start (a lower bound once it is read).
  LssAddress Tail() const;
  size_t MaxReservation() const;

  // Reads a whole record at `address` (its header and payload), verifying the
  // checksum, with one read of the segment file for a record of up to 4 KiB.
  // REQUIRES: the record lies below HiWritten(). Corruption (naming
  // segment and offset) on a bad record, NotFound for a released segment.
  Result<RecordHeader> ReadRecord(LssAddress address, std::string* payload) const;
  // Reads only the header of the record at `address` (one small read; the
  // checksum, which covers the payload, is not verified). For walks that
  // need a record's links and size, not its contents (LLAMA's live bytes).
  // REQUIRES and errors as ReadRecord.
  Result<RecordHeader> ReadRecordHeader(LssAddress address) const;

  // Visits every record of a segment that is wholly below HiWritten (for the
  // cleaner), transactions expanded as in Recover. Corruption on a damaged
  // buffer (it was written by this store, so this is never a torn tail).
  Status ScanSegment(uint64_t segment, const RecordVisitor& visitor) const;

  // Deletes (or keeps for recycling) every segment whose whole range lies below
  // `frontier`, except the segment being written. The caller guarantees that no
  // checkpoint recovery could start from still points into them.
  Status ReleaseSegmentsBelow(LssAddress frontier);
  // Lowest segment still held (for the cleaner), and the segment being written.
  uint64_t LowestSegment() const;
  uint64_t TailSegment() const;

  const StoreIdentity& identity() const;
  const LssOptions& options() const;

  struct Stats {
    uint64_t reservations = 0;
    uint64_t voids = 0;
    uint64_t void_bytes = 0;
    uint64_t record_bytes = 0;     // bytes committed in records (voids excluded)
    uint64_t written_bytes = 0;    // bytes written to segment files (headers, padding included)
    uint64_t buffers_written = 0;
    uint64_t syncs = 0;
    uint64_t reserve_waits = 0;    // reservations that waited for a buffer's I/O
    uint64_t segments_live = 0;
    uint64_t segments_released = 0;
    uint64_t live_bytes_on_disk = 0;  // segment files held, bytes
    uint64_t segments_recycled = 0;   // new segments made from recycled files
    uint64_t padding_bytes = 0;       // void records that fill a buffer cut short
  };
  Stats GetStats() const;

 private:
  class Impl;
  explicit LogStructuredStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace deuteron::llama
