// What the Env tests (env_test, fault_env_test) share: a file opened, or
// the test stopped with the reason.
//
// Thread safety: as the Env it is given.
#pragma once

#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "common/env.h"

namespace deuteron::test {

inline std::unique_ptr<File> Open(Env* env, const std::string& path, OpenMode mode) {
  Result<std::unique_ptr<File>> f = env->OpenFile(path, mode);
  INFO(path << ": " << f.status().ToString());
  REQUIRE(f.ok());
  return std::move(f).value();
}

}  // namespace deuteron::test
