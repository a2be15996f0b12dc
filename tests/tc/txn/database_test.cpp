// The embedded Database: one directory, the directory lock, reopen.
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/env.h"
#include "dc/dc.h"
#include "tc/database.h"
#include "tc/wal/log_format.h"
#include "tests/dc/dc_harness.h"

namespace deuteron::test {

TEST_CASE("database: open, commit, reopen; the directory lock refuses a second opener",
          "[tc][txn][database]") {
  std::unique_ptr<Env> env = NewMemEnv();
  tc::DatabaseOptions o;
  o.env = env.get();
  o.dc = InProcessHarness::Options(HarnessConfig{});
  o.log.segment_size = 64 << 10;
  o.log.buffer_size = 64 << 10;
  {
    Result<std::unique_ptr<tc::Database>> db = tc::Database::Open("/db", o);
    INFO(db.status().ToString());
    REQUIRE(db.ok());
    auto t = (*db)->Begin();
    REQUIRE(t->Put("k", "v").ok());
    REQUIRE(t->Commit().ok());
    Result<std::unique_ptr<tc::Database>> second = tc::Database::Open("/db", o);
    CHECK(second.status().IsBusy());
    REQUIRE((*db)->Checkpoint().ok());
    REQUIRE((*db)->Close().ok());
  }
  Result<std::unique_ptr<tc::Database>> db = tc::Database::Open("/db", o);
  INFO(db.status().ToString());
  REQUIRE(db.ok());
  auto t = (*db)->Begin();
  Result<std::string> v = t->Get("k");
  REQUIRE(v.ok());
  CHECK(*v == "v");
  REQUIRE(t->Commit().ok());
}

namespace {

tc::DatabaseOptions SmallOptions(Env* env) {
  tc::DatabaseOptions o;
  o.env = env;
  o.dc = InProcessHarness::Options(HarnessConfig{});
  o.log.segment_size = 64 << 10;
  o.log.buffer_size = 64 << 10;
  return o;
}

void CreateStore(const std::string& dir, const tc::DatabaseOptions& o) {
  Result<std::unique_ptr<tc::Database>> db = tc::Database::Open(dir, o);
  INFO(db.status().ToString());
  REQUIRE(db.ok());
  auto t = (*db)->Begin();
  REQUIRE(t->Put("k", dir).ok());
  REQUIRE(t->Commit().ok());
  REQUIRE((*db)->Close().ok());
}

std::string Read(Env* env, const std::string& path) {
  Result<std::string> bytes = ReadFileToString(env, path);
  REQUIRE(bytes.ok());
  return *bytes;
}

void Write(Env* env, const std::string& path, const std::string& bytes) {
  REQUIRE(WriteStringToFile(env, bytes, path, /*sync=*/true).ok());
}

}  // namespace

TEST_CASE("database: the log and the DC of two stores do not mix", "[tc][txn][database][storeid]") {
  std::unique_ptr<Env> env = NewMemEnv();
  const tc::DatabaseOptions o = SmallOptions(env.get());
  CreateStore("/one", o);
  CreateStore("/two", o);
  const std::string one_meta = Read(env.get(), "/one/dc/" + std::string(dc::kDcMetaFileName));
  // Store one's DC now says it belongs to store two.
  Write(env.get(), "/one/dc/" + std::string(dc::kDcMetaFileName),
        Read(env.get(), "/two/dc/" + std::string(dc::kDcMetaFileName)));
  Result<std::unique_ptr<tc::Database>> db = tc::Database::Open("/one", o);
  INFO(db.status().ToString());
  REQUIRE(db.status().code() == Code::kStoreMismatch);
  // The message names both stores.
  Result<dc::DcMeta> two = dc::DecodeDcMeta(Read(env.get(), "/two/dc/" + std::string(dc::kDcMetaFileName)));
  REQUIRE(two.ok());
  CHECK(db.status().message().find(two->store_id.ToString()) != std::string::npos);
  // Nothing changed: with its own dc.meta back, store one opens as it was.
  Write(env.get(), "/one/dc/" + std::string(dc::kDcMetaFileName), one_meta);
  db = tc::Database::Open("/one", o);
  INFO(db.status().ToString());
  REQUIRE(db.ok());
  auto t = (*db)->Begin();
  Result<std::string> v = t->Get("k");
  REQUIRE(v.ok());
  CHECK(*v == "/one");
  REQUIRE(t->Commit().ok());
}

TEST_CASE("database: a directory of a newer format is refused as StoreMismatch",
          "[tc][txn][database][storeid]") {
  std::unique_ptr<Env> env = NewMemEnv();
  const tc::DatabaseOptions o = SmallOptions(env.get());
  CreateStore("/db", o);
  // Rewrites the format version of `path` to one above `current`, with a
  // valid checksum at `crc` (over the bytes before it).
  auto bump = [&](const std::string& path, uint32_t current, size_t crc) {
    std::string bytes = Read(env.get(), path);
    EncodeFixed32(&bytes[8], current + 1);
    EncodeFixed32(&bytes[crc], crc32c::Mask(crc32c::Value(bytes.data(), crc)));
    Write(env.get(), path, bytes);
  };
  const std::string wal_meta = "/db/log/" + std::string(wal::kMetaFileName);
  const std::string dc_meta = "/db/dc/" + std::string(dc::kDcMetaFileName);
  const std::string wal_bytes = Read(env.get(), wal_meta);
  const std::string dc_bytes = Read(env.get(), dc_meta);
  SECTION("the log") { bump(wal_meta, wal::kFormatVersion, wal::kMetaSize - 8); }
  SECTION("the DC") { bump(dc_meta, dc::kDcMetaVersion, dc::kDcMetaSize - 4); }
  Result<std::unique_ptr<tc::Database>> db = tc::Database::Open("/db", o);
  INFO(db.status().ToString());
  CHECK(db.status().code() == Code::kStoreMismatch);
  CHECK(db.status().message().find("newer") != std::string::npos);
  Write(env.get(), wal_meta, wal_bytes);
  Write(env.get(), dc_meta, dc_bytes);
  db = tc::Database::Open("/db", o);
  INFO(db.status().ToString());
  CHECK(db.ok());
}

}  // namespace deuteron::test
