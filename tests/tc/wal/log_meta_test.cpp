// wal.meta (tc/wal/log_format.md): version 2 holds the store id; version 1
// is still read, and a log opened from it gets a store id that it keeps.
#include <memory>
#include <string>

#include <catch2/catch.hpp>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/env.h"
#include "tc/wal/log.h"
#include "tc/wal/log_format.h"

namespace deuteron::wal {
namespace {

std::string V1Meta(uint64_t segment_size, Lsn rssp) {
  std::string v1(kMetaSizeV1, '\0');
  EncodeFixed64(&v1[0], 0x314c41574e525444ull);  // "DTRNWAL1"
  EncodeFixed32(&v1[8], 1);
  EncodeFixed64(&v1[16], segment_size);
  EncodeFixed64(&v1[24], rssp);
  EncodeFixed32(&v1[32], crc32c::Mask(crc32c::Value(v1.data(), 32)));
  return v1;
}

}  // namespace

TEST_CASE("wal.meta: version 2 holds the store id; version 1 reads as none", "[wal][storeid]") {
  const StoreId id = StoreId::Random();
  const std::string bytes = EncodeMeta(LogMeta{1 << 16, 12345, id});
  REQUIRE(bytes.size() == kMetaSize);
  Result<LogMeta> m = DecodeMeta(bytes, "wal.meta");
  REQUIRE(m.ok());
  CHECK(m->segment_size == 1 << 16);
  CHECK(m->rssp == 12345);
  CHECK(m->store_id == id);
  for (size_t i = 0; i < kMetaSize - 4; ++i) {  // the last word is reserved
    std::string bad = bytes;
    bad[i] ^= 0x08;
    INFO("byte " << i);
    CHECK_FALSE(DecodeMeta(bad, "wal.meta").ok());
  }
  CHECK(DecodeMeta(bytes.substr(0, kMetaSize - 1), "wal.meta").status().IsCorruption());
  std::string newer = bytes;
  EncodeFixed32(&newer[8], kFormatVersion + 1);
  EncodeFixed32(&newer[48], crc32c::Mask(crc32c::Value(newer.data(), 48)));
  CHECK(DecodeMeta(newer, "wal.meta").status().code() == Code::kNotSupported);
  // A newer version is refused whatever its size.
  CHECK(DecodeMeta(newer + "more", "wal.meta").status().code() == Code::kNotSupported);
  Result<LogMeta> old = DecodeMeta(V1Meta(1 << 16, 777), "wal.meta");
  INFO(old.status().ToString());
  REQUIRE(old.ok());
  CHECK(old->rssp == 777);
  CHECK(old->store_id.nil());
}

TEST_CASE("wal.meta: a new log gets a store id; a version 1 log gets one at open and keeps it",
          "[wal][storeid]") {
  std::unique_ptr<Env> env = NewMemEnv();
  LogOptions o;
  o.segment_size = 64 << 10;
  o.buffer_size = 64 << 10;
  StoreId fresh;
  {
    Result<std::unique_ptr<Log>> log = Log::Open(env.get(), "/a", o);
    REQUIRE(log.ok());
    fresh = (*log)->store_id();
    CHECK_FALSE(fresh.nil());
  }
  {
    Result<std::unique_ptr<Log>> log = Log::Open(env.get(), "/a", o);
    REQUIRE(log.ok());
    CHECK((*log)->store_id() == fresh);
  }
  // A version 1 directory: wal.meta only, as an older build left it empty.
  REQUIRE(env->CreateDirs("/b").ok());
  REQUIRE(WriteStringToFile(env.get(), V1Meta(o.segment_size, SegmentStart(kFirstSegment, o.segment_size)),
                            "/b/" + std::string(kMetaFileName), true)
              .ok());
  StoreId upgraded;
  {
    Result<std::unique_ptr<Log>> log = Log::Open(env.get(), "/b", o);
    INFO(log.status().ToString());
    REQUIRE(log.ok());
    upgraded = (*log)->store_id();
    CHECK_FALSE(upgraded.nil());
    CHECK(upgraded != fresh);
  }
  Result<std::string> meta = ReadFileToString(env.get(), "/b/" + std::string(kMetaFileName));
  REQUIRE(meta.ok());
  CHECK(meta->size() == kMetaSize);
  Result<std::unique_ptr<Log>> log = Log::Open(env.get(), "/b", o);
  REQUIRE(log.ok());
  CHECK((*log)->store_id() == upgraded);
}

}  // namespace deuteron::wal
