#include "tc/cli/store_check.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>

#include "common/coding.h"
#include "common/crc32c.h"
#include "dc/dc.h"
#include "dc/llama/checkpoint.h"
#include "dc/llama/lss_format.h"
#include "tc/cli/cli_options.h"
#include "tc/cli/progress.h"
#include "tc/wal/log_format.h"

namespace deuteron::cli {

void CheckReport::Checked(const std::string& area, const std::string& what) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%-9s ", area.c_str());
  lines_.push_back(std::string("  ") + buf + what);
  if (print_) {
    std::printf("%s\n", lines_.back().c_str());
    std::fflush(stdout);
  }
}

void CheckReport::Problem(const std::string& file, uint64_t offset, const std::string& what) {
  problems_.push_back({file, offset, what});
  if (print_) {
    std::printf("  PROBLEM   %s offset %llu: %s\n", file.c_str(), static_cast<unsigned long long>(offset),
                what.c_str());
    std::fflush(stdout);
  }
}

namespace {

// The whole file (empty, with *exists false, when absent).
Result<std::string> ReadAll(Env* env, const std::string& path, bool* exists) {
  *exists = env->FileExists(path);
  if (!*exists) return std::string();
  return ReadFileToString(env, path);
}

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// ---- the log ----

struct LogSegment {
  uint64_t number = 0;
  std::string path;
  uint64_t valid_end = 0;       // offset of the first invalid record (or the size)
  const char* why = nullptr;    // why it is invalid; null when the walk reached the end
  uint64_t records = 0;
  uint64_t max_esl_seen = 0;    // over the chain's records
  uint64_t stray_esl_seen = 0;  // over valid records after valid_end
  uint64_t stray_offset = 0;    // the first such record with the highest esl_seen
};

// Progress within a segment: `walked` gets the offset reached, every
// kWalkedStep bytes or so (a segment is 16 or 64 MiB: the live line moves
// while one is checked, not only between them).
constexpr uint64_t kWalkedStep = 1 << 20;
using Walked = std::function<void(uint64_t offset)>;

void WalkLogSegment(const std::string& data, uint64_t segment_size, LogSegment* seg,
                    const Walked& walked) {
  const wal::Lsn start = wal::SegmentStart(seg->number, segment_size);
  uint64_t off = 0, reported = 0;
  while (off + wal::kRecordHeaderSize <= segment_size) {
    if (off - reported >= kWalkedStep) {
      walked(off);
      reported = off;
    }
    wal::RecordHeader h;
    const char* why = nullptr;
    const size_t avail = off < data.size() ? data.size() - off : 0;
    const wal::Parsed p =
        wal::ParseRecord(avail == 0 ? "" : data.data() + off, avail, start + off, segment_size, &h, &why);
    if (p == wal::Parsed::kInvalid) {
      seg->why = why;
      break;
    }
    seg->max_esl_seen = std::max(seg->max_esl_seen, h.esl_seen);
    if (p == wal::Parsed::kPadding) {
      off = segment_size;
      break;
    }
    ++seg->records;
    off += wal::RecordSpan(h.length);
  }
  seg->valid_end = std::min<uint64_t>(off, segment_size);
  // What lies after the end: a valid record there whose esl_seen is above
  // the end proves the end was durable (damage, not a torn tail).
  for (uint64_t o = seg->valid_end + wal::kRecordAlign; o + wal::kRecordHeaderSize <= data.size();
       o += wal::kRecordAlign) {
    if (o - reported >= kWalkedStep) {
      walked(o);
      reported = o;
    }
    wal::RecordHeader h;
    const wal::Parsed p = wal::ParseRecord(data.data() + o, data.size() - o, start + o, segment_size, &h, nullptr);
    if (p != wal::Parsed::kInvalid && h.esl_seen > seg->stray_esl_seen) {
      seg->stray_esl_seen = h.esl_seen;
      seg->stray_offset = o;
    }
  }
}

}  // namespace

