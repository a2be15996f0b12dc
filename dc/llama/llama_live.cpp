// Llama: the live bytes, the LSS bytes that the pages' current states need
// (llama.h, Stats::live_bytes; llama.md, "Live bytes"). Each change of a
// page's LSS state adds its difference where it is made (flushes,
// replacements, commits, relocations, frees); this file holds the walks
// that find a state's bytes when they were not noted, the recount and the
// recovery of the total at open.
#include <string>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "dc/llama/internal/llama_impl.h"
#include "dc/llama/llama.h"

namespace deuteron::llama {

LssAddress Llama::EntryLssHead(uint64_t e) {
  if (MappingTable::IsLss(e)) return MappingTable::ToLss(e);
  if (MappingTable::IsMemory(e)) return LssHeadOf(MappingTable::ToPointer<const PageNode>(e));
  return kNullAddress;  // free, or allocated with no state
}

Result<uint64_t> Llama::WalkStateBytes(PageId pid, LssAddress head) {
  uint64_t bytes = 0;
  for (LssAddress a = head; a != kNullAddress;) {
    RETURN_IF_ERROR(EnsureWritten(a));
    ASSIGN_OR_RETURN(RecordHeader h, lss_->ReadRecordHeader(a));
    const std::string where = "LSS record at " + std::to_string(a);
    if (h.type != RecordType::kBase && h.type != RecordType::kDelta) {
      return Status::Corruption(where + " is not a page record");
    }
    if (h.pid != pid) {
      return Status::Corruption(where + " belongs to " + PageName(h.pid) + ", not " +
                                PageName(pid));
    }
    bytes += RecordSpan(h.length);
    if (h.type == RecordType::kBase) break;
    if (h.prev == kNullAddress || h.prev >= a) {
      return Status::Corruption(where + ": C-delta with bad link " + std::to_string(h.prev));
    }
    a = h.prev;
  }
  return bytes;
}

Result<uint64_t> Llama::StateBytesOf(PageId pid, LssAddress head) {
  if (std::optional<uint64_t> b = state_bytes_->Lookup(pid, head)) return *b;
  ASSIGN_OR_RETURN(const uint64_t bytes, WalkStateBytes(pid, head));
  state_bytes_->Note(pid, head, bytes);
  return bytes;
}

Result<uint64_t> Llama::RecountLiveBytes() {
  uint64_t total = 0;
  for (PageId pid = 1; pid < mapping_->high_water(); ++pid) {
    // The guard lasts the walk: cleaning releases the segments of a state
    // it relocated only once the guards that could hold its address ended.
    auto guard = epochs_->Enter();
    const LssAddress head = EntryLssHead(mapping_->Load(pid));
    // Whole records, checksums verified: not the header walk the count
    // itself falls back on.
    for (LssAddress a = head; a != kNullAddress;) {
      RETURN_IF_ERROR(EnsureWritten(a));
      std::string payload;
      ASSIGN_OR_RETURN(RecordHeader h, lss_->ReadRecord(a, &payload));
      if (h.pid != pid || (h.type != RecordType::kBase && h.type != RecordType::kDelta)) {
        return Status::Corruption("LSS record at " + std::to_string(a) + " is not " +
                                  PageName(pid) + "'s");
      }
      total += RecordSpan(h.length);
      if (h.type == RecordType::kBase) break;
      if (h.prev == kNullAddress || h.prev >= a) {
        return Status::Corruption("LSS record at " + std::to_string(a) + ": bad link");
      }
      a = h.prev;
    }
  }
  return total;
}

Status Llama::RecoverLiveBytes() {
  // Every page recovered is an LSS address (or empty, or free): walk each
  // state once, noting it for the changes to come.
  uint64_t total = 0;
  for (PageId pid = 1; pid < mapping_->high_water(); ++pid) {
    const uint64_t e = mapping_->Load(pid);
    if (!MappingTable::IsLss(e)) continue;
    ASSIGN_OR_RETURN(const uint64_t bytes, StateBytesOf(pid, MappingTable::ToLss(e)));
    total += bytes;
  }
  state_bytes_->Set(static_cast<int64_t>(total));
  return Status::OK();
}

void Llama::SubtractFreed(PageId pid, uint64_t entry,
                          std::vector<std::pair<PageId, LssAddress>>* unresolved) {
  const LssAddress head = EntryLssHead(entry);
  if (head == kNullAddress) return;
  if (std::optional<uint64_t> b = state_bytes_->Lookup(pid, head)) {
    state_bytes_->Add(-static_cast<int64_t>(*b));
  } else {
    unresolved->emplace_back(pid, head);
  }
}

void Llama::SubtractUnresolved(const std::vector<std::pair<PageId, LssAddress>>& unresolved) {
  for (const auto& [pid, head] : unresolved) {
    Result<uint64_t> b = WalkStateBytes(pid, head);
    if (!b.ok()) {
      // The count keeps the freed state: too high, never unsafe.
      DLOG_ERROR("live bytes: freed {} at {}: {}", PageName(pid), head, b.status().ToString());
      continue;
    }
    state_bytes_->Add(-static_cast<int64_t>(*b));
  }
}

}  // namespace deuteron::llama
