#include "common/slice.h"

namespace deuteron {

std::string Slice::ToEscaped() const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(size_);
  for (size_t i = 0; i < size_; ++i) {
    const auto c = static_cast<unsigned char>(data_[i]);
    if (c >= 0x20 && c <= 0x7e && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
  return out;
}

}  // namespace deuteron
