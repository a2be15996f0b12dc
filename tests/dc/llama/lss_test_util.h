// Helpers shared by the LSS tests (lss_test.cpp, lss_crash_test.cpp): small
// options, payloads, what was written and what recovery saw.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "common/env.h"
#include "dc/llama/lss.h"

namespace deuteron::llama::lss_test {

constexpr uint64_t kSeg = 256 * 1024;
constexpr uint64_t kBuf = 64 * 1024;
constexpr size_t kFullRecordPayload = kBuf - kBufferHeaderSize - kRecordHeaderSize;  // fills a buffer
inline const std::string kDir = "/db";

inline LssOptions SmallLssOptions(int io_threads = 0) {
  LssOptions o;
  o.segment_size = kSeg;
  o.buffer_size = kBuf;
  o.buffer_count = 4;
  o.io_threads = io_threads;
  o.recycle_pool = 2;
  return o;
}

inline std::string SegPath(uint64_t n) { return kDir + "/lss/" + SegmentFileName(n); }

// Deterministic record content, so that a check can recompute it.
inline std::string MakePayload(uint64_t id, size_t len) {
  std::string p(len, '\0');
  Random64 r(id * 7919 + len);
  r.Fill(p.data(), len);
  return p;
}

struct Written {
  RecordType type;
  PageId pid;
  std::string payload;
};

struct Seen {
  LssAddress address;
  RecordHeader header;
  std::string payload;
  bool in_transaction;
};

inline std::unique_ptr<LogStructuredStore> MustOpen(Env* env, const LssOptions& o = SmallLssOptions()) {
  Result<std::unique_ptr<LogStructuredStore>> r = LogStructuredStore::Open(env, kDir, o);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return std::move(r).value();
}

inline Status Collect(LogStructuredStore* lss, std::vector<Seen>* out, LssAddress start = kNullAddress) {
  return lss->Recover(start, [out](LssAddress a, const RecordHeader& h, Slice p, bool txn) {
    out->push_back({a, h, p.ToString(), txn});
    return Status::OK();
  });
}

inline std::unique_ptr<LogStructuredStore> OpenAndRecover(Env* env, std::vector<Seen>* seen,
                                                   const LssOptions& o = SmallLssOptions()) {
  auto lss = MustOpen(env, o);
  Status s = Collect(lss.get(), seen);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return lss;
}

// Reserves, encodes and commits one record.
inline Result<LssAddress> Put(LogStructuredStore* lss, RecordType type, PageId pid, const std::string& payload,
                       uint64_t annotation = 0) {
  ASSIGN_OR_RETURN(Reservation r, lss->Reserve(RecordSpan(payload.size())));
  RecordHeader h;
  h.type = type;
  h.length = static_cast<uint32_t>(payload.size());
  h.pid = pid;
  h.annotation = annotation;
  EncodeRecord(h, payload, r.dst);
  lss->Commit(r);
  return r.address;
}

inline void CheckRead(LogStructuredStore* lss, LssAddress a, const Written& w) {
  std::string payload;
  Result<RecordHeader> h = lss->ReadRecord(a, &payload);
  INFO("address " << a << ": " << h.status().ToString());
  REQUIRE(h.ok());
  CHECK(h->type == w.type);
  CHECK(h->pid == w.pid);
  CHECK(payload == w.payload);
}

inline RecordType TypeFor(uint64_t i) {
  static const RecordType kTypes[] = {RecordType::kBase, RecordType::kDelta, RecordType::kAllocate,
                                      RecordType::kFree};
  return kTypes[i % 4];
}

}  // namespace deuteron::llama::lss_test
