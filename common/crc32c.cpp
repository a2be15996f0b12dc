#include "common/crc32c.h"

#include <array>
#include <cassert>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace deuteron::crc32c {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // 0x1EDC6F41 bit-reflected

using Tables = std::array<std::array<uint32_t, 256>, 8>;

// tables[0][b] is the CRC register after shifting byte b through an all-zero
// register (the classic byte-at-a-time table). tables[k][b] is the same for
// byte b followed by k zero bytes, so eight table lookups advance the
// register over eight input bytes at once (slicing-by-8).
constexpr Tables MakeTables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kPolynomial : 0u);
    t[0][b] = crc;
  }
  for (size_t k = 1; k < t.size(); ++k) {
    for (uint32_t b = 0; b < 256; ++b) {
      const uint32_t prev = t[k - 1][b];
      t[k][b] = (prev >> 8) ^ t[0][prev & 0xffu];
    }
  }
  return t;
}

constexpr Tables kTables = MakeTables();
static_assert(kTables[0][0x80] == kPolynomial, "one bit shifted out leaves the polynomial");
static_assert(kTables[0][0x01] == 0xF26B8303u, "published first entry of the CRC32C table");

// Little-endian 32-bit load from any alignment.
inline uint32_t LoadLe32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

using ExtendFn = uint32_t (*)(uint32_t, const char*, size_t);

ExtendFn ChooseExtend() { return HardwareAvailable() ? &ExtendHardware : &ExtendPortable; }

}  // namespace

uint32_t ExtendPortable(uint32_t init_crc, const char* data, size_t n) {
  const auto* p = reinterpret_cast<const uint8_t*>(data);
  uint32_t crc = init_crc ^ 0xffffffffu;
  while (n >= 8) {
    const uint32_t lo = crc ^ LoadLe32(p);
    const uint32_t hi = LoadLe32(p + 4);
    crc = kTables[7][lo & 0xffu] ^ kTables[6][(lo >> 8) & 0xffu] ^
          kTables[5][(lo >> 16) & 0xffu] ^ kTables[4][lo >> 24] ^
          kTables[3][hi & 0xffu] ^ kTables[2][(hi >> 8) & 0xffu] ^
          kTables[1][(hi >> 16) & 0xffu] ^ kTables[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    crc = (crc >> 8) ^ kTables[0][(crc ^ *p) & 0xffu];
    ++p;
    --n;
  }
  return crc ^ 0xffffffffu;
}

#if defined(__x86_64__)

__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t init_crc, const char* data,
                                                          size_t n) {
  const auto* p = reinterpret_cast<const uint8_t*>(data);
  uint32_t crc = init_crc ^ 0xffffffffu;
  // Single bytes up to an 8-byte boundary, so that the word loads below never
  // straddle a cache line.
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0) {
    crc = _mm_crc32_u8(crc, *p);
    ++p;
    --n;
  }
  uint64_t crc64 = crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, sizeof(word));  // x86 is little-endian, as the CRC expects
    crc64 = _mm_crc32_u64(crc64, word);
    p += 8;
    n -= 8;
  }
  crc = static_cast<uint32_t>(crc64);
  while (n > 0) {
    crc = _mm_crc32_u8(crc, *p);
    ++p;
    --n;
  }
  return crc ^ 0xffffffffu;
}

bool HardwareAvailable() {
  static const bool available = [] {
    __builtin_cpu_init();  // needed if we run before libgcc's constructor
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return available;
}

#else  // !__x86_64__

uint32_t ExtendHardware(uint32_t init_crc, const char* data, size_t n) {
  assert(false && "ExtendHardware without HardwareAvailable()");
  return ExtendPortable(init_crc, data, n);
}

bool HardwareAvailable() { return false; }

#endif

uint32_t Extend(uint32_t init_crc, const char* data, size_t n) {
  static const ExtendFn extend = ChooseExtend();
  return extend(init_crc, data, n);
}

}  // namespace deuteron::crc32c
