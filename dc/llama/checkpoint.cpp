// Mapping-table checkpoint files; the format is documented in
// dc/llama/checkpoint.h.
#include "dc/llama/checkpoint.h"

#include <algorithm>
#include <bit>
#include <memory>
#include <optional>
#include <utility>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/fault_hooks.h"

namespace deuteron::llama {
namespace {

// Header field offsets.
constexpr size_t kMagicOffset = 0;
constexpr size_t kVersionOffset = 8;
constexpr size_t kStoreIdOffset = 16;
constexpr size_t kSequenceOffset = 24;
constexpr size_t kRspOffset = 32;
constexpr size_t kGcFrontierOffset = 40;
constexpr size_t kEntryCountOffset = 48;
constexpr size_t kMaxAnnotationOffset = 56;
constexpr size_t kEntriesCrcOffset = 64;
constexpr size_t kHeaderCrcOffset = 68;
static_assert(kHeaderCrcOffset + 4 == kCheckpointHeaderSize);

// Entries are written, read and checksummed this many at a time.
constexpr size_t kChunkEntries = size_t{1} << 17;  // 1 MiB

// Calls fn(Slice) on the little-endian bytes of entries[0, n), one chunk at a
// time, stopping at the first error. On a little-endian host the vector's own
// bytes are the encoding and nothing is copied.
template <typename Fn>
Status ForEachChunk(const uint64_t* entries, size_t n, Fn&& fn) {
  std::string buf;
  for (size_t i = 0; i < n; i += kChunkEntries) {
    const size_t m = std::min(kChunkEntries, n - i);
    if constexpr (std::endian::native == std::endian::little) {
      RETURN_IF_ERROR(fn(Slice(reinterpret_cast<const char*>(entries + i), m * 8)));
    } else {
      buf.resize(m * 8);
      for (size_t j = 0; j < m; ++j) EncodeFixed64(&buf[j * 8], entries[i + j]);
      RETURN_IF_ERROR(fn(Slice(buf)));
    }
  }
  return Status::OK();
}

uint32_t EntriesCrc(const std::vector<uint64_t>& entries) {
  uint32_t crc = 0;
  Status s = ForEachChunk(entries.data(), entries.size(), [&crc](Slice chunk) {
    crc = crc32c::Extend(crc, chunk.data(), chunk.size());
    return Status::OK();
  });
  s.PermitUncheckedError();  // the callback never fails
  return crc32c::Mask(crc);
}

std::string EncodeHeader(const CheckpointData& data, uint32_t entries_crc) {
  std::string h(kCheckpointHeaderSize, '\0');
  EncodeFixed64(&h[kMagicOffset], kCheckpointMagic);
  EncodeFixed32(&h[kVersionOffset], kFormatVersion);
  EncodeFixed64(&h[kStoreIdOffset], data.store_id);
  EncodeFixed64(&h[kSequenceOffset], data.sequence);
  EncodeFixed64(&h[kRspOffset], data.rsp);
  EncodeFixed64(&h[kGcFrontierOffset], data.gc_frontier);
  EncodeFixed64(&h[kEntryCountOffset], data.entries.size());
  EncodeFixed64(&h[kMaxAnnotationOffset], data.max_annotation);
  EncodeFixed32(&h[kEntriesCrcOffset], entries_crc);
  EncodeFixed32(&h[kHeaderCrcOffset], crc32c::Mask(crc32c::Value(h.data(), kHeaderCrcOffset)));
  return h;
}

// The checkpoint in `path`. NotFound when the file is missing, Corruption
// when it is torn or damaged, NotSupported for a newer format, else the I/O
// error.
Result<CheckpointData> ReadCheckpointFile(Env* env, const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<File> file, env->OpenFile(path, OpenMode::kRead));
  ASSIGN_OR_RETURN(const uint64_t size, file->Size());
  if (size < kCheckpointHeaderSize) {
    return Status::Corruption(path + ": " + std::to_string(size) +
                              " bytes, shorter than a checkpoint header");
  }
  char h[kCheckpointHeaderSize];
  RETURN_IF_ERROR(file->ReadExactAt(0, h, sizeof(h)));
  if (DecodeFixed64(h + kMagicOffset) != kCheckpointMagic) {
    return Status::Corruption(path + ": not a checkpoint (bad magic)");
  }
  if (crc32c::Unmask(DecodeFixed32(h + kHeaderCrcOffset)) !=
      crc32c::Value(h, kHeaderCrcOffset)) {
    return Status::Corruption(path + ": header checksum mismatch");
  }
  const uint32_t version = DecodeFixed32(h + kVersionOffset);
  if (version == 0) return Status::Corruption(path + ": format version 0");
  if (version > kFormatVersion) {
    return Status::NotSupported(path + ": checkpoint format version " + std::to_string(version) +
                                " is newer than this build's " + std::to_string(kFormatVersion));
  }
  const uint64_t count = DecodeFixed64(h + kEntryCountOffset);
  const uint64_t body = size - kCheckpointHeaderSize;
  if (body % 8 != 0 || count != body / 8) {
    return Status::Corruption(path + ": " + std::to_string(size) + " bytes do not hold the " +
                              std::to_string(count) + " entries the header announces");
  }

