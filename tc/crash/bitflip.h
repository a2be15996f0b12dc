// The `bitflip` fault's file side (tc/crash/crash.md, "bitflip"): pick a
// seeded random bit in the used part of a stopped store's log segments or
// LSS segments and flip it; copy and restore a store around the attempt.
//
// Thread safety: free functions; callers keep the store stopped.
#pragma once

#include <cstdint>
#include <string>

#include "common/random.h"
#include "common/status.h"

namespace deuteron::crash {

struct Flip {
  std::string file;
  uint64_t offset = 0;
  int bit = 0;  // 0..7
  std::string ToString() const;
};

// The used length of a file: one past its last nonzero byte (0: none).
Result<uint64_t> UsedLength(const std::string& path);

// Flips one bit: with even odds in the log (tc_dir/log/*.wal, not spare
// segments) or the LSS (dc_dir/lss/*.seg), in a file chosen by used length,
// at a uniform offset within the used part. NotFound when neither holds a
// used byte.
Result<Flip> FlipRandomBit(const std::string& tc_dir, const std::string& dc_dir, Random64& rng);

// Flips `flip`'s bit again (XOR), e.g. to undo it.
Status FlipBit(const Flip& flip);

// Replaces `to` with a copy of `from` (recursively, holes kept: cp -a
// --sparse=always).
Status CopyTree(const std::string& from, const std::string& to);

}  // namespace deuteron::crash
