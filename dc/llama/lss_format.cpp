#include "dc/llama/lss_format.h"

#include <cinttypes>
#include <algorithm>
#include <cassert>
#include <cstdio>
#include <cstring>

#include "common/coding.h"
#include "common/crc32c.h"

namespace deuteron::llama {
namespace {

uint32_t MaskedCrc(const char* data, size_t n) { return crc32c::Mask(crc32c::Value(data, n)); }

// Fixed-size blocks ending in a masked CRC of everything before it.
void SealBlock(std::string* block) {
  PutFixed32(block, MaskedCrc(block->data(), block->size()));
}

Status CheckBlock(Slice data, size_t size, const char* what) {
  if (data.size() < size) {
    return Status::Corruption(std::string(what) + ": truncated");
  }
  const uint32_t stored = DecodeFixed32(data.data() + size - 4);
  if (stored != MaskedCrc(data.data(), size - 4)) {
    return Status::Corruption(std::string(what) + ": checksum mismatch");
  }
  return Status::OK();
}

}  // namespace

bool IsValidRecordType(uint8_t t) {
  return t >= static_cast<uint8_t>(RecordType::kBase) &&
         t <= static_cast<uint8_t>(RecordType::kTransaction);
}

std::string EncodeIdentity(const StoreIdentity& id) {
  std::string out;
  PutFixed64(&out, kIdentityMagic);
  PutFixed32(&out, id.format_version);
  PutFixed32(&out, 0);
  PutFixed64(&out, id.store_id);
  PutFixed64(&out, id.segment_size);
  PutFixed64(&out, id.buffer_size);
  out.append(kIdentitySize - 4 - out.size(), '\0');
  SealBlock(&out);
  return out;
}

Result<StoreIdentity> DecodeIdentity(Slice data) {
  if (data.size() >= 8 && DecodeFixed64(data.data()) != kIdentityMagic) {
    return Status::StoreMismatch("IDENTITY is not a Deuteron LLAMA store identity");
  }
  RETURN_IF_ERROR(CheckBlock(data, kIdentitySize, "IDENTITY"));
  StoreIdentity id;
  id.format_version = DecodeFixed32(data.data() + 8);
  if (id.format_version > kFormatVersion) {
    return Status::NotSupported("store format version " + std::to_string(id.format_version) +
                                " is newer than this build's " + std::to_string(kFormatVersion));
  }
  id.store_id = DecodeFixed64(data.data() + 16);
  id.segment_size = DecodeFixed64(data.data() + 24);
  id.buffer_size = DecodeFixed64(data.data() + 32);
  return id;
}

std::string EncodeSegmentHeader(const SegmentHeader& h) {
  std::string out;
  PutFixed64(&out, kSegmentMagic);
  PutFixed32(&out, h.format_version);
  PutFixed32(&out, 0);
  PutFixed64(&out, h.store_id);
  PutFixed64(&out, h.segment_number);
  PutFixed64(&out, h.segment_size);
  out.append(kSegmentHeaderSize - 4 - out.size(), '\0');
  SealBlock(&out);
  return out;
}

Result<SegmentHeader> DecodeSegmentHeader(Slice data) {
  if (data.size() < 8 || DecodeFixed64(data.data()) != kSegmentMagic) {
    return Status::Corruption("segment header: bad magic");
  }
  RETURN_IF_ERROR(CheckBlock(data, kSegmentHeaderSize, "segment header"));
  SegmentHeader h;
  h.format_version = DecodeFixed32(data.data() + 8);
  if (h.format_version > kFormatVersion) {
    return Status::NotSupported("segment format version " + std::to_string(h.format_version));
  }
  h.store_id = DecodeFixed64(data.data() + 16);
  h.segment_number = DecodeFixed64(data.data() + 24);
  h.segment_size = DecodeFixed64(data.data() + 32);
  return h;
}

void EncodeBufferHeader(const BufferHeader& h, char* dst) {
  std::memset(dst, 0, kBufferHeaderSize);
  EncodeFixed32(dst, kBufferMagic);
  EncodeFixed64(dst + 8, h.base);
  EncodeFixed64(dst + 16, h.used);
  EncodeFixed64(dst + 24, h.sequence);
  EncodeFixed64(dst + 32, h.stable_at_seal);
  EncodeFixed32(dst + 40, h.records_crc);
  EncodeFixed32(dst + 4, MaskedCrc(dst + 8, kBufferHeaderSize - 8));
}

Result<BufferHeader> DecodeBufferHeader(Slice data) {
  if (data.size() < kBufferHeaderSize) return Status::Corruption("buffer header: truncated");
  const char* p = data.data();
  if (DecodeFixed32(p) != kBufferMagic) return Status::Corruption("buffer header: bad magic");
  if (DecodeFixed32(p + 4) != MaskedCrc(p + 8, kBufferHeaderSize - 8)) {
    return Status::Corruption("buffer header: checksum mismatch");
  }
  BufferHeader h;
  h.base = DecodeFixed64(p + 8);
  h.used = DecodeFixed64(p + 16);
  h.sequence = DecodeFixed64(p + 24);
  h.stable_at_seal = DecodeFixed64(p + 32);
  h.records_crc = DecodeFixed32(p + 40);
  return h;
}

void EncodeRecord(const RecordHeader& h, Slice payload, char* dst) {
  assert(h.length == payload.size());
  const size_t span = RecordSpan(payload.size());
  std::memset(dst, 0, kRecordHeaderSize);
  dst[4] = static_cast<char>(h.type);
  EncodeFixed32(dst + 8, h.length);
  EncodeFixed32(dst + 12, h.count);
  EncodeFixed64(dst + 16, h.pid);
  EncodeFixed64(dst + 24, h.prev);
  EncodeFixed64(dst + 32, h.annotation);
  EncodeFixed64(dst + 40, h.bound);
  if (!payload.empty() && payload.data() != dst + kRecordHeaderSize) {
    std::memmove(dst + kRecordHeaderSize, payload.data(), payload.size());
  }
  std::memset(dst + kRecordHeaderSize + payload.size(), 0,
              span - kRecordHeaderSize - payload.size());
  uint32_t crc = crc32c::Value(dst + 4, kRecordHeaderSize - 4);
  crc = crc32c::Extend(crc, dst + kRecordHeaderSize, payload.size());
  EncodeFixed32(dst, crc32c::Mask(crc));
}

Result<RecordHeader> DecodeRecordHeader(Slice header) {
  if (header.size() < kRecordHeaderSize) return Status::Corruption("record: truncated header");
  const char* p = header.data();
  const auto type = static_cast<uint8_t>(p[4]);
  if (!IsValidRecordType(type)) {
    return Status::Corruption("record: unknown type " + std::to_string(type));
  }
  RecordHeader h;
  h.type = static_cast<RecordType>(type);
  h.length = DecodeFixed32(p + 8);
  h.count = DecodeFixed32(p + 12);
  h.pid = DecodeFixed64(p + 16);
  h.prev = DecodeFixed64(p + 24);
  h.annotation = DecodeFixed64(p + 32);
  h.bound = DecodeFixed64(p + 40);
  return h;
}

Result<RecordHeader> DecodeRecord(Slice data, Slice* payload) {
  ASSIGN_OR_RETURN(RecordHeader h, DecodeRecordHeader(data));
  const char* p = data.data();
  if (data.size() - kRecordHeaderSize < h.length) {
    return Status::Corruption("record: payload of " + std::to_string(h.length) +
                              " bytes runs past its buffer");
  }
  uint32_t crc = crc32c::Value(p + 4, kRecordHeaderSize - 4);
  crc = crc32c::Extend(crc, p + kRecordHeaderSize, h.length);
  if (crc32c::Mask(crc) != DecodeFixed32(p)) return Status::Corruption("record: checksum mismatch");
  *payload = Slice(p + kRecordHeaderSize, h.length);
  return h;
}

LssAddress BufferBaseAtOrAfter(LssAddress a, uint64_t segment_size) {
  // `a` is at most the end of a segment, which belongs to the segment before.
  const uint64_t segment = SegmentOf(a == 0 ? 0 : a - 1, segment_size);
  LssAddress next = (a + kBufferAlign - 1) & ~(kBufferAlign - 1);
  if (next < FirstBufferBase(segment, segment_size)) next = FirstBufferBase(segment, segment_size);
  const LssAddress segment_end = (segment + 1) * segment_size;
  if (next + kMinBufferSpan > segment_end) next = FirstBufferBase(segment + 1, segment_size);
  return next;
}

LssAddress NextBufferBase(LssAddress base, uint64_t used, uint64_t segment_size) {
  return BufferBaseAtOrAfter(base + kBufferHeaderSize + used, segment_size);
}

uint64_t BufferCapacity(LssAddress base, uint64_t buffer_size, uint64_t segment_size) {
  const LssAddress segment_end = (SegmentOf(base, segment_size) + 1) * segment_size;
  const uint64_t span = std::min<uint64_t>(buffer_size, segment_end - base);
  return span - kBufferHeaderSize;
}

std::string SegmentFileName(uint64_t segment) {
  char name[32];
  std::snprintf(name, sizeof(name), "%016" PRIx64 ".seg", segment);
  return name;
}

bool ParseSegmentFileName(const std::string& name, uint64_t* segment) {
  if (name.size() != 20 || name.compare(16, 4, ".seg") != 0) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < 16; ++i) {
    const char c = name[i];
    uint64_t d;
    if (c >= '0' && c <= '9') {
      d = static_cast<uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      d = static_cast<uint64_t>(c - 'a' + 10);
    } else {
      return false;
    }
    v = (v << 4) | d;
  }
  *segment = v;
  return true;
}

}  // namespace deuteron::llama
