#include "tc/wal/log_format.h"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/coding.h"
#include "common/crc32c.h"

namespace deuteron::wal {
namespace {

constexpr uint64_t kMetaMagic = 0x314c41574e525444ull;  // "DTRNWAL1" little-endian

std::string HexName(const char* prefix, uint64_t n) {
  char name[48];
  std::snprintf(name, sizeof(name), "%s%016" PRIx64 ".wal", prefix, n);
  return name;
}

// Parses "<prefix><16 lower-case hex>.wal".
bool ParseHexName(const std::string& name, const std::string& prefix, uint64_t* n) {
  if (name.size() != prefix.size() + 20 || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - 4, 4, ".wal") != 0) {
    return false;
  }
  const std::string digits = name.substr(prefix.size(), 16);
  if (digits.find_first_not_of("0123456789abcdef") != std::string::npos) return false;
  *n = std::strtoull(digits.c_str(), nullptr, 16);
  return true;
}

}  // namespace

uint32_t PayloadCrc(Slice payload) {
  return crc32c::Mask(crc32c::Value(payload.data(), payload.size()));
}

void EncodeRecordHeader(char* dst, const RecordHeader& h, uint32_t payload_crc) {
  EncodeFixed32(dst + 4, payload_crc);
  EncodeFixed64(dst + 8, h.lsn);
  EncodeFixed32(dst + 16, h.length);
  dst[20] = static_cast<char>(h.type);
  dst[21] = 0;
  EncodeFixed16(dst + 22, 0);
  EncodeFixed64(dst + 24, h.esl_seen);
  EncodeFixed32(dst, crc32c::Mask(crc32c::Value(dst + 4, kRecordHeaderSize - 4)));
}

Parsed ParseRecord(const char* data, size_t avail, Lsn lsn, uint64_t segment_size,
                   RecordHeader* h, const char** why) {
  auto invalid = [why](const char* reason) {
    if (why != nullptr) *why = reason;
    return Parsed::kInvalid;
  };
  if (avail < kRecordHeaderSize) return invalid("truncated header");
  // The position check first: it rejects zeros and recycled bytes cheaply.
  if (DecodeFixed64(data + 8) != lsn) return invalid("header names another position");
  if (crc32c::Unmask(DecodeFixed32(data)) != crc32c::Value(data + 4, kRecordHeaderSize - 4)) {
    return invalid("header checksum mismatch");
  }
  h->lsn = lsn;
  h->length = DecodeFixed32(data + 16);
  const auto type = static_cast<uint8_t>(data[20]);
  h->esl_seen = DecodeFixed64(data + 24);
  if (data[21] != 0 || DecodeFixed16(data + 22) != 0) return invalid("reserved bits set");
  if (h->esl_seen > lsn) return invalid("esl_seen above the record");
  const uint64_t segment_left = segment_size - lsn % segment_size;
  if (type == static_cast<uint8_t>(RecordType::kPadding)) {
    h->type = RecordType::kPadding;
    if (kRecordHeaderSize + uint64_t{h->length} != segment_left) {
      return invalid("padding does not end at the segment end");
    }
    return Parsed::kPadding;
  }
  if (type != static_cast<uint8_t>(RecordType::kData)) return invalid("unknown record type");
  h->type = RecordType::kData;
  if (kRecordHeaderSize + uint64_t{h->length} > segment_left) {
    return invalid("record crosses the segment end");
  }
  if (kRecordHeaderSize + uint64_t{h->length} > avail) return invalid("truncated payload");
  if (crc32c::Unmask(DecodeFixed32(data + 4)) !=
      crc32c::Value(data + kRecordHeaderSize, h->length)) {
    return invalid("payload checksum mismatch");
  }
  return Parsed::kData;
}

std::string SegmentFileName(uint64_t segment) { return HexName("", segment); }
std::string SpareFileName(uint64_t id) { return HexName("spare-", id); }
bool ParseSegmentFileName(const std::string& name, uint64_t* segment) {
  return ParseHexName(name, "", segment);
}
bool ParseSpareFileName(const std::string& name, uint64_t* id) {
  return ParseHexName(name, "spare-", id);
}

std::string EncodeMeta(const LogMeta& meta) {
  std::string out(kMetaSize, '\0');
  EncodeFixed64(out.data(), kMetaMagic);
  EncodeFixed32(out.data() + 8, kFormatVersion);
  EncodeFixed64(out.data() + 16, meta.segment_size);
  EncodeFixed64(out.data() + 24, meta.rssp);
  std::memcpy(out.data() + 32, meta.store_id.data(), StoreId::kSize);
  EncodeFixed32(out.data() + 48, crc32c::Mask(crc32c::Value(out.data(), 48)));
  return out;
}

Result<LogMeta> DecodeMeta(Slice data, const std::string& path) {
  if (data.size() < 12) {
    return Status::Corruption(path + ": " + std::to_string(data.size()) + " bytes, expected " +
                              std::to_string(kMetaSize));
  }
  const char* p = data.data();
  if (DecodeFixed64(p) != kMetaMagic) return Status::StoreMismatch(path + ": not a Deuteron log");
  // The version decides the size; a newer one is refused whatever its size.
  const uint32_t version = DecodeFixed32(p + 8);
  if (version > kFormatVersion) {
    return Status::NotSupported(path + ": log format version " + std::to_string(version) +
                                " is newer than this program's " + std::to_string(kFormatVersion));
  }
  const size_t size = version <= 1 ? kMetaSizeV1 : kMetaSize;
  const size_t crc = size - 8;  // both versions end with crc u32, reserved u32
  if (data.size() != size) {
    return Status::Corruption(path + ": " + std::to_string(data.size()) + " bytes, expected " +
                              std::to_string(size) + " for format version " + std::to_string(version));
  }
  if (crc32c::Unmask(DecodeFixed32(p + crc)) != crc32c::Value(p, crc)) {
    return Status::Corruption(path + ": checksum mismatch");
  }
  LogMeta meta;
  meta.segment_size = DecodeFixed64(p + 16);
  meta.rssp = DecodeFixed64(p + 24);
  if (version >= 2) meta.store_id = StoreId::FromBytes(Slice(p + 32, StoreId::kSize)).value();
  return meta;
}

std::string DescribePosition(Lsn lsn, uint64_t segment_size) {
  char text[96];
  std::snprintf(text, sizeof(text), "segment %016" PRIx64 " offset %" PRIu64 " (LSN %" PRIu64 ")",
                SegmentOf(lsn, segment_size), lsn % segment_size, lsn);
  return text;
}

}  // namespace deuteron::wal
