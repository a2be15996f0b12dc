// Byte encodings shared by every Deuteron format: little-endian fixed-width
// integers, LEB128-style varints (7 bits per byte, low group first, high bit
// set on every byte but the last) and varint32-length-prefixed byte strings.
//
// Encoders write into caller-provided buffers or append to a std::string.
// Decoders come in two forms: GetXxx(Slice* input, ...) consumes from the
// front of *input, returns false on truncated or malformed input and then
// leaves *input unchanged; Decoder wraps them for record formats and keeps the
// first failure (with its byte offset) as a Corruption status.
//
// Varint validity: a varint32 is at most kMaxVarint32Bytes long and its 5th
// byte may carry only the 4 bits that fit (<= 0x0f); a varint64 is at most
// kMaxVarint64Bytes long and its 10th byte may only be 0x00 or 0x01. Anything
// longer, or overflowing, is rejected. Non-minimal encodings within those
// lengths (e.g. 0x80 0x00 for 0) are accepted, as in LevelDB; the encoders
// never produce them.
//
// Thread safety: free functions are pure; a Decoder is a value that needs
// external synchronization to be shared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/slice.h"
#include "common/status.h"

namespace deuteron {

inline constexpr int kMaxVarint32Bytes = 5;
inline constexpr int kMaxVarint64Bytes = 10;

// ---- Fixed width, little-endian ---------------------------------------------
// REQUIRES: dst has room for 2/4/8 bytes; src has 2/4/8 readable bytes.

inline void EncodeFixed16(char* dst, uint16_t v) {
  auto* b = reinterpret_cast<uint8_t*>(dst);
  b[0] = static_cast<uint8_t>(v);
  b[1] = static_cast<uint8_t>(v >> 8);
}

inline void EncodeFixed32(char* dst, uint32_t v) {
  auto* b = reinterpret_cast<uint8_t*>(dst);
  for (int i = 0; i < 4; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
}

inline void EncodeFixed64(char* dst, uint64_t v) {
  auto* b = reinterpret_cast<uint8_t*>(dst);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
}

inline uint16_t DecodeFixed16(const char* src) {
  const auto* b = reinterpret_cast<const uint8_t*>(src);
  return static_cast<uint16_t>(b[0] | (b[1] << 8));
}

inline uint32_t DecodeFixed32(const char* src) {
  const auto* b = reinterpret_cast<const uint8_t*>(src);
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(b[i]) << (8 * i);
  return v;
}

inline uint64_t DecodeFixed64(const char* src) {
  const auto* b = reinterpret_cast<const uint8_t*>(src);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(b[i]) << (8 * i);
  return v;
}

void PutFixed16(std::string* dst, uint16_t v);
void PutFixed32(std::string* dst, uint32_t v);
void PutFixed64(std::string* dst, uint64_t v);

// ---- Varints -----------------------------------------------------------------

// Writes v at dst and returns the byte just past it.
// REQUIRES: dst has room for VarintLength(v) bytes (kMaxVarint32Bytes or
// kMaxVarint64Bytes always suffice).
char* EncodeVarint32(char* dst, uint32_t v);
char* EncodeVarint64(char* dst, uint64_t v);

void PutVarint32(std::string* dst, uint32_t v);
void PutVarint64(std::string* dst, uint64_t v);

// Appends VarintLength(value.size()) bytes of length, then the bytes.
// REQUIRES: value.size() <= UINT32_MAX.
void PutLengthPrefixedSlice(std::string* dst, Slice value);

// Number of bytes EncodeVarint64(v) writes (1..10); also right for varint32.
int VarintLength(uint64_t v);

// Parses a varint from [p, limit). Returns the byte just past it, or nullptr
// if the input is truncated, too long or overflows (see the file comment).
// REQUIRES: p <= limit. A one-byte varint (every small length, and the
// Bw-tree's leaf entries decode several per record) is parsed inline; longer
// ones out of line.
const char* GetVarint32PtrFallback(const char* p, const char* limit, uint32_t* v);
const char* GetVarint64PtrFallback(const char* p, const char* limit, uint64_t* v);
inline const char* GetVarint32Ptr(const char* p, const char* limit, uint32_t* v) {
  if (p < limit && static_cast<uint8_t>(*p) < 0x80) {
    *v = static_cast<uint8_t>(*p);
    return p + 1;
  }
  return GetVarint32PtrFallback(p, limit, v);
}
inline const char* GetVarint64Ptr(const char* p, const char* limit, uint64_t* v) {
  if (p < limit && static_cast<uint8_t>(*p) < 0x80) {
    *v = static_cast<uint8_t>(*p);
    return p + 1;
  }
  return GetVarint64PtrFallback(p, limit, v);
}

// Bounds-checked decoders: on success consume the encoding from the front of
// *input and return true; on failure return false and leave *input (and *v)
// unchanged.
bool GetFixed16(Slice* input, uint16_t* v);
// Inline: every node decode on the Bw-tree's search path goes through these.
inline bool GetFixed32(Slice* input, uint32_t* v) {
  if (input->size() < sizeof(*v)) return false;
  *v = DecodeFixed32(input->data());
  input->remove_prefix(sizeof(*v));
  return true;
}
inline bool GetFixed64(Slice* input, uint64_t* v) {
  if (input->size() < sizeof(*v)) return false;
  *v = DecodeFixed64(input->data());
  input->remove_prefix(sizeof(*v));
  return true;
}
bool GetVarint32(Slice* input, uint32_t* v);
bool GetVarint64(Slice* input, uint64_t* v);
// *result points into the bytes *input points to.
bool GetLengthPrefixedSlice(Slice* input, Slice* result);

// Reads a sequence of encoded fields from one buffer. The first failure
// sticks: that call and every later one return false and consume nothing, and
// status() reports Corruption naming the field kind and the byte offset
// (from the start of the buffer) where it failed.
//
//   Decoder d(record);
//   uint32_t id; Slice key;
//   d.Varint32(&id); d.LengthPrefixedSlice(&key);
//   RETURN_IF_ERROR(d.status());
class Decoder {
 public:
  explicit Decoder(Slice input) : input_(input), size_(input.size()) {}

  bool Fixed16(uint16_t* v) { return Check(ok() && GetFixed16(&input_, v), "fixed16"); }
  bool Fixed32(uint32_t* v) { return Check(ok() && GetFixed32(&input_, v), "fixed32"); }
  bool Fixed64(uint64_t* v) { return Check(ok() && GetFixed64(&input_, v), "fixed64"); }
  bool Varint32(uint32_t* v) { return Check(ok() && GetVarint32(&input_, v), "varint32"); }
  bool Varint64(uint64_t* v) { return Check(ok() && GetVarint64(&input_, v), "varint64"); }
  bool LengthPrefixedSlice(Slice* v) {
    return Check(ok() && GetLengthPrefixedSlice(&input_, v), "length-prefixed slice");
  }
  // The next n bytes, unparsed; *v points into the input.
  bool Bytes(size_t n, Slice* v);

  // True until the first failure.
  bool ok() const { return failed_what_ == nullptr; }
  // OK, or Corruption("truncated or malformed <kind> at offset <n> of <size>").
  Status status() const;
  // Bytes not yet consumed (unchanged by a failure).
  size_t remaining() const { return input_.size(); }
  // Bytes consumed so far.
  size_t offset() const { return size_ - input_.size(); }
  // What remains to be read.
  Slice rest() const { return input_; }

 private:
  bool Check(bool success, const char* what) {
    if (!success && ok()) {
      failed_what_ = what;
      failed_offset_ = offset();
    }
    return success;
  }

  Slice input_;
  size_t size_;
  // A Status member would abort in checked builds when a Decoder is dropped
  // without its status() being read; keep the failure as plain data instead.
  const char* failed_what_ = nullptr;
  size_t failed_offset_ = 0;
};

}  // namespace deuteron
