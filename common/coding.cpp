#include "common/coding.h"

#include <cassert>
#include <string>

namespace deuteron {

void PutFixed16(std::string* dst, uint16_t v) {
  char buf[sizeof(v)];
  EncodeFixed16(buf, v);
  dst->append(buf, sizeof(buf));
}

void PutFixed32(std::string* dst, uint32_t v) {
  char buf[sizeof(v)];
  EncodeFixed32(buf, v);
  dst->append(buf, sizeof(buf));
}

void PutFixed64(std::string* dst, uint64_t v) {
  char buf[sizeof(v)];
  EncodeFixed64(buf, v);
  dst->append(buf, sizeof(buf));
}

char* EncodeVarint32(char* dst, uint32_t v) { return EncodeVarint64(dst, v); }

char* EncodeVarint64(char* dst, uint64_t v) {
  auto* p = reinterpret_cast<uint8_t*>(dst);
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return reinterpret_cast<char*>(p);
}

void PutVarint32(std::string* dst, uint32_t v) {
  char buf[kMaxVarint32Bytes];
  const char* end = EncodeVarint32(buf, v);
  dst->append(buf, static_cast<size_t>(end - buf));
}

void PutVarint64(std::string* dst, uint64_t v) {
  char buf[kMaxVarint64Bytes];
  const char* end = EncodeVarint64(buf, v);
  dst->append(buf, static_cast<size_t>(end - buf));
}

void PutLengthPrefixedSlice(std::string* dst, Slice value) {
  assert(value.size() <= UINT32_MAX);
  PutVarint32(dst, static_cast<uint32_t>(value.size()));
  dst->append(value.data(), value.size());
}

int VarintLength(uint64_t v) {
  int len = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++len;
  }
  return len;
}

namespace {

// Shared varint parser. `max_bytes` bytes at most; the last allowed byte may
// not have its continuation bit set nor any bit above `last_byte_max`.
template <typename T>
const char* ParseVarint(const char* p, const char* limit, int max_bytes, uint8_t last_byte_max,
                        T* v) {
  assert(p <= limit);
  T result = 0;
  for (int i = 0; i < max_bytes && p < limit; ++i) {
    const auto byte = static_cast<uint8_t>(*p++);
    if (i == max_bytes - 1) {
      if (byte > last_byte_max) return nullptr;  // overflow, or continues past the max length
      result |= static_cast<T>(byte) << (7 * i);
      *v = result;
      return p;
    }
    result |= static_cast<T>(byte & 0x7f) << (7 * i);
    if ((byte & 0x80) == 0) {
      *v = result;
      return p;
    }
  }
  return nullptr;  // truncated
}

}  // namespace

const char* GetVarint32PtrFallback(const char* p, const char* limit, uint32_t* v) {
  // Byte 5 holds bits 28..34; only 28..31 fit.
  return ParseVarint<uint32_t>(p, limit, kMaxVarint32Bytes, 0x0f, v);
}

const char* GetVarint64PtrFallback(const char* p, const char* limit, uint64_t* v) {
  // Byte 10 holds bits 63..69; only bit 63 fits.
  return ParseVarint<uint64_t>(p, limit, kMaxVarint64Bytes, 0x01, v);
}

bool GetFixed16(Slice* input, uint16_t* v) {
  if (input->size() < sizeof(*v)) return false;
  *v = DecodeFixed16(input->data());
  input->remove_prefix(sizeof(*v));
  return true;
}

bool GetVarint32(Slice* input, uint32_t* v) {
  const char* end = GetVarint32Ptr(input->begin(), input->end(), v);
  if (end == nullptr) return false;
  input->remove_prefix(static_cast<size_t>(end - input->begin()));
  return true;
}

bool GetVarint64(Slice* input, uint64_t* v) {
  const char* end = GetVarint64Ptr(input->begin(), input->end(), v);
  if (end == nullptr) return false;
  input->remove_prefix(static_cast<size_t>(end - input->begin()));
  return true;
}

bool GetLengthPrefixedSlice(Slice* input, Slice* result) {
  uint32_t len = 0;
  const char* body = GetVarint32Ptr(input->begin(), input->end(), &len);
  if (body == nullptr || static_cast<size_t>(input->end() - body) < len) return false;
  *result = Slice(body, len);
  input->remove_prefix(static_cast<size_t>(body - input->begin()) + len);
  return true;
}

bool Decoder::Bytes(size_t n, Slice* v) {
  const bool success = ok() && n <= input_.size();
  if (success) {
    *v = input_.sub(0, n);
    input_.remove_prefix(n);
  }
  return Check(success, "bytes");
}

Status Decoder::status() const {
  if (ok()) return Status::OK();
  return Status::Corruption("truncated or malformed " + std::string(failed_what_) + " at offset " +
                            std::to_string(failed_offset_) + " of " + std::to_string(size_));
}

}  // namespace deuteron
