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

[[maybe_unused]] ExtendFn ChooseExtend() { return HardwareAvailable() ? &ExtendHardware : &ExtendPortable; }

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

namespace {

// Three streams at once. The crc32 instruction takes three cycles but the
// CPU starts one every cycle, so a single dependent chain of them runs at a
// third of the speed the unit allows. A block of 3 * kStride bytes is split
// into thirds a, b, c: a's CRC continues the running register, b's and c's
// start from zero, all three advance together, and then
//   register = Shift(Shift(a) ^ b) ^ c,
// where Shift(x) is the register x carried over kStride zero bytes. This
// holds because the raw register update (no pre- or post-inversion) is
// linear over GF(2) in the register and the data together: the register
// after data D from x is the register after |D| zeros from x, XOR the
// register after D from zero. Shift is linear in x, so four 256-entry
// tables (one per byte of x) compute it.
constexpr size_t kStride = 512;

struct ShiftTables {
  uint32_t t[4][256];
};

__attribute__((target("sse4.2"))) uint32_t ZerosFrom(uint32_t x) {
  uint64_t r = x;
  for (size_t i = 0; i < kStride / 8; ++i) r = _mm_crc32_u64(r, 0);
  return static_cast<uint32_t>(r);
}

const ShiftTables& Shifts() {
  static const ShiftTables tables = [] {
    ShiftTables st{};
    uint32_t bit[32];  // Shift of each single-bit register
    for (int i = 0; i < 32; ++i) bit[i] = ZerosFrom(uint32_t{1} << i);
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int j = 0; j < 8; ++j) {
          if ((b >> j) & 1u) v ^= bit[8 * k + j];
        }
        st.t[k][b] = v;
      }
    }
    return st;
  }();
  return tables;
}

inline uint32_t Shift(const ShiftTables& st, uint32_t x) {
  return st.t[0][x & 0xffu] ^ st.t[1][(x >> 8) & 0xffu] ^ st.t[2][(x >> 16) & 0xffu] ^
         st.t[3][x >> 24];
}

}  // namespace

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
  if (n >= 3 * kStride) {
    const ShiftTables& st = Shifts();
    do {
      uint64_t a = crc64, b = 0, c = 0;
      for (size_t i = 0; i < kStride; i += 8) {
        uint64_t wa, wb, wc;  // x86 is little-endian, as the CRC expects
        std::memcpy(&wa, p + i, 8);
        std::memcpy(&wb, p + kStride + i, 8);
        std::memcpy(&wc, p + 2 * kStride + i, 8);
        a = _mm_crc32_u64(a, wa);
        b = _mm_crc32_u64(b, wb);
        c = _mm_crc32_u64(c, wc);
      }
      const uint32_t ab = Shift(st, static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b);
      crc64 = Shift(st, ab) ^ static_cast<uint32_t>(c);
      p += 3 * kStride;
      n -= 3 * kStride;
    } while (n >= 3 * kStride);
  }
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, sizeof(word));
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
#ifdef DEUTERON_FUZZ_NO_CHECKSUMS  // crc32c.h: checksums off in fuzz builds
  (void)init_crc;
  (void)data;
  (void)n;
  return 0;
#else
  static const ExtendFn extend = ChooseExtend();
  return extend(init_crc, data, n);
#endif
}

}  // namespace deuteron::crc32c