  CheckpointData data;
  data.store_id = DecodeFixed64(h + kStoreIdOffset);
  data.sequence = DecodeFixed64(h + kSequenceOffset);
  data.rsp = DecodeFixed64(h + kRspOffset);
  data.gc_frontier = DecodeFixed64(h + kGcFrontierOffset);
  data.max_annotation = DecodeFixed64(h + kMaxAnnotationOffset);
  data.entries.resize(count);
  if constexpr (std::endian::native == std::endian::little) {
    RETURN_IF_ERROR(file->ReadExactAt(kCheckpointHeaderSize,
                                      reinterpret_cast<char*>(data.entries.data()), body));
  } else {
    std::string buf;
    for (uint64_t i = 0; i < count; i += kChunkEntries) {
      const uint64_t m = std::min<uint64_t>(kChunkEntries, count - i);
      buf.resize(m * 8);
      RETURN_IF_ERROR(file->ReadExactAt(kCheckpointHeaderSize + i * 8, buf.data(), buf.size()));
      for (uint64_t j = 0; j < m; ++j) data.entries[i + j] = DecodeFixed64(&buf[j * 8]);
    }
  }
  RETURN_IF_ERROR(file->Close());
  if (EntriesCrc(data.entries) != DecodeFixed32(h + kEntriesCrcOffset)) {
    return Status::Corruption(path + ": entries checksum mismatch");
  }
  return data;
}

}  // namespace

std::string CheckpointFileName(int slot) { return "ckpt-" + std::to_string(slot); }

Status WriteCheckpoint(Env* env, const std::string& dir, const CheckpointData& data) {
  const std::string path = JoinPath(dir, CheckpointFileName(static_cast<int>(data.sequence % 2)));
  const std::string header = EncodeHeader(data, EntriesCrc(data.entries));
  ASSIGN_OR_RETURN(std::unique_ptr<File> file, env->OpenFile(path, OpenMode::kTruncate));
  RETURN_IF_ERROR(file->Append(header));
  RETURN_IF_ERROR(ForEachChunk(data.entries.data(), data.entries.size(),
                               [&file](Slice chunk) { return file->Append(chunk); }));
  DEUTERON_KILL_POINT(kDcCheckpointBeforeSync);
  RETURN_IF_ERROR(file->Sync());
  DEUTERON_KILL_POINT(kDcCheckpointAfterSync);
  RETURN_IF_ERROR(file->Close());
  return env->SyncDir(dir);
}

Result<CheckpointData> ReadLatestCheckpoint(Env* env, const std::string& dir,
                                            uint64_t store_id) {
  std::optional<CheckpointData> best;
  std::string why;  // each rejected slot's reason, for the NotFound message
  int damaged = 0;  // slots present but invalid
  for (int slot = 0; slot < 2; ++slot) {
    Result<CheckpointData> r = ReadCheckpointFile(env, JoinPath(dir, CheckpointFileName(slot)));
    if (!r.ok()) {
      const Status& s = r.status();
      // A missing or torn slot is skipped; anything else could hide the newest
      // checkpoint, so it is not.
      if (!s.IsNotFound() && !s.IsCorruption()) return s;
      if (s.IsCorruption()) ++damaged;
      why += (why.empty() ? "" : "; ") + s.ToString();
      continue;
    }
    if (store_id != 0 && r->store_id != store_id) {
      return Status::StoreMismatch(JoinPath(dir, CheckpointFileName(slot)) +
                                   ": checkpoint of store " + std::to_string(r->store_id) +
                                   ", expected store " + std::to_string(store_id));
    }
    if (!best.has_value() || r->sequence > best->sequence) best = std::move(r).value();
  }
  // Both slots exist only once a checkpoint was complete (the second slot is
  // first written after the first one succeeded, and a write never touches
  // the slot holding the newest valid checkpoint), so two invalid slots are
  // damage, not a crash: replaying the LSS without a checkpoint would miss
  // what released segments held (their pages' allocations).
  if (!best.has_value() && damaged == 2) {
    return Status::Corruption("both checkpoints in " + dir + " are damaged: " + why);
  }
  if (!best.has_value()) return Status::NotFound("no valid checkpoint in " + dir + ": " + why);
  return std::move(*best);
}

}  // namespace deuteron::llama