void CheckLog(Env* env, const std::string& log_dir, CheckReport* report, StoreId* store_id) {
  *store_id = StoreId();
  const std::string meta_path = JoinPath(log_dir, wal::kMetaFileName);
  Result<std::vector<std::string>> children = env->GetChildren(log_dir);
  if (!children.ok()) {
    report->Problem(log_dir, 0, "cannot list the log directory: " + children.status().ToString());
    return;
  }
  std::vector<uint64_t> numbers;
  for (const std::string& name : *children) {
    uint64_t n = 0;
    if (wal::ParseSegmentFileName(name, &n)) numbers.push_back(n);
  }
  std::sort(numbers.begin(), numbers.end());
  bool exists = false;
  Result<std::string> meta_bytes = ReadAll(env, meta_path, &exists);
  if (!meta_bytes.ok()) {
    report->Problem(meta_path, 0, "unreadable: " + meta_bytes.status().ToString());
    return;
  }
  if (!exists) {
    if (numbers.empty()) {
      report->Checked("log", "empty (no wal.meta, no segments)");
    } else {
      report->Problem(meta_path, 0, "missing, but the log has " + std::to_string(numbers.size()) + " segments");
    }
    return;
  }
  Result<wal::LogMeta> meta = wal::DecodeMeta(*meta_bytes, meta_path);
  if (!meta.ok()) {
    report->Problem(meta_path, 0, meta.status().ToString());
    return;
  }
  *store_id = meta->store_id;
  const uint64_t S = meta->segment_size;
  report->Checked("log", "wal.meta: segment size " + FormatSize(S) + ", durable RSSP " +
                             std::to_string(meta->rssp) + ", store " + meta->store_id.ToString());
  if (meta->rssp != wal::kNullLsn && !numbers.empty()) {
    const uint64_t rssp_segment = wal::SegmentOf(meta->rssp, S);
    if (!std::binary_search(numbers.begin(), numbers.end(), rssp_segment)) {
      report->Problem(JoinPath(log_dir, wal::SegmentFileName(rssp_segment)), 0,
                      "missing: it holds the durable RSSP " + std::to_string(meta->rssp) +
                          ", where recovery starts");
    }
  }
  Progress progress("check: log", S * numbers.size(), Progress::kBytes);
  std::vector<LogSegment> segs;
  uint64_t bytes = 0, records = 0;
  for (size_t i = 0; i < numbers.size(); ++i) {
    LogSegment seg;
    seg.number = numbers[i];
    seg.path = JoinPath(log_dir, wal::SegmentFileName(seg.number));
    if (i > 0 && numbers[i] != numbers[i - 1] + 1) {
      report->Problem(JoinPath(log_dir, wal::SegmentFileName(numbers[i - 1] + 1)), 0,
                      "missing: segments " + std::to_string(numbers[i - 1]) + " and " +
                          std::to_string(numbers[i]) + " are there, not the ones between");
    }
    Result<std::string> data = ReadFileToString(env, seg.path);
    if (!data.ok()) {
      report->Problem(seg.path, 0, "unreadable: " + data.status().ToString());
      continue;
    }
    if (data->size() != S) {
      report->Problem(seg.path, data->size(),
                      "segment file is " + std::to_string(data->size()) + " bytes, not " + std::to_string(S) +
                          " (truncated or grown)");
    }
    WalkLogSegment(*data, S, &seg, [&](uint64_t off) { progress.Update(S * i + off); });
    bytes += seg.valid_end;
    records += seg.records;
    segs.push_back(seg);
    progress.Update(S * (i + 1));
  }
  progress.Finish();
  // Each place a segment's walk stopped early: damage when a later valid
  // record (in this segment after it, or in a later segment) proves it durable.
  bool end_seen = false;
  for (size_t i = 0; i < segs.size(); ++i) {
    const LogSegment& seg = segs[i];
    if (seg.why == nullptr) continue;
    const wal::Lsn at = wal::SegmentStart(seg.number, S) + seg.valid_end;
    uint64_t proof = seg.stray_esl_seen;
    uint64_t proof_segment = seg.number, proof_offset = seg.stray_offset;
    for (size_t j = i + 1; j < segs.size(); ++j) {
      if (segs[j].max_esl_seen > proof) {
        proof = segs[j].max_esl_seen;
        proof_segment = segs[j].number;
        proof_offset = 0;
      }
    }
    if (proof > at) {
      report->Problem(seg.path, seg.valid_end,
                      std::string("invalid record (") + seg.why + ") at LSN " + std::to_string(at) +
                          ", below the ESL " + std::to_string(proof) + " that the record in segment " +
                          std::to_string(proof_segment) + " near offset " + std::to_string(proof_offset) +
                          " saw: it was durable");
    } else if (!end_seen) {
      end_seen = true;
      report->Checked("log", "end of the log at " + wal::DescribePosition(at, S) + " (" + seg.why + ")");
    } else {
      report->Checked("log", "records after the end in " + seg.path + " (recovery discards them)");
    }
  }
  report->Checked("log", std::to_string(segs.size()) + " segments, " + std::to_string(records) + " records, " +
                             FormatSize(bytes) + " of records checked");
}

