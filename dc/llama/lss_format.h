// LSS on-disk format, version 1: constants, header layouts and their
// encoders/decoders. The prose is in dc/llama/lss_format.md; keep both in step.
//
// Thread safety: pure functions and constants.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/slice.h"
#include "common/status.h"

namespace deuteron::llama {

using LssAddress = uint64_t;       // virtual offset into the endless log; 0 = none
constexpr LssAddress kNullAddress = 0;
using PageId = uint64_t;           // PID: index into the mapping table; 0 is never used

constexpr uint32_t kFormatVersion = 1;
constexpr uint64_t kIdentityMagic = 0x414D4C4C4E525444ull;  // "DTRNLLMA" little-endian
constexpr uint64_t kSegmentMagic = 0x4745534C4E525444ull;   // "DTRNLSEG"
constexpr uint32_t kBufferMagic = 0x4253534Cu;              // "LSSB"

constexpr size_t kIdentitySize = 64;
constexpr size_t kSegmentHeaderSize = 64;      // bytes used in the header area
constexpr size_t kSegmentHeaderArea = 4096;    // data starts here in every segment
constexpr size_t kBufferHeaderSize = 64;
constexpr size_t kRecordHeaderSize = 48;
constexpr size_t kBufferAlign = 4096;          // buffer bases are multiples of this
constexpr size_t kRecordAlign = 8;
// A buffer is only started where at least this much of the segment is left.
constexpr size_t kMinBufferSpan = 64 * 1024;

enum class RecordType : uint8_t {
  kBase = 1,
  kDelta = 2,
  kVoid = 3,
  kAllocate = 4,
  kFree = 5,
  kTransaction = 6,
};
bool IsValidRecordType(uint8_t t);

// What IDENTITY holds.
struct StoreIdentity {
  uint32_t format_version = kFormatVersion;
  uint64_t store_id = 0;
  uint64_t segment_size = 0;
  uint64_t buffer_size = 0;
};
std::string EncodeIdentity(const StoreIdentity& id);
// StoreMismatch for another magic, NotSupported for a newer version,
// Corruption for a bad checksum or short input.
Result<StoreIdentity> DecodeIdentity(Slice data);

struct SegmentHeader {
  uint32_t format_version = kFormatVersion;
  uint64_t store_id = 0;
  uint64_t segment_number = 0;
  uint64_t segment_size = 0;
};
std::string EncodeSegmentHeader(const SegmentHeader& h);  // kSegmentHeaderSize bytes
Result<SegmentHeader> DecodeSegmentHeader(Slice data);

struct BufferHeader {
  LssAddress base = 0;
  uint64_t used = 0;               // record bytes after the header
  uint64_t sequence = 0;           // seal order, from 1
  LssAddress stable_at_seal = 0;   // Hi-Stable when sealed
  uint32_t records_crc = 0;        // masked CRC32C of the record bytes
};
// Writes kBufferHeaderSize bytes at dst.
void EncodeBufferHeader(const BufferHeader& h, char* dst);
// Corruption when the magic or header checksum is wrong (records_crc is
// checked by the caller, who has the records).
Result<BufferHeader> DecodeBufferHeader(Slice data);

struct RecordHeader {
  RecordType type = RecordType::kVoid;
  uint32_t length = 0;             // payload bytes
  uint32_t count = 0;
  PageId pid = 0;
  LssAddress prev = kNullAddress;
  uint64_t annotation = 0;
  uint64_t bound = 0;              // the flush's tag bound (page records)
};
// Bytes a record with `payload` bytes occupies, padding included.
constexpr size_t RecordSpan(size_t payload) {
  return (kRecordHeaderSize + payload + kRecordAlign - 1) & ~(kRecordAlign - 1);
}
// Writes the header and payload at dst (RecordSpan(payload.size()) bytes,
// padding zeroed) and fills in the checksum. REQUIRES: h.length == payload.size().
void EncodeRecord(const RecordHeader& h, Slice payload, char* dst);
// Decodes the record at the front of `data`; checks type and checksum.
// On success *payload points into data.
Result<RecordHeader> DecodeRecord(Slice data, Slice* payload);
// Decodes a record's header alone (kRecordHeaderSize bytes): its type is
// checked, its checksum, which covers the payload, is not.
Result<RecordHeader> DecodeRecordHeader(Slice header);

// Segment arithmetic. REQUIRES: segment_size is a power of two >= 2 * kMinBufferSpan.
constexpr uint64_t SegmentOf(LssAddress a, uint64_t segment_size) { return a / segment_size; }
constexpr uint64_t OffsetInSegment(LssAddress a, uint64_t segment_size) {
  return a & (segment_size - 1);
}
constexpr LssAddress FirstBufferBase(uint64_t segment, uint64_t segment_size) {
  return segment * segment_size + kSegmentHeaderArea;
}
// The first buffer base at or after `a` (a buffer end, or a buffer base).
LssAddress BufferBaseAtOrAfter(LssAddress a, uint64_t segment_size);
// Where the buffer after one at `base` holding `used` record bytes starts.
LssAddress NextBufferBase(LssAddress base, uint64_t used, uint64_t segment_size);
// Most record bytes a buffer at `base` may hold, given the buffer size limit.
uint64_t BufferCapacity(LssAddress base, uint64_t buffer_size, uint64_t segment_size);

std::string SegmentFileName(uint64_t segment);   // "<16 hex>.seg"
// Parses a segment file name; false if it is not one.
bool ParseSegmentFileName(const std::string& name, uint64_t* segment);

}  // namespace deuteron::llama
