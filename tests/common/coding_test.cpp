#include "common/coding.h"

#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/random.h"

namespace deuteron {
namespace {

std::string Bytes(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

// Values around every 7-bit group boundary, plus the type limits.
std::vector<uint64_t> BoundaryValues64() {
  std::vector<uint64_t> v = {0, 1, UINT64_MAX, UINT64_MAX - 1, uint64_t{1} << 63};
  for (int bits = 7; bits < 64; bits += 7) {
    const uint64_t p = uint64_t{1} << bits;
    v.insert(v.end(), {p - 1, p, p + 1});
  }
  for (int bits : {8, 16, 31, 32, 33, 35, 62}) {
    const uint64_t p = uint64_t{1} << bits;
    v.insert(v.end(), {p - 1, p, p + 1});
  }
  return v;
}

std::vector<uint32_t> BoundaryValues32() {
  std::vector<uint32_t> v;
  for (uint64_t x : BoundaryValues64()) {
    if (x <= UINT32_MAX) v.push_back(static_cast<uint32_t>(x));
  }
  return v;
}

// A random value with a random bit length, so every encoded length shows up.
uint64_t RandomValue(Random64* rnd) { return rnd->Next() >> rnd->Uniform(64); }

TEST_CASE("Fixed encodings are little-endian byte for byte", "[common][coding]") {
  char buf[8];
  EncodeFixed16(buf, 0x0201);
  CHECK(std::string(buf, 2) == Bytes({0x01, 0x02}));
  EncodeFixed32(buf, 0x04030201u);
  CHECK(std::string(buf, 4) == Bytes({0x01, 0x02, 0x03, 0x04}));
  EncodeFixed64(buf, 0x0807060504030201u);
  CHECK(std::string(buf, 8) == Bytes({0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08}));
  EncodeFixed64(buf, 0xfedcba9876543210u);
  CHECK(std::string(buf, 8) == Bytes({0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe}));
  CHECK(DecodeFixed64(buf) == 0xfedcba9876543210u);
  CHECK(DecodeFixed32(buf) == 0x76543210u);
  CHECK(DecodeFixed16(buf) == 0x3210u);

  std::string s;
  PutFixed16(&s, 0xbeef);
  PutFixed32(&s, 0xdeadbeefu);
  PutFixed64(&s, 0x0123456789abcdefu);
  CHECK(s == Bytes({0xef, 0xbe, 0xef, 0xbe, 0xad, 0xde, 0xef, 0xcd, 0xab, 0x89, 0x67, 0x45,
                    0x23, 0x01}));
}

TEST_CASE("Fixed encodings round trip and reject short input", "[common][coding]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rnd(seed);
  std::vector<uint64_t> values = BoundaryValues64();
  for (int i = 0; i < 1000; ++i) values.push_back(RandomValue(&rnd));

  std::string s;
  for (uint64_t v : values) {
    PutFixed16(&s, static_cast<uint16_t>(v));
    PutFixed32(&s, static_cast<uint32_t>(v));
    PutFixed64(&s, v);
  }
  Slice in(s);
  for (uint64_t v : values) {
    INFO("value " << v);
    uint16_t v16 = 0;
    uint32_t v32 = 0;
    uint64_t v64 = 0;
    REQUIRE(GetFixed16(&in, &v16));
    REQUIRE(GetFixed32(&in, &v32));
    REQUIRE(GetFixed64(&in, &v64));
    CHECK(v16 == static_cast<uint16_t>(v));
    CHECK(v32 == static_cast<uint32_t>(v));
    CHECK(v64 == v);
  }
  CHECK(in.empty());

  const std::string eight(8, '\x5a');
  for (size_t len = 0; len < 8; ++len) {
    INFO("length " << len);
    const Slice orig(eight.data(), len);
    Slice in2 = orig;
    uint16_t v16 = 7;
    uint32_t v32 = 7;
    uint64_t v64 = 7;
    CHECK(GetFixed64(&in2, &v64) == false);
    CHECK(v64 == 7);
    if (len < 4) {
      CHECK(GetFixed32(&in2, &v32) == false);
      CHECK(v32 == 7);
    }
    if (len < 2) {
      CHECK(GetFixed16(&in2, &v16) == false);
      CHECK(v16 == 7);
    }
    CHECK(in2.data() == orig.data());
    CHECK(in2.size() == orig.size());
  }
}

TEST_CASE("Varint encodings have the documented bytes", "[common][coding]") {
  auto enc64 = [](uint64_t v) {
    std::string s;
    PutVarint64(&s, v);
    return s;
  };
  auto enc32 = [](uint32_t v) {
    std::string s;
    PutVarint32(&s, v);
    return s;
  };
  CHECK(enc64(0) == Bytes({0x00}));
  CHECK(enc64(1) == Bytes({0x01}));
  CHECK(enc64(127) == Bytes({0x7f}));
  CHECK(enc64(128) == Bytes({0x80, 0x01}));
  CHECK(enc64(300) == Bytes({0xac, 0x02}));
  CHECK(enc64(16383) == Bytes({0xff, 0x7f}));
  CHECK(enc64(16384) == Bytes({0x80, 0x80, 0x01}));
  CHECK(enc32(UINT32_MAX) == Bytes({0xff, 0xff, 0xff, 0xff, 0x0f}));
  CHECK(enc64(UINT32_MAX) == enc32(UINT32_MAX));
  CHECK(enc64(UINT64_MAX) ==
        Bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));
  CHECK(enc64(uint64_t{1} << 63) ==
        Bytes({0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}));
}

TEST_CASE("Varint32 round trips at boundaries and on random values", "[common][coding]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rnd(seed);
  std::vector<uint32_t> values = BoundaryValues32();
  for (int i = 0; i < 10000; ++i) values.push_back(static_cast<uint32_t>(RandomValue(&rnd)));

  std::string s;
  for (uint32_t v : values) {
    const size_t before = s.size();
    PutVarint32(&s, v);
    INFO("value " << v);
    REQUIRE(static_cast<int>(s.size() - before) == VarintLength(v));
    REQUIRE(VarintLength(v) <= kMaxVarint32Bytes);
    char buf[kMaxVarint32Bytes];
    REQUIRE(EncodeVarint32(buf, v) - buf == VarintLength(v));
  }
  Slice in(s);
  for (uint32_t v : values) {
    uint32_t got = 0;
    INFO("value " << v);
    REQUIRE(GetVarint32(&in, &got));
    REQUIRE(got == v);
  }
  CHECK(in.empty());
}

TEST_CASE("Varint64 round trips at boundaries and on random values", "[common][coding]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rnd(seed);
  std::vector<uint64_t> values = BoundaryValues64();
  for (int i = 0; i < 10000; ++i) values.push_back(RandomValue(&rnd));

  std::string s;
  for (uint64_t v : values) {
    const size_t before = s.size();
    PutVarint64(&s, v);
    INFO("value " << v);
    REQUIRE(static_cast<int>(s.size() - before) == VarintLength(v));
    REQUIRE(VarintLength(v) <= kMaxVarint64Bytes);
    char buf[kMaxVarint64Bytes];
    REQUIRE(EncodeVarint64(buf, v) - buf == VarintLength(v));
  }
  Slice in(s);
  for (uint64_t v : values) {
    uint64_t got = 0;
    INFO("value " << v);
    REQUIRE(GetVarint64(&in, &got));
    REQUIRE(got == v);
  }
  CHECK(in.empty());

  CHECK(VarintLength(0) == 1);
  CHECK(VarintLength(127) == 1);
  CHECK(VarintLength(128) == 2);
  CHECK(VarintLength(UINT32_MAX) == 5);
  CHECK(VarintLength(UINT64_MAX) == 10);
}

TEST_CASE("Every truncated varint fails and consumes nothing", "[common][coding]") {
  for (uint64_t v : BoundaryValues64()) {
    std::string enc;
    PutVarint64(&enc, v);
    for (size_t len = 0; len < enc.size(); ++len) {
      INFO("value " << v << " truncated to " << len);
      Slice in(enc.data(), len);
      uint64_t got64 = 42;
      CHECK_FALSE(GetVarint64(&in, &got64));
      CHECK(got64 == 42);
      uint32_t got32 = 42;
      CHECK_FALSE(GetVarint32(&in, &got32));
      CHECK(got32 == 42);
      CHECK(in.data() == enc.data());
      CHECK(in.size() == len);
      CHECK(GetVarint64Ptr(enc.data(), enc.data() + len, &got64) == nullptr);
    }
    // The whole encoding, followed by more bytes, consumes exactly itself.
    const std::string padded = enc + "xyz";
    Slice in(padded);
    uint64_t got = 0;
    REQUIRE(GetVarint64(&in, &got));
    CHECK(got == v);
    CHECK(in == Slice("xyz"));
  }
}

TEST_CASE("Overlong and overflowing varints fail", "[common][coding]") {
  struct Case {
    const char* name;
    std::string bytes;
    bool ok32;
    bool ok64;
  };
  const std::vector<Case> cases = {
      {"uint32 max", Bytes({0xff, 0xff, 0xff, 0xff, 0x0f}), true, true},
      {"bit 32 set in byte 5", Bytes({0xff, 0xff, 0xff, 0xff, 0x10}), false, true},
      {"2^32 exactly", Bytes({0x80, 0x80, 0x80, 0x80, 0x10}), false, true},
      {"high bits of byte 5", Bytes({0x80, 0x80, 0x80, 0x80, 0x70}), false, true},
      {"byte 5 continues", Bytes({0x80, 0x80, 0x80, 0x80, 0x80, 0x00}), false, true},
      {"byte 5 continues, low bits", Bytes({0xff, 0xff, 0xff, 0xff, 0x8f, 0x00}), false, true},
      {"uint64 max", Bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}), false,
       true},
      {"bit 64 set in byte 10",
       Bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}), false, false},
      {"byte 10 high bits", Bytes({0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7e}),
       false, false},
      {"11 bytes", Bytes({0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}),
       false, false},
      {"byte 10 continues",
       Bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x81, 0x00}), false, false},
      {"all continuation", std::string(20, '\x80'), false, false},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    Slice in32(c.bytes);
    uint32_t v32 = 7;
    CHECK(GetVarint32(&in32, &v32) == c.ok32);
    if (!c.ok32) {
      CHECK(v32 == 7);
      CHECK(in32.size() == c.bytes.size());
    }
    Slice in64(c.bytes);
    uint64_t v64 = 7;
    CHECK(GetVarint64(&in64, &v64) == c.ok64);
    if (!c.ok64) {
      CHECK(v64 == 7);
      CHECK(in64.size() == c.bytes.size());
    }
  }
  uint32_t v32 = 0;
  Slice max32(cases[0].bytes);
  REQUIRE(GetVarint32(&max32, &v32));
  CHECK(v32 == UINT32_MAX);
  uint64_t v64 = 0;
  Slice max64(cases[6].bytes);
  REQUIRE(GetVarint64(&max64, &v64));
  CHECK(v64 == UINT64_MAX);
}

