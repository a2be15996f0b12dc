#include "common/slice.h"

#include <string>

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
