// LogStructuredStore: recovery (lss.h, Recover; the design at the top of
// lss.cpp; the format: lss_format.md).
#include "common/fault_hooks.h"
#include "dc/llama/internal/lss_impl.h"

namespace deuteron::llama {

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
    // A start (a checkpoint's RSP: a Hi-Stable seen when it was taken) lies
    // in a segment held or in the one after the highest held (nothing was
    // written there yet). One further on is a damaged checkpoint: taken as
    // a torn tail, it would put the writer far past the log and leave every
    // page address below it looking like a released segment (found by
    // dc_store_fuzz: each read then retried until Busy).
    std::lock_guard<std::mutex> l(seg_mu_);
    if (!segments_.empty() && SegmentOf(start, segment_size_) > segments_.rbegin()->first + 1) {
      return Status::Corruption("LSS recovery start " + WhereA(start) +
                                " lies past the log, whose last segment is " +
                                std::to_string(segments_.rbegin()->first));
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
    DEUTERON_KILL_POINT(kDcRecoveryBuffer);
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
  // Without sync_on_write, a process that crashed may have left buffers
  // written but unsynced: read back as valid here, they are made durable
  // before anything is built over them.
  if (!options_.sync_on_write) RETURN_IF_ERROR(SyncAllSegments());
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
    hi_written_.store(pos);
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
  const LssAddress written = hi_written_.load();
  LssAddress pos = FirstBufferBase(segment, segment_size_);
  std::string records;
  std::string why;
  while (SegmentOf(pos, segment_size_) == segment && pos < written) {
    BufferHeader h;
    ASSIGN_OR_RETURN(bool valid, ReadBuffer(seg.get(), pos, &h, &records, &why));
    if (!valid) return Status::Corruption(WhereA(pos) + ": written buffer invalid: " + why);
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

}  // namespace deuteron::llama
