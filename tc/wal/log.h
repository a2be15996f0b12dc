// Log: the TC's write-ahead log. Many committers append records at once; one
// writer at a time, the leader (a waiting committer that found nobody
// writing, as RocksDB's group leader), writes and fdatasyncs whole groups,
// publishes the ESL (every LSN below it is durable), wakes exactly the
// committers it now covers and hands the leadership on.
// Segments are pre-written files, recycled once the durable RSSP passes them.
// Format: tc/wal/log_format.md. Design and failure rules: tc/wal/wal.md.
//
// Log buffer invariants (memory orders in log.cpp):
//  1. tail_ only grows, by CAS: each Append owns the LSN range it moved it over
//     (its record, plus padding to the segment end when the record did not fit
//     in the rest of the segment). No lock is held while a committer copies.
//  2. The ring holds LSN x at ring offset x mod buffer_size. A committer
//     copies into its range only once released_ (bytes the leader has handed
//     to the file) is within one ring length of the range's end.
//  3. A committer publishes a filled range by storing its end into the slot
//     of its start (release). The leader follows slots from the end of what
//     was written: slot[x] > x means [x, slot[x]) is filled. Stale slots
//     from an earlier lap of the ring hold ends at or below x, never above.
//  4. At most one thread leads (leading_, changed only under the waiter
//     lock): a committer waiting for its record, one short of ring space,
//     the background flusher or Close. Only the leader writes, syncs,
//     switches segments or stores the ESL. It writes the filled prefix as
//     one group, syncs it, then stores the ESL and wakes exactly the
//     sleeping committers whose record ends at or below it (outside the
//     waiter lock). The ESL only grows and never passes a byte that is not
//     synced. A leader leads until the ESL covers its own record (waiting
//     out a range still being copied before it) and writes already-filled
//     groups for writer_spin_us more, then ends by handing the leadership
//     to the sleeping committer with the lowest uncovered end (woken before
//     the group), or, when none sleeps, after waking the group, by handing
//     it to one that queued meanwhile or clearing leading_; all under the
//     waiter lock, so a committer that queues behind a leader is always
//     either covered or handed the leadership.
//  5. After a failed write, sync or segment switch the log is failed: the
//     ESL stops, every waiter and every later call gets that error (IOError,
//     or NoSpace for ENOSPC); nothing is retried.
//
// Thread safety: Append, WaitDurable, Commit, Esl, DurableRssp,
// SetDurableRssp, NewReader and GetStats may be called from any threads at
// once. Close (and the destructor) must not race with Append.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/env.h"
#include "common/slice.h"
#include "common/status.h"
#include "tc/wal/log_format.h"
#include "tc/wal/log_reader.h"

namespace deuteron::wal {

struct LogOptions {
  // Bytes per segment file: a power of two, >= kMinSegmentSize. A log
  // reopened must use the size it was created with.
  uint64_t segment_size = 16ull << 20;
  // The shared log buffer: a power of two, >= 4096. A record's payload is at
  // most MaxPayload() (about a quarter of the smaller of the two).
  uint64_t buffer_size = 4ull << 20;
  // Pre-written spare segment files kept for reuse (created at Open, refilled
  // from released segments). Overwriting a pre-written file syncs faster than
  // growing one (../shared/LIMITS.md).
  int spare_segments = 2;
  // After its own record is durable, a leader keeps writing groups that are
  // already filled for up to writer_spin_us before it hands the leadership
  // on. 0 (RocksDB's hand-off after its own group) measured best: a longer
  // lead delays the leader's own next commit more than it saves hand-offs.
  // A committer that waits while another leads may poll the ESL for up to
  // committer_spin_us before it sleeps (only max_spinning_committers of them
  // at a time, and only while nobody sleeps), saving the futex wake. Off by
  // default: on the shared 2-vCPU machines the poller takes a core from the
  // leader and the committers it wakes (log_bench, 4 committers: 1.3K
  // commits/s and 240 cpu us per commit with 5000, 8-10K and 26-34 us
  // with 0; txn_bench 2-3x faster with 0).
  uint32_t writer_spin_us = 0;
  uint32_t committer_spin_us = 0;
  int max_spinning_committers = 1;
  // Records appended that nobody waits for are written by a background
  // flusher when no leader wrote for about this long (> 0).
  uint32_t flush_interval_us = 1000;
};

// The LSNs of one record: [lsn, end). It is durable once Esl() >= end.
struct LogSpan {
  Lsn lsn = kNullLsn;
  Lsn end = kNullLsn;
};

class Log {
 public:
  // Opens (creating when absent) the log in `dir` and recovers it: scans from
  // the segment holding the durable RSSP, cuts a torn tail (truncating its
  // segment there and deleting later segment files), and resumes writing at
  // the end of the valid log, which is the initial ESL. Corruption naming the
  // segment and offset when an invalid record lies before records written
  // after it was durable, or when the log ends below the durable RSSP.
  static Result<std::unique_ptr<Log>> Open(Env* env, const std::string& dir,
                                           const LogOptions& options);
  ~Log();  // Close(), ignoring its status

  // Reserves a record's span and copies `payload` into the log buffer; it is
  // not durable yet (WaitDurable). TooLarge over MaxPayload(); the log's
  // error once it has failed; ShuttingDown after Close.
  Result<LogSpan> Append(Slice payload);
  // Returns once Esl() >= end (OK), or with the log's error when it failed
  // before covering `end`. The calling thread may do the write and
  // fdatasync of a group itself (as its leader). REQUIRES: end was returned
  // by Append.
  Status WaitDurable(Lsn end);
  // Append, then WaitDurable.
  Result<LogSpan> Commit(Slice payload);

  // End of stable log: every record whose span ends at or below it is durable.
  Lsn Esl() const;
  // Where the next Append's record would start (at least).
  Lsn Tail() const;
  Lsn DurableRssp() const;
  // The store this log belongs to (wal.meta): random, made with the log; a
  // version 1 log gets one at its first open by this build.
  StoreId store_id() const;

  // Records `rssp` durably (wal.meta replaced atomically), then recycles or
  // deletes every segment wholly below it. After a restart, reading starts at
  // the durable RSSP. InvalidArgument when rssp > Esl() or below the current
  // durable RSSP. A failure leaves the previous durable RSSP in force and does
  // not stop the log.
  Status SetDurableRssp(Lsn rssp);

  // A reader of the records whose span ends after `from`, up to the ESL as
  // of this call. NotFound when `from` lies in a segment already released.
  Result<std::unique_ptr<LogReader>> NewReader(Lsn from) const;

  // Writes and syncs everything appended, stops the writer and closes the
  // files. Returns the log's error if it had failed. Idempotent.
  Status Close();

  size_t MaxPayload() const;
  const LogOptions& options() const;

  struct Stats {
    uint64_t records = 0;
    uint64_t groups = 0;         // write + fdatasync rounds of the leaders
    uint64_t bytes_written = 0;  // record and padding bytes
    uint64_t syncs = 0;          // fdatasyncs of segment files
    uint64_t committer_sleeps = 0;  // waits that went to sleep (the rest polled)
    uint64_t space_waits = 0;    // Appends that waited for ring space
    uint64_t segments_created = 0;   // new pre-written files
    uint64_t segments_recycled = 0;  // released segments kept as spares
    uint64_t segments_deleted = 0;
    uint64_t leader_handoffs = 0;  // leaderships passed to a sleeping committer
    uint64_t flusher_leads = 0;    // leaderships taken by the background flusher
  };
  Stats GetStats() const;

 private:
  class Impl;
  explicit Log(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace deuteron::wal
