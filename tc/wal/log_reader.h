// LogReader: scans the write-ahead log forward from an LSN, verifying every
// record (tc/wal/log_format.md).
//
// Two modes. Bounded (limit = an ESL the caller knows was durable): every byte
// below the limit was reported durable, so an invalid record or a missing
// segment below it is Corruption naming the segment and offset, never skipped.
// Unbounded (limit = kNoLimit, recovery only): the scan stops at the first
// position that does not hold a valid record; position() is then the end of
// the valid log, which the caller must judge (tail or corruption) itself.
//
// Thread safety: a LogReader is used by one thread. It reads segment files
// through the Env while the log may be writing above `limit`; the caller keeps
// the segments it reads from being released (Log::SetDurableRssp) meanwhile.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "common/env.h"
#include "common/slice.h"
#include "common/status.h"
#include "tc/wal/log_format.h"

namespace deuteron::wal {

// One record: it spans the LSNs [lsn, end). The transactions layer gives each
// operation of a commit its own LSN inside that span.
struct LogRecord {
  Lsn lsn = kNullLsn;
  Lsn end = kNullLsn;
  Lsn esl_seen = kNullLsn;
  Slice payload;  // valid until the next call of Next
};

// The bytes of segment `segment` in `dir`, at most `max_bytes` of them
// (fewer when the file is shorter); NotFound when the file does not exist.
Result<std::string> ReadSegment(Env* env, const std::string& dir, uint64_t segment,
                                uint64_t max_bytes);

class LogReader {
 public:
  static constexpr Lsn kNoLimit = std::numeric_limits<Lsn>::max();

  // Reads records whose span ends after `from` (the first one returned is the
  // one holding `from`, or the next), below `limit`.
  // REQUIRES: from <= limit; segment_size as the log was written with.
  LogReader(Env* env, std::string dir, uint64_t segment_size, Lsn from, Lsn limit);

  // True with the next record; false at the limit (bounded) or at the end of
  // the valid log (unbounded). Corruption in bounded mode as above.
  Result<bool> Next(LogRecord* record);

  // Where the next record would start; after an unbounded scan ended, the end
  // of the valid log.
  Lsn position() const { return pos_; }

 private:
  Status Load(uint64_t segment);

  Env* const env_;
  const std::string dir_;
  const uint64_t segment_size_;
  const Lsn from_;
  const Lsn limit_;
  Lsn pos_;
  uint64_t loaded_ = 0;   // segment held in buf_, 0: none
  bool missing_ = false;  // the loaded segment's file does not exist
  std::string buf_;
};

}  // namespace deuteron::wal
