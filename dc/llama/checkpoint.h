// Mapping-table checkpoints (LLAMA section 6.2): the LSS address of every
// page's newest flushed state, written to one of two alternating files
// (ckpt-0, ckpt-1) with the recovery start position (RSP) and the cleaner's
// garbage-collection frontier. The previous checkpoint stays valid until the
// new one is complete: a file is written whole, synced, and only then counts.
//
// File format (little-endian, masked CRC32C):
//   header (72 bytes): magic u64 "DTRNCKPT", format_version u32, reserved u32,
//     store_id u64, sequence u64, rsp u64, gc_frontier u64, entry_count u64,
//     max_annotation u64 (the highest flush annotation written to the LSS
//     when the checkpoint was taken: the DC's durable LSN bound),
//     entries_crc u32, header_crc u32 (over the preceding 68 bytes)
//   entries: entry_count u64 values; entry i is page (i + 1)'s LSS address,
//     0 for a free page, kEmptyPageEntry for an allocated page with no state.
//     entries_crc covers their entry_count * 8 bytes.
// A file is valid when it is exactly 72 + 8 * entry_count bytes long, its
// magic and both CRCs match and its format_version is not 0 (one above
// kFormatVersion is an error, NotSupported, not a torn file). The file is
// rewritten in place (no rename): the slot being written only ever holds the
// older of the two checkpoints, and a torn write fails a check.
//
// Thread safety: free functions; callers serialize writes to one directory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/status.h"
#include "dc/llama/lss_format.h"

namespace deuteron::llama {

constexpr uint64_t kCheckpointMagic = 0x54504B434E525444ull;  // "DTRNCKPT"
constexpr size_t kCheckpointHeaderSize = 72;
constexpr uint64_t kEmptyPageEntry = ~0ull;

struct CheckpointData {
  uint64_t store_id = 0;
  uint64_t sequence = 0;       // higher = newer; written to slot sequence % 2
  LssAddress rsp = 0;          // recovery replays the LSS from here
  LssAddress gc_frontier = 0;  // the cleaner resumes here
  uint64_t max_annotation = 0; // Llama::MaxAnnotation() when taken
  std::vector<uint64_t> entries;
};

std::string CheckpointFileName(int slot);  // "ckpt-0" / "ckpt-1"

// Writes `data` to dir/ckpt-(sequence % 2) and syncs it and the directory.
// (The directory every time, not only when the file is new: a file created by
// a process that crashed before its directory sync exists but is not durable.)
// Only an OK return makes the checkpoint count; after an error the slot may
// hold a torn file, which readers skip.
// REQUIRES: dir exists; data.sequence is one above the newest valid
// checkpoint's (any value when there is none), and a failed write is retried
// with the same sequence: the slot written must never hold the newest valid
// checkpoint, or a crash during the write could leave none.
Status WriteCheckpoint(Env* env, const std::string& dir, const CheckpointData& data);

// The valid checkpoint with the highest sequence; the other one when the
// newest is torn or corrupt. NotFound when neither is valid and at least one
// slot is missing (none yet, or the first one torn; the message says why for
// each slot); Corruption when both slots are present and invalid (a
// complete checkpoint existed and is damaged: recovery without one could
// drop the records of released segments); StoreMismatch when a valid
// one belongs to another store (store_id 0 accepts any store; real store ids
// are never 0); NotSupported when a valid one has a newer format_version; an
// I/O error reading a slot is returned as is, since the slot might have held
// the newest checkpoint.
Result<CheckpointData> ReadLatestCheckpoint(Env* env, const std::string& dir,
                                            uint64_t store_id);

}  // namespace deuteron::llama
