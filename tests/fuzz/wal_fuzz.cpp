// libFuzzer target for the write-ahead log's readers (tc/wal/log_format.md,
// tc/commit_record.md): each input is the bytes of a log, cut into 4 KiB
// segment files (segments 1, 2, ...) in an in-memory Env next to a valid
// wal.meta. On it:
//  - an unbounded LogReader finds the end of the valid log, and every record
//    it returns is decoded as a commit record (as TC recovery does);
//  - a bounded LogReader up to that end must return the same records with no
//    error (everything below the end of the valid log is valid);
//  - Log::Open recovers the log (cuts the torn tail) and, when it opens,
//    must take a commit and open again;
//  - the input itself goes to DecodeMeta and DecodeCommitRecord.
// Any crash, hang, leak, over-allocation or broken expectation (abort) is
// a bug.
//
// DEUTERON_FUZZ_WRITE_SEEDS=<dir>: writes seeds made by the real log (a few
// commits of commit records, one log crossing into a second segment, one
// cut inside a record) into <dir> and exits (tests/fuzz/make_corpus.py).
//
// Built only by scripts/fuzz (clang, -fsanitize=fuzzer).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/env.h"
#include "common/logging.h"
#include "common/store_id.h"
#include "tc/commit_record.h"
#include "tc/wal/log.h"
#include "tc/wal/log_format.h"
#include "tc/wal/log_reader.h"

namespace {

namespace wal = ::deuteron::wal;
using deuteron::Env;
using deuteron::Result;
using deuteron::Slice;
using deuteron::Status;

constexpr uint64_t kSegmentSize = wal::kMinSegmentSize;
constexpr size_t kMaxSegments = 8;
const std::string kDir = "/wal";

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "wal_fuzz: %s\n", what.c_str());
  std::abort();
}

// Marks a Status or Result as looked at (DEUTERON_STATUS_CHECKED).
template <typename T>
void Ignore(const T& r) {
  (void)r.ok();
}

struct Record {
  wal::Lsn lsn;
  wal::Lsn end;
  std::string payload;
};

// Reads every record from the first segment up to `limit`; *status gets the
// reader's error, if any.
std::vector<Record> ReadAll(Env* env, wal::Lsn limit, wal::Lsn* end, Status* status) {
  wal::LogReader reader(env, kDir, kSegmentSize, wal::SegmentStart(wal::kFirstSegment, kSegmentSize),
                        limit);
  std::vector<Record> out;
  wal::LogRecord r;
  for (;;) {
    Result<bool> more = reader.Next(&r);
    if (!more.ok()) {
      *status = more.status();
      break;
    }
    if (!*more) break;
    out.push_back({r.lsn, r.end, r.payload.ToString()});
    std::vector<deuteron::RecordOp> ops;
    Ignore(deuteron::tc::DecodeCommitRecord(r.payload, r.lsn, &ops));
  }
  *end = reader.position();
  return out;
}

// The segments of a real log holding one commit record per entry of
// `commits` (each a list of (key, value) upserts; an empty value is a
// delete), concatenated, with the zeros after the last record dropped.
std::string RealLog(const std::vector<std::vector<std::pair<std::string, std::string>>>& commits) {
  std::unique_ptr<Env> env = deuteron::NewMemEnv();
  wal::LogOptions options;
  options.segment_size = kSegmentSize;
  options.buffer_size = 4096;
  options.spare_segments = 0;
  Result<std::unique_ptr<wal::Log>> log = wal::Log::Open(env.get(), kDir, options);
  if (!log.ok()) Fail("open a log: " + log.status().ToString());
  for (const auto& commit : commits) {
    std::vector<deuteron::RecordOp> ops;
    for (const auto& [k, v] : commit) {
      ops.push_back({v.empty() ? deuteron::RecordOpKind::kDelete : deuteron::RecordOpKind::kUpsert, k, v, 0});
    }
    std::string payload;
    deuteron::tc::EncodeCommitRecord(ops, &payload);
    if (!(*log)->Commit(payload).ok()) Fail("commit");
  }
  const wal::Lsn end = (*log)->Esl();
  if (!(*log)->Close().ok()) Fail("close");
  std::string out;
  for (uint64_t s = wal::kFirstSegment; wal::SegmentStart(s, kSegmentSize) < end; ++s) {
    Result<std::string> seg = wal::ReadSegment(env.get(), kDir, s, kSegmentSize);
    if (!seg.ok()) Fail("read a segment: " + seg.status().ToString());
    seg->resize(kSegmentSize, '\0');
    out += *seg;
  }
  out.resize(end - wal::SegmentStart(wal::kFirstSegment, kSegmentSize));
  return out;
}