TEST_CASE("Non-minimal varints within the length limit are accepted", "[common][coding]") {
  // Documented in coding.h: padding with 0x80 groups is tolerated, as in
  // LevelDB; our encoders never write it.
  const std::string zero_in_two = Bytes({0x80, 0x00});
  Slice in(zero_in_two);
  uint32_t v = 99;
  REQUIRE(GetVarint32(&in, &v));
  CHECK(v == 0);
  CHECK(in.empty());
  const std::string one_in_five = Bytes({0x81, 0x80, 0x80, 0x80, 0x00});
  Slice in5(one_in_five);
  REQUIRE(GetVarint32(&in5, &v));
  CHECK(v == 1);
}

TEST_CASE("Length-prefixed slices round trip and reject truncation", "[common][coding]") {
  const uint64_t seed = TestSeed();
  INFO("seed " << seed);
  Random64 rnd(seed);
  std::vector<std::string> values = {"", "a", std::string(127, 'x'), std::string(128, 'y'),
                                     std::string(16384, 'z')};
  for (int i = 0; i < 50; ++i) {
    std::string v(rnd.Uniform(400), '\0');
    rnd.Fill(v.data(), v.size());
    values.push_back(v);
  }
  std::string s;
  for (const std::string& v : values) PutLengthPrefixedSlice(&s, v);
  Slice in(s);
  for (const std::string& v : values) {
    Slice got;
    INFO("size " << v.size());
    REQUIRE(GetLengthPrefixedSlice(&in, &got));
    CHECK(got == Slice(v));
  }
  CHECK(in.empty());

  // Truncations: inside the 2-byte prefix of a 200-byte value, and anywhere in
  // its body.
  std::string enc;
  PutLengthPrefixedSlice(&enc, std::string(200, 'q'));
  REQUIRE(enc.size() == 202);
  for (size_t len = 0; len < enc.size(); ++len) {
    INFO("truncated to " << len);
    Slice t(enc.data(), len);
    Slice got("untouched");
    CHECK_FALSE(GetLengthPrefixedSlice(&t, &got));
    CHECK(got == Slice("untouched"));
    CHECK(t.data() == enc.data());
    CHECK(t.size() == len);
  }
  // A prefix that is not a valid varint32 fails too.
  const std::string bad_prefix = Bytes({0xff, 0xff, 0xff, 0xff, 0x1f}) + "body";
  Slice b(bad_prefix);
  Slice got;
  CHECK_FALSE(GetLengthPrefixedSlice(&b, &got));
  CHECK(b.size() == bad_prefix.size());
}

