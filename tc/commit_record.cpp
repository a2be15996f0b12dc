#include "tc/commit_record.h"

#include "common/coding.h"

namespace deuteron::tc {

void EncodeCommitRecord(std::span<const RecordOp> ops, std::string* dst) {
  dst->push_back(static_cast<char>(kCommitRecordVersion));
  PutVarint32(dst, static_cast<uint32_t>(ops.size()));
  for (const RecordOp& op : ops) {
    dst->push_back(static_cast<char>(op.kind));
    PutLengthPrefixedSlice(dst, op.key);
    if (op.kind == RecordOpKind::kUpsert) PutLengthPrefixedSlice(dst, op.value);
  }
}

Status DecodeCommitRecord(Slice payload, uint64_t first_lsn, std::vector<RecordOp>* ops) {
  ops->clear();
  if (payload.size() < 1) return Status::Corruption("commit record: empty payload");
  const auto version = static_cast<uint8_t>(payload[0]);
  if (version != kCommitRecordVersion) {
    return version > kCommitRecordVersion
               ? Status::NotSupported("commit record: newer format version")
               : Status::Corruption("commit record: bad format version");
  }
  payload.remove_prefix(1);
  uint32_t count = 0;
  if (!GetVarint32(&payload, &count)) return Status::Corruption("commit record: bad op count");
  // Every op takes at least 2 bytes: a bound before reserving.
  if (count > payload.size() / 2) return Status::Corruption("commit record: op count too large");
  ops->reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    RecordOp op;
    if (payload.empty()) return Status::Corruption("commit record: truncated op");
    const auto kind = static_cast<uint8_t>(payload[0]);
    payload.remove_prefix(1);
    if (kind != static_cast<uint8_t>(RecordOpKind::kUpsert) &&
        kind != static_cast<uint8_t>(RecordOpKind::kDelete)) {
      return Status::Corruption("commit record: unknown op kind");
    }
    op.kind = static_cast<RecordOpKind>(kind);
    if (!GetLengthPrefixedSlice(&payload, &op.key)) {
      return Status::Corruption("commit record: truncated key");
    }
    if (op.kind == RecordOpKind::kUpsert && !GetLengthPrefixedSlice(&payload, &op.value)) {
      return Status::Corruption("commit record: truncated value");
    }
    op.lsn = first_lsn + i;
    ops->push_back(op);
  }
  if (!payload.empty()) return Status::Corruption("commit record: trailing bytes");
  return Status::OK();
}

}  // namespace deuteron::tc
