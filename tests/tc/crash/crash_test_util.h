// What the crash harness's tests (tests/tc/crash/) share: a fresh
// temporary directory and a whole file read back.
//
// Thread safety: functions over their arguments.
#pragma once

#include <stdlib.h>

#include <fstream>
#include <iterator>
#include <string>

#include <catch2/catch.hpp>

namespace deuteron::crash {

inline std::string TempDir() {
  char tmpl[] = "/tmp/deuteron-crash-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return tmpl;
}

// The file's bytes ("" when it cannot be read).
inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace deuteron::crash