void WriteSeed(const std::string& dir, const std::string& name, const std::string& bytes) {
  FILE* f = std::fopen((dir + "/" + name).c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) Fail("write seed");
  std::fclose(f);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  const char* dir = std::getenv("DEUTERON_FUZZ_WRITE_SEEDS");
  if (dir == nullptr) return 0;
  WriteSeed(dir, "one_commit", RealLog({{{"key", "value"}}}));
  WriteSeed(dir, "commits", RealLog({{{"a", "1"}, {"b", "2"}}, {{"a", ""}}, {{"c", std::string(40, 'c')}}}));
  std::vector<std::vector<std::pair<std::string, std::string>>> many;
  for (int i = 0; i < 12; ++i) many.push_back({{"key" + std::to_string(i), std::string(300, 'v')}});
  const std::string two_segments = RealLog(many);  // padding, then segment 2
  WriteSeed(dir, "two_segments", two_segments);
  WriteSeed(dir, "torn", two_segments.substr(0, two_segments.size() - 100));
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    deuteron::SetLogLevel(deuteron::LogLevel::kError);
    return true;
  }();
  (void)quiet;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  // The pure decoders, on the raw input.
  Ignore(wal::DecodeMeta(Slice(bytes.data(), bytes.size()), "fuzz"));
  {
    std::vector<deuteron::RecordOp> ops;
    Ignore(deuteron::tc::DecodeCommitRecord(Slice(bytes.data(), bytes.size()), 1, &ops));
  }

  std::unique_ptr<Env> env = deuteron::NewMemEnv();
  if (!env->CreateDirs(kDir).ok()) Fail("create dir");
  wal::LogMeta meta;
  meta.segment_size = kSegmentSize;
  meta.rssp = wal::SegmentStart(wal::kFirstSegment, kSegmentSize);
  meta.store_id = deuteron::StoreId::Random();
  if (!deuteron::WriteStringToFile(env.get(), wal::EncodeMeta(meta), deuteron::JoinPath(kDir, wal::kMetaFileName), false).ok()) {
    Fail("write meta");
  }
  for (size_t i = 0; i * kSegmentSize < size && i < kMaxSegments; ++i) {
    const std::string_view seg = bytes.substr(i * kSegmentSize, kSegmentSize);
    const std::string path = deuteron::JoinPath(kDir, wal::SegmentFileName(wal::kFirstSegment + i));
    if (!deuteron::WriteStringToFile(env.get(), Slice(seg.data(), seg.size()), path, false).ok()) {
      Fail("write segment");
    }
  }

  // Unbounded: the end of the valid log. Bounded to it: the same records.
  wal::Lsn end = 0;
  Status unbounded;
  Ignore(unbounded);
  const std::vector<Record> all = ReadAll(env.get(), wal::LogReader::kNoLimit, &end, &unbounded);
  if (!unbounded.ok()) Fail("unbounded reader failed: " + unbounded.ToString());
  wal::Lsn bounded_end = 0;
  Status bounded;
  Ignore(bounded);
  const std::vector<Record> again = ReadAll(env.get(), end, &bounded_end, &bounded);
  if (!bounded.ok()) Fail("bounded reader up to the valid end failed: " + bounded.ToString());
  if (again.size() != all.size()) Fail("bounded reader saw another number of records");
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].lsn != again[i].lsn || all[i].end != again[i].end || all[i].payload != again[i].payload) {
      Fail("bounded reader saw another record");
    }
  }

  // Recovery: Open cuts the torn tail; an opened log takes a commit and
  // opens again with that commit in it.
  wal::LogOptions options;
  options.segment_size = kSegmentSize;
  options.buffer_size = 4096;
  options.spare_segments = 1;
  options.committer_spin_us = 0;
  Result<std::unique_ptr<wal::Log>> log = wal::Log::Open(env.get(), kDir, options);
  if (!log.ok()) return 0;  // Corruption and the like: a typed error is the right answer
  if ((*log)->Esl() != end) Fail("the recovered ESL is not the end of the valid log");
  Result<wal::LogSpan> span = (*log)->Commit("fuzz");
  if (!span.ok()) Fail("commit after recovery: " + span.status().ToString());
  if (Status s = (*log)->Close(); !s.ok()) Fail("close: " + s.ToString());
  log->reset();
  Result<std::unique_ptr<wal::Log>> reopened = wal::Log::Open(env.get(), kDir, options);
  if (!reopened.ok()) Fail("reopen after a clean close: " + reopened.status().ToString());
  if ((*reopened)->Esl() != span->end) Fail("the reopened log lost the commit");
  Ignore((*reopened)->Close());
  return 0;
}
