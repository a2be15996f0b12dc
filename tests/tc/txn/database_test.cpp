// The embedded Database: one directory, the directory lock, reopen; its
// TC options (commits apply concurrently into the in-process DC).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/coding.h"
#include "common/crc32c.h"
#include "common/env.h"
#include "dc/dc.h"
#include "tc/database.h"
#include "tc/wal/log.h"
#include "tc/wal/log_format.h"
#include "tests/dc/dc_harness.h"
#include "tests/protocol/forwarding_dc.h"

namespace deuteron::test {

TEST_CASE("database: open, commit, reopen; the directory lock refuses a second opener",
          "[tc][txn][database]") {
  std::unique_ptr<Env> env = NewMemEnv();
  tc::DatabaseOptions o;
  o.env = env.get();
  o.dc = InProcessHarness::Options(HarnessConfig{});
  o.log.segment_size = 64 << 10;
  o.log.buffer_size = 64 << 10;
  {
    Result<std::unique_ptr<tc::Database>> db = tc::Database::Open("/db", o);
    INFO(db.status().ToString());
    REQUIRE(db.ok());
    auto t = (*db)->Begin();
    REQUIRE(t->Put("k", "v").ok());
    REQUIRE(t->Commit().ok());
    Result<std::unique_ptr<tc::Database>> second = tc::Database::Open("/db", o);
    CHECK(second.status().IsBusy());
    REQUIRE((*db)->Checkpoint().ok());
    REQUIRE((*db)->Close().ok());
  }
  Result<std::unique_ptr<tc::Database>> db = tc::Database::Open("/db", o);
  INFO(db.status().ToString());
  REQUIRE(db.ok());
  auto t = (*db)->Begin();
  Result<std::string> v = t->Get("k");
  REQUIRE(v.ok());
  CHECK(*v == "v");
  REQUIRE(t->Commit().ok());
}

namespace {

tc::DatabaseOptions SmallOptions(Env* env) {
  tc::DatabaseOptions o;
  o.env = env;
  o.dc = InProcessHarness::Options(HarnessConfig{});
  o.log.segment_size = 64 << 10;
  o.log.buffer_size = 64 << 10;
  return o;
}

void CreateStore(const std::string& dir, const tc::DatabaseOptions& o) {
  Result<std::unique_ptr<tc::Database>> db = tc::Database::Open(dir, o);
  INFO(db.status().ToString());
  REQUIRE(db.ok());
  auto t = (*db)->Begin();
  REQUIRE(t->Put("k", dir).ok());
  REQUIRE(t->Commit().ok());
  REQUIRE((*db)->Close().ok());
}

std::string Read(Env* env, const std::string& path) {
  Result<std::string> bytes = ReadFileToString(env, path);
  REQUIRE(bytes.ok());
  return *bytes;
}

void Write(Env* env, const std::string& path, const std::string& bytes) {
  REQUIRE(WriteStringToFile(env, bytes, path, /*sync=*/true).ok());
}

}  // namespace

TEST_CASE("database: the log and the DC of two stores do not mix", "[tc][txn][database][storeid]") {
  std::unique_ptr<Env> env = NewMemEnv();
  const tc::DatabaseOptions o = SmallOptions(env.get());
  CreateStore("/one", o);
  CreateStore("/two", o);
  const std::string one_meta = Read(env.get(), "/one/dc/" + std::string(dc::kDcMetaFileName));
  // Store one's DC now says it belongs to store two.
  Write(env.get(), "/one/dc/" + std::string(dc::kDcMetaFileName),
        Read(env.get(), "/two/dc/" + std::string(dc::kDcMetaFileName)));
  Result<std::unique_ptr<tc::Database>> db = tc::Database::Open("/one", o);
  INFO(db.status().ToString());
  REQUIRE(db.status().code() == Code::kStoreMismatch);
  // The message names both stores.
  Result<dc::DcMeta> two = dc::DecodeDcMeta(Read(env.get(), "/two/dc/" + std::string(dc::kDcMetaFileName)));
  REQUIRE(two.ok());
  CHECK(db.status().message().find(two->store_id.ToString()) != std::string::npos);
  // Nothing changed: with its own dc.meta back, store one opens as it was.
  Write(env.get(), "/one/dc/" + std::string(dc::kDcMetaFileName), one_meta);
  db = tc::Database::Open("/one", o);
  INFO(db.status().ToString());
  REQUIRE(db.ok());
  auto t = (*db)->Begin();
  Result<std::string> v = t->Get("k");
  REQUIRE(v.ok());
  CHECK(*v == "/one");
  REQUIRE(t->Commit().ok());
}

TEST_CASE("database: a directory of a newer format is refused as StoreMismatch",
          "[tc][txn][database][storeid]") {
  std::unique_ptr<Env> env = NewMemEnv();
  const tc::DatabaseOptions o = SmallOptions(env.get());
  CreateStore("/db", o);
  // Rewrites the format version of `path` to one above `current`, with a
  // valid checksum at `crc` (over the bytes before it).
  auto bump = [&](const std::string& path, uint32_t current, size_t crc) {
    std::string bytes = Read(env.get(), path);
    EncodeFixed32(&bytes[8], current + 1);
    EncodeFixed32(&bytes[crc], crc32c::Mask(crc32c::Value(bytes.data(), crc)));
    Write(env.get(), path, bytes);
  };
  const std::string wal_meta = "/db/log/" + std::string(wal::kMetaFileName);
  const std::string dc_meta = "/db/dc/" + std::string(dc::kDcMetaFileName);
  const std::string wal_bytes = Read(env.get(), wal_meta);
  const std::string dc_bytes = Read(env.get(), dc_meta);
  SECTION("the log") { bump(wal_meta, wal::kFormatVersion, wal::kMetaSize - 8); }
  SECTION("the DC") { bump(dc_meta, dc::kDcMetaVersion, dc::kDcMetaSize - 4); }
  Result<std::unique_ptr<tc::Database>> db = tc::Database::Open("/db", o);
  INFO(db.status().ToString());
  CHECK(db.status().code() == Code::kStoreMismatch);
  CHECK(db.status().message().find("newer") != std::string::npos);
  Write(env.get(), wal_meta, wal_bytes);
  Write(env.get(), dc_meta, dc_bytes);
  db = tc::Database::Open("/db", o);
  INFO(db.status().ToString());
  CHECK(db.ok());
}

namespace {

// Forwards to a DataComponent. Apply waits, up to `wait`, until `want`
// Apply calls are inside at once, and records the most that were.
class RendezvousDc final : public ForwardingDc {
 public:
  RendezvousDc(DataComponent* dc, int want, std::chrono::milliseconds wait)
      : ForwardingDc(dc), want_(want), wait_(wait) {}

