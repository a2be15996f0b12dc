// What the node-format and page-operation tests share: keys "k00042",
// fixed width, so that numeric order is key order.
//
// Thread safety: pure functions.
#pragma once

#include <cstdio>
#include <string>

namespace deuteron::bwtree::test {

inline std::string NodeKey(int i) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "k%05d", i);
  return buf;
}

}  // namespace deuteron::bwtree::test
