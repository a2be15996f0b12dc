// The write-ahead log's on-disk format: constants, the record header, segment
// and side-file names, and the one function that decides whether the bytes at
// a log position are a valid record. Prose: tc/wal/log_format.md.
//
// Thread safety: every function is pure and may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/slice.h"
#include "common/status.h"
#include "common/store_id.h"

namespace deuteron::wal {

// A position in the log: a byte address in an endless, virtual log. Segment n
// holds the LSNs [n * S, (n + 1) * S) (S: the segment size), at file offset
// lsn mod S of segment n's file. LSNs only grow; 0 is "none".
using Lsn = uint64_t;
inline constexpr Lsn kNullLsn = 0;

// The first segment is 1, so that no record and no operation has LSN 0.
inline constexpr uint64_t kFirstSegment = 1;

inline constexpr size_t kRecordHeaderSize = 32;
inline constexpr size_t kRecordAlign = 8;
inline constexpr uint64_t kMinSegmentSize = 4096;

enum class RecordType : uint8_t {
  kData = 1,     // a caller's payload
  kPadding = 2,  // fills the rest of a segment that the next record did not fit in
};

// The decoded fixed header of a record. Layout (little-endian):
//   0 header_crc u32   masked CRC32C of bytes 4..32
//   4 payload_crc u32  masked CRC32C of the payload (0 for padding)
//   8 lsn u64          the record's own position: a record left in a recycled
//                      segment file names another position and never matches
//  16 length u32       payload bytes
//  20 type u8, flags u8 (0), reserved u16 (0)
//  24 esl_seen u64     the ESL when the record was reserved: everything below
//                      it was durable before this record was written
struct RecordHeader {
  Lsn lsn = kNullLsn;
  uint32_t length = 0;
  RecordType type = RecordType::kData;
  Lsn esl_seen = kNullLsn;
};

// Bytes of log a record with `payload` bytes occupies (header, payload, zero
// padding to kRecordAlign).
inline constexpr uint64_t RecordSpan(uint64_t payload) {
  return (kRecordHeaderSize + payload + kRecordAlign - 1) / kRecordAlign * kRecordAlign;
}

inline constexpr uint64_t SegmentOf(Lsn lsn, uint64_t segment_size) { return lsn / segment_size; }
inline constexpr Lsn SegmentStart(uint64_t segment, uint64_t segment_size) {
  return segment * segment_size;
}

// Writes the kRecordHeaderSize header bytes at dst.
void EncodeRecordHeader(char* dst, const RecordHeader& h, uint32_t payload_crc);

// The masked CRC stored for a data record's payload.
uint32_t PayloadCrc(Slice payload);

// What lies at log position `lsn`, given the bytes from there to the end of
// its segment that are on hand (`avail` of them at `data`, possibly fewer than
// the segment holds). kInvalid is anything that is not exactly a record
// written at `lsn`: bad checksum, another position, truncated, zeros.
enum class Parsed { kData, kPadding, kInvalid };
// REQUIRES: lsn is kRecordAlign-aligned. `why` (if not null) gets a static
// reason on kInvalid.
Parsed ParseRecord(const char* data, size_t avail, Lsn lsn, uint64_t segment_size,
                   RecordHeader* header, const char** why);

// "<16 hex digits>.wal" for a segment; spare (recycled, pre-written) files are
// "spare-<16 hex digits>.wal".
std::string SegmentFileName(uint64_t segment);
std::string SpareFileName(uint64_t id);
bool ParseSegmentFileName(const std::string& name, uint64_t* segment);
bool ParseSpareFileName(const std::string& name, uint64_t* id);

// The side file that holds the log's segment size, its durable RSSP and the
// store id, replaced atomically (written to kMetaTempFileName, synced,
// renamed). Version 2 (written; log_format.md has version 1, still read):
//   0 magic u64 "DTRNWAL1", 8 format_version u32 (2), 12 reserved u32,
//  16 segment_size u64, 24 rssp u64, 32 store_id (16 bytes),
//  48 crc u32 (masked, over bytes 0..48), 52 reserved u32
inline constexpr char kMetaFileName[] = "wal.meta";
inline constexpr char kMetaTempFileName[] = "wal.meta.tmp";
inline constexpr size_t kMetaSize = 56;    // version 2
inline constexpr size_t kMetaSizeV1 = 40;  // version 1
inline constexpr uint32_t kFormatVersion = 2;

struct LogMeta {
  uint64_t segment_size = 0;
  Lsn rssp = kNullLsn;
  StoreId store_id;  // nil in a version 1 file
};
std::string EncodeMeta(const LogMeta& meta);
// Corruption (naming `path`) for a damaged file, NotSupported for a newer
// version, StoreMismatch for another magic.
Result<LogMeta> DecodeMeta(Slice data, const std::string& path);

// "segment 0000000000000003 offset 4096 (LSN 16384)", for messages.
std::string DescribePosition(Lsn lsn, uint64_t segment_size);

}  // namespace deuteron::wal