  int max_inside() {
    std::lock_guard<std::mutex> l(mu_);
    return max_inside_;
  }

  Result<ApplyResult> Apply(std::span<const RecordOp> ops, uint64_t esl, uint64_t inc) override {
    {
      std::unique_lock<std::mutex> l(mu_);
      ++inside_;
      max_inside_ = std::max(max_inside_, inside_);
      cv_.notify_all();
      cv_.wait_for(l, wait_, [&] { return max_inside_ >= want_; });
    }
    Result<ApplyResult> r = dc()->Apply(ops, esl, inc);
    std::lock_guard<std::mutex> l(mu_);
    --inside_;
    return r;
  }

 private:
  const int want_;
  const std::chrono::milliseconds wait_;
  std::mutex mu_;
  std::condition_variable cv_;
  int inside_ = 0;      // GUARDED_BY(mu_)
  int max_inside_ = 0;  // GUARDED_BY(mu_)
};

}  // namespace

TEST_CASE("database: over the in-process DC, concurrent commits apply at once, not one leader "
          "at a time",
          "[tc][txn][database]") {
  // With one apply leader at a time (coalesce_applies), the DC would see one
  // Apply inside at a time, each waiting out the rendezvous.
  constexpr int kThreads = 4;
  std::unique_ptr<Env> env = NewMemEnv();
  const tc::DatabaseOptions o = SmallOptions(env.get());
  CHECK_FALSE(o.txn.coalesce_applies);
  Result<std::unique_ptr<dc::Dc>> d = dc::Dc::Open(env.get(), "/dc", o.dc);
  REQUIRE(d.ok());
  Result<std::unique_ptr<wal::Log>> log = wal::Log::Open(env.get(), "/log", o.log);
  REQUIRE(log.ok());
  RendezvousDc rendezvous(d->get(), kThreads, std::chrono::milliseconds(5000));
  Result<std::unique_ptr<tc::TxnManager>> tm =
      tc::TxnManager::Open(&rendezvous, log->get(), o.txn);
  INFO(tm.status().ToString());
  REQUIRE(tm.ok());
  std::vector<std::thread> threads;
  std::vector<Status> results(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      auto t = (*tm)->Begin();
      results[i] = t->Put("k" + std::to_string(i), "v");
      if (results[i].ok()) results[i] = t->Commit();
    });
  }
  for (std::thread& t : threads) t.join();
  for (const Status& s : results) CHECK(s.ok());
  CHECK(rendezvous.max_inside() == kThreads);
  CHECK((*tm)->stats().applies == kThreads);
  REQUIRE((*tm)->Close().ok());
}

}  // namespace deuteron::test