// ---- the DC: IDENTITY, LSS segments, checkpoints, dc.meta ----

namespace {

struct LssSegment {
  uint64_t number = 0;
  std::string path;
  uint64_t valid_end = 0;  // address where the buffer walk stopped
  std::string why;         // why it stopped ("" when it reached the segment end)
  uint64_t buffers = 0, records = 0;
};

// Decodes the records of one buffer; a failure is a problem (the buffer's
// checksum held, so the record was written bad).
void CheckRecords(const LssSegment& seg, uint64_t S, llama::LssAddress base, Slice records,
                  CheckReport* report, uint64_t* count) {
  size_t off = 0;
  while (off < records.size()) {
    const llama::LssAddress address = base + llama::kBufferHeaderSize + off;
    Slice payload;
    Result<llama::RecordHeader> h =
        llama::DecodeRecord(Slice(records.data() + off, records.size() - off), &payload);
    const size_t span = h.ok() ? llama::RecordSpan(h->length) : 0;
    if (!h.ok() || span > records.size() - off) {
      report->Problem(seg.path, llama::OffsetInSegment(address, S),
                      h.ok() ? "record runs past its buffer" : h.status().ToString());
      return;
    }
    ++*count;
    if (h->type == llama::RecordType::kTransaction) {
      size_t in = 0;
      for (uint32_t i = 0; i < h->count; ++i) {
        Slice p;
        Result<llama::RecordHeader> r = llama::DecodeRecord(Slice(payload.data() + in, payload.size() - in), &p);
        if (!r.ok() || r->type == llama::RecordType::kTransaction ||
            llama::RecordSpan(r->length) > payload.size() - in) {
          report->Problem(seg.path, llama::OffsetInSegment(address + llama::kRecordHeaderSize + in, S),
                          "bad record in a system transaction");
          return;
        }
        in += llama::RecordSpan(r->length);
        ++*count;
      }
      if (in != payload.size()) {
        report->Problem(seg.path, llama::OffsetInSegment(address, S),
                        "system transaction's records do not fill its payload");
        return;
      }
    }
    off += span;
  }
}

// Walks one segment's buffers; *max_stable gets the highest stable_at_seal.
void WalkLssSegment(const std::string& data, const llama::StoreIdentity& id, LssSegment* seg,
                    CheckReport* report, uint64_t* max_stable, const Walked& walked) {
  const uint64_t S = id.segment_size;
  Result<llama::SegmentHeader> sh = llama::DecodeSegmentHeader(Slice(data));
  if (!sh.ok()) {
    report->Problem(seg->path, 0, "segment header: " + sh.status().ToString());
  } else if (sh->segment_number != seg->number || sh->store_id != id.store_id || sh->segment_size != S) {
    report->Problem(seg->path, 0,
                    "segment header names segment " + std::to_string(sh->segment_number) + " of store " +
                        Hex(sh->store_id) + ", size " + std::to_string(sh->segment_size) + "; expected segment " +
                        std::to_string(seg->number) + " of store " + Hex(id.store_id));
  }
  llama::LssAddress base = llama::FirstBufferBase(seg->number, S);
  while (llama::SegmentOf(base, S) == seg->number) {
    const uint64_t off = llama::OffsetInSegment(base, S);
    if (off + llama::kBufferHeaderSize > data.size()) {
      seg->why = "the file ends";
      break;
    }
    Result<llama::BufferHeader> h = llama::DecodeBufferHeader(Slice(data.data() + off, llama::kBufferHeaderSize));
    if (!h.ok()) {
      seg->why = h.status().ToString();
      break;
    }
    if (h->base != base) {
      seg->why = "buffer header names address " + std::to_string(h->base) + ", not its own";
      break;
    }
    if (off + llama::kBufferHeaderSize + h->used > data.size()) {
      seg->why = "buffer of " + std::to_string(h->used) + " record bytes runs past the end of the file";
      break;
    }
    const Slice records(data.data() + off + llama::kBufferHeaderSize, h->used);
    if (crc32c::Mask(crc32c::Value(records.data(), records.size())) != h->records_crc) {
      seg->why = "buffer records checksum mismatch";
      break;
    }
    CheckRecords(*seg, S, base, records, report, &seg->records);
    *max_stable = std::max(*max_stable, h->stable_at_seal);
    ++seg->buffers;
    base = llama::NextBufferBase(base, h->used, S);
    walked(off + llama::kBufferHeaderSize + h->used);
  }
  seg->valid_end = llama::SegmentOf(base, S) == seg->number ? base : (seg->number + 1) * S;
}

}  // namespace

