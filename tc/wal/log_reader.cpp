#include "tc/wal/log_reader.h"

#include <algorithm>
#include <utility>

namespace deuteron::wal {

Result<std::string> ReadSegment(Env* env, const std::string& dir, uint64_t segment,
                                uint64_t max_bytes) {
  ASSIGN_OR_RETURN(std::unique_ptr<File> f,
                   env->OpenFile(JoinPath(dir, SegmentFileName(segment)), OpenMode::kRead));
  ASSIGN_OR_RETURN(uint64_t size, f->Size());
  std::string buf(std::min(size, max_bytes), '\0');
  ASSIGN_OR_RETURN(size_t got, f->ReadAt(0, buf.data(), buf.size()));
  buf.resize(got);
  RETURN_IF_ERROR(f->Close());
  return buf;
}

LogReader::LogReader(Env* env, std::string dir, uint64_t segment_size, Lsn from, Lsn limit)
    : env_(env), dir_(std::move(dir)), segment_size_(segment_size), from_(from), limit_(limit),
      pos_(SegmentStart(SegmentOf(from, segment_size), segment_size)) {}

Status LogReader::Load(uint64_t segment) {
  const Lsn base = SegmentStart(segment, segment_size_);
  const uint64_t want = limit_ == kNoLimit ? segment_size_ : std::min(segment_size_, limit_ - base);
  Result<std::string> r = ReadSegment(env_, dir_, segment, want);
  loaded_ = segment;
  missing_ = false;
  buf_.clear();
  if (r.ok()) {
    buf_ = std::move(r).value();
  } else if (r.status().IsNotFound()) {
    missing_ = true;
  } else {
    return r.status();
  }
  return Status::OK();
}

Result<bool> LogReader::Next(LogRecord* record) {
  const bool bounded = limit_ != kNoLimit;
  while (pos_ < limit_) {
    const uint64_t segment = SegmentOf(pos_, segment_size_);
    const uint64_t offset = pos_ % segment_size_;
    if (segment_size_ - offset < kRecordHeaderSize) {  // implicit padding
      pos_ = SegmentStart(segment + 1, segment_size_);
      continue;
    }
    if (loaded_ != segment) RETURN_IF_ERROR(Load(segment));
    if (missing_) {
      if (!bounded) return false;
      return Status::Corruption("log segment file missing below the durable end, at " +
                                DescribePosition(pos_, segment_size_) + " in " + dir_);
    }
    const size_t avail = buf_.size() > offset ? buf_.size() - offset : 0;
    RecordHeader h;
    const char* why = "";
    const Parsed parsed = ParseRecord(buf_.data() + std::min<size_t>(offset, buf_.size()), avail,
                                      pos_, segment_size_, &h, &why);
    if (parsed == Parsed::kInvalid) {
      if (!bounded) return false;
      return Status::Corruption(std::string("bad log record (") + why + ") at " +
                                DescribePosition(pos_, segment_size_) + " in " + dir_);
    }
    if (parsed == Parsed::kPadding) {
      pos_ = SegmentStart(segment + 1, segment_size_);
      continue;
    }
    const Lsn end = pos_ + RecordSpan(h.length);
    if (bounded && end > limit_) {
      return Status::Corruption("log record at " + DescribePosition(pos_, segment_size_) +
                                " ends past the durable end " + std::to_string(limit_));
    }
    record->lsn = pos_;
    record->end = end;
    record->esl_seen = h.esl_seen;
    record->payload = Slice(buf_.data() + offset + kRecordHeaderSize, h.length);
    pos_ = end;
    if (end > from_) return true;
  }
  return false;
}

}  // namespace deuteron::wal
