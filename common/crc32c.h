// CRC32C (Castagnoli): the checksum on every log record, page image and
// on-disk block in Deuteron.
//
// The polynomial is 0x1EDC6F41, used in its bit-reflected form 0x82F63B78
// (iSCSI, ext4, LevelDB), with the conventional pre- and post-inversion, so
// Value("123456789") == 0xE3069283. Two implementations give identical
// results: a portable table-driven one (slicing-by-8) and one that uses the
// SSE4.2 CRC32 instruction. Extend() picks the hardware one once, at first
// use, when the CPU supports it.
//
// Checksums stored on disk are Mask()ed first: the CRC of a byte string that
// itself contains CRCs is weak, so a stored CRC is rotated and offset to look
// unlike a CRC of the surrounding bytes. (A heuristic, as in LevelDB: Mask
// has exactly two fixed points, 0x8299f00b and 0xd7ee9ab5, found by exhaustive
// search.)
//
// Fuzz builds (DEUTERON_FUZZ_NO_CHECKSUMS, set by DEUTERON_FUZZ: scripts/fuzz
// only) turn checksums off: Extend, Value, Mask and Unmask all return 0, so
// a stored checksum of 0 (what such a build writes) always matches, and a
// check that unmasks the stored value passes whatever it holds. Fuzzed bytes
// then reach the parsers behind the checks instead of stopping at them.
//
// Thread safety: every function is pure (or, for the one-time dispatch and
// the HardwareAvailable() cache, initialized thread-safely) and may be called
// from any thread concurrently.
#pragma once

#include <cstddef>
#include <cstdint>

namespace deuteron::crc32c {

// The CRC of the concatenation A + data[0, n), where init_crc is the CRC of
// some byte string A (0 for the empty string).
// REQUIRES: data points to n readable bytes (data may be null when n == 0).
uint32_t Extend(uint32_t init_crc, const char* data, size_t n);

// The CRC of data[0, n).
inline uint32_t Value(const char* data, size_t n) { return Extend(0, data, n); }

// Table-driven (slicing-by-8) implementation; works on every CPU.
uint32_t ExtendPortable(uint32_t init_crc, const char* data, size_t n);

// SSE4.2 implementation.
// REQUIRES: HardwareAvailable().
uint32_t ExtendHardware(uint32_t init_crc, const char* data, size_t n);

// Whether this CPU has the SSE4.2 CRC32 instruction (always false off x86-64).
// Computed once and cached.
bool HardwareAvailable();

inline constexpr uint32_t kMaskDelta = 0xa282ead8u;

// The form of a CRC stored on disk: rotated right by 15 bits, plus kMaskDelta.
inline constexpr uint32_t Mask(uint32_t crc) {
#ifdef DEUTERON_FUZZ_NO_CHECKSUMS
  (void)crc;
  return 0;
#else
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
#endif
}

// Inverse of Mask(): Unmask(Mask(crc)) == crc for every crc.
inline constexpr uint32_t Unmask(uint32_t masked) {
#ifdef DEUTERON_FUZZ_NO_CHECKSUMS
  (void)masked;
  return 0;
#else
  const uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
#endif
}

}  // namespace deuteron::crc32c
