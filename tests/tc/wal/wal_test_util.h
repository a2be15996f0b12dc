// Helpers shared by the write-ahead log tests: small logs, payloads that name
// their writer, and reading a whole log back.
#pragma once

#include <catch2/catch.hpp>

#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "common/env.h"
#include "tc/wal/log.h"

namespace deuteron::wal::test {

inline const std::string kDir = "/wal";

// The process that a simulated power loss kills: once Kill() returned, every
// call that could reach a file (open, rename, delete, directory sync) fails,
// so a Log left running after FaultInjectionEnv::SimulateCrash cannot go on
// in files opened after the crash. Files opened before fail by themselves.
class KillableEnv : public EnvWrapper {
 public:
  explicit KillableEnv(Env* target) : EnvWrapper(target) {}
  // Waits for calls in flight, so that none of them lands after the crash.
  void Kill() {
    std::unique_lock<std::shared_mutex> l(mu_);
    dead_ = true;
  }
  Result<std::unique_ptr<File>> OpenFile(const std::string& path, OpenMode mode) override {
    std::shared_lock<std::shared_mutex> l(mu_);
    if (dead_) return Dead(path);
    return target()->OpenFile(path, mode);
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    std::shared_lock<std::shared_mutex> l(mu_);
    if (dead_) return Dead(from);
    return target()->RenameFile(from, to);
  }
  Status DeleteFile(const std::string& path) override {
    std::shared_lock<std::shared_mutex> l(mu_);
    if (dead_) return Dead(path);
    return target()->DeleteFile(path);
  }
  Status SyncDir(const std::string& dir) override {
    std::shared_lock<std::shared_mutex> l(mu_);
    if (dead_) return Dead(dir);
    return target()->SyncDir(dir);
  }

 private:
  static Status Dead(const std::string& path) {
    return Status::IOError(path + ": the process was killed");
  }
  std::shared_mutex mu_;
  bool dead_ = false;
};

// Small segments and buffer, so that tests cross segments and lap the ring;
// short polling, so that sanitizer builds stay quick.
inline LogOptions SmallOptions(uint64_t segment_size = 16 << 10, uint64_t buffer_size = 8 << 10) {
  LogOptions o;
  o.segment_size = segment_size;
  o.buffer_size = buffer_size;
  o.spare_segments = 2;
  o.writer_spin_us = 20;
  o.committer_spin_us = 200;
  return o;
}

inline std::unique_ptr<Log> OpenLog(Env* env, const LogOptions& o) {
  Result<std::unique_ptr<Log>> r = Log::Open(env, kDir, o);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return std::move(r).value();
}

// "<tag>-<n>-" followed by filler up to `size` bytes (at least the name).
inline std::string Payload(const std::string& tag, uint64_t n, size_t size) {
  std::string p = tag + "-" + std::to_string(n) + "-";
  while (p.size() < size) p.push_back(static_cast<char>('a' + (p.size() + n) % 26));
  return p;
}

struct ReadBack {
  Lsn lsn;
  Lsn end;
  std::string payload;
};

// Every record whose span ends after `from`, up to the log's ESL.
inline std::vector<ReadBack> ReadAll(const Log& log, Lsn from) {
  Result<std::unique_ptr<LogReader>> reader = log.NewReader(from);
  INFO(reader.status().ToString());
  REQUIRE(reader.ok());
  std::vector<ReadBack> out;
  LogRecord rec;
  for (;;) {
    Result<bool> more = (*reader)->Next(&rec);
    INFO(more.status().ToString());
    REQUIRE(more.ok());
    if (!*more) break;
    out.push_back(ReadBack{rec.lsn, rec.end, rec.payload.ToString()});
  }
  return out;
}

}  // namespace deuteron::wal::test