TEST_CASE("Decoder reads a record and reports the first failure", "[common][coding]") {
  std::string rec;
  PutFixed16(&rec, 0x1234);
  PutVarint32(&rec, 300);
  PutFixed32(&rec, 0xcafef00du);
  PutLengthPrefixedSlice(&rec, "key");
  PutVarint64(&rec, uint64_t{1} << 40);
  PutFixed64(&rec, 99);
  rec += "tail";

  {
    Decoder d(rec);
    uint16_t a = 0;
    uint32_t b = 0, c = 0;
    Slice key, tail;
    uint64_t e = 0, f = 0;
    CHECK(d.Fixed16(&a));
    CHECK(d.Varint32(&b));
    CHECK(d.Fixed32(&c));
    CHECK(d.LengthPrefixedSlice(&key));
    CHECK(d.Varint64(&e));
    CHECK(d.Fixed64(&f));
    CHECK(d.remaining() == 4);
    CHECK(d.Bytes(4, &tail));
    CHECK(d.ok());
    CHECK(d.status().ok());
    CHECK(d.remaining() == 0);
    CHECK(d.offset() == rec.size());
    CHECK(a == 0x1234);
    CHECK(b == 300);
    CHECK(c == 0xcafef00du);
    CHECK(key == Slice("key"));
    CHECK(e == uint64_t{1} << 40);
    CHECK(f == 99);
    CHECK(tail == Slice("tail"));
  }

  {
    // Cut inside the fixed32 (which starts at offset 4): the failure sticks.
    Decoder d(Slice(rec.data(), 6));
    uint16_t a = 0;
    uint32_t b = 0, c = 7;
    CHECK(d.Fixed16(&a));
    CHECK(d.Varint32(&b));
    CHECK(d.offset() == 4);
    CHECK_FALSE(d.Fixed32(&c));
    CHECK(c == 7);
    CHECK_FALSE(d.ok());
    CHECK(d.remaining() == 2);
    uint16_t later = 5;
    CHECK_FALSE(d.Fixed16(&later));  // would fit, but the decoder has failed
    CHECK(later == 5);
    CHECK(d.remaining() == 2);
    Status s = d.status();
    CHECK(s.IsCorruption());
    CHECK(s.message() == "truncated or malformed fixed32 at offset 4 of 6");
  }

  {
    const std::string truncated = Bytes({0x80, 0x80});
    Decoder d(truncated);
    uint64_t v = 0;
    CHECK_FALSE(d.Varint64(&v));
    CHECK(d.status().IsCorruption());
    Decoder d2("ab");
    Slice out;
    CHECK_FALSE(d2.Bytes(3, &out));
    CHECK(d2.status().message() == "truncated or malformed bytes at offset 0 of 2");
  }
}

}  // namespace
}  // namespace deuteron