void CheckDcFiles(Env* env, const std::string& dc_dir, CheckReport* report, StoreId* store_id) {
  *store_id = StoreId();
  // dc.meta first: its stable_lss is the floor below which nothing may be missing.
  const std::string meta_path = JoinPath(dc_dir, dc::kDcMetaFileName);
  bool exists = false;
  uint64_t floor = 0;
  Result<std::string> meta_bytes = ReadAll(env, meta_path, &exists);
  if (!meta_bytes.ok()) {
    report->Problem(meta_path, 0, "unreadable: " + meta_bytes.status().ToString());
  } else if (!exists) {
    report->Checked("dc.meta", "absent: no RSSP acknowledged yet");
  } else {
    Result<dc::DcMeta> meta = dc::DecodeDcMeta(*meta_bytes);
    if (!meta.ok()) {
      report->Problem(meta_path, 0, meta.status().ToString());
    } else {
      *store_id = meta->store_id;
      floor = meta->stable_lss;
      report->Checked("dc.meta", "RSSP " + std::to_string(meta->rssp) + ", stable LSS " +
                                     std::to_string(meta->stable_lss) + ", incarnation " +
                                     std::to_string(meta->incarnation) + ", store " + meta->store_id.ToString());
    }
  }
  const std::string id_path = JoinPath(dc_dir, "IDENTITY");
  Result<std::string> id_bytes = ReadAll(env, id_path, &exists);
  if (!id_bytes.ok() || !exists) {
    report->Problem(id_path, 0, exists ? "unreadable: " + id_bytes.status().ToString() : "missing");
    return;
  }
  Result<llama::StoreIdentity> id = llama::DecodeIdentity(*id_bytes);
  if (!id.ok()) {
    report->Problem(id_path, 0, id.status().ToString());
    return;
  }
  const uint64_t S = id->segment_size;
  report->Checked("lss", "IDENTITY: format " + std::to_string(id->format_version) + ", LSS " + Hex(id->store_id) +
                             ", segment size " + FormatSize(S) + ", buffer size " + FormatSize(id->buffer_size));
  if (S < 2 * llama::kMinBufferSpan || (S & (S - 1)) != 0) {
    report->Problem(id_path, 0, "segment size " + std::to_string(S) + " is not a power of two >= 128 KiB");
    return;
  }
  const std::string lss_dir = JoinPath(dc_dir, "lss");
  std::vector<uint64_t> numbers;
  if (env->FileExists(lss_dir)) {
    Result<std::vector<std::string>> children = env->GetChildren(lss_dir);
    if (!children.ok()) {
      report->Problem(lss_dir, 0, "cannot list: " + children.status().ToString());
      return;
    }
    for (const std::string& name : *children) {
      uint64_t n = 0;
      if (llama::ParseSegmentFileName(name, &n)) numbers.push_back(n);
    }
  }
  std::sort(numbers.begin(), numbers.end());
  uint64_t total = 0;
  for (uint64_t n : numbers) {
    Result<uint64_t> size = env->GetFileSize(JoinPath(lss_dir, llama::SegmentFileName(n)));
    if (size.ok()) total += *size;
  }
  Progress progress("check: lss", total, Progress::kBytes);
  std::map<uint64_t, LssSegment> segs;
  uint64_t max_stable = 0, read = 0, buffers = 0, records = 0;
  for (uint64_t n : numbers) {
    LssSegment seg;
    seg.number = n;
    seg.path = JoinPath(lss_dir, llama::SegmentFileName(n));
    Result<std::string> data = ReadFileToString(env, seg.path);
    if (!data.ok()) {
      report->Problem(seg.path, 0, "unreadable: " + data.status().ToString());
      continue;
    }
    WalkLssSegment(*data, *id, &seg, report, &max_stable,
                   [&](uint64_t off) { progress.Update(read + off); });
    read += data->size();
    buffers += seg.buffers;
    records += seg.records;
    progress.Update(read);
    segs.emplace(n, std::move(seg));
  }
  progress.Finish();
  for (const auto& [n, seg] : segs) {
    if (seg.why.empty()) continue;
    const uint64_t off = llama::OffsetInSegment(seg.valid_end, S);
    if (seg.valid_end < max_stable || seg.valid_end < floor) {
      report->Problem(seg.path, off,
                      "invalid or missing buffer (" + seg.why + ") at address " + std::to_string(seg.valid_end) +
                          ", below what was reported stable (" +
                          std::to_string(std::max(max_stable, floor)) + ")");
    }
  }
  // The newest checkpoint's pages must all lie in what the walk found valid.
  Result<llama::CheckpointData> ckpt = llama::ReadLatestCheckpoint(env, dc_dir, id->store_id);
  if (!ckpt.ok()) {
    if (ckpt.status().code() == Code::kNotFound) {
      report->Checked("ckpt", "no checkpoint yet");
    } else {
      report->Problem(JoinPath(dc_dir, llama::CheckpointFileName(0)), 0, ckpt.status().ToString());
    }
  } else {
    std::map<uint64_t, std::pair<uint64_t, uint64_t>> past_end;  // segment -> (first pid, count)
    uint64_t pages = 0;
    for (size_t i = 0; i < ckpt->entries.size(); ++i) {
      const uint64_t a = ckpt->entries[i];
      if (a == 0 || a == llama::kEmptyPageEntry) continue;
      ++pages;
      auto it = segs.find(llama::SegmentOf(a, S));
      if (it == segs.end() || a >= it->second.valid_end) {
        auto& [pid, count] = past_end[llama::SegmentOf(a, S)];
        if (count++ == 0) pid = i + 1;
      }
    }
    const std::string ckpt_name = llama::CheckpointFileName(static_cast<int>(ckpt->sequence % 2));
    for (const auto& [segment, first] : past_end) {
      auto it = segs.find(segment);
      const std::string path = JoinPath(lss_dir, llama::SegmentFileName(segment));
      if (it == segs.end()) {
        report->Problem(path, 0,
                        "missing, yet " + ckpt_name + " places " + std::to_string(first.second) +
                            " pages in it (first: page " + std::to_string(first.first) + ")");
      } else {
        report->Problem(path, llama::OffsetInSegment(it->second.valid_end, S),
                        "valid data ends here (" + (it->second.why.empty() ? "segment end" : it->second.why) +
                            "), yet " + ckpt_name + " places " + std::to_string(first.second) +
                            " pages at or past it (first: page " + std::to_string(first.first) +
                            "): truncated or damaged");
      }
    }
    report->Checked("ckpt", ckpt_name + ": sequence " + std::to_string(ckpt->sequence) + ", RSP " +
                                std::to_string(ckpt->rsp) + ", " + std::to_string(pages) + " pages placed");
  }
  report->Checked("lss", std::to_string(segs.size()) + " segments (" + FormatSize(read) + "), " +
                             std::to_string(buffers) + " buffers, " + std::to_string(records) + " records checked");
}

}  // namespace deuteron::cli
