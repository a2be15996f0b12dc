// What the bank tests of the transaction manager (bank_test,
// dc_failure_test) share: account keys and the opening balance.
//
// Thread safety: constants and pure functions.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace deuteron::test {

inline std::string Account(int i) {
  char buf[16];
  snprintf(buf, sizeof buf, "acct%05d", i);
  return buf;
}

inline constexpr int64_t kInitial = 100;

}  // namespace deuteron::test
