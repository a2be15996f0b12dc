#include "common/slice.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace deuteron {
namespace {

TEST_CASE("Slice orders bytewise like memcmp", "[common][slice]") {
  CHECK(Slice("a") < Slice("b"));
  CHECK(Slice("a") < Slice("ab"));
  CHECK(Slice("") < Slice("a"));
  CHECK(Slice("ab").compare(Slice("ab")) == 0);
  // Bytes above 0x7f sort after ASCII: unsigned comparison.
  const std::string high("\x80", 1);
  CHECK(Slice("z") < Slice(high));
  const std::string with_nul("a\0b", 3);
  CHECK(Slice(with_nul).size() == 3);
  CHECK(Slice("a") < Slice(with_nul));
}

// compare() and == take a word-at-a-time path for 8 or more bytes: check it
// against memcmp order over keys that differ in every position, in high
// bits, and only in length.
TEST_CASE("Slice orders long keys bytewise like memcmp", "[common][slice]") {
  auto sign = [](int v) { return (v > 0) - (v < 0); };
  auto expected = [&](const std::string& a, const std::string& b) {
    const size_t n = std::min(a.size(), b.size());
    const int r = std::memcmp(a.data(), b.data(), n);
    if (r != 0) return sign(r);
    return a.size() < b.size() ? -1 : (a.size() > b.size() ? 1 : 0);
  };
  std::vector<std::string> keys;
  const std::string base = "abcdefghijklmnop";
  for (size_t len : {7, 8, 9, 15, 16}) {
    keys.push_back(base.substr(0, len));
    for (size_t pos = 0; pos < len; ++pos) {
      for (char c : {'\x00', '\x7f', '\x80', '\xff'}) {
        std::string k = base.substr(0, len);
        k[pos] = c;
        keys.push_back(k);
      }
    }
  }
  for (const std::string& a : keys) {
    for (const std::string& b : keys) {
      INFO("a=" << Slice(a).ToEscaped() << " b=" << Slice(b).ToEscaped());
      CHECK(sign(Slice(a).compare(Slice(b))) == expected(a, b));
      CHECK((Slice(a) == Slice(b)) == (a == b));
    }
  }
  CHECK(Slice::LoadBigEndian64("\x01\x02\x03\x04\x05\x06\x07\x08") == 0x0102030405060708u);
}

TEST_CASE("Slice prefix operations", "[common][slice]") {
  Slice s("hello world");
  CHECK(s.starts_with("hello"));
  CHECK_FALSE(s.starts_with("world"));
  s.remove_prefix(6);
  CHECK(s == Slice("world"));
  CHECK(s.sub(1, 3).ToString() == "orl");
  s.remove_suffix(2);
  CHECK(s.ToString() == "wor");
}

TEST_CASE("Slice escapes unprintable bytes", "[common][slice]") {
  const std::string raw("k\x01\xff\\", 4);
  CHECK(Slice(raw).ToEscaped() == "k\\x01\\xff\\x5c");
}

}  // namespace
}  // namespace deuteron
