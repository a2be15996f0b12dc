// Commit records: the payload of the one log record a committing transaction
// appends (format: tc/commit_record.md). Operation i of a record whose span
// starts at LSN s gets LSN s + i.
//
// Thread safety: pure functions over values; safe from any thread.
#pragma once

#include <string>
#include <vector>

#include "common/slice.h"
#include "common/status.h"
#include "protocol/data_component.h"

namespace deuteron::tc {

inline constexpr uint8_t kCommitRecordVersion = 1;

// Appends the encoding of `ops` (their lsn fields are ignored) to *dst.
void EncodeCommitRecord(std::span<const RecordOp> ops, std::string* dst);

// Decodes `payload` into *ops (cleared first); keys and values borrow from
// `payload`. Operation i gets lsn `first_lsn + i`. Corruption for a malformed
// payload, NotSupported for a newer version.
Status DecodeCommitRecord(Slice payload, uint64_t first_lsn, std::vector<RecordOp>* ops);

}  // namespace deuteron::tc
