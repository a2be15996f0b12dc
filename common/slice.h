// Slice: a borrowed, immutable view of bytes (keys, values, log payloads).
//
// A Slice does not own its bytes; the caller keeps them alive for as long as
// the Slice is used. Ordering is bytewise (memcmp), the order of keys in the
// Bw-tree. Thread safety: a value type, like std::string_view.
#pragma once

#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace deuteron {

class Slice {
 public:
  constexpr Slice() noexcept = default;
  constexpr Slice(const char* data, size_t size) noexcept : data_(data), size_(size) {}
  Slice(const uint8_t* data, size_t size) noexcept
      : data_(reinterpret_cast<const char*>(data)), size_(size) {}
  Slice(const std::string& s) noexcept : data_(s.data()), size_(s.size()) {}  // NOLINT
  constexpr Slice(std::string_view s) noexcept : data_(s.data()), size_(s.size()) {}  // NOLINT
  Slice(const char* s) noexcept : data_(s), size_(std::strlen(s)) {}  // NOLINT

  constexpr const char* data() const { return data_; }
  const uint8_t* udata() const { return reinterpret_cast<const uint8_t*>(data_); }
  constexpr size_t size() const { return size_; }
  constexpr bool empty() const { return size_ == 0; }
  const char* begin() const { return data_; }
  const char* end() const { return data_ + size_; }

  char operator[](size_t i) const {
    assert(i < size_);
    return data_[i];
  }

  // REQUIRES: n <= size().
  void remove_prefix(size_t n) {
    assert(n <= size_);
    data_ += n;
    size_ -= n;
  }
  void remove_suffix(size_t n) {
    assert(n <= size_);
    size_ -= n;
  }
  // REQUIRES: pos + n <= size().
  Slice sub(size_t pos, size_t n) const {
    assert(pos + n <= size_);
    return Slice(data_ + pos, n);
  }

  std::string ToString() const { return std::string(data_, size_); }
  std::string_view view() const { return std::string_view(data_, size_); }
  // Printable form: bytes outside [0x20, 0x7e] as \xNN (for messages).
  std::string ToEscaped() const;

  // <0, 0, >0 as memcmp, shorter-is-smaller on a common prefix.
  int compare(const Slice& b) const {
    const size_t n = size_ < b.size_ ? size_ : b.size_;
    if (n >= 8) {
      // The first 8 bytes as one big-endian number decide most compares of
      // keys (the Bw-tree's hot path) without a library call.
      const uint64_t x = LoadBigEndian64(data_), y = LoadBigEndian64(b.data_);
      if (x != y) return x < y ? -1 : 1;
      int r = n == 8 ? 0 : std::memcmp(data_ + 8, b.data_ + 8, n - 8);
      if (r == 0) r = (size_ < b.size_) ? -1 : (size_ > b.size_ ? 1 : 0);
      return r;
    }
    int r = n == 0 ? 0 : std::memcmp(data_, b.data_, n);
    if (r == 0) r = (size_ < b.size_) ? -1 : (size_ > b.size_ ? 1 : 0);
    return r;
  }
  bool starts_with(const Slice& p) const {
    return size_ >= p.size_ && (p.size_ == 0 || std::memcmp(data_, p.data_, p.size_) == 0);
  }

  friend bool operator==(const Slice& a, const Slice& b) {
    if (a.size_ != b.size_) return false;
    if (a.size_ == 8) {
      uint64_t x, y;
      std::memcpy(&x, a.data_, 8);
      std::memcpy(&y, b.data_, 8);
      return x == y;
    }
    return a.size_ == 0 || std::memcmp(a.data_, b.data_, a.size_) == 0;
  }

  // The 8 bytes at p as a big-endian number (bytewise order = numeric order).
  static uint64_t LoadBigEndian64(const char* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap64(v);
    return v;
  }
  friend bool operator<(const Slice& a, const Slice& b) { return a.compare(b) < 0; }
  friend bool operator>(const Slice& a, const Slice& b) { return a.compare(b) > 0; }
  friend bool operator<=(const Slice& a, const Slice& b) { return a.compare(b) <= 0; }
  friend bool operator>=(const Slice& a, const Slice& b) { return a.compare(b) >= 0; }

 private:
  const char* data_ = "";
  size_t size_ = 0;
};

}  // namespace deuteron
