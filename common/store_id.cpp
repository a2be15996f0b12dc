#include "common/store_id.h"

#include <cstring>
#include <random>

namespace deuteron {

StoreId StoreId::Random() {
  std::random_device rd;
  StoreId id;
  do {
    for (size_t i = 0; i < kSize; i += 4) {
      const uint32_t w = rd();
      std::memcpy(id.bytes_.data() + i, &w, 4);
    }
  } while (id.nil());
  return id;
}

Result<StoreId> StoreId::FromBytes(Slice bytes) {
  if (bytes.size() != kSize) {
    return Status::InvalidArgument("a store id is " + std::to_string(kSize) + " bytes, not " +
                                   std::to_string(bytes.size()));
  }
  StoreId id;
  std::memcpy(id.bytes_.data(), bytes.data(), kSize);
  return id;
}

bool StoreId::nil() const {
  for (uint8_t b : bytes_) {
    if (b != 0) return false;
  }
  return true;
}

std::string StoreId::bytes() const { return std::string(reinterpret_cast<const char*>(bytes_.data()), kSize); }

std::string StoreId::ToString() const {
  if (nil()) return "none";
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * kSize);
  for (uint8_t b : bytes_) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

}  // namespace deuteron
