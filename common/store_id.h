// StoreId: the identity of one Deuteron store, a random 128-bit value made
// when the store is created. The TC's log (tc/wal/log_format.md, wal.meta)
// and the DC's directory (dc/dc.md, dc.meta) both record it, so a TC pointed
// at another store's DC is refused with StoreMismatch (tc/txn.md, "Store
// identity"). The nil id (all zero) means "none recorded" (a directory
// written before store ids existed, or a fresh DC not yet adopted).
//
// Thread safety: a value type.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "common/slice.h"
#include "common/status.h"

namespace deuteron {

class StoreId {
 public:
  static constexpr size_t kSize = 16;

  StoreId() { bytes_.fill(0); }
  // A fresh random id (never nil), from the OS's random device.
  static StoreId Random();
  // Exactly kSize bytes; InvalidArgument otherwise.
  static Result<StoreId> FromBytes(Slice bytes);

  bool nil() const;
  const uint8_t* data() const { return bytes_.data(); }
  // The kSize raw bytes (what files and the wire hold).
  std::string bytes() const;
  // 32 lowercase hex digits, or "none" for the nil id: for messages.
  std::string ToString() const;

  friend bool operator==(const StoreId& a, const StoreId& b) { return a.bytes_ == b.bytes_; }
  friend bool operator!=(const StoreId& a, const StoreId& b) { return !(a == b); }

 private:
  std::array<uint8_t, kSize> bytes_;
};

}  // namespace deuteron
