#include "dc/llama/lss_format.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/coding.h"
#include "common/random.h"

namespace deuteron::llama {
namespace {

constexpr uint64_t kSegment = 256 * 1024;

TEST_CASE("identity round trips and rejects foreign, newer and damaged files",
          "[dc][llama][lss_format]") {
  StoreIdentity id;
  id.store_id = 0x1234567890abcdefull;
  id.segment_size = 64ull << 20;
  id.buffer_size = 4ull << 20;
  const std::string data = EncodeIdentity(id);
  REQUIRE(data.size() == kIdentitySize);

  Result<StoreIdentity> back = DecodeIdentity(data);
  REQUIRE(back.ok());
  CHECK(back->format_version == kFormatVersion);
  CHECK(back->store_id == id.store_id);
  CHECK(back->segment_size == id.segment_size);
  CHECK(back->buffer_size == id.buffer_size);

  SECTION("another magic is StoreMismatch") {
    std::string other = data;
    other[0] ^= 0x01;
    CHECK(DecodeIdentity(other).status().code() == Code::kStoreMismatch);
    CHECK(DecodeIdentity(std::string(64, 'x')).status().code() == Code::kStoreMismatch);
  }
  SECTION("a newer version is NotSupported") {
    StoreIdentity newer = id;
    newer.format_version = kFormatVersion + 1;
    CHECK(DecodeIdentity(EncodeIdentity(newer)).status().code() == Code::kNotSupported);
  }
  SECTION("a flipped bit anywhere after the magic is Corruption") {
    for (size_t byte = 8; byte < kIdentitySize; ++byte) {
      std::string bad = data;
      bad[byte] ^= 0x10;
      INFO("byte " << byte);
      CHECK(DecodeIdentity(bad).status().IsCorruption());
    }
  }
  SECTION("short input is Corruption") {
    CHECK(DecodeIdentity(Slice(data.data(), 40)).status().IsCorruption());
    CHECK(DecodeIdentity(Slice(data.data(), 4)).status().IsCorruption());
    CHECK(DecodeIdentity(Slice()).status().IsCorruption());
  }
}

TEST_CASE("segment header round trips and detects damage", "[dc][llama][lss_format]") {
  SegmentHeader h;
  h.store_id = 77;
  h.segment_number = 0xabcdef;
  h.segment_size = kSegment;
  const std::string data = EncodeSegmentHeader(h);
  REQUIRE(data.size() == kSegmentHeaderSize);
  Result<SegmentHeader> back = DecodeSegmentHeader(data);
  REQUIRE(back.ok());
  CHECK(back->format_version == kFormatVersion);
  CHECK(back->store_id == 77);
  CHECK(back->segment_number == 0xabcdef);
  CHECK(back->segment_size == kSegment);

  for (size_t byte = 0; byte < kSegmentHeaderSize; ++byte) {
    std::string bad = data;
    bad[byte] ^= 0x04;
    INFO("byte " << byte);
    CHECK(DecodeSegmentHeader(bad).status().IsCorruption());
  }
  CHECK(DecodeSegmentHeader(Slice(data.data(), 63)).status().IsCorruption());
  SegmentHeader newer = h;
  newer.format_version = kFormatVersion + 1;
  CHECK(DecodeSegmentHeader(EncodeSegmentHeader(newer)).status().code() == Code::kNotSupported);
}

TEST_CASE("buffer header round trips and detects damage", "[dc][llama][lss_format]") {
  BufferHeader h;
  h.base = 3 * kSegment + 8192;
  h.used = 12345;
  h.sequence = 99;
  h.stable_at_seal = 3 * kSegment + 4096;
  h.records_crc = 0xdeadbeef;
  char buf[kBufferHeaderSize + 8];
  std::memset(buf, 0x5a, sizeof(buf));
  EncodeBufferHeader(h, buf);
  CHECK(buf[kBufferHeaderSize] == 0x5a);  // writes exactly 64 bytes
  for (size_t i = 44; i < kBufferHeaderSize; ++i) CHECK(buf[i] == 0);  // reserved

  Result<BufferHeader> back = DecodeBufferHeader(Slice(buf, kBufferHeaderSize));
  REQUIRE(back.ok());
  CHECK(back->base == h.base);
  CHECK(back->used == h.used);
  CHECK(back->sequence == h.sequence);
  CHECK(back->stable_at_seal == h.stable_at_seal);
  CHECK(back->records_crc == h.records_crc);

  for (size_t byte = 0; byte < kBufferHeaderSize; ++byte) {
    char bad[kBufferHeaderSize];
    std::memcpy(bad, buf, sizeof(bad));
    bad[byte] ^= 0x80;
    INFO("byte " << byte);
    CHECK(DecodeBufferHeader(Slice(bad, sizeof(bad))).status().IsCorruption());
  }
  CHECK(DecodeBufferHeader(Slice(buf, kBufferHeaderSize - 1)).status().IsCorruption());
  const std::string zeros(kBufferHeaderSize, '\0');
  CHECK(DecodeBufferHeader(zeros).status().IsCorruption());
}

TEST_CASE("records of every type round trip", "[dc][llama][lss_format]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rnd(seed);
  const RecordType types[] = {RecordType::kBase,     RecordType::kDelta, RecordType::kVoid,
                              RecordType::kAllocate, RecordType::kFree,  RecordType::kTransaction};
  for (RecordType type : types) {
    for (size_t len : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{1000}}) {
      std::string payload(len, '\0');
      rnd.Fill(payload.data(), len);
      RecordHeader h;
      h.type = type;
      h.length = static_cast<uint32_t>(len);
      h.count = static_cast<uint32_t>(rnd.Uniform(100));
      h.pid = rnd.Next();
      h.prev = rnd.Next();
      h.annotation = rnd.Next();
      h.bound = rnd.Next();
      const size_t span = RecordSpan(len);
      CHECK(span % kRecordAlign == 0);
      CHECK(span >= kRecordHeaderSize + len);
      CHECK(span < kRecordHeaderSize + len + kRecordAlign);
      std::string buf(span + 16, '\x77');
      EncodeRecord(h, payload, buf.data());
      CHECK(buf[span] == '\x77');  // writes exactly the span
      for (size_t i = kRecordHeaderSize + len; i < span; ++i) CHECK(buf[i] == 0);  // padding

      Slice got;
      Result<RecordHeader> back = DecodeRecord(Slice(buf.data(), span), &got);
      INFO("type " << static_cast<int>(type) << " len " << len);
      REQUIRE(back.ok());
      CHECK(back->type == type);
      CHECK(back->length == len);
      CHECK(back->count == h.count);
      CHECK(back->pid == h.pid);
      CHECK(back->prev == h.prev);
      CHECK(back->annotation == h.annotation);
      CHECK(back->bound == h.bound);
      CHECK(got == Slice(payload));
      CHECK(got.data() == buf.data() + kRecordHeaderSize);

      // Any flipped bit in the header or the payload is detected.
      for (size_t byte = 0; byte < kRecordHeaderSize + len; byte += (len > 64 ? 13 : 1)) {
        std::string bad = buf;
        bad[byte] ^= 0x02;
        Slice p;
        INFO("byte " << byte);
        CHECK(DecodeRecord(Slice(bad.data(), span), &p).status().IsCorruption());
      }
      // A record longer than the input is Corruption, not a read past it.
      if (len > 0) {
        Slice p;
        CHECK(DecodeRecord(Slice(buf.data(), kRecordHeaderSize + len - 1), &p)
                  .status()
                  .IsCorruption());
      }
    }
  }
  Slice p;
  CHECK(DecodeRecord(Slice("short"), &p).status().IsCorruption());
  std::string zeros(kRecordHeaderSize, '\0');  // type 0 is not a type
  CHECK(DecodeRecord(zeros, &p).status().IsCorruption());
}

TEST_CASE("record types", "[dc][llama][lss_format]") {
  CHECK_FALSE(IsValidRecordType(0));
  for (uint8_t t = 1; t <= 6; ++t) CHECK(IsValidRecordType(t));
  CHECK_FALSE(IsValidRecordType(7));
  CHECK_FALSE(IsValidRecordType(255));
}

TEST_CASE("buffer positions never cross a segment", "[dc][llama][lss_format]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rnd(seed);
  for (uint64_t segment_size : {uint64_t{128} << 10, uint64_t{256} << 10, uint64_t{64} << 20}) {
    for (uint64_t buffer_size : {uint64_t{8} << 10, uint64_t{64} << 10, segment_size / 2}) {
      INFO("segment " << segment_size << " buffer " << buffer_size);
      // Walk a log of random buffers from the first buffer of segment 0.
      LssAddress base = FirstBufferBase(0, segment_size);
      CHECK(base == kSegmentHeaderArea);
      for (int i = 0; i < 2000; ++i) {
        const uint64_t seg = SegmentOf(base, segment_size);
        const uint64_t seg_end = (seg + 1) * segment_size;
        REQUIRE(base % kBufferAlign == 0);
        REQUIRE(OffsetInSegment(base, segment_size) >= kSegmentHeaderArea);
        REQUIRE(base + kMinBufferSpan <= seg_end);
        const uint64_t cap = BufferCapacity(base, buffer_size, segment_size);
        REQUIRE(cap + kBufferHeaderSize <= buffer_size);
        REQUIRE(base + kBufferHeaderSize + cap <= seg_end);
        REQUIRE(cap + kBufferHeaderSize >= std::min<uint64_t>(buffer_size, kMinBufferSpan));
        const uint64_t used = rnd.OneIn(4) ? cap : rnd.Uniform(cap + 1) & ~uint64_t{7};
        const LssAddress next = NextBufferBase(base, used, segment_size);
        REQUIRE(next >= base + kBufferHeaderSize + used);
        REQUIRE(next % kBufferAlign == 0);
        if (SegmentOf(next, segment_size) != seg) {
          REQUIRE(next == FirstBufferBase(seg + 1, segment_size));
        }
        base = next;
      }
    }
  }
  // The examples of lss_format.md.
  const uint64_t s = 256 << 10;
  CHECK(NextBufferBase(4096, 0, s) == 8192);
  CHECK(NextBufferBase(4096, 65472, s) == 69632);
  CHECK(NextBufferBase(135168, 65472, s) == s + 4096);  // 200704 + 64 KiB > 256 KiB
  CHECK(NextBufferBase(s - kMinBufferSpan - 8192, 100, s) == s - kMinBufferSpan - 4096);
  CHECK(NextBufferBase(s - kMinBufferSpan - 4096, 100, s) == s - kMinBufferSpan);
  CHECK(NextBufferBase(s - kMinBufferSpan, 100, s) == s + 4096);
  CHECK(BufferCapacity(4096, 64 << 10, s) == (64 << 10) - kBufferHeaderSize);
  CHECK(BufferCapacity(s - kMinBufferSpan, 128 << 10, s) == kMinBufferSpan - kBufferHeaderSize);
  // BufferBaseAtOrAfter: a base maps to itself; an end to the next base.
  CHECK(BufferBaseAtOrAfter(4096, s) == 4096);
  CHECK(BufferBaseAtOrAfter(4097, s) == 8192);
  CHECK(BufferBaseAtOrAfter(0, s) == 4096);
  CHECK(BufferBaseAtOrAfter(s, s) == s + 4096);  // a segment's end
  CHECK(BufferBaseAtOrAfter(s + 1, s) == s + 4096);
  CHECK(BufferBaseAtOrAfter(2 * s - kMinBufferSpan, s) == 2 * s - kMinBufferSpan);
  CHECK(BufferBaseAtOrAfter(2 * s - kMinBufferSpan + 1, s) == 2 * s + 4096);
  CHECK(SegmentOf(3 * s + 5, s) == 3);
  CHECK(OffsetInSegment(3 * s + 5, s) == 5);
}

TEST_CASE("segment file names", "[dc][llama][lss_format]") {
  for (uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{0xabcdef}, ~uint64_t{0}}) {
    const std::string name = SegmentFileName(n);
    CHECK(name.size() == 20);
    uint64_t back = 12345;
    REQUIRE(ParseSegmentFileName(name, &back));
    CHECK(back == n);
  }
  CHECK(SegmentFileName(0x1f) == "000000000000001f.seg");
  uint64_t n = 7;
  const std::vector<std::string> junk = {
      "",
      ".seg",
      "000000000000001f",
      "000000000000001f.se",
      "000000000000001f.sega",
      "000000000000001f.SEG",
      "000000000000001F.seg",  // upper case is not how we write them
      "00000000000001f.seg",
      "0000000000000001f.seg",
      "000000000000001g.seg",
      "00000000000 001f.seg",
      "-00000000000001f.seg",
      "000000000000001f.tmp",
      "000000000000001f.free",
      "IDENTITY",
  };
  for (const std::string& name : junk) {
    INFO(name);
    CHECK_FALSE(ParseSegmentFileName(name, &n));
  }
  CHECK(n == 7);  // untouched on failure
}

}  // namespace
}  // namespace deuteron::llama
